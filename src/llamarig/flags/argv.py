"""llama-server's argument parser, emulated: how one invocation's words become options and values.

The walk copies common/arg.cpp ``parse_cli_args``: ``--`` spellings get ``_`` -> ``-``, an
unknown token is ``error: invalid argument`` (there is no ``--opt=value`` syntax and no positional
argument), a value option takes the next word whatever it looks like, a repeated option warns and
the last value wins (handlers that append keep all). What the parser itself rejects is reported
here, as the binary does while parsing (see PARSE_RULES in llamarig.flags.rules); the rules in
llamarig.flags.rules judge the options read.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from llamarig.flags.findings import Finding, Fix, Severity, finding
from llamarig.flags.history import history_note
from llamarig.flags.knowledge import FOLKLORE, JSON_OPTIONS, Folklore
from llamarig.flags.parsed import Invocation, Word
from llamarig.flags.schema import Option, Schema
from llamarig.i18n import _


@dataclass
class Use:
    """One option as written: the spelling, its values and where."""

    opt: Option | None  # None: unknown flag / stray word
    spelling: str
    values: list[Word]
    line: int
    positive: bool = True
    passed: bool = True
    index: int = 0
    #: a shell variable not known here (readers: Word.opaque), kept as written and not judged
    opaque: bool = False
    #: words the shell split off an unquoted JSON value (`{"a": 1}` -> `{a:` `1}`), read with it
    spill: list[Word] = field(default_factory=list)

    @property
    def value(self) -> str | None:
        return self.values[0].text if self.values else None


@dataclass
class Reading:
    """The options of one invocation as llama-server would parse them."""

    uses: list[Use] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    # option name -> its uses, built on first look-up (rules ask for dozens of names: a scan of
    # every use per question would cost uses x questions); rebuilt when uses grows
    _index: dict[str, list[Use]] = field(default_factory=dict, repr=False, compare=False)
    _indexed: int = field(default=-1, repr=False, compare=False)

    def _by_name(self) -> dict[str, list[Use]]:
        if self._indexed != len(self.uses):
            index: dict[str, list[Use]] = {}
            for u in self.uses:
                if u.opt is not None:
                    index.setdefault(u.opt.name, []).append(u)
            self._index, self._indexed = index, len(self.uses)
        return self._index

    def last(self, name: str) -> Use | None:
        hit = self._by_name().get(name)
        return hit[-1] if hit else None

    def all(self, name: str) -> list[Use]:
        return list(self._by_name().get(name, ()))

    def has(self, name: str) -> bool:
        return self.last(name) is not None


# ----------------------------------------------------------------------------- helpers

INT_RE = re.compile(r"^\s*[+-]?\d+")
TRUTHY = ("on", "enabled", "true", "1")
FALSY = ("off", "disabled", "false", "0")


def closest(schema: Schema, token: str, n: int = 3) -> list[str]:
    """Closest real spellings (difflib ratio >= 0.6), memoised per schema."""
    key = token.replace("_", "-") if token.startswith("--") else token
    hit = schema.memo.closest.get((key, n))
    if hit is None:
        if not schema.memo.take_search():
            return []
        long_ = key.startswith("--")
        cands = [c for c in schema.spellings if c.startswith("--") == long_
                 and abs(len(c) - len(key)) <= max(4, len(key) // 2)]
        hit = difflib.get_close_matches(key, cands, n=n, cutoff=0.6)
        schema.memo.closest[(key, n)] = hit
    return list(hit)


def int_of(text: str | None) -> int | None:
    if text is None:
        return None
    m = INT_RE.match(text)
    if not m:
        return None
    try:
        return int(m.group(0))
    except ValueError:
        return None


_NUMBER_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")


def is_number(text: str) -> bool:
    return _NUMBER_RE.fullmatch(text) is not None


def _looks_like_value(text: str) -> bool:
    return not text.startswith("-") or is_number(text)


def fa_mode(r: Reading) -> str:
    u = r.last("--flash-attn")
    v = (u.value or "auto") if u else "auto"
    if v in TRUTHY:
        return "on"
    if v in FALSY:
        return "off"
    return "auto"


# ----------------------------------------------------------------------------- the walk


@dataclass(frozen=True)
class ArgStep:
    """What llama-server's parser makes of the word at one place of an argv: the option it names
    (None: an unknown option or a stray word) and how many of the next words it takes.

    ``missing``: a value option followed by another option (common/arg.cpp hands it that option
    as its value and throws; read here without a value, so the option after it is read too).
    ``equals``: ``--name=value`` whose name is an option (no such syntax: one unknown word).
    ``lore``: the folklore entry of an unknown option (flags/knowledge.py)."""

    opt: Option | None
    positive: bool = True
    count: int = 0
    missing: bool = False
    equals: str | None = None
    lore: Folklore | None = None


def step_at(words: Sequence[str], i: int, schema: Schema) -> ArgStep:
    """The one rule for the word ``words[i]``, shared by check's located reading
    (:func:`read_invocation`) and :meth:`Command.parse`: a known option takes as many words as
    the build says (not another option where it wants a number or a choice); an unknown option
    takes the next word when that looks like a value (and is no option of this build), a
    folklore flag only when FOLKLORE says it is written with one."""
    t = words[i]
    nxt = words[i + 1] if i + 1 < len(words) else None
    hit = schema.lookup(t)
    if hit is not None:
        opt, positive = hit
        n = opt.n_values if positive else 0
        vals = words[i + 1:i + 1 + n]
        if vals and opt.value_kind not in (None, "string") and not is_number(vals[0]) \
                and schema.lookup(vals[0]) is not None:
            return ArgStep(opt, positive, missing=True)
        return ArgStep(opt, positive, len(vals))
    if not looks_like_option(t):
        return ArgStep(None)
    name, eq, _val = t.partition("=")
    if eq and schema.lookup(name) is not None:
        return ArgStep(None, equals=name)
    lore = FOLKLORE.get(t) or FOLKLORE.get(t.replace("_", "-"))
    takes = lore.takes_value if lore is not None else nxt is not None and schema.lookup(nxt) is None
    return ArgStep(None, count=1 if takes and nxt is not None and _looks_like_value(nxt) else 0, lore=lore)


# ----------------------------------------------------------------------------- reading


def read_invocation(inv: Invocation, schema: Schema, k: int | None = None) -> Reading:
    """Walk the intended argv (received + cut-off words) like common/arg.cpp parse_cli_args."""
    r = Reading()
    words = inv.intended_args
    texts = [w.text for w in words]
    n_passed = len(inv.args)
    i = 0
    while i < len(words):
        w = words[i]
        passed = i < n_passed
        if w.opaque:  # `"$@"`, `$EXTRA`: any number of words, unknown here
            r.uses.append(Use(None, w.text, [], w.line, passed=passed, index=len(r.uses), opaque=True))
            i += 1
            continue
        st = step_at(texts, i, schema)
        if st.opt is None:
            _unknown_use(r, schema, st, words[i:i + 1 + st.count], k, passed)
        else:
            i += _known_use(r, schema, st, words, i, k, passed)
        i += 1 + st.count
    return r


def _unknown_use(r: Reading, schema: Schema, st: ArgStep, words: list[Word], k: int | None, passed: bool) -> None:
    """A word that names no option of this build: `--opt=value`, an unknown option (with the
    value it takes), a value given to a flag, or a stray word."""
    w = words[0]
    t = w.text
    use = Use(None, t, list(words[1:]), w.line, passed=passed, index=len(r.uses))
    prev = r.uses[-1] if r.uses else None
    if st.equals is not None:
        val = t.partition("=")[2]
        r.findings.append(finding(
            "equals-syntax", Severity.ERROR, w.line, t,
            _("`{word}`: llama-server has no `--opt=value` syntax, the whole word is an "
              "unknown argument (error: invalid argument)").format(word=t),
            _("write `{fixed}`").format(fixed=f"{st.equals} {val}"), k, passed, Fix("split-equals", (st.equals, val)),
            use.index))
    elif looks_like_option(t):
        r.findings.append(_unknown(schema, t, use, st.lore, k, passed))
    elif prev is not None and prev.opt is not None and prev.opt.kind in ("flag", "bool_pair"):
        r.findings.append(finding(
            "flag-takes-no-value", Severity.ERROR, w.line, prev.spelling,
            _("`{flag}` takes no value, so `{word}` is read as a separate argument: "
              "error: invalid argument: {word}").format(flag=prev.spelling, word=t),
            _("write `{flag}` alone").format(flag=prev.spelling) + _neg_hint(prev, t), k, passed,
            Fix("drop-value", (t,)), prev.index))
    else:
        r.findings.append(finding(
            "stray-argument", Severity.ERROR, w.line, t,
            _("`{word}` is not an option and llama-server takes no positional arguments "
              "(error: invalid argument: {word})").format(word=t),
            _("remove it, or put the option it belongs to before it"), k, passed, Fix("drop"), use.index))
    r.uses.append(use)


def _known_use(r: Reading, schema: Schema, st: ArgStep, words: list[Word], i: int, k: int | None,
               passed: bool) -> int:
    """An option of this build with its values; how many words more than the step's it read
    (the words the shell split off an unquoted JSON value)."""
    assert st.opt is not None
    opt, w = st.opt, words[i]
    t = w.text
    vals = words[i + 1:i + 1 + st.count]
    use = Use(opt, t, list(vals), w.line, st.positive, passed, len(r.uses))
    r.uses.append(use)
    if st.missing:
        # the handler gets the next option as its value and throws (common/arg.cpp): reported
        # once, and the swallowed option read normally to avoid a cascade
        nxt = words[i + 1].text
        hint = opt.value_hint or "VALUE"
        r.findings.append(finding(
            "missing-value", Severity.ERROR, w.line, t,
            _("`{flag}` needs a value ({hint}) but is followed by the option `{next}`, which it "
              "takes as its value: error while handling argument \"{flag}\" (older builds accepted "
              "a bare `{flag}`)").format(flag=t, hint=hint, next=nxt),
            _("write `{fixed}`").format(fixed=f"{t} {_default_for(opt)}"), k, passed,
            Fix("add-value", (_default_for(opt),)), use.index))
        return 0
    if vals and schema.lookup(vals[0].text) is not None and not is_number(vals[0].text):
        r.findings.append(finding(
            "value-looks-like-flag", Severity.WARNING, w.line, t,
            _("`{flag}` takes `{value}` as its value (it looks like an option)").format(flag=t, value=vals[0].text),
            _("give `{flag}` a value").format(flag=t), k, passed))
    n = opt.n_values if st.positive else 0
    if len(vals) < n:
        r.findings.append(finding(
            "missing-value", Severity.ERROR, w.line, t,
            _("`{flag}` needs a value and none follows (error while handling argument \"{flag}\": "
              "expected value for argument)").format(flag=t),
            _("give `{fixed}`").format(fixed=f"{t} {opt.value_hint or 'VALUE'}"), k, passed, Fix("drop"), use.index))
    if vals and opt.name in JSON_OPTIONS and "$" not in vals[0].text:
        return len(_json_value(use, words, i + 1 + len(vals), r, k, passed))
    return 0


def _json_ok(text: str) -> bool:
    def no_constant(name: str) -> None:
        raise ValueError(name)  # nlohmann::json has no NaN/Infinity literals

    try:
        json.loads(text, parse_constant=no_constant)
    except (ValueError, RecursionError):
        return False
    return True


def _depth(text: str) -> int:
    """How many JSON brackets are still open at the end of ``text`` (outside strings)."""
    depth = 0
    in_str = esc = False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
    return depth


def _json_value(use: Use, words: list[Word], j: int, r: Reading, k: int | None, passed: bool) -> list[Word]:
    """An option whose value llama-server parses as JSON (knowledge.JSON_OPTIONS): an invalid
    value is an error; when the shell split unquoted JSON at its blanks (and removed its double
    quotes), the words it split off are read with it and the finding gives the quoted JSON."""
    assert use.opt is not None
    v = use.values[0]
    if _json_ok(v.text):
        return []
    where, at_parse = JSON_OPTIONS[use.opt.name]
    spill: list[Word] = []
    written = v.raw or v.text
    if v.text.lstrip().startswith(("{", "[")):
        while _depth(written) > 0 and j + len(spill) < len(words) and len(spill) < 64:
            nxt = words[j + len(spill)]
            spill.append(nxt)
            written += " " + (nxt.raw or nxt.text)
        if _depth(written) != 0:
            spill, written = [], v.raw or v.text
    use.spill = spill
    meant = written if _json_ok(written) else None
    got = f"`{v.text}`"
    if spill:
        got = _("{value} and then {words} as separate arguments").format(
            value=got, words=" ".join(f"`{x.text}`" for x in spill))
    if spill:
        how = _("the shell split the unquoted JSON at its blanks and removed its double quotes, so llama-server "
                "gets {got}").format(got=got)
    elif meant and meant != v.text:
        how = _("the shell removed the double quotes of the unquoted JSON, so llama-server gets {got}").format(got=got)
    else:
        how = _("`{value}` is not valid JSON").format(value=v.text)
    when = _("error while handling argument") if at_parse else _("the server exits at start")
    sp = use.spelling
    r.findings.append(finding(
        "invalid-value" if at_parse else "invalid-json", Severity.ERROR, use.line, sp,
        _("`{flag}` takes JSON: {how} ({where} fails: {when})").format(flag=sp, how=how, where=where, when=when),
        _("quote it: `{fixed}`").format(fixed=f"{sp} '{meant}'") if meant
        else _("give `{flag}` valid JSON in single quotes").format(flag=sp), k, passed,
        Fix("set-value", (meant,)) if meant else None, use.index))
    return spill


def _default_for(opt: Option) -> str:
    if opt.allowed and "on" in opt.allowed:
        return "on"
    if opt.allowed:
        return opt.allowed[0]
    return opt.default or "VALUE"


def _neg_hint(prev: Use, value: str) -> str:
    opt = prev.opt
    if opt is None:
        return ""
    if value.lower() in FALSY:
        if opt.negations:
            return _("; to switch it off write `{flag}`").format(flag=opt.negations[-1])
        return _("; to leave it off, drop the flag")
    return ""


def _unknown(schema: Schema, t: str, use: Use, lore: Folklore | None, k: int | None, passed: bool) -> Finding:
    near = closest(schema, t)
    # when other bundled builds accept the spelling, say when it came or went (flags/history.py)
    when = history_note(schema, t)
    when = _("; ") + when if when else ""
    missing = _("`{flag}` does not exist in this llama-server (error: invalid argument: {flag})").format(flag=t)
    if lore is not None:
        msg: str = missing + when + _("; ") + lore.advice()
        if lore.replace:
            v = use.value or ""
            new = tuple(a.replace("{v}", v) for a in lore.replace)
            return finding("unknown-flag", Severity.ERROR, use.line, t, msg,
                           _("replace with `{fixed}`").format(fixed=" ".join(new)),
                           k, passed, Fix("replace", new), use.index)
        return finding("unknown-flag", Severity.ERROR, use.line, t, msg, _("remove it"), k, passed, Fix("drop"),
                       use.index)
    hint = _("; closest real spellings: {names}").format(names=", ".join(near)) if near else ""
    msg = missing + when + hint
    if near and difflib.SequenceMatcher(None, t, near[0]).ratio() >= 0.85:
        return finding("unknown-flag", Severity.ERROR, use.line, t, msg,
                       _("did you mean `{flag}`?").format(flag=near[0]), k, passed,
                       Fix("rename", (near[0],)), use.index)
    return finding("unknown-flag", Severity.ERROR, use.line, t, msg, _("remove it"), k, passed, Fix("drop"), use.index)


# ----------------------------------------------------------------------------- settings read


def last_int(r: Reading, name: str) -> tuple[Use | None, int | None]:
    """The last use of option ``name`` and its value as std::stoi reads it (None when the option
    is not given or its value is not a number)."""
    u = r.last(name)
    return u, (int_of(u.value) if u else None)


def kv_unified(r: Reading) -> bool:
    """Whether the slots share one KV pool: ``-kvu``/``-no-kvu`` as given, else unified exactly
    when ``-np`` is left at auto (tools/server/server.cpp)."""
    kvu = r.last("--kv-unified")
    return kvu.positive if kvu else r.last("--parallel") is None


# ----------------------------------------------------------------------------- Command


def looks_like_option(text: str) -> bool:
    """A word llama-server's parser treats as an option (a dash, not a negative number)."""
    return text.startswith("-") and text != "-" and not is_number(text)


@dataclass(frozen=True)
class Arg:
    """One option of a :class:`Command` as written: the spelling and the values it takes.
    ``opt`` is the schema's option (None: a word the build does not know)."""

    spelling: str
    values: tuple[str, ...] = ()
    opt: Option | None = None
    positive: bool = True

    @property
    def name(self) -> str:
        """The option's canonical name (the word itself, ``_`` -> ``-``, for an unknown one)."""
        if self.opt is not None:
            return self.opt.name
        return self.spelling.replace("_", "-") if self.spelling.startswith("--") else self.spelling

    @property
    def value(self) -> str | None:
        return self.values[0] if self.values else None

    @property
    def words(self) -> tuple[str, ...]:
        return (self.spelling, *self.values)


@dataclass(frozen=True)
class Command:
    """A llama-server command parsed once against the flag schema, the way common/arg.cpp
    ``parse_cli_args`` walks it, word by word with :func:`step_at` (the walk check's located
    reading, :func:`read_invocation`, makes too): each option takes as many words as the build
    says (not another option where it wants a number or a choice), ``--`` spellings read ``_``
    as ``-``, there is no ``--opt=value`` syntax (such a word is one unknown argument). An
    unknown option keeps the value-looking word after it (a folklore flag only when FOLKLORE
    says it is written with one), so it can be shown, moved or dropped whole. The planner
    (:meth:`llamarig.plan.config.ServerConfig.from_command`), render, launch and tune read and
    edit commands through it."""

    program: str | None
    args: tuple[Arg, ...]
    schema: Schema = field(repr=False, compare=False)

    @classmethod
    def parse(cls, argv: Sequence[str], schema: Schema | None = None, *, program: bool | None = None) -> Command:
        """``argv`` with its program (``program=True``), without (False), or either (None: a
        first word that is not an option is the program)."""
        sch = schema if schema is not None else _bundled()
        words = list(argv)
        prog: str | None = None
        if words and (program or (program is None and not looks_like_option(words[0]))):
            prog, words = words[0], words[1:]
        out: list[Arg] = []
        i = 0
        while i < len(words):
            st = step_at(words, i, sch)
            out.append(Arg(words[i], tuple(words[i + 1:i + 1 + st.count]), st.opt, st.positive))
            i += 1 + st.count
        return cls(prog, tuple(out), sch)

    @classmethod
    def of(cls, argv: Command | Sequence[str], schema: Schema | None = None, *, program: bool | None = None) -> Command:
        """``argv`` itself when it is already a Command (not parsed again), else :meth:`parse`."""
        return argv if isinstance(argv, Command) else cls.parse(argv, schema, program=program)

    # -- reading

    def _key(self, name: str) -> str:
        hit = self.schema.lookup(name)
        if hit is not None:
            return hit[0].name
        return name.replace("_", "-") if name.startswith("--") else name

    def all(self, *names: str) -> list[Arg]:
        """Every use of the options ``names`` (any spellings, negations included), in order."""
        keys = {self._key(n) for n in names}
        return [a for a in self.args if a.name in keys]

    def last(self, *names: str) -> Arg | None:
        hit = self.all(*names)
        return hit[-1] if hit else None

    def has(self, *names: str) -> bool:
        return self.last(*names) is not None

    def get(self, *names: str) -> str | None:
        """The value of the last use of ``names`` (llama-server: the last one wins); None when
        not given or given without a value."""
        a = self.last(*names)
        return a.value if a is not None else None

    def enabled(self, name: str) -> bool | None:
        """A flag or bool pair: True / False as last written (a negation is False), None unset."""
        a = self.last(name)
        return None if a is None else a.positive

    # -- editing (each returns a new Command)

    def without(self, *names: str) -> Command:
        keys = {self._key(n) for n in names}
        return Command(self.program, tuple(a for a in self.args if a.name not in keys), self.schema)

    def set(self, name: str, *values: str) -> Command:
        """Every use of the option dropped, one ``name values...`` appended (``name`` as spelled)."""
        hit = self.schema.lookup(name)
        arg = Arg(name, tuple(values), hit[0] if hit else None, hit[1] if hit else True)
        return Command(self.program, (*self.without(name).args, arg), self.schema)

    def with_program(self, program: str | None) -> Command:
        return Command(program, self.args, self.schema)

    def groups(self) -> list[list[str]]:
        """``[["-m", "a.gguf"], ["-fa", "on"], ["--jinja"]]``: one list per option."""
        return [list(a.words) for a in self.args]

    def server_args(self) -> list[str]:
        """What llama-server receives (the program excluded)."""
        return [w for a in self.args for w in a.words]

    def to_argv(self) -> list[str]:
        return ([self.program] if self.program is not None else []) + self.server_args()


def default_schema() -> Schema:
    """The schema :meth:`Command.parse` reads against when given none: the bundled one of the
    pinned build, read once per process."""
    return _bundled()


@cache
def _bundled() -> Schema:
    """The bundled schema of the pinned build, read once per process."""
    from llamarig.flags.schema import load_bundled  # lazy: the schema file is read on first use

    return load_bundled()
