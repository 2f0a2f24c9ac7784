"""Another engine's command line, read the way its own Python ``argparse`` parser reads it, from
the options recorded as data (src/llamarig/data/engines/, written by scripts/engine-options from
the engine's source at a pinned release).

argparse's rules followed (https://docs.python.org/3/library/argparse.html): an option is one of
its option strings exactly, ``--opt=value``, or a unique prefix of a long option (``allow_abbrev``,
on by default; two matches are "ambiguous option"); an option that stores a value takes the next
word, unless that word looks like an option (then "expected one argument"); a value is converted
by the option's ``type`` (``int``, ``float``); a word that is no option fills the positional
arguments, and one too many, like an unknown option, ends in "unrecognized arguments" (exit 2).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from llamarig.flags.parsed import Word

__all__ = ["EngineOption", "EngineParser", "EngineUse", "load_parser"]

_DATA = Path(__file__).resolve().parent.parent.parent / "data" / "engines"
_NEGATIVE_RE = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class EngineOption:
    """One option of the engine's parser: its option strings (the first is the one shown),
    whether it stores a value and of which type, and the ``file:line`` it is defined on."""

    names: tuple[str, ...]
    takes_value: bool
    type: str | None
    where: str

    @property
    def name(self) -> str:
        return self.names[0]


@dataclass(frozen=True)
class EngineUse:
    """One word or option as the engine's parser reads it: ``option`` None for an unknown
    option (``spelling`` starts with ``-``) or a positional word; ``problem`` what argparse says
    of it ("" when nothing); ``passed``: the word reaches the engine (not cut off)."""

    spelling: str
    option: EngineOption | None
    values: tuple[Word, ...]
    line: int
    passed: bool = True
    problem: str = ""

    @property
    def value(self) -> str | None:
        return self.values[0].text if self.values else None


@dataclass(frozen=True)
class EngineParser:
    """An engine's parser at a pinned release: where it comes from and its options."""

    engine: str
    release: str
    commit: str
    repository: str
    parser: str
    options: tuple[EngineOption, ...]
    positionals: int = 1
    _by_name: dict[str, EngineOption] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for o in self.options:
            for n in o.names:
                self._by_name[n] = o

    @property
    def label(self) -> str:
        """``ftllm server 0.1.7.1 (tools/fastllm_pytools/util.py, commit 46079d59)``."""
        return f"{self.release} ({self.parser.split(':')[0]}, commit {self.commit[:8]})"

    def lookup(self, word: str) -> tuple[EngineOption | None, str | None, str]:
        """The option ``word`` names (argparse: exactly, ``--opt=value``, or a unique prefix of
        a long option), the value written in it after ``=``, and what argparse says when it
        names none or more than one ("" when it is fine)."""
        name, eq, inline = word.partition("=")
        hit = self._by_name.get(name)
        if hit is not None:
            return hit, (inline if eq else None), ""
        if name.startswith("--") and len(name) > 2:
            cands = sorted({o.name for o in self.options for n in o.names if n.startswith(name)})
            if len(cands) == 1:
                return self._by_name[cands[0]], (inline if eq else None), ""
            if len(cands) > 1:
                return None, None, "ambiguous option: {word} could match {names}".format(
                    word=name, names=", ".join(cands))
        return None, None, f"unrecognized arguments: {word}"

    def read(self, words: list[Word], n_passed: int) -> list[EngineUse]:
        """``words`` (after the subcommand) as the parser reads them; the first ``n_passed``
        reach the engine."""
        out: list[EngineUse] = []
        i = 0
        positionals = 0
        while i < len(words):
            w = words[i]
            passed = i < n_passed
            if not w.text.startswith("-") or _NEGATIVE_RE.match(w.text) or w.text == "-":
                positionals += 1
                problem = "" if positionals <= self.positionals else f"unrecognized arguments: {w.text}"
                out.append(EngineUse(w.text, None, (), w.line, passed, problem))
                i += 1
                continue
            opt, inline, problem = self.lookup(w.text)
            use, taken = self._use(w, opt, inline, problem, words[i + 1:], passed)
            out.append(use)
            i += 1 + taken
        return out

    def _use(self, w: Word, opt: EngineOption | None, inline: str | None, problem: str, rest: list[Word],
             passed: bool) -> tuple[EngineUse, int]:
        """One option and the words it takes (an unknown one keeps a value-looking word after
        it, so that it can be dropped whole)."""
        if opt is None:
            takes = 1 if inline is None and rest and _is_value(rest[0].text) else 0
            return EngineUse(w.text, None, tuple(rest[:takes]), w.line, passed, problem), takes
        if not opt.takes_value:
            bad = f"argument {w.text}: ignored explicit argument '{inline}'" if inline is not None else ""
            return EngineUse(w.text, opt, (), w.line, passed, bad), 0
        if inline is not None:
            value = Word(inline, w.line)
            return EngineUse(w.text, opt, (value,), w.line, passed, _typed(opt, inline)), 0
        if not rest or not _is_value(rest[0].text):
            return EngineUse(w.text, opt, (), w.line, passed, f"argument {w.text}: expected one argument"), 0
        return EngineUse(w.text, opt, (rest[0],), w.line, passed, _typed(opt, rest[0].text)), 1


def _is_value(text: str) -> bool:
    """argparse takes a word as an option's value unless it looks like an option (a negative
    number does not)."""
    return not text.startswith("-") or bool(_NEGATIVE_RE.match(text)) or text == "-"


def _typed(opt: EngineOption, value: str) -> str:
    """What argparse says when ``value`` is not of the option's type ("" when it is)."""
    try:
        if opt.type == "int":
            int(value)
        elif opt.type == "float":
            float(value)
    except ValueError:
        return f"argument {opt.name}: invalid {opt.type} value: '{value}'"
    return ""


@cache
def load_parser(engine: str, release: str) -> EngineParser:
    """The parser of ``engine`` at ``release``, from data/engines/ENGINE-RELEASE.json."""
    doc = json.loads((_DATA / f"{engine}-{release}.json").read_text(encoding="utf-8"))
    options = tuple(EngineOption(tuple(o["names"]), bool(o["takes_value"]), o.get("type"), o["where"])
                    for o in doc["options"] if not o.get("positional"))
    # argparse's own -h/--help (a subparser has add_help=True)
    options += (EngineOption(("-h", "--help"), False, None, "argparse add_help"),)
    positionals = sum(1 for o in doc["options"] if o.get("positional"))
    return EngineParser(doc["engine"], doc["release"], doc["commit"], doc["repository"], doc["parser"], options,
                        positionals)
