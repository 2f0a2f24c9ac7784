"""What llamarig tells a person about their deployment, as a value: a ``Diagnostic`` has a
stable ``code`` (kebab-case, never translated: code reads it), a ``Severity`` and a ``message``
(an ``i18n.Message``, shown in the reader's language).

One type for everything that judges a deployment: the planner's warnings and notes
(``Plan.diagnostics``) and check's findings (``flags.findings.Finding``, a Diagnostic with the
place in the file it is about: its ``code`` is the rule id). Code that needs to know what a
diagnostic says reads its code, never its wording.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """How bad a diagnostic is, most severe first. A ``str`` whose value is the word itself, so that
    JSON output, comparisons with ``"error"`` and f-strings read exactly as the word."""

    ERROR = "error"  # llama-server refuses the command, or fails to load with it
    WARNING = "warning"  # it runs, but not as the author meant
    INFO = "info"  # worth knowing

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class Diagnostic:
    """One thing worth telling: ``code`` says which (stable, for code), ``message`` says it to a
    person (a catalogue Message: English as a ``str``, localized where it is shown)."""

    code: str
    severity: Severity
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity", Severity(self.severity))

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity.value, "message": self.message}


def info(code: str, message: str) -> Diagnostic:
    return Diagnostic(code, Severity.INFO, message)


def warning(code: str, message: str) -> Diagnostic:
    return Diagnostic(code, Severity.WARNING, message)


def messages(diags: tuple[Diagnostic, ...] | list[Diagnostic], severity: Severity) -> tuple[str, ...]:
    """The messages of the diagnostics of one severity, in order."""
    return tuple(d.message for d in diags if d.severity is severity)
