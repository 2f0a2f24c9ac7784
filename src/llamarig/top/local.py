"""The llama-server behind a URL on this machine, found through Linux's ``/proc``: the process
that listens on the URL's port, its command line and its log (``--log-file``, or the file its
stderr or stdout goes to). ``llamarig top`` reads the KV pool from them (llamarig.top.pool):
the log says what ran, the command line only what was meant. Read once on first contact and
whenever the server comes back; anything unreadable (another machine, another user's process, a
container, not Linux) simply gives no hint."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from llamarig.bench.gpu import is_local
from llamarig.flags.argv import Command
from llamarig.top.model import PoolHint
from llamarig.top.pool import NO_HINT, hint_from_argv, hint_from_log

PROC = Path("/proc")
#: the start-up lines are at a log's head; a log appended to by several runs has the last at its tail
LOG_READ = 1024 * 1024
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def pool_hint(url: str, slot_ctx: int | None, proc: Path = PROC) -> PoolHint:
    """The pool of the llama-server at ``url`` if it runs here: from its log, else its command line."""
    port = urlsplit(url).port
    if port is None or not is_local(url):
        return NO_HINT
    pid = listening_pid(port, proc)
    if pid is None:
        return NO_HINT
    argv = _cmdline(pid, proc)
    for path, text in _logs(pid, argv, proc):
        hint = hint_from_log(text, detail=path)
        if hint is not None:
            return hint
    return hint_from_argv(argv[1:], slot_ctx, detail=f"pid {pid}") if argv else NO_HINT


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


def _logs(pid: int, argv: list[str], proc: Path) -> Iterator[tuple[str, str]]:
    """(path, text) of each file the server logs to: its ``--log-file``, its stderr, its stdout."""
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
        if shown in seen:
            continue
        seen.add(shown)
        text = _head_and_tail(path)
        if text is not None:
            yield shown, text


def _head_and_tail(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(LOG_READ)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            tail = b""
            if size > LOG_READ:
                f.seek(max(LOG_READ, size - LOG_READ))
                tail = f.read(LOG_READ)
    except OSError:
        return None
    return (head + b"\n" + tail).decode("utf-8", errors="replace")
