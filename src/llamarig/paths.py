"""Where llamarig keeps files: the state directory (launch/tune state, calibrations) and the
build cache of scripts/get-llama-server."""

from __future__ import annotations

import os
from pathlib import Path

#: environment variable: the state directory
ENV_STATE_DIR = "LLAMARIG_STATE_DIR"
#: environment variable: the cache root of scripts/get-llama-server
ENV_CACHE = "LLAMARIG_CACHE"
#: environment variable: where remote GGUF headers are cached (llamarig.hub)
ENV_HEADER_CACHE = "LLAMARIG_HEADER_CACHE"


def state_dir() -> Path:
    """``$LLAMARIG_STATE_DIR``, else ``$XDG_STATE_HOME/llamarig``, else ``~/.local/state/llamarig``."""
    env = os.environ.get(ENV_STATE_DIR)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "llamarig"


def cache_root() -> Path:
    """``$LLAMARIG_CACHE``, else ``~/.cache/llamarig`` (scripts/get-llama-server's builds)."""
    return Path(os.environ.get(ENV_CACHE, Path.home() / ".cache" / "llamarig"))


def header_cache_dir() -> Path:
    """``$LLAMARIG_HEADER_CACHE``, else ``cache_root()/headers``: remote GGUF headers (llamarig.hub)."""
    env = os.environ.get(ENV_HEADER_CACHE)
    return Path(env) if env else cache_root() / "headers"
