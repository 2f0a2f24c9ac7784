"""Reading a systemd unit: its ``ExecStart=`` (and ``ExecStartPre=``/``ExecStartPost=``) lines and
``Environment=`` assignments, by systemd.syntax(7): a trailing backslash joins the next line, and
comment lines that follow a backslash line are skipped (the continuation goes on), so comments
do not cut a unit's command as they cut a bash one.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Parsed, Word
from llamarig.flags.readers.common import ends_with_backslash, is_server_call, unwrap


def parse_systemd(text: str) -> Parsed:
    """Read ExecStart= (and Environment=) of a unit file, systemd.syntax(7) continuation rules."""
    raw = text.split("\n")
    entries: list[tuple[str, str, int, list[int]]] = []  # key, value, first line, lines
    i = 0
    while i < len(raw):
        line = raw[i].strip()
        if not line or line[0] in "#;" or line.startswith("["):
            i += 1
            continue
        start = i
        parts = []
        line_nos = [i + 1]
        cur = raw[i].rstrip()
        while ends_with_backslash(cur) and i + 1 < len(raw):
            parts.append(cur[:-1] + " ")
            i += 1
            # systemd.syntax(7): comment lines following a backslash line are ignored
            while i < len(raw) and raw[i].strip()[:1] in ("#", ";"):
                i += 1
            if i >= len(raw):
                cur = ""
                break
            cur = raw[i].rstrip()
            line_nos.append(i + 1)
        parts.append(cur)
        joined = "".join(parts)
        key, sep, val = joined.partition("=")
        if sep:
            entries.append((key.strip(), val.strip(), start + 1, line_nos))
        i += 1
    env: list[tuple[str, str, int]] = []
    invocations: list[Invocation] = []
    notes: list[Note] = []
    for key, val, ln, line_nos in entries:
        if key == "Environment":
            try:
                for item in shlex.split(val):
                    n, _, v = item.partition("=")
                    env.append((n, v, ln))
            except ValueError:
                notes.append(Note("shell-syntax", ln, "unbalanced quotes in Environment=", Severity.ERROR))
        elif key in ("ExecStart", "ExecStartPre", "ExecStartPost"):
            v = val.lstrip("@-:+!")
            try:
                words_text = shlex.split(v, comments=False)
            except ValueError:
                notes.append(Note("shell-syntax", ln, f"unbalanced quotes in {key}=", Severity.ERROR))
                continue
            words = _assign_lines(words_text, raw, line_nos)
            tmp_env: list[tuple[str, str, int]] = []
            idx, _ = unwrap(words, tmp_env)
            if idx < len(words) and is_server_call(words[idx].text, words[idx + 1:]):
                inv = Invocation(words[idx].text, words[idx + 1:], words[idx].line,
                                 line_nos[-1], env=list(env) + tmp_env, source="systemd", label=key)
                invocations.append(inv)
            elif idx < len(words) and PurePosixPath(words[idx].text).name in ("killall", "pkill"):
                notes.append(Note("kill-by-name", ln, f"{key}= kills processes by name", Severity.WARNING))
    return Parsed("systemd", invocations, notes, [], raw)


def _assign_lines(words: list[str], raw: list[str], line_nos: list[int]) -> list[Word]:
    """Attach a line number to each word by finding it in the unit's physical lines, in order."""
    out: list[Word] = []
    li = 0
    pos = 0
    for w in words:
        probe = w.split()[0] if w.split() else w
        found = None
        for j in range(li, len(line_nos)):
            text = raw[line_nos[j] - 1]
            k = text.find(probe, pos if j == li else 0)
            if k >= 0:
                found = (j, k + len(probe))
                break
        if found:
            li, pos = found
            out.append(Word(w, line_nos[li]))
        else:
            out.append(Word(w, line_nos[min(li, len(line_nos) - 1)]))
    return out

