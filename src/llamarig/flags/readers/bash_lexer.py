"""bash's lexical rules, for reading a script without running it: the text becomes tokens
(words after quote removal, operators, redirections), each with the line it starts on and its
offsets in the text, and the tokens become simple commands.

The rules followed (bash(1) QUOTING, REDIRECTION, DEFINITIONS): ``\\``-newline joins lines; a
``#`` at the start of a word runs to the end of the line (so a comment line after a ``\\`` line
*ends* the command); blanks and newlines separate words; ``;`` ``&&`` ``||`` ``|`` ``&`` ``(``
``)`` and newlines are operators; a redirection takes its target word with it; a here-document's
body is skipped; single quotes, ``$'...'``, double quotes and backslashes quote; ``$(...)``,
``${...}``, backquotes and process substitutions are kept as written. The interpreter
(llamarig.flags.readers.bash) runs over the commands. Garbage in gives problems, never an
exception; one pass over the text, so the cost is linear in its size.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from llamarig.flags.parsed import ShellCommand, Word
from llamarig.i18n import _

__all__ = ["Lexer", "Part", "Token", "split_commands"]

_OPS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
_OP_CHARS = frozenset("&|;()")


class Token(NamedTuple):
    """One lexical token: ``kind`` "word" (its text after quote removal), "op" (an operator or
    a newline) or "redir" (a redirection with its target, as written); the line it starts on
    (1-based) and its offsets in the text."""

    kind: str
    text: str
    line: int
    start: int
    end: int


# bash(1) REDIRECTION: [n]< [n]> [n]>| [n]>> &> &>> [n]<& [n]>& [n]<> << <<- <<<; an unquoted
# all-digit word glued to the operator is the file descriptor (`2>`, `10>&1`)
_REDIR_OP_RE = re.compile(r"(?:\d+|\{[A-Za-z_][A-Za-z0-9_]*\})?(?:>>|>&|>\||<<<|<<-|<<|<&|<>|>|<)|&>>|&>")
# runs of characters that stand for themselves, read in one step (the lexer stays linear and
# fast on megabytes): outside quotes, anything but blanks, quotes, `\`, `$`, backquotes and
# metacharacters; inside double quotes, anything but `"`, `\`, `$`, backquotes and newlines
_PLAIN_RE = re.compile(r"[^ \t\r\n'\"\\$`&|;()<>]+")
_DQ_PLAIN_RE = re.compile(r"[^\"\\$`\n]+")
_BLANKS_RE = re.compile(r"[ \t\r]+")
_ARRAY_HEAD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=$")
_INDEX_RE = re.compile(r"^\[[^\]]*\]=")

#: a piece of a word and how it was quoted: "" unquoted, '"' inside double quotes, "'" literal
#: (single quotes, $'...', a backslash escape), "`" a command substitution (kept as written)
Part = tuple[str, str]


@dataclass
class _WordState:
    """The pieces of the word being read, and whether it holds a ``$`` bash would expand."""

    parts: list[Part] = field(default_factory=list)
    dollar: bool = False


class Lexer:
    """A bash-subset lexer producing words (with the line each starts on) and operators."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.line = 1
        self.tokens: list[Token] = []
        self.heredocs: list[tuple[str, bool]] = []
        #: (line, problem) where bash would stop with a syntax error
        self.problems: list[tuple[int, str]] = []
        #: word start offset -> how its pieces were quoted (words with a `$` to expand only)
        self.parts: dict[int, tuple[Part, ...]] = {}
        #: word start offset -> the elements of a `NAME=(...)` array assignment
        self.arrays: dict[int, list[Word]] = {}
        #: (first, last) line of each here-document's body (its delimiter line included)
        self.heredoc_spans: list[tuple[int, int]] = []

    # -- the token stream

    def run(self) -> list[Token]:
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c == "\n":
                self._newline()
            elif c in " \t\r":
                m = _BLANKS_RE.match(s, self.i)
                self.i = m.end() if m else self.i + 1
            elif c == "\\" and self.i + 1 < self.n and s[self.i + 1] == "\n":
                self.i += 2
                self.line += 1
            elif c == "#":
                nl = s.find("\n", self.i)
                self.i = self.n if nl < 0 else nl
            else:
                self._token(c)
        return self.tokens

    def _token(self, c: str) -> None:
        """A redirection, an operator or a word, starting at ``c``."""
        s = self.s
        m = _REDIR_OP_RE.match(s, self.i)
        if m and not (c in "<>" and s.startswith("(", self.i + 1)):
            self._redirect(m)
            return
        op = next((o for o in _OPS if s.startswith(o, self.i)), None) if c in _OP_CHARS else None
        if op:
            self.tokens.append(Token("op", op, self.line, self.i, self.i + len(op)))
            self.i += len(op)
            return
        self._word()

    def _newline(self) -> None:
        self.tokens.append(Token("op", "\n", self.line, self.i, self.i + 1))
        self.i += 1
        self.line += 1
        if self.heredocs:
            self._skip_heredocs()

    def _skip_heredocs(self) -> None:
        first = self.line
        for delim, strip in self.heredocs:
            while self.i < self.n:
                end = self.s.find("\n", self.i)
                end = self.n if end < 0 else end
                body = self.s[self.i:end]
                self.i = min(end + 1, self.n)
                self.line += 1
                if (body.lstrip("\t") if strip else body) == delim:
                    break
        self.heredocs = []
        if self.line > first:
            self.heredoc_spans.append((first, self.line - 1))

    def _skip_gap(self) -> bool:
        """Skip blanks and ``\\``-newlines; whether any were skipped."""
        gap = False
        while self.i < self.n:
            if self.s[self.i] in " \t\r":
                self.i += 1
            elif self.s.startswith("\\\n", self.i):
                self.i += 2
                self.line += 1
            else:
                break
            gap = True
        return gap

    def _redirect(self, m: re.Match[str]) -> None:
        """A redirection (bash(1) REDIRECTION): the operator, then its target word, which may be
        quoted and may follow blanks. Bash removes both from the command's argv; the text as
        written (quotes kept) goes into one ``redir`` token."""
        line = self.line
        op = m.group(0)
        self.i = m.end()
        gap = self._skip_gap()
        c = self.s[self.i] if self.i < self.n else "\n"
        if c in "\n#" or c in _OP_CHARS or (c in "<>" and not self.s.startswith("(", self.i + 1)):
            self.problems.append((line, _("redirection `{op}` without a target").format(op=op)))
            self.tokens.append(Token("redir", op, line, m.start(), self.i))
            return
        start = self.i
        target, _line, _parts = self.read_word()
        if op in ("<<", "<<-") and target:
            self.heredocs.append((target, op == "<<-"))
        self.tokens.append(Token("redir", op + (" " if gap else "") + self.s[start:self.i], line, m.start(), self.i))

    def _word(self) -> None:
        start = self.i
        text, start_line, parts = self.read_word()
        if self.i == start:  # nothing a word can start with: never loop on it
            self.i += 1
            return
        if self.i < self.n and self.s[self.i] == "(" and _ARRAY_HEAD_RE.match(text) \
                and self.s[start:self.i] == text:
            self._array(text, start, start_line)
            return
        if parts is not None:
            self.parts[start] = parts
        self.tokens.append(Token("word", text, start_line, start, self.i))

    def _array(self, head: str, start: int, start_line: int) -> None:
        """``NAME=( element ... )`` (bash(1) Arrays): the elements are words, separated by blanks
        and newlines, with comments allowed between them; one token for the whole assignment."""
        self.i += 1  # the `(`
        elements: list[Word] = []
        closed = False
        while self.i < self.n and not closed:
            closed = self._array_step(elements)
        if not closed:
            self.problems.append((start_line, _("unterminated array assignment `(`")))
        self.arrays[start] = elements
        self.tokens.append(Token("word", head + "(" + " ".join(w.text for w in elements) + ")",
                                 start_line, start, self.i))

    def _array_step(self, elements: list[Word]) -> bool:
        """One step inside ``( ... )``: a gap, a comment, an element; True at the ``)``."""
        s = self.s
        c = s[self.i]
        if c == ")":
            self.i += 1
            return True
        if c == "\n":
            self.i += 1
            self.line += 1
        elif self._skip_gap():
            pass
        elif c == "#":
            nl = s.find("\n", self.i)
            self.i = self.n if nl < 0 else nl
        else:
            w_start = self.i
            text, line, parts = self.read_word()
            if self.i == w_start:  # an operator inside the array: bash's syntax error
                self.problems.append((self.line, _("unexpected `{c}` in the array assignment").format(c=c)))
                self.i += 1
                return False
            m = _INDEX_RE.match(text)
            if m:  # `[2]=value`: the value (indices are not tracked)
                text, parts = text[m.end():], None
            elements.append(Word(text, line, s[w_start:self.i], w_start, self.i, parts))
        return False

    # -- one word

    def read_word(self) -> tuple[str, int, tuple[Part, ...] | None]:
        """One word: its text after quote removal, the line it starts on, and, when it holds a
        ``$`` that bash would expand, how each piece of it was quoted (for the expansion)."""
        s = self.s
        start_line = self.line
        st = _WordState()
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\r\n" or (not st.parts and c == "#"):
                break
            plain = _PLAIN_RE.match(s, self.i)
            if plain:
                st.parts.append((plain.group(0), ""))
                self.i = plain.end()
                continue
            if c in _OP_CHARS or (c in "<>" and not s.startswith("(", self.i + 1)):
                break  # `<` and `>` are metacharacters: `a>b` is the word `a` and `>b`
            _PIECES[c](self, st)
        return _finish(st, start_line)

    def _process_subst(self, st: _WordState) -> None:
        """``<(...)`` / ``>(...)``, kept as written."""
        c = self.s[self.i]
        self.i += 1
        st.parts.append((c + self._subst("(", ")"), "`"))

    def _backslash(self, st: _WordState) -> None:
        if self.i + 1 >= self.n:
            self.i += 1
            return
        nxt = self.s[self.i + 1]
        self.i += 2
        if nxt == "\n":
            self.line += 1
        else:
            st.parts.append((nxt, "'"))

    def _single(self, st: _WordState) -> None:
        end = self.s.find("'", self.i + 1)
        if end < 0:
            self.problems.append((self.line, _("unterminated single quote")))
            end = self.n
        chunk = self.s[self.i + 1:end]
        st.parts.append((chunk, "'"))
        self.line += chunk.count("\n")
        self.i = end + 1

    def _ansi_c(self, st: _WordState) -> None:
        """``$'...'``: backslash escapes (``\\n``, ``\\t``; others stand for the character)."""
        s = self.s
        end = self.i + 2
        out: list[str] = []
        while end < self.n and s[end] != "'":
            if s[end] == "\\" and end + 1 < self.n:
                out.append({"n": "\n", "t": "\t"}.get(s[end + 1], s[end + 1]))
                end += 2
                continue
            out.append(s[end])
            end += 1
        st.parts.append(("".join(out), "'"))
        self.line += s[self.i:end].count("\n")
        self.i = end + 1

    def _double(self, st: _WordState) -> None:
        start_line = self.line
        self.i += 1
        opened = len(st.parts)
        while self.i < self.n and self.s[self.i] != '"':
            run = _DQ_PLAIN_RE.match(self.s, self.i)
            if run:
                st.parts.append((run.group(0), '"'))
                self.i = run.end()
            else:
                self._double_special(st)
        if self.i >= self.n:
            self.problems.append((start_line, _("unterminated double quote")))
        self.i += 1
        if len(st.parts) == opened:
            st.parts.append(("", '"'))  # `""`: an empty word all the same

    def _double_special(self, st: _WordState) -> None:
        """Inside double quotes: ``\\`` before ``"\\$``` or a newline, ``$(...)``, backquotes,
        a newline, a ``$``."""
        s = self.s
        ch = s[self.i]
        nxt = s[self.i + 1] if self.i + 1 < self.n else ""
        if ch == "\\" and nxt == "\n":
            self.line += 1
            self.i += 2
        elif ch == "\\" and nxt and nxt in '"\\$`':
            st.parts.append((nxt, "'"))
            self.i += 2
        elif ch == "$" and nxt == "(" or ch == "`":
            st.dollar = True
            st.parts.append((self._subst("$(", ")") if ch == "$" else self._subst("`", "`"), "`"))
        else:
            if ch == "\n":
                self.line += 1
            elif ch == "$":
                st.dollar = True
            st.parts.append((ch, '"'))
            self.i += 1

    def _dollar(self, st: _WordState) -> None:
        s = self.s
        nxt = s[self.i + 1] if self.i + 1 < self.n else ""
        if nxt == "'":
            self._ansi_c(st)
            return
        st.dollar = True
        if nxt == "(":
            st.parts.append((self._subst("$(", ")"), "`"))
        elif nxt == "{":
            st.parts.append((self._subst("${", "}"), ""))
        else:
            st.parts.append(("$", ""))
            self.i += 1

    def _backtick(self, st: _WordState) -> None:
        st.dollar = True
        st.parts.append((self._subst("`", "`"), "`"))

    def _subst(self, open_: str, close: str) -> str:
        """Consume a $(...), ${...} or `...` substitution verbatim (nesting-aware)."""
        s = self.s
        start = self.i
        self.i += len(open_)
        depth = 1
        while self.i < self.n and depth:
            ch = s[self.i]
            if ch == "\\":
                self.i += 2
                continue
            if close != "`" and s.startswith(open_, self.i):
                depth += 1
                self.i += len(open_)
                continue
            if ch == close:
                depth -= 1
            elif ch == "\n":
                self.line += 1
            self.i += 1
        if depth:
            self.problems.append((self.line, _("unterminated {open}").format(open=open_)))
        return s[start:self.i]


#: the character a piece of a word starts with -> the method that reads the piece
_PIECES: dict[str, Callable[[Lexer, _WordState], None]] = {
    "\\": Lexer._backslash, "'": Lexer._single, '"': Lexer._double, "$": Lexer._dollar,
    "`": Lexer._backtick, "<": Lexer._process_subst, ">": Lexer._process_subst,
}


def _finish(st: _WordState, start_line: int) -> tuple[str, int, tuple[Part, ...] | None]:
    text = "".join(p[0] for p in st.parts)
    if not st.dollar:
        return text, start_line, None
    merged: list[Part] = []  # adjacent pieces quoted alike, joined: `$` + `NAME` is `$NAME`
    for t, q in st.parts:
        if merged and merged[-1][1] == q and q in ("", '"'):
            merged[-1] = (merged[-1][0] + t, q)
        else:
            merged.append((t, q))
    return text, start_line, tuple(merged)


# ----------------------------------------------------------------------------- commands


@dataclass
class _Building:
    """The simple command being gathered from the tokens."""

    words: list[Word] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    end_pos: int = -1


def split_commands(tokens: list[Token], src: str, lex: Lexer, shift: int = 0) -> list[ShellCommand]:
    """The simple commands of a token stream (``shift``: lines to add to the array elements'
    lines, when the tokens were shifted to the input's numbering)."""
    cmds: list[ShellCommand] = []
    cur = _Building()
    last_line = 1
    for tok in tokens:
        last_line = tok.line
        if tok.kind == "op":
            _flush(cmds, cur, tok.text, tok.line)
            cur = _Building()
            continue
        cur.end_pos = max(cur.end_pos, tok.end)
        if tok.kind == "redir":  # never part of the argv (the lexer read the target too)
            cur.redirects.append(tok.text)
            continue
        elements = lex.arrays.get(tok.start)
        cur.words.append(Word(tok.text, tok.line, src[tok.start:tok.end].replace("\\\n", ""), tok.start, tok.end,
                              lex.parts.get(tok.start), None if elements is None else tuple(
                                  replace(e, line=e.line + shift) if shift else e for e in elements)))
    _flush(cmds, cur, "", last_line)
    return cmds


def _flush(cmds: list[ShellCommand], cur: _Building, term: str, line: int) -> None:
    if cur.words:
        cmds.append(ShellCommand(words=cur.words, line=cur.words[0].line, end_line=line, terminator=term,
                                 redirects=cur.redirects, end_pos=cur.end_pos))
