"""What check reports: a ``Finding`` (rule id, severity, where, what, how to fix) and the ``Fix``
that ``check --fix`` applies for it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from llamarig.i18n import N_, _


class Severity(str, Enum):
    """How bad a finding is, most severe first. A ``str`` whose value is the word itself, so that
    JSON output, comparisons with ``"error"`` and f-strings read exactly as before."""

    ERROR = "error"  # llama-server refuses the command, or fails to load with it
    WARNING = "warning"  # it runs, but not as the author meant
    INFO = "info"  # worth knowing

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class Fix:
    """A machine-readable repair for --fix."""

    action: str  # drop | replace | set-value | drop-value | rename | add | split-equals
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    line: int
    flag: str | None
    message: str
    fix: str | None = None
    invocation: int | None = None
    passed: bool = True  # False: on a cut-off line, llama-server never sees it today
    action: Fix | None = None
    use: int | None = None  # index into the invocation's uses

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity", Severity(self.severity))

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity.value, "line": self.line, "flag": self.flag,
                "message": self.message, "fix": self.fix, "invocation": self.invocation,
                "passed": self.passed}


#: what a finding on a cut-off line adds to its message
CUT_OFF_NOTE = N_(" [on a cut-off line: llama-server does not receive it today, but will once the "
                  "continuation is fixed]")


def finding(rule: str, sev: Severity, line: int, flag: str | None, msg: str, fix: str | None,
            k: int | None, passed: bool = True, action: Fix | None = None,
            use: int | None = None) -> Finding:
    """A finding about invocation ``k``; one on a cut-off line (``passed`` False) says so."""
    if not passed:
        msg += _(CUT_OFF_NOTE)
    return Finding(rule, sev, line, flag, msg, fix, k, passed, action, use)
