"""Reading llama-server's own ``--models-preset`` INI file (router mode), as the pinned build reads
it: common/preset.cpp ``parse_ini_from_file`` (a PEG grammar, common/preset.cpp:185-221) and
``common_preset_context::load_from_ini`` (common/preset.cpp:285-345), tools/server/README.md
"Model presets".

* a line is a section header ``[NAME]``, ``KEY = VALUE``, a comment (``;`` or ``#``) or blank;
  any other line makes llama-server refuse the whole file ("failed to parse server config file",
  common/preset.cpp:228);
* a KEY is ``[a-zA-Z_][a-zA-Z0-9_.-]*``: an option's spelling without its dashes (``c``,
  ``ctx-size``, ``no-mmap``) or its environment variable (``LLAMA_ARG_CACHE_RAM``);
* a VALUE runs to the end of the line, without trailing blanks, and *stops at the first ``;``
  or ``#``*, blanks before it or not (``eol-start ::= ws [;#]``);
* a section written a second time starts over (``parsed[current_section] = {}``); a key
  written twice in a section keeps the last value;
* ``[*]`` holds options every preset gets, a preset's own keys win (README "precedence");
  ``version`` is skipped; lines before the first header belong to a section named ``default``.

Each preset becomes one invocation: its pairs (``Invocation.preset``), turned into the argv the
router gives the model's server (common/preset.cpp ``to_args``) once the build's options are
known (llamarig.flags.preset).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Parsed, Word
from llamarig.i18n import _

_HEADER_RE = re.compile(r"^\[[ \t]*([^\]]+?)[ \t]*\][ \t]*(?:[;#].*)?$")
_KV_RE = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_.-]*)[ \t]*=[ \t]*([^;#\n]*?)[ \t]*(?:([;#]).*)?$")
_BLANK_OR_COMMENT_RE = re.compile(r"^[ \t]*(?:[;#].*)?$")
DEFAULT = "default"  # COMMON_PRESET_DEFAULT_NAME, common/preset.h:15


def looks_like_preset(text: str) -> bool:
    """A ``[section]`` header and ``KEY = VALUE`` lines, and (nearly) nothing else: a broken line
    or two is what check is for."""
    header = kv = bad = lines = 0
    for ln in text.split("\n"):
        ln = ln.rstrip("\r")
        if _BLANK_OR_COMMENT_RE.match(ln):
            continue
        lines += 1
        if _HEADER_RE.match(ln):
            header += 1
        elif _KV_RE.match(ln):
            kv += 1
        else:
            bad += 1
    return header > 0 and kv > 0 and bad <= max(1, lines // 10)


@dataclass
class _Preset:
    """The sections of a preset file as llama-server's parser fills them (common/preset.cpp)."""

    notes: list[Note] = field(default_factory=list)
    sections: dict[str, dict[str, tuple[Word, Word]]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    seen_at: dict[str, int] = field(default_factory=dict)
    current: str = DEFAULT

    def header(self, i: int, name: str) -> None:
        if name in self.seen_at and self.sections.get(name):
            self.notes.append(Note("preset-section-again", i,
                                   _("section [{section}] is written again on line {line}: llama-server starts it "
                                     "over (common/preset.cpp:238), the keys set from line {first} on are "
                                     "lost").format(section=name, line=i, first=self.seen_at[name]),
                                   Severity.WARNING))
        self.current = name
        self.seen_at[name] = i
        self.sections[name] = {}
        if name not in self.order:
            self.order.append(name)

    def key(self, i: int, ln: str, m: re.Match[str]) -> None:
        key, value, cut = m.group(1), m.group(2), m.group(3)
        if cut and re.search(r"[^ \t]" + re.escape(cut), ln[ln.index("=") + 1:]):
            self.notes.append(Note("value-truncated", i,
                                   _("`{key} = {written}`: the value stops at the `{cut}` (a comment "
                                     "starts at any `;` or `#`, common/preset.cpp:195-199), so llama-server reads "
                                     "`{value}`").format(key=key, written=ln.split("=", 1)[1].strip(), cut=cut,
                                                         value=value), Severity.WARNING))
        sec = self.sections.setdefault(self.current, {})
        if self.current not in self.order:
            self.order.append(self.current)
        if key in sec:
            self.notes.append(Note("preset-key-again", i, _("[{section}] `{key}` is set again on line {line} (first "
                                   "on line {first}): the last value counts").format(
                                       section=self.current, key=key, line=i, first=sec[key][0].line), Severity.INFO))
            del sec[key]
        sec[key] = (Word(key, i), Word(value, i))

    def invocations(self) -> list[Invocation]:
        """One per section but ``[*]`` (whose keys every section starts from) and an empty default."""
        glob = self.sections.get("*", {})
        out: list[Invocation] = []
        for name in self.order:
            if name == "*" or (name == DEFAULT and not [k for k in self.sections.get(name, {}) if k != "version"]):
                continue
            pairs = dict(glob)
            for k, kv in self.sections[name].items():
                pairs.pop(k, None)
                pairs[k] = kv
            line = self.seen_at.get(name, min((kv[0].line for kv in pairs.values()), default=1))
            out.append(Invocation(
                "llama-server", [], line, max([line, *(kv[0].line for kv in self.sections[name].values())]),
                source="models-preset", label=f"[{name}]", written_here=False,
                preset=[pairs[k] for k in pairs if k != "version"]))
        return out


def parse_preset(text: str) -> Parsed:
    raw = text.split("\n")
    p = _Preset()
    for i, ln in enumerate(raw, 1):
        ln = ln.rstrip("\r")
        m = _HEADER_RE.match(ln)
        if m:
            p.header(i, m.group(1))
            continue
        if _BLANK_OR_COMMENT_RE.match(ln):
            continue
        m = _KV_RE.match(ln)
        if m:
            p.key(i, ln, m)
            continue
        p.notes.append(Note("shell-syntax", i,
                            _("line {line} is neither `[section]`, `key = value`, a comment nor blank: "
                              "llama-server refuses the whole file (\"failed to parse server config file\", "
                              "common/preset.cpp:228)").format(line=i), Severity.ERROR,
                            fix=_("write it as `key = value` or `[section]`, or comment it out with `;` or `#`")))
    return Parsed("models-preset", p.invocations(), p.notes, [], raw)
