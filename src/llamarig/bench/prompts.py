"""Deterministic prompts: built-in prompt sets, seeded filler text of a target token length,
and the unique salt that keeps cold-prefill samples cold."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llamarig.errors import InputError
from llamarig.i18n import _, os_error, unknown_name

#: the RTX 3090 field report's long code-generation prompt (tests/fixtures/seeds/000_3d5d35932c1dd60e.txt), verbatim.
TETRIS_PROMPT = """你是一名资深的软件工程师，请写一个单文件 HTML 俄罗斯方块游戏，要求：

1. 纯 HTML+CSS+JS，无外部依赖，复制即运行
2. 画布 300×600，10×20 网格，方块 30px
3. 7 种标准方块（I/J/L/O/S/T/Z），不同颜色，带水晶辉光效果
   游戏开始时提示点开始按钮，点开始之后活动方块开始慢速下落。
4. 操作：按键盘左右箭头移动活动方块，按上箭头旋转，下箭头加速1.5倍，按空格硬降
5. 功能：HUD显示计分、等级、下一块预览、消行粒子爆炸动画，动画显示位置在被消除方块所在位置、消行时有清脆简单的爆炸音。
   消掉1行到4行分别有不同提示音及文字提示鼓励，音效代码要简洁，避免冗长。
   游戏触顶结束时提示按ENTER重置
6. 注意方块之间的边界处理，代码结构清晰，关键逻辑加中文注释
7. 风格：深色背景，霓虹配色，响应式布局"""

NOTES_TEXT = """会议笔记 2026-03-14（周五）
- 服务器：RTX 3090 24G，llama-server，Qwen3.6-27B IQ4_NL，上下文 65000，KV q4_0。
- 问题：长对话到 45K token 深度后解码从 43 tok/s 降到 37 tok/s；prompt 处理约 875 tok/s。
- 讨论：是否因为 KV 缓存读取随深度增长？是否与 --cache-reuse、checkpoint（每个 149.6 MiB）有关？
- 待办：1) 用 llamarig bench depth 测 0/8K/32K 深度的解码曲线；2) 统计 checkpoint 占用的内存；
  3) 比较 ubatch 2048 与 4096 的冷 prefill；4) 确认夜间 cron 任务不占用槽位。
Meeting notes (English part): the agent framework keeps 3 sessions open; a nightly job summarises
the day's notes into the database; image recognition runs through the mmproj and writes rows.
Decision: measure before tuning; every number must carry its method."""

NOTES_PROMPT = "请把下面的笔记整理成要点摘要（中文，分条列出，最后给出三条行动项）：\n\n" + NOTES_TEXT

#: English/Chinese words for seeded filler text (tokenizes to many tokens on any vocabulary)
_WORDS = ["the", "model", "reads", "every", "cached", "token", "once", "per", "step", "so", "decode", "slows", "as", "depth", "grows", "prefill", "runs", "in", "batches", "of", "ubatch", "tokens", "and", "the", "server", "reports", "prompt_ms", "and", "predicted_ms", "上下文", "缓存", "解码", "速度", "显存", "带宽", "槽位", "检查点", "测法", "数字", "接受率", "并发", "温度", "功耗", "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma"]


@dataclass(frozen=True)
class ChatPrompt:
    """A chat request prompt: messages plus its generation length (max_tokens)."""

    name: str
    messages: tuple[dict[str, str], ...]
    max_tokens: int | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    def body(self) -> dict[str, Any]:
        d: dict[str, Any] = {"messages": [dict(m) for m in self.messages]}
        if self.max_tokens is not None:
            d["max_tokens"] = self.max_tokens
        d.update(dict(self.extra))
        return d


def filler_text(n_words: int, seed: int) -> str:
    """Deterministic pseudo-random text of ``n_words`` words (same seed, same text)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


def synthetic_prompts(k: int, seed: int) -> list[ChatPrompt]:
    """K short, distinct, seeded chat prompts."""
    out = []
    for i in range(k):
        text = filler_text(24, seed * 1000 + i)
        out.append(ChatPrompt(f"synthetic-{i}", ({"role": "user", "content": f"Continue this text: {text}"},)))
    return out


PROMPT_SETS = ("synthetic", "tetris", "notes", "mixed")


def prompt_set(name: str, k: int, seed: int) -> list[ChatPrompt]:
    """K prompts from a built-in set. ``tetris``: the RTX 3090 field report's code-generation prompt;
    ``notes``: note summarisation; ``mixed``: alternate both; ``synthetic``: seeded filler.
    Repeats of the same prompt get a numbered system line so they are distinct requests."""
    if name == "synthetic":
        return synthetic_prompts(k, seed)
    if name not in PROMPT_SETS:
        raise unknown_name(_("prompt set"), name, list(PROMPT_SETS))
    bases = {"tetris": [TETRIS_PROMPT], "notes": [NOTES_PROMPT], "mixed": [TETRIS_PROMPT, NOTES_PROMPT]}[name]
    out = []
    for i in range(k):
        text = bases[i % len(bases)]
        out.append(
            ChatPrompt(
                f"{name}-{i}",
                ({"role": "system", "content": f"Request {seed}-{i}."}, {"role": "user", "content": text}),
            )
        )
    return out


def salt(run_id: str, i: int) -> str:
    """A unique leading marker: no two cold-prefill prompts share a first token run."""
    return f"[{run_id}#{i:04d}] "


def load_workload(path: Path) -> list[ChatPrompt]:
    """A JSONL workload: one chat request per line (``messages`` required; ``max_tokens``,
    sampling fields kept). Raises InputError naming the file and line for bad lines."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError(_("{path}: cannot read workload file: {error}").format(path=path, error=os_error(e))) from e
    out: list[ChatPrompt] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            # JSONDecodeError has .msg; json.loads also raises a plain ValueError (e.g. an integer
            # literal over sys.get_int_max_str_digits()), which has none
            why = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
            raise InputError(_("{path}:{no}: not JSON ({why})").format(path=path, no=no, why=why)) from e
        if not isinstance(obj, dict):
            raise InputError(_("{path}:{no}: expected a JSON object with 'messages'").format(path=path, no=no))
        if "body" in obj and isinstance(obj["body"], dict):
            obj = obj["body"]  # OpenAI batch format {custom_id, method, url, body}
        msgs = obj.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            raise InputError(_("{path}:{no}: 'messages' must be a non-empty list of objects").format(path=path, no=no))
        max_tokens = obj.get("max_tokens", obj.get("max_completion_tokens"))
        keep = {
            k: v
            for k, v in obj.items()
            if k in ("temperature", "top_p", "top_k", "seed", "stop", "min_p", "presence_penalty")
        }
        out.append(
            ChatPrompt(
                f"workload-{no}",
                tuple({str(k): v for k, v in m.items()} for m in msgs),
                int(max_tokens) if isinstance(max_tokens, int) else None,
                tuple(sorted(keep.items())),
            )
        )
    if not out:
        raise InputError(_("{path}: workload file has no requests").format(path=path))
    return out
