"""The one way llamarig starts a llama-server it owns (tests, tune): a free loopback port, wait
for /health, stopped on every way out (Ctrl-C during start-up included). ``launch.process``
starts detached servers with a state file on top of the same health check."""

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
from collections.abc import Sequence
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

    def stop(self, timeout: float = 15) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
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


def spawn(argv: list[str], log_path: Path, env: dict[str, str] | None) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """Start ``argv`` with stdout and stderr into ``log_path`` (its folder made) and ``env`` added
    to this environment. Returns the process and the open log, which the caller's
    :class:`OwnedProcess` closes. Raises ServerError in one line when it cannot start."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file = open(log_path, "wb")  # noqa: SIM115 - closed by OwnedProcess.stop
    try:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env} if env else None)
    except OSError as e:
        log_file.close()
        raise ServerError(_("{binary}: cannot start: {error}").format(binary=argv[0], error=e.strerror or e)) from None
    return proc, log_file


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
    try:
        return _wait_healthy(srv, timeout)
    except BaseException:
        # Ctrl-C or any error while waiting: never leave the server running
        srv.stop()
        raise


def _wait_healthy(srv: RunningServer, timeout: float) -> RunningServer:
    proc = srv.proc
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            srv.stop()
            raise ServerError(_("llama-server {exit_description} before /health:\n{log_tail}").format(
                exit_description=exit_description(proc.returncode), log_tail=log_tail(srv.log_path)))
        if health(srv.url) == 200:
            return srv
        if time.monotonic() > deadline:
            srv.stop()
            raise ServerError(_("llama-server not healthy after {timeout:.0f} s:\n{log_tail}").format(timeout=timeout, log_tail=log_tail(srv.log_path)))
        time.sleep(0.1)
