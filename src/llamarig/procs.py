"""Processes: how one ended, in words a user reads ("crashed (SIGSEGV)", not "code -11")."""

from __future__ import annotations

import signal

from llamarig.i18n import _

#: signals that mean the program itself crashed, not that somebody stopped it
_CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT}


def exit_description(code: int | None) -> str:
    """A Popen returncode in words: "exited with code 1", "crashed (SIGSEGV)",
    "was killed (SIGKILL)"; "is still running" for None."""
    if code is None:
        return _("is still running")
    if code >= 0:
        return _("exited with code {code}").format(code=code)
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return _("ended by signal {signal}").format(signal=-code)
    if sig in _CRASH_SIGNALS:
        return _("crashed ({signal})").format(signal=sig.name)
    return _("was killed ({signal})").format(signal=sig.name)
