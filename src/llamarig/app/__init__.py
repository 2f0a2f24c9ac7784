"""The application layer: one library function per thing the CLI does (check, plan with speed,
resolve a command, render, launch, tune), on the parsed :class:`~llamarig.flags.argv.Command`.

The ``llamarig`` command only parses options, calls these and prints; ``llamarig.api``
re-exports them.
Results are values (dataclasses, Findings, Plans); nothing here prints or exits.
"""
