"""Reading a llama-swap config: ``models.<id>.cmd`` with ``models.<id>.env``.

llama-swap's SanitizeCommand (https://github.com/mostlygeek/llama-swap, proxy/config/config.go)
drops lines starting with ``#``, turns a trailing backslash into a space and splits the rest with
POSIX shlex, so newlines never end its command; ``${PORT}`` style macros are kept verbatim.
"""

from __future__ import annotations

import shlex
from typing import Any

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Parsed, Word
from llamarig.flags.readers.common import find_line, is_server_call, unwrap, words_on_lines


def read_llama_swap(data: dict[str, Any], lines: list[str]) -> Parsed:
    """The llama-server commands of a loaded llama-swap config (``data["models"]`` is a dict)."""
    invocations: list[Invocation] = []
    notes: list[Note] = []
    for mid, cfg in data["models"].items():
        if not isinstance(cfg, dict) or not isinstance(cfg.get("cmd"), str):
            continue
        key_line = find_line(lines, f"{mid}:")
        cmd_line = find_line(lines, "cmd:", key_line - 1)
        words = _llama_swap_words(cfg["cmd"], lines, cmd_line)
        if words is None:
            notes.append(Note("shell-syntax", cmd_line, f"models.{mid}.cmd: unbalanced quotes", Severity.ERROR))
            continue
        env: list[tuple[str, str, int]] = []
        for item in cfg.get("env") or []:
            if isinstance(item, str):
                n, _, v = item.partition("=")
                env.append((n, v, find_line(lines, item, key_line - 1)))
        idx, _ = unwrap(words, env)
        if idx < len(words) and is_server_call(words[idx].text, words[idx + 1:]):
            invocations.append(Invocation(words[idx].text, words[idx + 1:], words[idx].line,
                                          words[-1].line, env=env, source="llama-swap", label=str(mid)))
    return Parsed("llama-swap", invocations, notes, [], lines)


def _llama_swap_words(cmd: str, lines: list[str], cmd_line: int) -> list[Word] | None:
    # llama-swap proxy/config/config.go SanitizeCommand: drop `#` lines, trailing `\` -> space,
    # then POSIX shlex (newlines are plain whitespace)
    kept = []
    for ln in cmd.split("\n"):
        t = ln.strip()
        if t.startswith("#"):
            continue
        kept.append(t[:-1] + " " if t.endswith("\\") else ln)
    try:
        texts = shlex.split("\n".join(kept))
    except ValueError:
        return None
    return words_on_lines(texts, lines, cmd_line)
