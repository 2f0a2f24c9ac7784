"""The error tree and the exit codes. Every error llamarig raises on purpose is a LlamarigError,
and carries the exit code the CLI ends with (docs/exit-codes.md, checked against ExitCode by
tests/test_exit_codes.py)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The exit codes every llamarig command shares (docs/exit-codes.md)."""

    OK = 0  #: success
    PROBLEMS = 1  #: the command ran and found problems (check: error findings; plan: does not fit)
    BAD_INPUT = 2  #: a missing/unreadable/malformed file, an unknown name, a bad option value
    ENVIRONMENT = 3  #: llama-server binary missing, server unreachable or failed to start
    NEEDS_ANSWER = 4  #: check --fix cannot tell which command lines of flags belong to (it names them)
    INTERRUPTED = 130  #: Ctrl-C


def one_line(text: str, limit: int = 300) -> str:
    """Make untrusted text (names read from a file) safe for a one-line message."""
    if len(text) <= limit and text.isprintable():
        return text  # as it is (a llamarig.i18n.Message stays one)
    out = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else "?" for c in text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


class LlamarigError(Exception):
    """Base of every deliberate llamarig error. ``str(err)`` is a one-line message."""

    exit_code: int = ExitCode.PROBLEMS


class InputError(LlamarigError):
    """Bad input from the user: a file, a name, a value."""

    exit_code = ExitCode.BAD_INPUT


class GGUFError(InputError):
    """A GGUF file that cannot be read: missing, not GGUF, truncated, absurd or unsupported."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = one_line(problem)
        super().__init__(self.path + (": " + self.problem))  # a Message stays one; its ": " localizes


class ModelNotFoundError(GGUFError):
    """A model that is neither a file here nor a catalogue id (``no such file``)."""


class UnknownNameError(InputError):
    """An unknown catalogue id, GPU name, scenario… with the closest known names."""

    def __init__(self, kind: str, name: str, suggestions: list[str] | None = None, message: str | None = None) -> None:
        self.kind = kind
        self.name = name
        self.suggestions = list(suggestions or [])
        hint = f" (did you mean: {', '.join(self.suggestions)}?)" if self.suggestions else ""
        # ``message``: the same sentence as a catalogue Message (llamarig.i18n.unknown_name)
        super().__init__(message or f"unknown {kind} '{name}'{hint}")


class RemoteError(InputError):
    """A model reference (hf:, ms:, a URL) that cannot be read: no such repo, a gated repo
    without a token, no such quant or file, a truncated or non-GGUF answer."""


class NetworkError(LlamarigError):
    """A hub or server that cannot be reached, or one that does not serve byte ranges."""

    exit_code = ExitCode.ENVIRONMENT


class MissingExtraError(LlamarigError):
    """An optional part of the install that this needs is not installed (``llamarig.extras``):
    the message names the ``pip install 'llamarig[EXTRA]'`` to run."""

    exit_code = ExitCode.ENVIRONMENT

    def __init__(self, message: str, extra: str) -> None:
        self.extra = extra
        super().__init__(message)


class ServerError(LlamarigError):
    """llama-server missing, failing to start, or unreachable."""

    exit_code = ExitCode.ENVIRONMENT
