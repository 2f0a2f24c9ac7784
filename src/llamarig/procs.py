"""Processes: how one ended, in words a user reads ("crashed (SIGSEGV)", not "code -11")."""

from __future__ import annotations

import signal

#: signals that mean the program itself crashed, not that somebody stopped it
_CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}


def exit_description(code: int | None) -> str:
    """A Popen returncode in words: "exited with code 1", "crashed (SIGSEGV)",
    "was killed (SIGKILL)"; "is still running" for None."""
    if code is None:
        return "is still running"
    if code >= 0:
        return f"exited with code {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"ended by signal {-code}"
    if sig in _CRASH_SIGNALS:
        return f"crashed ({sig.name})"
    return f"was killed ({sig.name})"
