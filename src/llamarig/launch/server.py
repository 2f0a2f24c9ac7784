"""The one way llamarig starts a process it owns: :func:`spawn` starts it (in the foreground or
detached), :func:`wait_ready` waits until it serves and stops it on every other way out (an
exit, a timeout, Ctrl-C during start-up), :class:`OwnedProcess` stops it by its own pid.

On top: :func:`start_server` (tests, tune: a free loopback port, /health), ``launch.rpc``
(rpc-servers: a listening socket) and ``launch.process`` (``llamarig launch``: detached, with a
state file, an RPC deployment's rpc-servers first)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from llamarig.errors import ServerError
from llamarig.i18n import _
from llamarig.procs import exit_description


def health(url: str, timeout: float = 2) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)  # 503 while loading
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def log_tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_P = TypeVar("_P", bound="OwnedProcess")


class OwnedProcess:
    """What every process llamarig starts and owns shares: its log, and a stop by its own pid
    (``stop_signal``, then SIGKILL after ``timeout``) on every way out."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    _log_file: Any
    #: how the process is asked to stop (llama-server ends cleanly on SIGINT)
    stop_signal: signal.Signals = signal.SIGINT

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def log(self) -> str:
        """Everything the process printed so far (stdout and stderr)."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def release(self) -> None:
        """Close this process's copy of the log (a detached server keeps writing it)."""
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def stop(self, timeout: float = 15) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.release()
        return self.proc.returncode

    def __enter__(self: _P) -> _P:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class RunningServer(OwnedProcess):
    """A llama-server process started by :func:`start_server`."""

    proc: subprocess.Popen[bytes]
    url: str
    port: int
    argv: list[str]
    log_path: Path
    _log_file: Any = field(repr=False, default=None)

    def get(self, path: str, timeout: float = 30) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def post(self, path: str, body: dict[str, Any], timeout: float = 120) -> Any:
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())


def spawn(argv: list[str], log_path: Path, env: Mapping[str, str] | None, *,
          detach: bool = False) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """Start ``argv`` with stdout and stderr into ``log_path`` (its folder made) and ``env`` added
    to this environment; ``detach``: in a session of its own, so that it outlives llamarig and
    a Ctrl-C in llamarig's terminal does not reach it. Returns the process and the open log,
    which the caller's :class:`OwnedProcess` closes. Raises ServerError in one line when it
    cannot start. The only place llamarig starts a server process."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = open(log_path, "wb")  # noqa: SIM115 - closed by OwnedProcess.stop / release
    try:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=detach, env={**os.environ, **env} if env else None)
    except OSError as e:
        log_file.close()
        raise ServerError(_("{binary}: cannot start: {error}").format(binary=argv[0], error=e.strerror or e)) from None
    return proc, log_file


def wait_ready(p: OwnedProcess, ready: Callable[[], bool], timeout: float,
               exited: Callable[[int], BaseException], timed_out: Callable[[], BaseException],
               poll: float = 0.1) -> None:
    """Wait until ``ready()`` for a process llamarig started. When it exits first, ``exited(code)``
    is raised; after ``timeout`` seconds, ``timed_out()``; either way, and on Ctrl-C or any
    other error while waiting, the process is stopped first: never left running. The one wait
    loop of llama-server (``/health``) and rpc-server (a listening socket) starts."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            code = p.proc.poll()
            if code is not None:
                raise exited(code)
            if ready():
                return
            if time.monotonic() > deadline:
                raise timed_out()
            time.sleep(poll)
    except BaseException:
        p.stop()
        raise


def start_server(
    binary: str | os.PathLike[str],
    model: str | os.PathLike[str] | None,
    args: Sequence[str] = (),
    *,
    port: int | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    timeout: float = 180,
    threads: int | None = 2,
    env: dict[str, str] | None = None,
) -> RunningServer:
    """Start llama-server and wait until ``/health`` answers 200. ``env``: extra environment
    variables for the server process.

    Raises ServerError (with the last log lines) if it exits or does not become healthy.
    """
    port = port or free_port()
    argv = [str(binary)]
    if model is not None:
        argv += ["-m", str(model)]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    if threads is not None and "-t" not in args and "--threads" not in args:
        argv += ["-t", str(threads)]
    argv += list(args)
    log_path = Path(log_dir or tempfile.mkdtemp(prefix="llamarig-server-")) / f"llama-server-{port}.log"
    proc, log_file = spawn(argv, log_path, env)
    srv = RunningServer(proc, f"http://127.0.0.1:{port}", port, argv, log_path, log_file)

    def exited(code: int) -> ServerError:
        return ServerError(_("llama-server {exit_description} before /health:\n{log_tail}").format(
            exit_description=exit_description(code), log_tail=log_tail(srv.log_path)))

    def timed_out() -> ServerError:
        return ServerError(_("llama-server not healthy after {timeout:.0f} s:\n{log_tail}").format(
            timeout=timeout, log_tail=log_tail(srv.log_path)))

    wait_ready(srv, lambda: health(srv.url) == 200, timeout, exited, timed_out)
    return srv
