"""Reading a systemd unit: its ``ExecStart=`` (and ``ExecStartPre=``/``ExecStartPost=``) lines and
``Environment=`` assignments, by systemd.syntax(7): a trailing backslash joins the next line, and
comment lines that follow a backslash line are skipped (the continuation goes on), so comments
do not cut a unit's command as they cut a bash one. A *blank* line does: systemd's reader
(src/shared/conf-parser.c ``config_parse``) skips only comment lines inside a continuation, so an
empty line is appended and ends it; the option lines after it are then lines of their own, which
systemd ignores ("Missing '=', ignoring line."). Those are reported as cut off, as for bash.
"""

from __future__ import annotations

import re
import shlex

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Parsed, Word
from llamarig.flags.readers.common import basename, ends_with_backslash, is_server_call, unwrap
from llamarig.i18n import _

_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*\s*=")


def _logical(raw: list[str], i: int) -> tuple[str, list[int], int, int | None]:
    """The logical line starting at raw[i]: its text (backslash-newlines joined, comment lines
    skipped), its physical line numbers, the index of its last line, and the line of a blank
    line that ended the continuation (or None)."""
    parts = []
    line_nos = [i + 1]
    cur = raw[i].rstrip()
    blank = None
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
        if not cur.strip():  # an empty line is appended, and ends the continuation
            blank = i + 1
            cur = ""
            break
        line_nos.append(i + 1)
    parts.append(cur)
    return "".join(parts), line_nos, i, blank


def parse_systemd(text: str) -> Parsed:
    """Read ExecStart= (and Environment=) of a unit file, systemd.syntax(7) continuation rules."""
    raw = text.split("\n")
    # key, value, first line, lines, (blank line that cut it, [(ignored text, its lines)])
    entries: list[tuple[str, str, int, list[int], int | None, list[tuple[str, list[int]]]]] = []
    i = 0
    while i < len(raw):
        line = raw[i].strip()
        if not line or line[0] in "#;" or line.startswith("["):
            i += 1
            continue
        start = i
        joined, line_nos, i, blank = _logical(raw, i)
        ignored: list[tuple[str, list[int]]] = []
        if blank is not None:
            # the lines after the blank one, up to the next `Key=` or section: systemd ignores them
            j = blank  # 0-based index of the line after the blank one
            while j < len(raw):
                t = raw[j].strip()
                if not t or t[0] in "#;":
                    j += 1
                    continue
                if t.startswith("[") or _KEY_RE.match(t):
                    break
                text_j, nos_j, last_j = _logical(raw, j)[:3]
                ignored.append((text_j, nos_j))
                j = last_j + 1
            i = max(i, j - 1)
        key, sep, val = joined.partition("=")
        if sep:
            entries.append((key.strip(), val.strip(), start + 1, line_nos, blank, ignored))
        i += 1
    # name -> (name, value, line): a later Environment= assignment of a name replaces the earlier
    env: dict[str, tuple[str, str, int]] = {}
    invocations: list[Invocation] = []
    notes: list[Note] = []
    for key, val, ln, line_nos, blank, ignored in entries:
        if key == "Environment":
            try:
                for item in shlex.split(val):
                    n, _eq, v = item.partition("=")
                    env.pop(n, None)
                    env[n] = (n, v, ln)
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
            idx = unwrap(words, tmp_env)[0]
            if idx < len(words) and is_server_call(words[idx].text, words[idx + 1:]):
                inv = Invocation(words[idx].text, words[idx + 1:], words[idx].line,
                                 line_nos[-1], env=[*env.values(), *tmp_env], source="systemd", label=key)
                invocations.append(inv)
                if blank is not None and ignored:
                    _cut(inv, len(invocations) - 1, key, blank, ignored, raw, notes)
            elif idx < len(words) and basename(words[idx].text) in ("killall", "pkill"):
                notes.append(Note("kill-by-name", ln, _("{key}= kills processes by name").format(key=key),
                                  Severity.WARNING))
    return Parsed("systemd", invocations, notes, [], raw)


def _cut(inv: Invocation, k: int, key: str, blank: int, ignored: list[tuple[str, list[int]]],
         raw: list[str], notes: list[Note]) -> None:
    """The lines after a blank line inside ``key=``'s continuation: cut off (``inv.orphans``)."""
    for text, nos in ignored:
        try:
            inv.orphans.extend(_assign_lines(shlex.split(text, comments=False), raw, nos))
        except ValueError:
            notes.append(Note("shell-syntax", nos[0], "unbalanced quotes", Severity.ERROR, k))
    inv.cut_line = blank
    first, last = ignored[0][1][0], ignored[-1][1][-1]
    n = len(inv.orphans)
    notes.append(Note(
        "continuation-broken", blank,
        _("the {key}= command started on line {start} is cut off at line {blank}: line {blank} is blank, and "
          "systemd skips only comment lines inside a `\\` continuation; an empty line is appended and ends it "
          "(src/shared/conf-parser.c config_parse). {n} word(s) after it are never passed to llama-server").format(
            key=key, start=inv.line, blank=blank, n=n), Severity.ERROR, k))
    notes.append(Note(
        "orphan-flags", first,
        _("systemd ignores line(s) {first}-{last} (\"Missing '=', ignoring line.\"): {n} word(s) never reach "
          "llama-server (started on line {start})").format(first=first, last=last, n=n, start=inv.line),
        Severity.ERROR, k))


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

