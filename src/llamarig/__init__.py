"""llamarig: llama-server deployments as engineering, not folklore."""

from llamarig.errors import GGUFError, InputError, LlamarigError, ServerError

__version__ = "0.1.0"

__all__ = ["GGUFError", "InputError", "LlamarigError", "ServerError", "__version__"]
