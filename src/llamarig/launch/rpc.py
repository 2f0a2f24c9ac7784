"""RPC servers: llama.cpp's distributed backend, one ``ggml-rpc-server`` process per device.

``llama-server --rpc HOST:PORT,...`` adds each rpc-server's device to its own and splits layers,
KV and compute across them with the same scheduler (ggml-backend sched + ggml-alloc) that splits
across GPUs. On one machine, rpc-servers on 127.0.0.1 each expose the host's CPU as a device:
a real multi-device run that the tests and ``launch`` of a loopback deployment use.

Facts from the pinned build (11434):
- the binary is the ``ggml-rpc-server`` target (tools/rpc/CMakeLists.txt), built by
  scripts/get-llama-server beside llama-server;
- its options are ``-H/--host`` (default 127.0.0.1), ``-p/--port`` (default 50052),
  ``-t/--threads`` (default 1), ``-d/--device``, ``-c/--cache`` (tools/rpc/rpc-server.cpp:118-158);
- it serves one client connection at a time (ggml/src/ggml-rpc/ggml-rpc.cpp:2145-2155), so a
  readiness probe must not connect: :func:`start_rpc_server` waits for the listening socket in
  /proc/net/tcp instead;
- it has no authentication: any host other than 127.0.0.1 makes it print a warning
  (tools/rpc/rpc-server.cpp, main).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from llamarig.errors import ServerError
from llamarig.i18n import _
from llamarig.launch.server import OwnedProcess, free_port, log_tail, spawn, wait_ready
from llamarig.procs import exit_description

#: the rpc-server target's name in the pinned build (tools/rpc/CMakeLists.txt)
RPC_SERVER_NAME = "ggml-rpc-server"


@dataclass
class RpcServer(OwnedProcess):
    """An rpc-server process started by :func:`start_rpc_server`."""

    proc: subprocess.Popen[bytes]
    host: str
    port: int
    argv: list[str]
    log_path: Path
    _log_file: IO[bytes] | None = field(repr=False, default=None)
    stop_signal = signal.SIGTERM

    @property
    def endpoint(self) -> str:
        """``HOST:PORT`` as llama-server's ``--rpc`` takes it."""
        return f"{self.host}:{self.port}"


def rpc_server_binary(server_bin: str | os.PathLike[str]) -> Path:
    """The ``ggml-rpc-server`` beside a llama-server binary (scripts/get-llama-server builds both)."""
    return Path(server_bin).with_name(RPC_SERVER_NAME)


def host_memory() -> int:
    """The memory an rpc-server's CPU device reports on this machine: ``sysconf(_SC_PHYS_PAGES)
    * sysconf(_SC_PAGE_SIZE)``, free equal to total (ggml/src/ggml-cpu/ggml-cpu.cpp:365-381)."""
    return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def rpc_argument(servers: Sequence[RpcServer]) -> str:
    """The value of llama-server's ``--rpc``: the endpoints, comma-separated, in device order."""
    return ",".join(s.endpoint for s in servers)


def rpc_server_argv(binary: str | os.PathLike[str], host: str, port: int, threads: int | None = None,
                    devices: Sequence[str] = (), cache: bool = False) -> list[str]:
    """An rpc-server's command line (its options: tools/rpc/rpc-server.cpp:118-158)."""
    argv = [str(binary), "--host", host, "--port", str(port)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    if devices:
        argv += ["--device", ",".join(devices)]
    if cache:
        argv += ["--cache"]
    return argv


def start_rpc_server(
    binary: str | os.PathLike[str],
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    threads: int | None = 1,
    log_dir: str | os.PathLike[str] | None = None,
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 30,
    detach: bool = False,
) -> RpcServer:
    """Start one rpc-server and wait until it listens. ``threads``: its CPU device's threads
    (None: rpc-server's own default, half the cores); ``env``: extra environment variables (e.g.
    an LD_PRELOAD that sets the memory it reports); ``detach``: in a session of its own (``llamarig
    launch``). Raises ServerError with the log's last lines when it exits or does not listen in
    time; it is never left running then."""
    port = port or free_port()
    # stdout is a file: line-buffered output would need stdbuf; the log is read only on failure
    argv = rpc_server_argv(binary, host, port, threads)
    log_path = log_path or Path(log_dir or tempfile.mkdtemp(prefix="llamarig-rpc-")) / f"rpc-server-{port}.log"
    proc, log_file = spawn(argv, log_path, env, detach=detach)
    srv = RpcServer(proc, host, port, argv, log_path, log_file)

    def exited(code: int) -> ServerError:
        return ServerError(_("rpc-server {exit_description} before it listened:\n{log_tail}").format(
            exit_description=exit_description(code), log_tail=log_tail(srv.log_path)))

    def timed_out() -> ServerError:
        return ServerError(_("rpc-server not listening on {endpoint} after {timeout:.0f} s:\n{log_tail}").format(
            endpoint=srv.endpoint, timeout=timeout, log_tail=log_tail(srv.log_path)))

    wait_ready(srv, lambda: _listening(srv.host, srv.port), timeout, exited, timed_out, poll=0.05)
    return srv


def start_rpc_servers(binary: str | os.PathLike[str], n: int, **kw: object) -> list[RpcServer]:
    """Start ``n`` rpc-servers on free loopback ports; all are stopped if one fails."""
    started: list[RpcServer] = []
    try:
        for _i in range(n):
            started.append(start_rpc_server(binary, **kw))  # type: ignore[arg-type]
    except BaseException:
        for s in started:
            s.stop()
        raise
    return started


#: /proc/net/tcp's state of a listening socket
_TCP_LISTEN = "0A"


def _listening(host: str, port: int) -> bool:
    """Whether some socket listens on ``port`` (from /proc/net/tcp{,6}: no connection is made,
    since an rpc-server serves one client at a time). Elsewhere than Linux: a bind test."""
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not tables[0].exists():
        return _port_taken(host, port)
    want = f"{port:04X}"
    for t in tables:
        try:
            rows = t.read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 3 and cols[3] == _TCP_LISTEN and cols[1].rsplit(":", 1)[-1] == want:
                return True
    return False


def _port_taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False
