"""Text that remembers where it was written: every character of a ``Located`` string maps to the
line of the input it came from, even after it has been cut out of a YAML scalar, spliced into a
llama-swap command by a macro, or split into shell words. ``split_words`` is POSIX shell word
splitting (quotes, backslashes) that keeps the offset each word starts at, so that every word of
a command read out of a YAML value gets the line it is written on.

All of it is linear in the size of the text: a Located string stores one (offset, line) pair
per line change, not one per character, and look-ups bisect.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

from llamarig.flags.parsed import Word
from llamarig.i18n import _


@dataclass
class Located:
    """``text`` with the input line of each character: characters from ``starts[k]`` on (up to
    the next start) were written on line ``lines[k]``."""

    text: str
    starts: list[int] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)

    @classmethod
    def at(cls, text: str, line: int) -> Located:
        """All of ``text`` on one line."""
        return cls(text, [0], [line])

    def line_at(self, offset: int) -> int:
        if not self.starts:
            return 1
        k = bisect_right(self.starts, offset) - 1
        return self.lines[max(k, 0)]


class LocatedBuilder:
    """Concatenates Located pieces (and slices of them) into one Located string."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.starts: list[int] = []
        self.lines: list[int] = []
        self.n = 0

    def _mark(self, line: int) -> None:
        if self.lines and self.lines[-1] == line:
            return
        if self.starts and self.starts[-1] == self.n:  # nothing was added on the previous mark
            self.lines[-1] = line
            return
        self.starts.append(self.n)
        self.lines.append(line)

    def add(self, loc: Located, start: int = 0, end: int | None = None) -> None:
        end = len(loc.text) if end is None else end
        if end <= start:
            return
        k = max(bisect_right(loc.starts, start) - 1, 0)
        pos = start
        while pos < end:
            nxt = loc.starts[k + 1] if k + 1 < len(loc.starts) else end
            stop = min(nxt, end)
            if stop > pos:
                self._mark(loc.lines[k] if loc.lines else 1)
                self.parts.append(loc.text[pos:stop])
                self.n += stop - pos
            pos = stop
            k += 1

    def add_text(self, text: str, line: int) -> None:
        if text:
            self._mark(line)
            self.parts.append(text)
            self.n += len(text)

    def build(self) -> Located:
        return Located("".join(self.parts), self.starts, self.lines)


class ShellSyntaxError(ValueError):
    """Unbalanced quotes: the offset where the unterminated quote starts."""

    def __init__(self, offset: int, what: str) -> None:
        super().__init__(what)
        self.offset = offset


_BLANK = " \t\r\n"


def split_words(loc: Located) -> list[Word]:
    """POSIX shell word splitting of ``loc.text`` (blanks separate words; single quotes, double
    quotes with ``\\"`` ``\\\\`` ``\\$`` escapes, backslash outside quotes), as Go's
    billziss-gh/golib shlex.Posix (llama-swap) and shlex.split do; no expansion. Each Word has
    the line its first character was written on. Raises ShellSyntaxError on an unterminated
    quote."""
    s = loc.text
    n = len(s)
    out: list[Word] = []
    i = 0
    while i < n:
        while i < n and s[i] in _BLANK:
            i += 1
        if i >= n:
            break
        start = i
        buf: list[str] = []
        while i < n and s[i] not in _BLANK:
            i = _piece(s, i, start, buf)
        out.append(Word("".join(buf), loc.line_at(start)))
    return out


def _piece(s: str, i: int, start: int, buf: list[str]) -> int:
    """One piece of a word at ``s[i]`` (a quoted string, an escape, a run of plain characters)
    into ``buf``; where the next piece starts."""
    c = s[i]
    if c == "'":
        end = s.find("'", i + 1)
        if end < 0:
            raise ShellSyntaxError(i, _("unterminated single quote"))
        buf.append(s[i + 1:end])
        return end + 1
    if c == '"':
        return _double_quoted(s, i + 1, start, buf)
    if c == "\\":
        if i + 1 >= len(s):
            return i + 1
        if s[i + 1] != "\n":
            buf.append(s[i + 1])
        return i + 2
    j = i
    while j < len(s) and s[j] not in _BLANK and s[j] not in "'\"\\":
        j += 1
    buf.append(s[i:j])
    return j


def _double_quoted(s: str, i: int, start: int, buf: list[str]) -> int:
    """The inside of double quotes from ``s[i]``: ``\\`` escapes ``"`` ``\\`` ``$`` backquote and a
    newline; where the closing quote ends."""
    n = len(s)
    while True:
        if i >= n:
            raise ShellSyntaxError(start, _("unterminated double quote"))
        ch = s[i]
        if ch == '"':
            return i + 1
        if ch == "\\" and i + 1 < n and s[i + 1] in '"\\$`\n':
            if s[i + 1] != "\n":
                buf.append(s[i + 1])
            i += 2
            continue
        buf.append(ch)
        i += 1
