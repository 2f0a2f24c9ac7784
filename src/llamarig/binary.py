"""Finding the llama.cpp binaries the user has (or the ones the tests built)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from llamarig.errors import ServerError
from llamarig.i18n import _
from llamarig.paths import cache_root

#: environment variable naming the llama-server binary
ENV_SERVER_BIN = "LLAMARIG_SERVER_BIN"
#: cache root of scripts/get-llama-server
CACHE_ROOT = cache_root()


def cached_bin_dirs() -> list[Path]:
    """bin/ directories built by scripts/get-llama-server, newest build number first, native
    before portable."""
    dirs = []
    # native builds (llama.cpp-N/bin) before portable ones (llama.cpp-N/portable/bin)
    for pattern, rank in (("llama.cpp-*/bin", 1), ("llama.cpp-*/portable/bin", 0)):
        for d in CACHE_ROOT.glob(pattern):
            top = d.parent if rank else d.parent.parent
            try:
                build = int(top.name.split("-", 1)[1])
            except ValueError:
                build = -1
            dirs.append((build, rank, d))
    return [d for _, _, d in sorted(dirs, reverse=True)]


def find_binary(name: str = "llama-server", explicit: str | os.PathLike[str] | None = None) -> Path:
    """Locate a llama.cpp tool: explicit path, then $LLAMARIG_SERVER_BIN's directory, then PATH,
    then the llamarig build cache. Raises ServerError when none is found."""
    if explicit:
        p = Path(explicit)
        if p.is_dir():
            p = p / name
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise ServerError(_("{path}: not an executable file").format(path=p))
        return p
    env = os.environ.get(ENV_SERVER_BIN)
    if env:
        p = Path(env)
        cand = p if name == "llama-server" else p.with_name(name)
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    found = shutil.which(name)
    if found:
        return Path(found)
    for d in cached_bin_dirs():
        cand = d / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    raise ServerError(
        _("{name} not found: pass --server-bin, set ${env_server_bin} or put it on PATH (a release of "
          "https://github.com/ggml-org/llama.cpp/releases, or your own build)").format(
            name=name, env_server_bin=ENV_SERVER_BIN)
    )
