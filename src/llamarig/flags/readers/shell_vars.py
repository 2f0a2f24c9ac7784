"""Shell variables and arrays, expanded the way bash expands them (bash(1) EXPANSION: parameter
expansion, then word splitting of the unquoted results on IFS blanks, then quote removal).

The values come from the assignments read so far in the same file, in text order (``NAME=value``,
``NAME+=value``, ``NAME=( a b c )``, ``NAME+=( d )``, ``export``/``declare``/``local``/
``readonly``/``typeset``); a command that runs later sees the last assignment before it.
Supported forms: ``$NAME`` ``${NAME}`` ``${NAME[@]}`` ``${NAME[*]}`` ``${NAME[N]}`` ``${#NAME}``
``${#NAME[@]}`` and the defaults ``${NAME:-word}`` ``${NAME-word}`` ``${NAME:=word}``
``${NAME:+word}``. ``"${arr[@]}"`` gives one word per element; an unquoted ``$ARGS`` is split on
blanks. What is not known here (the caller's environment, ``$1``/``"$@"``, ``$(...)``, other
operators) is kept as written and reported once per invocation (``unknown-variable``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from llamarig.flags.parsed import Word
from llamarig.i18n import _

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACED_RE = re.compile(r"^(#?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*])(?:\[([^\]]*)\])?(?:(:?[-=+?])(.*))?$", re.S)
_IFS_RE = re.compile(r"[ \t\n]+")
_SPECIAL = "@*#?$!-0123456789"

#: a variable's value: a scalar, or the elements of an array, each with the line its text was
#: written on and whether it is itself an unknown reference kept as written (``"$API_KEY"``);
#: None: assigned from something not known here (``$(cmd)``, ``read``)
Value = list[tuple[str, int, bool]]


@dataclass
class Var:
    value: Value | None
    is_array: bool
    line: int
    why: str = ""  # for an unknown value: where it comes from
    unknown: list[Unknown] = field(default_factory=list)  # references its value kept as written
    _joined: Value | None = field(default=None, repr=False)
    _joined_n: int = field(default=-1, repr=False)

    def values(self) -> Value:
        """An array's elements, or a scalar as one value (``+=`` keeps a scalar as pieces, joined
        here once per change rather than copied on every append)."""
        v = self.value or []
        if self.is_array or len(v) <= 1:
            return v
        if self._joined is None or self._joined_n != len(v):
            self._joined = [("".join(t for t, _, _ in v), v[0][1], all(op for _, _, op in v))]
            self._joined_n = len(v)
        return self._joined


@dataclass
class Unknown:
    """A reference that could not be expanded (or, ``default``, was expanded to its default)."""

    name: str
    line: int
    why: str
    default: bool = False


@dataclass
class Scope:
    """The variables assigned so far in a script."""

    vars: dict[str, Var] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)  # names the script expands somewhere
    #: the positional parameters (``$1`` ... ``"$@"``) inside a function call or a sourced file
    #: given arguments; None: the script's own, not known here
    positional: Value | None = None
    #: the script's own directory, when the script is a file (``$(dirname "$0")`` and the like)
    script_dir: str | None = None

    def assign(self, name: str, value: Value | None, line: int, *, array: bool = False,
               append: bool = False, why: str = "", unknown: list[Unknown] | None = None) -> None:
        old = self.vars.get(name)
        if append and old is not None and old.value is not None and value is not None:
            # in place: a script that appends n times costs n, not n squared
            old.value.extend(value)
            old.unknown.extend(unknown or ())
            old.is_array = old.is_array or array
            return
        self.vars[name] = Var(value, array, line, why, list(unknown or ()))

    def unset(self, name: str) -> None:
        self.vars.pop(name, None)


class _Fields:
    """Fields being built: bash's word splitting with quoted/unquoted pieces."""

    def __init__(self, line: int) -> None:
        self.out: list[tuple[str, int, bool]] = []  # text, line, opaque
        self.cur: list[str] = []
        self.exists = False  # quoted empty strings make a field too
        self.line = line
        self.cur_line: int | None = None
        self.known = False  # the current field holds something besides unknown references
        self.opaque = False

    def add(self, text: str, line: int, *, make: bool = True, known: bool = True) -> None:
        if text or make:
            if self.cur_line is None:
                self.cur_line = line
            self.exists = True
        if text:
            self.cur.append(text)
        if known and (text or make):
            self.known = True
        if not known:
            self.opaque = True

    def end(self) -> None:
        if self.exists:
            self.out.append(("".join(self.cur), self.cur_line or self.line, self.opaque and not self.known))
        self.cur, self.exists, self.cur_line, self.known, self.opaque = [], False, None, False, False

    def split(self, text: str, line: int) -> None:
        """An unquoted expansion: split on IFS blanks (default IFS)."""
        pieces = _IFS_RE.split(text)
        for k, piece in enumerate(pieces):
            if k:
                self.end()
            if piece:
                self.add(piece, line)


def expand_word(w: Word, scope: Scope, unknown: list[Unknown], *, split: bool = True) -> list[Word]:
    """The words bash makes of ``w`` (a word of the lexer, with ``parts`` when it holds a
    ``$``). ``split`` False: an assignment's value (no word splitting, one word)."""
    if w.parts is None:
        return [w]
    f = _Fields(w.line)
    changed = False
    for text, q in w.parts:
        if q in ("'", "`"):
            f.add(text, w.line)
        elif "$" not in text:
            f.add(text, w.line, make=q == '"')
        else:
            changed = _expand_text(f, text, q == '"', w.line, scope, unknown, split) or changed
    f.end()
    if not changed:
        if f.out and f.out[0][2] and len(f.out) == 1:
            return [replace(w, opaque=True)]
        return [w]
    if not split:
        f.out = [("".join(t for t, _, _ in f.out), f.out[0][1] if f.out else w.line, False)]
    return [Word(t, ln, opaque=op) for t, ln, op in f.out]


def _expand_text(f: _Fields, text: str, quoted: bool, line: int, scope: Scope, unknown: list[Unknown],
                 split: bool) -> bool:
    """One piece of a word holding ``$``: its references replaced in ``f``; whether any was known."""
    changed = False
    i = 0
    while i < len(text):
        k = text.find("$", i)
        if k < 0:
            f.add(text[i:], line, make=quoted)
            break
        if k > i:
            f.add(text[i:k], line, make=quoted)
        ref, end = _reference(text, k)
        if ref is None:
            f.add("$", line, make=True)
            i = k + 1
            continue
        i = end
        got = _resolve(ref, text[k:end], scope, line, unknown)
        if got is None:
            f.add(text[k:end], line, known=False)
            continue
        changed = True
        _place(f, got, quoted, split, line)
    return changed


def _place(f: _Fields, got: tuple[str, Value], quoted: bool, split: bool, line: int) -> None:
    """A known expansion's values into ``f``: ``"${arr[@]}"`` one field per element, a quoted or
    unsplit one joined, an unquoted one split on blanks."""
    kind, vals = got
    if kind == "@" and quoted:
        for e, (t, ln, op) in enumerate(vals):
            if e:
                f.end()
            f.add(t, ln, known=not op)
    elif quoted or not split:
        f.add((" " if kind in ("@", "*") else "").join(t for t, _, _ in vals),
              vals[0][1] if vals else line, make=quoted, known=not (len(vals) == 1 and vals[0][2]))
    else:
        for e, (t, ln, op) in enumerate(vals):
            if e:
                f.end()
            if op:
                f.add(t, ln, known=False)
            else:
                f.split(t, ln)


def _reference(text: str, k: int) -> tuple[str | None, int]:
    """The parameter reference starting at ``text[k] == "$"``: its inside (``NAME``,
    ``NAME[@]``, ``NAME:-x`` ...) and where it ends; None when the ``$`` is literal."""
    if k + 1 >= len(text):
        return None, k + 1
    c = text[k + 1]
    if c == "{":
        depth, j = 1, k + 2
        while j < len(text) and depth:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        if depth:
            return None, k + 1
        return text[k + 2:j - 1], j
    if c in _SPECIAL:
        return c, k + 2
    m = _NAME_RE.match(text, k + 1)
    if m:
        return m.group(0), m.end()
    return None, k + 1


@dataclass
class _Ref:
    """A parameter reference taken apart: ``${#name[index]op word}``, and the variable it names
    (None: not set)."""

    name: str
    var: Var | None
    index: str | None
    count: bool
    op: str | None
    word: str


def _resolve(ref: str, written: str, scope: Scope, line: int, unknown: list[Unknown]
             ) -> tuple[str, Value] | None:
    """(``@`` for an array's elements, ``*`` for elements joined, ``$`` for a scalar, values), or
    None when not known here (recorded in ``unknown``)."""
    r = _parse_ref(ref, written, scope, line, unknown)
    if r is None:
        return None
    var = r.var
    if var is not None and var.value is None:
        unknown.append(Unknown(written, line, var.why or _("set on line {line} from a value not known here").format(
            line=var.line)))
        return None
    if var is not None:
        unknown.extend(var.unknown)
    vals: Value = var.values() if var is not None else []
    if r.index is None:
        kind, sel = "$", vals[:1]
    elif r.index in ("@", "*"):
        kind, sel = r.index, list(vals)
    elif r.index.isdigit():
        kind, sel = "$", vals[int(r.index):int(r.index) + 1]
    else:
        unknown.append(Unknown(written, line, _("an array index llamarig does not evaluate")))
        return None
    if r.count:
        return _length(r, vals, sel, written, line, unknown)
    if r.op is None:
        if var is None:
            unknown.append(Unknown(written, line, _("{name} is not set earlier in this file (it may come from the "
                                                    "environment or a sourced file)").format(name=r.name)))
            return None
        return kind, sel
    return _operator(r, kind, sel, written, scope, line, unknown)


def _parse_ref(ref: str, written: str, scope: Scope, line: int, unknown: list[Unknown]) -> _Ref | None:
    """The reference inside ``$...`` or ``${...}`` and the variable it names; None (with a note)
    for the shell's own parameters and what llamarig does not evaluate."""
    positional = scope.positional is not None and (ref in ("@", "*") or ref.isdigit() and ref != "0")
    if ref == "#" and scope.positional is not None:
        return _Ref("#", Var([(str(len(scope.positional)), line, False)], False, line), None, False, None, "")
    if ref and ref[0] in _SPECIAL and (len(ref) == 1 or ref[0] in "@*") and not positional:
        why = (_("the script's arguments, given when it runs") if ref[0] in "@*#0123456789"
               else _("set by the shell when it runs"))
        unknown.append(Unknown(written, line, why))
        return None
    m = _BRACED_RE.match(ref)
    if not m:
        unknown.append(Unknown(written, line, _("a shell expansion llamarig does not evaluate")))
        return None
    count, name, index, op, word = m.groups()
    if name[0].isalpha() or name[0] == "_":
        scope.used.add(name)
        return _Ref(name, scope.vars.get(name), index, bool(count), op, word or "")
    if scope.positional is None or name == "0" or index is not None:  # $1 ... $9, ${10}, $@, $*
        unknown.append(Unknown(written, line, _("the script's arguments, given when it runs")))
        return None
    pos = scope.positional
    if name in ("@", "*"):
        return _Ref(name, Var(list(pos), True, line), name, bool(count), op, word or "")
    n = int(name)
    var = Var([pos[n - 1] if n <= len(pos) else ("", line, False)], False, line)  # unset: empty
    return _Ref(name, var, index, bool(count), op, word or "")


def _length(r: _Ref, vals: Value, sel: Value, written: str, line: int, unknown: list[Unknown]
            ) -> tuple[str, Value] | None:
    """``${#name}``, ``${#arr[@]}``."""
    if r.op:
        unknown.append(Unknown(written, line, _("a shell expansion llamarig does not evaluate")))
        return None
    if r.var is None:
        unknown.append(Unknown(written, line, _("{name} is not set in this file").format(name=r.name)))
        return None
    n = len(vals) if r.index in ("@", "*") else len(sel[0][0]) if sel else 0
    return "$", [(str(n), line, False)]


def _operator(r: _Ref, kind: str, sel: Value, written: str, scope: Scope, line: int, unknown: list[Unknown]
              ) -> tuple[str, Value] | None:
    """``${name:-word}``, ``${name-word}``, ``:=``, ``:+``, ``:?``: the value bash gives."""
    op, word, is_set = r.op or "", r.word, r.var is not None
    empty = not sel or (len(sel) == 1 and sel[0][0] == "")
    use_default = (not is_set) if op in ("-", "=", "+", "?") else (not is_set or empty)
    if op in (":+", "+"):
        return ("$", [(word, line, False)]) if not use_default else ("$", [])
    if op in (":?", "?"):
        if use_default:
            unknown.append(Unknown(written, line, _("{name} is not set in this file").format(name=r.name)))
            return None
        return kind, sel
    if not use_default:
        return kind, sel
    if "$" in word:
        inner: list[Unknown] = []
        dw = expand_word(Word(word, line, parts=((word, '"'),)), scope, inner, split=False)
        if inner or not dw:
            unknown.append(Unknown(written, line, _("{name} is not set in this file and its default is not "
                                                    "known here").format(name=r.name)))
            return None
        word = dw[0].text
    if not is_set:
        unknown.append(Unknown(written, line, _("{name} is not set earlier in this file: checked with its "
                                                "default `{word}`").format(name=r.name, word=word), default=True))
    if op in (":=", "="):
        scope.assign(r.name, [(word, line, False)], line)
    return "$", [(word, line, False)]
