"""What check reports: a ``Finding`` (rule id, severity, where, what, how to fix) and the ``Fix``
that ``check --fix`` applies for it. A Finding is a ``llamarig.diagnostics.Diagnostic`` (the
planner's diagnostics are the same type) whose code is the rule id, with the place it is about."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llamarig.diagnostics import Diagnostic, Severity
from llamarig.i18n import N_, _

__all__ = ["CUT_OFF_NOTE", "Finding", "Fix", "Severity", "finding"]


@dataclass(frozen=True)
class Fix:
    """A machine-readable repair for --fix."""

    action: str  # drop | replace | set-value | drop-value | rename | add | split-equals
    args: tuple[str, ...] = ()


@dataclass(frozen=True, init=False)
class Finding(Diagnostic):
    """A diagnostic about a place in a launch file: ``code`` is the rule id (``rule``). Made as
    check's rules always made it: ``Finding(rule, severity, line, flag, message, fix, invocation,
    passed, action, use)``."""

    line: int = 0
    flag: str | None = None
    fix: str | None = None
    invocation: int | None = None
    passed: bool = True  # False: on a cut-off line, llama-server never sees it today
    action: Fix | None = None
    use: int | None = None  # index into the invocation's uses

    def __init__(self, rule: str = "", severity: Severity | str = Severity.INFO, line: int = 0,
                 flag: str | None = None, message: str = "", fix: str | None = None, invocation: int | None = None,
                 passed: bool = True, action: Fix | None = None, use: int | None = None, *,
                 code: str | None = None) -> None:
        # ``code``: what dataclasses.replace passes (the Diagnostic's field), the rule id
        for name, value in (("code", code if code is not None else rule), ("severity", Severity(severity)),
                            ("message", message), ("line", line), ("flag", flag), ("fix", fix),
                            ("invocation", invocation), ("passed", passed), ("action", action), ("use", use)):
            object.__setattr__(self, name, value)

    @property
    def rule(self) -> str:
        """check's rule id (docs/check.md), the diagnostic's code."""
        return self.code

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
