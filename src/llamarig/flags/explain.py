"""``llamarig explain``: one row per flag of a command: what it does in this build, its default,
and, with a readable model, its memory effect (formula shown next to every number).

The description and the default are the build's own help text; in Chinese (``--lang zh``) they
come from the table of the pinned build's options (locale/zh_CN/LC_MESSAGES/llama-server.po,
``i18n.server_text``); where it has none (another build's new option) the row keeps the English
original and says so (``Row.original``), and the view marks it once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llamarig.flags.argv import Reading, Use, int_of
from llamarig.flags.knowledge import FOLKLORE
from llamarig.flags.schema import Schema
from llamarig.gguf.ggml_types import row_size
from llamarig.i18n import _, localize, server_text
from llamarig.units import fmt_bytes

if TYPE_CHECKING:
    from llamarig.gguf.spec import ModelSpec

TEXT = {
    "en": {"flag": "flag", "value": "value", "what": "what it does (this build)", "default": "default",
           "effect": "effect", "unknown": "NOT a llama-server flag",
           "opaque": "a shell variable whose value is not known here",
           "kv": "KV {size} with {tk}/{tv}", "weights": "weights {size} (file)",
           "rs": "recurrent state {size}", "mtp": "MTP draft KV {size} ({tk}/{tv})",
           "per_slot": "{n} slots x {per} tokens", "shared": "{n} slots share one pool of {ctx}"},
    "zh": {"flag": "参数", "value": "值", "what": "作用（本版本）", "default": "默认值",
           "effect": "影响", "unknown": "不是 llama-server 的参数",
           "opaque": "此处无法得知其值的 shell 变量",
           "kv": "KV 缓存 {size}（{tk}/{tv}）", "weights": "权重 {size}（文件）",
           "rs": "循环状态 {size}", "mtp": "MTP 草稿 KV {size}（{tk}/{tv}）",
           "per_slot": "{n} 个槽位 × 每个 {per} token", "shared": "{n} 个槽位共享 {ctx} token 的池"},
}


@dataclass(frozen=True)
class Row:
    flag: str
    value: str
    what: str
    default: str
    effect: str
    line: int
    known: bool
    #: ``what`` is llama-server's English help text: no translation for this build's option yet
    original: bool = False


def _pad(x: int, n: int = 256) -> int:
    return int(math.ceil(x / n) * n)


def memory_effects(r: Reading, spec: ModelSpec | None, lang: str = "en") -> dict[str, str]:
    """Memory numbers (with formulas) keyed by the option they belong to, in ``lang``."""
    return {k: localize(v, lang) for k, v in _memory_effects(r, spec, lang).items()}


def _memory_effects(r: Reading, spec: ModelSpec | None, lang: str) -> dict[str, str]:
    t = TEXT[lang]
    out: dict[str, str] = {}
    if spec is None:
        return out

    def val(name: str) -> str | None:
        u = r.last(name)
        return u.value if u else None

    tk, tv = val("--cache-type-k") or "f16", val("--cache-type-v") or "f16"
    c = int_of(val("--ctx-size")) or 0
    n_ctx = _pad(c) if c > 0 else _pad(spec.n_ctx_train or 4096)
    npu = r.last("--parallel")
    n_par = int_of(npu.value) if npu else None
    kvu = r.last("--kv-unified")
    unified = kvu.positive if kvu else npu is None
    n_seq = n_par if n_par and n_par > 0 else 4
    if unified:
        n_ctx_seq, n_stream = n_ctx, 1
    else:
        n_ctx_seq, n_stream = _pad(n_ctx // n_seq), n_seq
    cells = n_ctx_seq * n_stream
    ub = int_of(val("--ubatch-size")) or 512
    total = 0
    n_att = 0
    try:
        for layer in spec.layers:
            if layer.nextn or layer.kind == "recurrent":
                continue
            lc = cells
            if layer.kind == "swa" and spec.swa_window:
                lc = min(n_ctx_seq, _pad(spec.swa_window * (n_seq if unified else 1) + ub)) * n_stream
            total += (row_size(tk, layer.n_embd_k_gqa) + row_size(tv, layer.n_embd_v_gqa)) * lc
            n_att += 1
    except (KeyError, ValueError, ZeroDivisionError):
        return out
    formula = _("sum over {n} attention layers of (row(K) + row(V)) x {cells} cells").format(n=n_att, cells=cells)
    out["--ctx-size"] = t["kv"].format(size=fmt_bytes(total), tk=tk, tv=tv) + " = " + formula + \
        " (src/llama-kv-cache.cpp)"
    out["--cache-type-k"] = t["kv"].format(size=fmt_bytes(total), tk=tk, tv=tv)
    out["--cache-type-v"] = out["--cache-type-k"]
    if n_par:
        out["--parallel"] = (t["shared"].format(n=n_seq, ctx=n_ctx) if unified
                             else t["per_slot"].format(n=n_seq, per=n_ctx_seq))
    rec = [lay for lay in spec.layers if lay.kind == "recurrent" and not lay.nextn]
    if rec and spec.recurrent is not None:
        rs = len(rec) * 4 * (spec.recurrent.n_embd_r + spec.recurrent.n_embd_s) * max(1, n_seq)
        out["--parallel"] = (out.get("--parallel", "") + "; " if "--parallel" in out else "") + t["rs"].format(
            size=fmt_bytes(rs)) + " = " + _("{n} layers x 4 B x (n_embd_r + n_embd_s) x {seqs} seqs").format(
            n=len(rec), seqs=max(1, n_seq))
    specs = [x for u in r.all("--spec-type") for x in (u.value or "").split(",")]
    nextn = [lay for lay in spec.layers if lay.nextn]
    if "draft-mtp" in specs and nextn:
        tkd, tvd = val("--spec-draft-type-k") or "f16", val("--spec-draft-type-v") or "f16"
        mtp = sum((row_size(tkd, lay.n_embd_k_gqa) + row_size(tvd, lay.n_embd_v_gqa)) * n_ctx for lay in nextn)
        out["--spec-type"] = t["mtp"].format(size=fmt_bytes(mtp), tk=tkd, tv=tvd) + " = " + _(
            "{n} nextn layers x (row(K)+row(V)) x {n_ctx}").format(n=len(nextn), n_ctx=n_ctx) + \
            " (common/speculative.cpp)"
    out["--model"] = t["weights"].format(size=fmt_bytes(spec.weights_bytes))
    return out


def explain_rows(r: Reading, schema: Schema, spec: ModelSpec | None = None, lang: str = "en") -> list[Row]:
    t = TEXT[lang]
    effects = memory_effects(r, spec, lang)
    rows: list[Row] = []
    for u in r.uses:
        rows.append(_row(u, schema, effects, lang, t))
    return rows


def _row(u: Use, schema: Schema, effects: dict[str, str], lang: str, t: dict[str, str]) -> Row:
    value = " ".join(v.text for v in u.values)
    if u.opaque:
        return Row(u.spelling, value, t["opaque"], "", "", u.line, False)
    if u.opt is None:
        lore = FOLKLORE.get(u.spelling) or FOLKLORE.get(u.spelling.replace("_", "-"))
        if lore is not None:
            what = localize(_("{a}: {b}"), lang).format(a=t["unknown"], b=lore.zh if lang == "zh" and lore.zh else lore.real)
        else:
            what = t["unknown"]
        return Row(u.spelling, value, what, "", "", u.line, False)
    opt = u.opt
    translated = server_text(opt.summary, lang)
    original = translated is None
    what = opt.summary if translated is None else translated
    if not u.positive:
        what = localize(_("turn off: {what}"), lang).format(what=what)
    default = opt.default or ""
    default = server_text(default, lang) or default
    return Row(u.spelling, value, what, default, effects.get(opt.name, ""), u.line, True, original)
