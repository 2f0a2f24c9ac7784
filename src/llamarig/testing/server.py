"""Real llama-servers for tests: the library's own starter (llamarig.launch.server)."""

from llamarig.launch.server import RunningServer, free_port, start_server

__all__ = ["RunningServer", "free_port", "start_server"]
