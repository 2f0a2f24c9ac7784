"""``llamarig explain``: one row per flag of a command: what it does in this build, its default,
and, with a readable model, its memory effect (the plan's figure with its formula, given by the
caller).

Chinese (``--lang zh``) has hand-written descriptions for the flags people use most; others
fall back to the build's own English help text, marked as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llamarig.flags.argv import Reading, Use
from llamarig.flags.knowledge import FOLKLORE
from llamarig.flags.schema import Schema

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
           "opaque": "a shell variable whose value is not known here"},
    "zh": {"flag": "参数", "value": "值", "what": "作用（本版本）", "default": "默认值",
           "effect": "影响", "unknown": "不是 llama-server 的参数", "fallback": "（英文原文）",
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

    def to_json(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": self.value, "what": self.what, "default": self.default,
                "effect": self.effect, "line": self.line, "known": self.known,
                "reaches_server": self.reaches_server}


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
            what = f"{t['unknown']}: " + (lore.zh if lang == "zh" and lore.zh else lore.real)
        else:
            what = t["unknown"]
        return Row(u.spelling, value, what, "", "", u.line, False, u.passed)
    opt = u.opt
    if lang == "zh" and opt.name in ZH:
        what = ZH[opt.name]
    else:
        what = opt.summary + (t["fallback"] if lang == "zh" else "")
    if not u.positive:
        what = ("关闭：" if lang == "zh" else "turn off: ") + what
    default = opt.default or ""
    return Row(u.spelling, value, what, default, effects.get(opt.name, ""), u.line, True, u.passed)
