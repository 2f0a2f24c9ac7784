"""``python -m llamarig`` = the ``llamarig`` command."""

from llamarig.cli.main import main

main()
