"""``llamarig explain``: one row per flag of a command: what it does in this build, its default,
and, with a readable model, its memory effect (the plan's figure with its formula, given by the
caller).

The description and the default are the build's own help text; in Chinese (``--lang zh``) they
come from the table of the pinned build's options (locale/zh_CN/LC_MESSAGES/llama-server.po,
``i18n.server_text``); where it has none (another build's new option) the row keeps the English
original and says so (``Row.original``), and the view marks it once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llamarig.flags.argv import Reading, Use
from llamarig.flags.knowledge import FOLKLORE
from llamarig.flags.schema import Schema
from llamarig.i18n import _, localize, server_text

TEXT = {
    "en": {"flag": "flag", "value": "value", "what": "what it does (this build)", "default": "default",
           "effect": "effect", "unknown": "NOT a llama-server flag",
           "opaque": "a shell variable whose value is not known here"},
    "zh": {"flag": "参数", "value": "值", "what": "作用（本版本）", "default": "默认值",
           "effect": "影响", "unknown": "不是 llama-server 的参数",
           "opaque": "此处无法得知其值的 shell 变量"},
}


@dataclass(frozen=True)
class Row:
    """One flag of a command as explain shows it: what it does in this build, its default, its
    effect on this model (the plan's figures, given by the caller), and whether it reaches
    llama-server (False: a broken continuation cut it off)."""

    flag: str
    value: str
    what: str
    default: str
    effect: str
    line: int
    known: bool
    reaches_server: bool = True
    #: ``what`` is llama-server's English help text: no translation for this build's option yet
    original: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": self.value, "what": self.what, "default": self.default,
                "effect": self.effect, "line": self.line, "known": self.known,
                "reaches_server": self.reaches_server, "original": self.original}


def explain_rows(r: Reading, schema: Schema, effects: Mapping[str, str] | None = None, lang: str = "en") -> list[Row]:
    """One row per use of ``r``, in ``lang``; ``effects``: the effect text per option name (the
    plan's figures for this command, made by the caller: llamarig.app.explain)."""
    t = TEXT[lang]
    return [_row(u, schema, effects or {}, lang, t) for u in r.uses]


def _row(u: Use, schema: Schema, effects: Mapping[str, str], lang: str, t: dict[str, str]) -> Row:
    value = " ".join(v.text for v in u.values)
    if u.opaque:
        return Row(u.spelling, value, t["opaque"], "", "", u.line, False, u.passed)
    if u.opt is None:
        lore = FOLKLORE.get(u.spelling) or FOLKLORE.get(u.spelling.replace("_", "-"))
        if lore is not None:
            what = localize(_("{a}: {b}"), lang).format(a=t["unknown"], b=lore.zh if lang == "zh" and lore.zh else lore.real)
        else:
            what = t["unknown"]
        return Row(u.spelling, value, what, "", "", u.line, False, u.passed)
    opt = u.opt
    translated = server_text(opt.summary, lang)
    original = translated is None
    what = opt.summary if translated is None else translated
    if not u.positive:
        what = localize(_("turn off: {what}"), lang).format(what=what)
    default = opt.default or ""
    default = server_text(default, lang) or default
    return Row(u.spelling, value, what, default, effects.get(opt.name, ""), u.line, True, u.passed, original)
