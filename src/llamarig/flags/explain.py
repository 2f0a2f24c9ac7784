"""``llamarig explain``: one row per flag of a command: what it does in this build, its default,
and, with a readable model, its memory effect (formula shown next to every number).

Chinese (``--lang zh``) has hand-written descriptions for the flags people use most; others
fall back to the build's own English help text, marked as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llamarig.flags.argv import Reading, Use, int_of
from llamarig.flags.knowledge import FOLKLORE
from llamarig.flags.schema import Schema
from llamarig.gguf.ggml_types import row_size
from llamarig.i18n import _, localize
from llamarig.units import fmt_bytes

if TYPE_CHECKING:
    from llamarig.gguf.spec import ModelSpec

# Chinese descriptions: what the flag does in llama-server (same facts as the English help).
ZH: dict[str, str] = {
    "--model": "模型 GGUF 文件路径",
    "--mmproj": "多模态投影文件（识图）；加载后 --cache-reuse 与 --context-shift 被禁用",
    "--ctx-size": "KV 缓存总容量（token），向上取整到 256；0 = 用模型训练长度",
    "--parallel": "服务槽位数（并发请求数）；-1 = 自动（4 个槽位，统一 KV 池）",
    "--kv-unified": "所有槽位共享一个 KV 池（不按槽位平分 -c）",
    "--batch-size": "逻辑批大小：预填充时一次送入的最大 token 数（默认 2048）",
    "--ubatch-size": "物理批大小：GPU 一次实际计算的 token 数（默认 512），大于 -b 时被截断",
    "--cache-type-k": "K 缓存数据类型（f16/q8_0/q4_0…），量化可省显存",
    "--cache-type-v": "V 缓存数据类型；量化 V 需要 Flash Attention",
    "--flash-attn": "Flash Attention：on/off/auto",
    "--gpu-layers": "放到 GPU 的层数；auto/all/数字",
    "--threads": "生成时的 CPU 线程数（默认 = 物理核心数）",
    "--threads-batch": "预填充时的 CPU 线程数（默认同 --threads）",
    "--host": "监听地址；0.0.0.0 表示对局域网/公网开放",
    "--port": "监听端口",
    "--api-key": "API 密钥；对外开放时必须设置",
    "--api-key-file": "从文件读取 API 密钥",
    "--fit": "按显存自动调整未设置的参数（默认 on）",
    "--fit-target": "--fit 为每张卡预留的空闲显存（MiB）",
    "--predict": "最多生成 token 数；-1 = 不限",
    "--temp": "采样温度",
    "--top-p": "top-p 采样阈值",
    "--top-k": "top-k 采样数",
    "--min-p": "min-p 采样阈值",
    "--repeat-penalty": "重复惩罚；1.0 = 关闭",
    "--presence-penalty": "出现惩罚",
    "--seed": "随机种子",
    "--metrics": "开启 Prometheus /metrics 接口（不带参数）",
    "--jinja": "使用 Jinja 聊天模板",
    "--cont-batching": "连续批处理（默认开启）",
    "--reasoning": "思考模式：on/off/auto",
    "--reasoning-budget": "思考 token 预算；-1 = 不限",
    "--reasoning-format": "思考内容的返回格式（none/auto/deepseek/deepseek-legacy）",
    "--cache-reuse": "通过 KV 平移复用的最小块大小（token）；0 = 关闭；有 --mmproj 时无效",
    "--cache-ram": "主机内存中的提示缓存上限（MiB）",
    "--cache-idle-slots": "新任务开始时把空闲槽位存入提示缓存（需 --cache-ram）",
    "--cache-prompt": "复用上一次请求的公共前缀（默认开启）",
    "--log-file": "日志写入文件",
    "--split-mode": "多卡切分方式：none/layer/row/tensor",
    "--tensor-split": "各卡分配比例",
    "--device": "使用的设备（如 CUDA0,CUDA1）",
    "--spec-type": "投机解码类型（如 draft-mtp 用模型自带的 MTP 层）",
    "--spec-draft-n-max": "每次最多草拟的 token 数",
    "--spec-default": "默认投机解码配置（ngram-mod）",
    "--model-draft": "草稿模型路径",
    "--load-mode": "模型加载方式：auto/none/mmap/mlock/mmap+mlock/dio",
    "--ctx-checkpoints": "每个槽位最多保存的上下文检查点数",
    "--alias": "API 中显示的模型名",
    "--chat-template-file": "自定义 Jinja 聊天模板文件",
    "--slot-save-path": "槽位 KV 保存目录",
    "--n-cpu-moe": "前 N 层的 MoE 专家权重放在 CPU",
    "--override-tensor": "按张量名指定存放设备",
    "--no-kv-offload": "KV 缓存放在主机内存",
    "--sleep-idle-seconds": "空闲 N 秒后卸载模型",
    "--spec-draft-type-k": "MTP/草稿上下文的 K 缓存类型（默认 f16，不继承 -ctk）",
    "--spec-draft-type-v": "MTP/草稿上下文的 V 缓存类型（默认 f16，不继承 -ctv）",
    "--spec-draft-ngl": "草稿模型放到 GPU 的层数",
}

TEXT = {
    "en": {"flag": "flag", "value": "value", "what": "what it does (this build)", "default": "default",
           "effect": "effect", "unknown": "NOT a llama-server flag", "fallback": "",
           "opaque": "a shell variable whose value is not known here",
           "kv": "KV {size} with {tk}/{tv}", "weights": "weights {size} (file)",
           "rs": "recurrent state {size}", "mtp": "MTP draft KV {size} ({tk}/{tv})",
           "per_slot": "{n} slots x {per} tokens", "shared": "{n} slots share one pool of {ctx}"},
    "zh": {"flag": "参数", "value": "值", "what": "作用（本版本）", "default": "默认值",
           "effect": "影响", "unknown": "不是 llama-server 的参数", "fallback": "（英文原文）",
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
            what = f"{t['unknown']}: " + (lore.zh if lang == "zh" and lore.zh else lore.real)
        else:
            what = t["unknown"]
        return Row(u.spelling, value, what, "", "", u.line, False)
    opt = u.opt
    if lang == "zh" and opt.name in ZH:
        what = ZH[opt.name]
    else:
        what = opt.summary + (t["fallback"] if lang == "zh" else "")
    if not u.positive:
        what = ("关闭：" if lang == "zh" else "turn off: ") + what
    default = opt.default or ""
    return Row(u.spelling, value, what, default, effects.get(opt.name, ""), u.line, True)
