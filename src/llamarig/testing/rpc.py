"""The multi-device rig for tests: rpc-servers on loopback (llamarig.launch.rpc), each exposing
this machine's CPU as one device of a real ``llama-server --rpc`` run.

Each rpc-server reports the host's RAM as its device's memory (ggml/src/ggml-cpu/ggml-cpu.cpp:
365-381), so on one machine every device offers the same. ``memory_mib=`` gives each one its
own: ``memshim.c`` (beside this file), compiled with gcc once per process into a temporary
directory, is preloaded into the rpc-server and answers its ``sysconf(_SC_PHYS_PAGES)`` from
``$LLAMARIG_RPC_MEMORY_MIB``. That is what ``--fit`` and the default split then see.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from llamarig.errors import ServerError
from llamarig.launch import rpc as _rpc
from llamarig.launch.rpc import RpcServer, rpc_argument, rpc_server_binary

#: the shim's source, and the variable it reads (MiB)
SHIM_SOURCE = Path(__file__).with_name("memshim.c")
MEMORY_VAR = "LLAMARIG_RPC_MEMORY_MIB"

_built: dict[str, Path] = {}


def memory_shim() -> Path:
    """The compiled shim (a shared library), built with gcc on first use in this process.
    Raises ServerError when gcc is missing or fails."""
    hit = _built.get("shim")
    if hit is not None and hit.exists():
        return hit
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise ServerError("memshim: no gcc/cc on PATH to build the rpc-server memory shim")
    out = Path(tempfile.mkdtemp(prefix="llamarig-memshim-")) / "memshim.so"
    r = subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM_SOURCE), "-ldl"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise ServerError(f"memshim: {gcc} failed: {r.stderr.strip()[:400]}")
    _built["shim"] = out
    return out


def memory_env(mib: int) -> dict[str, str]:
    """The environment that makes an rpc-server's CPU device report ``mib`` MiB."""
    preload = " ".join(x for x in (str(memory_shim()), os.environ.get("LD_PRELOAD", "")) if x)
    return {"LD_PRELOAD": preload, MEMORY_VAR: str(int(mib))}


def start_rpc_server(binary: str | os.PathLike[str], *, memory_mib: int | None = None,
                     env: dict[str, str] | None = None, **kw: object) -> RpcServer:
    """``llamarig.launch.rpc.start_rpc_server``; with ``memory_mib`` its device reports that."""
    if memory_mib is not None:
        env = {**(env or {}), **memory_env(memory_mib)}
    return _rpc.start_rpc_server(binary, env=env, **kw)  # type: ignore[arg-type]


def start_rpc_servers(binary: str | os.PathLike[str], n: int | None = None, *,
                      memory_mib: Sequence[int] | None = None, **kw: object) -> list[RpcServer]:
    """``n`` rpc-servers (or one per ``memory_mib`` entry, each reporting that many MiB); all
    are stopped if one fails to start."""
    mems: list[int | None] = list(memory_mib) if memory_mib is not None else [None] * (n or 0)
    if n is not None and len(mems) != n:
        raise ValueError(f"memory_mib has {len(mems)} entries for {n} servers")
    started: list[RpcServer] = []
    try:
        for m in mems:
            started.append(start_rpc_server(binary, memory_mib=m, **kw))  # type: ignore[arg-type]
    except BaseException:
        for s in started:
            s.stop()
        raise
    return started


__all__ = ["MEMORY_VAR", "SHIM_SOURCE", "RpcServer", "memory_env", "memory_shim", "rpc_argument",
           "rpc_server_binary", "start_rpc_server", "start_rpc_servers"]
