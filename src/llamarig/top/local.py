"""The llama-server behind a URL on this machine, found through Linux's ``/proc``: the process
that listens on the URL's port, its command line and its log (``--log-file``, or the file its
stderr or stdout goes to). ``llamarig top`` derives the KV pool from them with what the server
answers (llamarig.serverpool, through llamarig.top.pool): the log says what ran, the command line
how the process was started. Read once on first contact and whenever the server comes back;
anything unreadable (another machine, another user's process, a container, not Linux) simply
adds nothing."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from llamarig.flags.argv import Command
from llamarig.hardware.telemetry import is_local
from llamarig.serverpool import CommandLayout, LogStart, last_start, server_facts
from llamarig.top.model import PoolHint
from llamarig.top.pool import command_layout, hint_of

PROC = Path("/proc")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


@dataclass(frozen=True)
class LocalServer:
    """What the llama-server at a URL tells of itself on this machine: its last start in its log
    (``path``: the file), its command line's layout, its process id."""

    log: LogStart | None = None
    command: CommandLayout | None = None
    pid: int | None = None


def pool_hint(url: str, props: Mapping[str, Any] | None, models: Mapping[str, Any] | None,
              proc: Path = PROC) -> PoolHint:
    """The pool of the llama-server at ``url`` from its ``/props`` and ``/v1/models`` and, if it
    runs here, its log and command line."""
    here = local_server(url, proc)
    return hint_of(server_facts(props, models, here.log, here.command), f"pid {here.pid}" if here.command else "")


def local_server(url: str, proc: Path = PROC) -> LocalServer:
    """The log and command line of the process listening on ``url``'s port, if it runs here."""
    port = urlsplit(url).port
    if port is None or not is_local(url):
        return LocalServer()
    pid = listening_pid(port, proc)
    if pid is None:
        return LocalServer()
    argv = _cmdline(pid, proc)
    command = command_layout(argv[1:]) if argv else None
    for shown, path in _logs(pid, argv, proc):
        start = last_start(str(path))
        if start is not None:
            return LocalServer(replace(start, path=shown), command, pid)
    return LocalServer(None, command, pid)


def listening_pid(port: int, proc: Path = PROC) -> int | None:
    """The process with a socket listening on TCP ``port`` (any address), or None."""
    inodes = set(_listening_inodes(port, proc))
    if not inodes:
        return None
    links = {f"socket:[{i}]" for i in inodes}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in links for fd in (d / "fd").iterdir()):
                return int(d.name)
    return None


def _listening_inodes(port: int, proc: Path) -> Iterator[str]:
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                yield f[9]


def _cmdline(pid: int, proc: Path) -> list[str]:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [w.decode(errors="replace") for w in raw.split(b"\0") if w]


def _logs(pid: int, argv: list[str], proc: Path) -> Iterator[tuple[str, Path]]:
    """(shown, path) of each file the server logs to: its ``--log-file``, its stderr, its stdout."""
    base = proc / str(pid)
    seen: set[str] = set()
    log_file = Command.parse(argv).get("--log-file") if argv else None
    candidates = [(log_file, base / "cwd" / log_file)] if log_file else []
    for fd in ("2", "1"):
        with contextlib.suppress(OSError):
            target = os.readlink(base / "fd" / fd)
            if target.startswith("/") and not target.startswith("/dev/"):
                candidates.append((target.removesuffix(" (deleted)"), base / "fd" / fd))
    for shown, path in candidates:
        if shown not in seen:
            seen.add(shown)
            yield shown, path
