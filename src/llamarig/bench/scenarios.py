"""The bench scenarios: what each sends, which samples count, and the figures (with method).

Server fields used (vendored llama.cpp build 11434, tools/server/server-common.cpp
``server_slot_stats::to_json``): ``timings.{cache_n, prompt_n, prompt_ms, predicted_n,
predicted_ms, draft_n, draft_n_accepted}``; ``draft_*`` are present only when > 0.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from llamarig.bench.client import BenchClient, RequestSample
from llamarig.bench.prompts import ChatPrompt, filler_text, load_workload, prompt_set, salt
from llamarig.bench.records import Figure, note_text, single_figure, stat_figures
from llamarig.bench.runner import FIT_CTX, BenchConfig, Runner, ScenarioResult
from llamarig.bench.steady import SteadyRound, steady_round
from llamarig.i18n import N_

CHAT = "/v1/chat/completions"
COMPLETION = "/completion"
DECODE_FORMULA = "rate = (timings.predicted_n − 1) ÷ timings.predicted_ms (server clock, recomputed from raw fields)"
CLIENT_FORMULA = "client rate = (predicted_n − 1) ÷ (last − first token-bearing SSE chunk, perf_counter)"


def planned_requests(cfg: BenchConfig, r: Runner) -> int:
    n = 0
    for s in cfg.scenarios:
        if s == "decode":
            n += cfg.k + cfg.warmup
        elif s == "prefill":
            n += len(cfg.prefill_lengths) * cfg.repeats + min(cfg.warmup, 1)
        elif s == "ttft":
            n += cfg.repeats + 1
        elif s == "depth":
            n += len(cfg.depths) * cfg.repeats
        elif s == "concurrency":
            n += sum(c * _rounds(cfg) for c in cfg.concurrency) + min(cfg.warmup, 1)
        elif s == "spec":
            n += (cfg.k + cfg.warmup) * (2 if cfg.baseline_url else 1)
        elif s == "workload":
            n += 10
    return n


def _rounds(cfg: BenchConfig) -> int:
    """Rounds per concurrency level: --repeats (each round gives one aggregate sample)."""
    return max(1, cfg.repeats)


def _prompts(cfg: BenchConfig, k: int, seed: int) -> list[ChatPrompt]:
    """K prompts from a built-in set, or from a JSONL file given as --prompts FILE.jsonl
    (cycled when shorter than K)."""
    if cfg.prompt_set.endswith(".jsonl") or "/" in cfg.prompt_set:
        base = load_workload(Path(cfg.prompt_set))
        return [base[i % len(base)] for i in range(k)]
    return prompt_set(cfg.prompt_set, k, seed)


def _req(p: ChatPrompt, cfg: BenchConfig, n_predict: int | None = None) -> tuple[str, dict[str, Any]]:
    """(path, body) for a prompt: chat completions, or raw /completion (message contents joined
    by newlines, no chat template) with --endpoint completion."""
    b = _chat_body(p, cfg, n_predict)
    if cfg.endpoint == "completion":
        msgs = b.pop("messages")
        b["prompt"] = "\n".join(str(m.get("content", "")) for m in msgs)
        b["n_predict"] = b.pop("max_tokens")
        b.pop("stream_options", None)
        return COMPLETION, b
    return CHAT, b


def _chat_body(p: ChatPrompt, cfg: BenchConfig, n_predict: int | None = None) -> dict[str, Any]:
    b = p.body()
    b.setdefault("max_tokens", n_predict or cfg.n_predict)
    b.setdefault("seed", cfg.seed)
    if cfg.temperature is not None:
        b.setdefault("temperature", cfg.temperature)
    b["ignore_eos"] = True
    b["stream_options"] = {"include_usage": True}
    return b


def _ok(samples: list[RequestSample]) -> list[RequestSample]:
    return [s for s in samples if s.ok and s.valid and not s.warmup]


def _slot_text(cfg: BenchConfig) -> str:
    return f"pinned to slot {cfg.slot} (id_slot)" if cfg.slot is not None else "not pinned to a slot"


def _slot_text_zh(cfg: BenchConfig) -> str:
    return f"固定在槽位 {cfg.slot}（id_slot）" if cfg.slot is not None else "不固定槽位"


def annotate_contamination(r: Runner, res: ScenarioResult) -> None:
    """Say, on every figure of the scenario, how many of its samples overlapped foreign work."""
    mine = [s for s in r.samples if s.scenario == res.name and not s.warmup and s.ok]
    if not mine:
        return
    if not r.monitor.slots_available:
        tag = "interference unknown: /slots not available"
    else:
        bad = sum(1 for s in mine if s.contaminated)
        if not bad:
            return
        tag = f"{bad} of {len(mine)} samples ran while foreign work was on the server (see interference)"
    for i, f in enumerate(res.figures):
        note = f.note + "; " + tag if f.note else tag
        res.figures[i] = Figure(**{**f.__dict__, "note": note})


# ------------------------------------------------------------------------- decode
async def scenario_decode(r: Runner, res: ScenarioResult) -> None:
    cfg = r.cfg
    prompts = _prompts(cfg, cfg.k + cfg.warmup, cfg.seed)
    samples = []
    for i, p in enumerate(prompts):
        s = await r.request("decode", p.name, *_req(p, cfg), slot=cfg.slot, warmup=i < cfg.warmup)
        samples.append(s)
    ok = _ok(samples)
    what = (
        f"{cfg.k} {cfg.endpoint} requests ('{cfg.prompt_set}' prompts, seed {cfg.seed}) × max_tokens={cfg.n_predict} with "
        f"ignore_eos, streamed serially to {CHAT if cfg.endpoint == 'chat' else COMPLETION} {_slot_text(cfg)}; {cfg.warmup} warm-up request(s) excluded"
    )
    head_zh = (f"{cfg.k} 个 {cfg.endpoint} 请求（'{cfg.prompt_set}' 提示词，种子 {cfg.seed}）× max_tokens={cfg.n_predict}，"
               f"ignore_eos，串行流式发到 {CHAT if cfg.endpoint == 'chat' else COMPLETION}，{_slot_text_zh(cfg)}；"
               f"{cfg.warmup} 个预热请求不计入")
    zh = f"{head_zh}；速度 = (timings.predicted_n − 1) ÷ timings.predicted_ms（服务器时钟，由原始字段重算）"
    params = {"k": cfg.k, "n_predict": cfg.n_predict, "prompt_set": cfg.prompt_set}
    no_timings = "" if any(s.timings for s in ok) or not ok else "the server sent no timings (not llama-server?): see decode_client_tok_s"
    res.figures += stat_figures("decode_tok_s", [s.server_decode_tok_s for s in ok if s.server_decode_tok_s],
                                "tok/s", f"{what}; {DECODE_FORMULA}", scenario="decode", params=params, method_zh=zh,
                                note=no_timings)
    res.figures += stat_figures("decode_client_tok_s", [s.client_decode_tok_s for s in ok if s.client_decode_tok_s],
                                "tok/s", f"{what}; {CLIENT_FORMULA}", stats=("median", "p10", "max"),
                                scenario="decode", params=params, method_zh="客户端时钟：首个到最后一个含 token 的 SSE 块")
    res.figures += ttft_figures("decode_ttft", ok, f"{what}; time from sending the request to the first SSE chunk with "
                                "non-empty content or reasoning_content", stats=("median",), scenario="decode", params=params,
                                what_zh=f"{head_zh}；从发出请求到第一个带非空 content 或 reasoning_content 的 SSE 块的时间")
    res.series["decode"] = [{"seq": s.seq, "server": s.server_decode_tok_s, "client": s.client_decode_tok_s} for s in ok]
    _errors(res, samples)


#: a request with at least this share of its prompt from the cache is warm
WARM_SHARE = 0.5


def _cache_state(s: RequestSample) -> str:
    """``cold`` or ``warm`` from the server's timings (cache_n of cache_n + prompt_n prompt tokens),
    ``unknown`` without them."""
    c, p = s.timings.get("cache_n"), s.timings.get("prompt_n")
    if not isinstance(c, int) or not isinstance(p, int) or c + p <= 0:
        return "unknown"
    return "warm" if c >= WARM_SHARE * (c + p) else "cold"


def ttft_figures(base: str, ok: list[RequestSample], what: str, *, stats: tuple[str, ...], scenario: str,
                 params: dict[str, Any] | None = None, what_zh: str = "") -> list[Figure]:
    """Time to first token, cold and warm apart (``BASE_cold_ms_*``, ``BASE_warm_ms_*``): a prompt
    served from llama-server's cache answers in a fraction of the time, so the two never share a
    figure; each says how many prompt tokens were cached (``BASE_ms_*`` when the server sends no
    timings and the cache is unknown)."""
    figs: list[Figure] = []
    for state in ("cold", "warm", "unknown"):
        group = [s for s in ok if s.ttft_s is not None and _cache_state(s) == state]
        if not group:
            continue
        cached = [int(s.timings.get("cache_n", 0)) for s in group]
        prompt = [int(s.timings.get("cache_n", 0)) + int(s.timings.get("prompt_n", 0)) for s in group]
        rule = {"cold": f"cold: timings.cache_n < {WARM_SHARE:.0%} of the prompt (cache_n + prompt_n)",
                "warm": f"warm: timings.cache_n ≥ {WARM_SHARE:.0%} of the prompt (served from llama-server's cache)",
                "unknown": "cache unknown: the server sent no timings.cache_n"}[state]
        rule_zh = {"cold": f"冷：timings.cache_n 不到提示词（cache_n + prompt_n）的 {WARM_SHARE:.0%}",
                   "warm": f"暖：timings.cache_n 达到提示词的 {WARM_SHARE:.0%}（由 llama-server 的缓存提供）",
                   "unknown": "缓存情况未知：服务器没有返回 timings.cache_n"}[state]
        name = f"{base}_ms" if state == "unknown" else f"{base}_{state}_ms"
        extra = {} if state == "unknown" else {"cache": state, "cached_tokens_median": statistics.median(cached),
                                               "prompt_tokens_median": statistics.median(prompt)}
        figs += stat_figures(name, [s.ttft_s * 1000 for s in group if s.ttft_s is not None], "ms", f"{what}; {rule}",
                             stats=stats, scenario=scenario, params={**(params or {}), **extra},
                             method_zh=f"{what_zh}；{rule_zh}" if what_zh else "")
    return figs


def _errors(res: ScenarioResult, samples: list[RequestSample]) -> None:
    for s in samples:
        if s.error.startswith("not sent: "):
            continue  # summarised once by the runner ("scenario cut short")
        if s.error:
            res.errors.append(f"request {s.seq} ({s.label}): " + s.error)
        elif not s.valid:
            res.notes.append(note_text(N_("request {seq} ({label}) rejected: {why}"), seq=s.seq, label=s.label,
                                       why=s.reject_reason))


# ------------------------------------------------------------------------- prompt building
async def sized_text(client: BenchClient, n_tokens: int, seed: int, prefix: str = "") -> tuple[str, int]:
    """Seeded filler text of about ``n_tokens`` tokens (with ``prefix``), measured with
    /tokenize (add_special like /completion). Returns (text, exact token count)."""
    if n_tokens <= 8:
        text = prefix + "Hello."
        return text, len(await client.tokenize(text))
    words = max(1, n_tokens // 2)
    best = ("", 0)
    for _ in range(5):
        text = prefix + filler_text(words, seed)
        n = len(await client.tokenize(text))
        best = (text, n)
        if abs(n - n_tokens) <= max(2, n_tokens // 200):
            break
        words = max(1, int(words * n_tokens / max(n, 1)))
    return best


CTX_MARGIN = 16  # tokens kept free besides the generated ones (salt, template, /tokenize sizing)


def _fit(r: Runner, length: int, n_predict: int, res: ScenarioResult, what: str = "length") -> bool:
    if r.n_ctx_slot and length + n_predict + CTX_MARGIN > r.n_ctx_slot:
        res.notes.append(note_text(
            N_("{what} {length} skipped: {length} + {n_predict} generated + {margin} margin exceeds the slot context "
               "{slot_ctx} (/props default_generation_settings.n_ctx); use 'ctx' for the largest {what} that fits"),
            ("what",), what=what, length=length, n_predict=n_predict, margin=CTX_MARGIN, slot_ctx=r.n_ctx_slot))
        return False
    return True


def _ctx_point(n_ctx: int, n_predict: int) -> int:
    """The largest prompt/depth that fits a slot of ``n_ctx`` tokens with ``n_predict`` generated:
    the margin of :func:`_fit` plus 0.5 % for the filler sizing tolerance of :func:`sized_text`."""
    return n_ctx - n_predict - CTX_MARGIN - max(2, n_ctx // 200)


def _points(r: Runner, points: tuple[int, ...], n_predict: int, res: ScenarioResult, what: str) -> list[int]:
    """The requested lengths/depths with ``ctx`` (FIT_CTX) resolved, those that do not fit the
    slot context and repeats left out, each with a note that says why."""
    out: list[int] = []
    for p in points:
        if p == FIT_CTX:
            if not r.n_ctx_slot:
                res.notes.append(note_text(N_("{what} 'ctx' skipped: the slot context is unknown (/props has no "
                                              "default_generation_settings.n_ctx)"), ("what",), what=what))
                continue
            p = _ctx_point(int(r.n_ctx_slot), n_predict)
            if p <= 0:
                res.notes.append(note_text(N_("{what} 'ctx' skipped: the slot context {slot_ctx} leaves no room after "
                                              "{n_predict} generated tokens"), ("what",), what=what,
                                           slot_ctx=r.n_ctx_slot,
                                           n_predict=n_predict))
                continue
            res.notes.append(note_text(N_("{what} 'ctx' = {p}: slot context {slot_ctx} − {n_predict} generated − "
                                          "{margin} margin"), ("what",), what=what, p=p, slot_ctx=r.n_ctx_slot,
                                       n_predict=n_predict, margin=r.n_ctx_slot - n_predict - p))
        if p in out:
            res.notes.append(note_text(N_("{what} {p} skipped: listed twice"), ("what",), what=what, p=p))
            continue
        if _fit(r, p, n_predict, res, what):
            out.append(p)
    return out


# ------------------------------------------------------------------------- prefill
async def scenario_prefill(r: Runner, res: ScenarioResult) -> None:
    """Cold prefill: cache_prompt false + unique leading salt; a sample counts only if
    timings.cache_n == 0 and timings.prompt_n == /tokenize length of the prompt."""
    cfg = r.cfg
    series = []
    idx = 0
    warmed = cfg.warmup == 0
    for length in _points(r, cfg.prefill_lengths, 1, res, N_("length")):
        pfx = salt(r.run_id, 0) if cfg.prefill_salt else ""
        sized, _ = await sized_text(r.client, length, cfg.seed + length, prefix=pfx)
        base = sized[len(pfx):]  # the salt counts towards the length
        samples = []
        for rep in range(cfg.repeats + (0 if warmed else 1)):
            warm = not warmed
            warmed = True
            text = (salt(r.run_id, idx) if cfg.prefill_salt else "") + base
            idx += 1
            n_tok = len(await r.client.tokenize(text))
            body = {"prompt": text, "n_predict": 1, "cache_prompt": cfg.prefill_cache_prompt, "seed": cfg.seed}
            s = await r.request("prefill", f"{length}#{rep}", COMPLETION, body, slot=cfg.slot, warmup=warm)
            s.expected_prompt_tokens = n_tok
            if s.ok:
                c, p = s.timings.get("cache_n"), s.timings.get("prompt_n")
                if c != 0:
                    s.valid, s.reject_reason = False, f"not cold: timings.cache_n = {c} (expected 0)"
                elif p != n_tok:
                    s.valid, s.reject_reason = False, f"timings.prompt_n = {p} ≠ /tokenize length {n_tok}"
            samples.append(s)
        ok = _ok(samples)
        toks = [s.timings["prompt_n"] for s in ok]
        params = {"target_tokens": length, "prompt_tokens": int(statistics.median(toks)) if toks else None,
                  "repeats": cfg.repeats, "rejected": sum(1 for s in samples if not s.valid)}
        what = (
            f"{cfg.repeats} /completion requests of ~{length} prompt tokens (seeded filler after a unique salt), "
            f"cache_prompt=false, n_predict=1, {_slot_text(cfg)}; a sample counts only if timings.cache_n == 0 and "
            f"timings.prompt_n equals the /tokenize length; rate = timings.prompt_n ÷ timings.prompt_ms"
        )
        zh = "cache_prompt=false + 唯一前缀盐，仅计 cache_n==0 且 prompt_n 等于 /tokenize 长度的样本；prompt_n/prompt_ms"
        res.figures += stat_figures(f"prefill_tok_s_{_k(length)}", [s.prefill_tok_s for s in ok if s.prefill_tok_s],
                                    "tok/s", what, stats=("median", "p10", "max"), scenario="prefill", params=params, method_zh=zh)
        res.figures += stat_figures(f"prefill_ttft_ms_{_k(length)}", [s.t_first_chunk_s * 1000 for s in ok if s.t_first_chunk_s is not None],
                                    "ms", what.replace("rate = timings.prompt_n ÷ timings.prompt_ms",
                                                       "client time from send to the first SSE data chunk (n_predict=1: the only token)"),
                                    stats=("median",), scenario="prefill", params=params)
        if ok:
            series.append({"length": params["prompt_tokens"], "tok_s": statistics.median(s.prefill_tok_s for s in ok if s.prefill_tok_s)})
        _errors(res, samples)
    res.series["prefill_vs_length"] = series


def _k(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


# ------------------------------------------------------------------------- ttft
async def scenario_ttft(r: Runner, res: ScenarioResult) -> None:
    """Warm TTFT the way chats and agents hit the cache: the slot is primed with a prefix, then
    every request is the previous prompt plus a new question (append-only), on the same slot.
    Hybrid/SWA models (Qwen3.6) can only restore a context checkpoint, which llama.cpp places a
    few tokens before the end of the previous prompt (tools/server/server-context.cpp
    ``create_check``), so a sample counts as warm if cache_n >= previous prompt − 8."""
    cfg = r.cfg
    if not _fit(r, cfg.ttft_prefix + 16 * (cfg.repeats + 1), 8, res):
        return
    prefix, _ = await sized_text(r.client, cfg.ttft_prefix, cfg.seed + 7)
    prompt = prefix + "\nQ0: why?"
    body0 = {"prompt": prompt, "n_predict": 1, "cache_prompt": True, "seed": cfg.seed}
    samples = [await r.request("ttft", "prime", COMPLETION, body0, slot=cfg.slot, warmup=True)]
    for rep in range(cfg.repeats):
        n_prev = len(await r.client.tokenize(prompt))
        prompt = prompt + f"\nQ{rep + 1}: what next, number {rep + 1}?"
        body = {"prompt": prompt, "n_predict": 8, "cache_prompt": True, "seed": cfg.seed}
        s = await r.request("ttft", f"warm#{rep}", COMPLETION, body, slot=cfg.slot)
        s.expected_prompt_tokens = n_prev
        if s.ok:
            c = s.timings.get("cache_n") or 0
            if c < n_prev - 8:
                s.valid = False
                s.reject_reason = (
                    f"cache miss: timings.cache_n = {c} < previous prompt {n_prev} − 8 tokens "
                    "(slot evicted, SWA/hybrid model without a usable checkpoint, or mmproj)"
                )
        samples.append(s)
    ok = _ok(samples)
    params = {
        "prefix_tokens": statistics.median([s.expected_prompt_tokens or 0 for s in samples[1:]]) if samples[1:] else None,
        "cache_n_median": statistics.median([s.timings.get("cache_n", 0) for s in ok]) if ok else None,
        "prompt_n_median": statistics.median([s.timings.get("prompt_n", 0) for s in ok]) if ok else None,
        "rejected": sum(1 for s in samples if not s.valid),
    }
    what = (
        f"slot primed with a ~{cfg.ttft_prefix}-token prompt, then {cfg.repeats} /completion requests each = the previous "
        f"prompt + a new question (append-only, like a chat), cache_prompt=true, {_slot_text(cfg)}; "
        "samples with timings.cache_n < previous prompt − 8 rejected"
    )
    res.figures += stat_figures("ttft_warm_ms", [s.ttft_s * 1000 for s in ok if s.ttft_s is not None], "ms",
                                f"{what}; client time from send to the first token-bearing SSE chunk",
                                stats=("median", "p90", "max"), scenario="ttft", params=params,
                                method_zh="同槽位 id_slot，每次在上一个 prompt 后追加新问题；客户端首 token 时间")
    res.figures += stat_figures("ttft_warm_prompt_ms", [ms for s in ok if (ms := s.timings.get("prompt_ms")) is not None],
                                "ms", f"{what}; server timings.prompt_ms", stats=("median",), scenario="ttft", params=params)
    _errors(res, samples)


# ------------------------------------------------------------------------- depth
class _DepthPoint(TypedDict):
    """One point of the ``decode_vs_depth`` series."""

    depth: float | None  # median depth of the samples (None when no sample reported one)
    tok_s: float


async def scenario_depth(r: Runner, res: ScenarioResult) -> None:
    cfg = r.cfg
    series: list[_DepthPoint] = []
    for d in _points(r, cfg.depths, cfg.n_predict, res, N_("depth")):
        text, _ = await sized_text(r.client, d, cfg.seed + 31 + d, prefix=salt(r.run_id, 9000 + d))
        samples = []
        for rep in range(cfg.repeats):
            body = {"prompt": text, "n_predict": cfg.n_predict, "cache_prompt": True, "ignore_eos": True, "seed": cfg.seed}
            samples.append(await r.request("depth", f"d{d}#{rep}", COMPLETION, body, slot=cfg.slot))
        ok = _ok(samples)
        depths = [s.depth for s in ok if s.depth is not None]
        depth_median = statistics.median(depths) if depths else None
        params = {"target_depth": d, "depth_median": depth_median, "n_predict": cfg.n_predict}
        what = (
            f"{cfg.repeats} /completion requests with a ~{d}-token prompt (the first fills the slot, the rest hit the cache), "
            f"n_predict={cfg.n_predict}, ignore_eos, {_slot_text(cfg)}; depth = timings.cache_n + timings.prompt_n; {DECODE_FORMULA}"
        )
        res.figures += stat_figures(f"decode_tok_s_at_depth_{_k(d)}", [s.server_decode_tok_s for s in ok if s.server_decode_tok_s],
                                    "tok/s", what, stats=("median", "p10"), scenario="depth", params=params,
                                    method_zh="不同上下文深度下的解码速度，深度 = cache_n + prompt_n")
        vals = [s.server_decode_tok_s for s in ok if s.server_decode_tok_s]
        if vals:
            series.append({"depth": depth_median, "tok_s": statistics.median(vals)})
        _errors(res, samples)
    res.series["decode_vs_depth"] = series
    if len(series) >= 2 and series[0]["tok_s"]:
        a, b = series[0], series[-1]
        res.figures.append(single_figure(
            "decode_depth_drop_pct", 100.0 * (a["tok_s"] - b["tok_s"]) / a["tok_s"], "%",
            f"(median decode at depth {a['depth']} − median at depth {b['depth']}) ÷ median at depth {a['depth']}; medians from decode_tok_s_at_depth_*; one derived value",
            scenario="depth", params={"depth_a": a["depth"], "tok_s_a": a["tok_s"], "depth_b": b["depth"], "tok_s_b": b["tok_s"]},
        ))


# ------------------------------------------------------------------------- concurrency
@dataclass
class _Rounds:
    """The rounds of one concurrency level: every request, and per complete round its steady
    state and its whole span (tokens, seconds)."""

    samples: list[RequestSample] = field(default_factory=list)
    steady: list[SteadyRound] = field(default_factory=list)
    whole: list[tuple[int, float]] = field(default_factory=list)


async def scenario_concurrency(r: Runner, res: ScenarioResult) -> None:
    """For each N: ``--repeats`` rounds of N parallel streamed requests (not pinned); a round
    starts when the previous one has finished. Each round gives one steady-state rate: the tokens
    the N streams generated while all of them were decoding, over that window (bench.steady); the
    figure is their median and the rounds are its samples (the noise band of ``bench compare``).
    The round's whole span (prefill and queueing included) is a figure of its own."""
    cfg = r.cfg
    if cfg.warmup:
        p = prompt_set("synthetic", 1, cfg.seed + 99)[0]
        await r.request("concurrency", "warmup", *_req(p, cfg, 8), warmup=True)
    series = []
    for n in cfg.concurrency:
        rounds = await _concurrency_rounds(r, n)
        res.figures += _concurrency_figures(cfg, n, rounds)
        ok = _ok(rounds.samples)
        if rounds.steady or rounds.whole:
            series.append({"streams": n, "aggregate_tok_s": _median_or_none([x.rate for x in rounds.steady]),
                           "round_tok_s": _median_or_none([t / d for t, d in rounds.whole]),
                           "per_stream_tok_s": statistics.median([s.server_decode_tok_s for s in ok
                                                                  if s.server_decode_tok_s] or [0])})
        _errors(res, rounds.samples)
    res.series["concurrency"] = series


def _median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


async def _concurrency_rounds(r: Runner, n: int) -> _Rounds:
    cfg = r.cfg
    rounds = _rounds(cfg)
    prompts = _prompts(cfg, n * rounds, cfg.seed + 100 * n)
    out = _Rounds()
    for j in range(rounds):
        reqs = [_req(prompts[w * rounds + j], cfg) for w in range(n)]
        # timings_per_token: every chunk carries the tokens generated so far (timings.predicted_n)
        batch = list(await asyncio.gather(*(r.request("concurrency", f"c{n}w{w}r{j}", path, dict(body, timings_per_token=True))
                                            for w, (path, body) in enumerate(reqs))))
        out.samples += batch
        ok = _ok(batch)
        if len(ok) != n:
            continue  # a round with a failed or rejected stream is not n-way parallel
        t0 = min(s.t_start for s in batch)
        t_end = max(s.t_start + (s.t_last_s or 0) for s in ok)
        if t_end > t0:
            out.whole.append((sum(s.predicted_n or 0 for s in ok), t_end - t0))
        steady = steady_round([[(s.t_start - t0 + t, k) for t, k in s.token_times] for s in ok])
        if steady is not None:
            out.steady.append(steady)
    return out


def _concurrency_figures(cfg: BenchConfig, n: int, rounds: _Rounds) -> list[Figure]:
    ok = _ok(rounds.samples)
    k = _rounds(cfg)
    rates = [x.rate for x in rounds.steady]
    params: dict[str, Any] = {"streams": n, "rounds": k, "steady_rounds": len(rates), "n_predict": cfg.n_predict,
                              "window_s": [round(x.window_s, 4) for x in rounds.steady],
                              "tokens_in_window": [round(sum(x.tokens), 1) for x in rounds.steady]}
    what = (f"{k} round(s) of {n} parallel chat requests × max_tokens={cfg.n_predict}, ignore_eos, not pinned "
            "(a round starts when the previous one ended)")
    never = ("the streams never all decoded at once: the server ran them one after another (fewer slots than streams?)"
             if rounds.whole and not rates else "no complete round")
    figs = [single_figure(
        f"concurrency_{n}_aggregate_tok_s", _median_or_none(rates), "tok/s",
        f"steady state, median over N={len(rates)} rounds of {n} parallel chat requests × max_tokens={cfg.n_predict}, "
        "ignore_eos, not pinned: per round, the window in which all the streams were decoding (from the last "
        "stream's first token to the first stream's last token); Σ over the streams of the tokens each generated "
        "in it (timings.predicted_n of timings_per_token chunks, linear between chunks) ÷ the window; prefill, "
        "queueing and the tail where some streams decode alone are left out; rounds with a failed request excluded",
        samples=rates, scenario="concurrency", params=params,
        method_zh=(f"稳态，{len(rates)} 轮的中位数，每轮 {n} 个并行聊天请求 × max_tokens={cfg.n_predict}，ignore_eos，不固定槽位："
                   "每轮取所有流都在解码的时间窗（从最后一个流的第一个 token 到第一个流的最后一个 token），Σ 各流在窗内生成的 "
                   "token（timings_per_token 各块的 timings.predicted_n，块之间线性插值）÷ 窗长；不含 prefill、排队和只剩部分流在解码的"
                   "尾段；有请求失败的轮次不计"),
        note="" if rates else never)]
    whole = [t / d for t, d in rounds.whole]
    figs.append(single_figure(
        f"concurrency_{n}_round_tok_s", _median_or_none(whole), "tok/s",
        f"whole round, median over N={len(whole)} rounds: Σ timings.predicted_n ÷ (last token chunk of any stream − "
        "first request sent): prefill, queueing for a slot and the tail included",
        samples=whole, scenario="concurrency", params={"streams": n, "tokens_per_round": [t for t, _ in rounds.whole]},
        method_zh=(f"整轮，{len(whole)} 轮的中位数：Σ timings.predicted_n ÷（任一流的最后一个 token 块 − 第一个请求发出），"
                   "含 prefill、等待槽位和尾段"),
        note="" if whole else "no complete round"))
    figs += stat_figures(f"concurrency_{n}_per_stream_tok_s", [s.server_decode_tok_s for s in ok if s.server_decode_tok_s],
                         "tok/s", f"{what}; per request {DECODE_FORMULA}", stats=("median",), scenario="concurrency",
                         params={"streams": n})
    what_zh = (f"{k} 轮，每轮 {n} 个并行聊天请求 × max_tokens={cfg.n_predict}，ignore_eos，不固定槽位（上一轮结束后才开始下一轮）")
    figs += ttft_figures(f"concurrency_{n}_ttft", ok, f"{what}; client time to first token-bearing chunk",
                         stats=("median", "p90"), scenario="concurrency", params={"streams": n},
                         what_zh=f"{what_zh}；客户端到第一个含 token 的块的时间")
    queue = [max(0.0, s.ttft_s * 1000 - float(s.timings["prompt_ms"])) for s in ok if s.ttft_s is not None and "prompt_ms" in s.timings]
    figs += stat_figures(f"concurrency_{n}_queue_ms", queue, "ms",
                         f"{what}; client TTFT − timings.prompt_ms (waiting for a slot + HTTP + template)",
                         stats=("median",), scenario="concurrency", params={"streams": n})
    return figs


# ------------------------------------------------------------------------- spec
async def scenario_spec(r: Runner, res: ScenarioResult) -> None:
    """Acceptance = Σ timings.draft_n_accepted ÷ Σ timings.draft_n (llama.cpp: accepted /
    tested drafts, llama.cpp#14104); mean acceptance length from /metrics counter deltas."""
    cfg = r.cfg
    prompts = _prompts(cfg, cfg.k + cfg.warmup, cfg.seed)
    before = await r.monitor.scrape() if r.monitor.metrics_available else None
    samples = []
    for i, p in enumerate(prompts):
        samples.append(await r.request("spec", p.name, *_req(p, cfg), slot=cfg.slot, warmup=i < cfg.warmup))
    after = await r.monitor.scrape() if r.monitor.metrics_available else None
    ok = _ok(samples)
    with_draft = [s for s in ok if s.timings.get("draft_n")]
    dn = sum(int(s.timings["draft_n"]) for s in with_draft)
    da = sum(int(s.timings.get("draft_n_accepted", 0)) for s in with_draft)
    what = f"{cfg.k} {cfg.endpoint} requests ('{cfg.prompt_set}') × max_tokens={cfg.n_predict}, serial, {_slot_text(cfg)}"
    note = "" if with_draft else (
        "no response carried timings.draft_n: speculative decoding is off on this server "
        "(no --spec-type / --model-draft) or it drafted nothing"
    )
    res.figures.append(single_figure(
        "spec_acceptance", da / dn if dn else None, "ratio",
        f"{what}; Σ timings.draft_n_accepted ({da}) ÷ Σ timings.draft_n ({dn}) over requests that drafted",
        samples=[s.timings.get("draft_n_accepted", 0) / s.timings["draft_n"] for s in with_draft],
        scenario="spec", note=note, method_zh="Σdraft_n_accepted ÷ Σdraft_n（timings）",
        params={"draft_n": dn, "draft_n_accepted": da},
    ))
    if before and after:
        d_acc = after.values.get("spec_decode_num_accepted_tokens_total", 0) - before.values.get("spec_decode_num_accepted_tokens_total", 0)
        d_st = after.values.get("spec_decode_num_drafts_total", 0) - before.values.get("spec_decode_num_drafts_total", 0)
        res.figures.append(single_figure(
            "spec_mean_acceptance_length", 1 + d_acc / d_st if d_st else None, "tokens/step",
            "1 + Δllamacpp:spec_decode_num_accepted_tokens_total ÷ Δllamacpp:spec_decode_num_drafts_total between "
            "/metrics scrapes before and after the spec requests (server-wide: valid only without interference)",
            scenario="spec", note="" if d_st else "no drafts counted in /metrics",
            params={"drafts": d_st, "accepted_tokens": d_acc},
        ))
    res.figures += stat_figures("spec_decode_tok_s", [s.server_decode_tok_s for s in ok if s.server_decode_tok_s], "tok/s",
                                f"{what}; {DECODE_FORMULA}", stats=("median", "p10", "max"), scenario="spec")
    if cfg.baseline_url:
        async with BenchClient(cfg.baseline_url, timeout_s=cfg.request_timeout_s, api_key=cfg.api_key) as base:
            bs = []
            for i, p in enumerate(prompts):
                bs.append(await r.request("spec", f"baseline-{p.name}", *_req(p, cfg), slot=cfg.slot,
                                          warmup=i < cfg.warmup, client=base))
        bok = _ok(bs)
        bvals = [v for s in bok if (v := s.server_decode_tok_s or s.client_decode_tok_s)]
        res.figures += stat_figures("spec_baseline_decode_tok_s", bvals, "tok/s",
                                    f"same prompts sent to the baseline {cfg.baseline_url} (no speculation); {DECODE_FORMULA}",
                                    stats=("median",), scenario="spec", params={"baseline_url": cfg.baseline_url})
        svals = [s.server_decode_tok_s for s in ok if s.server_decode_tok_s]
        if bvals and svals:
            res.figures.append(single_figure(
                "spec_speedup", statistics.median(svals) / statistics.median(bvals), "×",
                "median spec_decode_tok_s ÷ median spec_baseline_decode_tok_s (same prompts, same max_tokens); one derived value",
                scenario="spec", params={"spec_median_tok_s": statistics.median(svals), "baseline_median_tok_s": statistics.median(bvals)}))
        _errors(res, bs)
    _errors(res, samples)


# ------------------------------------------------------------------------- workload
async def scenario_workload(r: Runner, res: ScenarioResult) -> None:
    cfg = r.cfg
    assert cfg.workload is not None
    reqs = load_workload(cfg.workload)
    r.planned += len(reqs) - 10
    samples = []
    for p in reqs:
        path, body = _req(p, cfg)
        body.pop("ignore_eos", None)  # replay: let requests stop naturally
        samples.append(await r.request("workload", p.name, path, body, slot=cfg.slot))
    ok = _ok(samples)
    what = f"{len(reqs)} chat requests replayed serially from {cfg.workload.name} (max_tokens from the file, else {cfg.n_predict})"
    res.figures += stat_figures("workload_decode_tok_s", [v for s in ok if (v := s.server_decode_tok_s or s.client_decode_tok_s)],
                                "tok/s", f"{what}; {DECODE_FORMULA} (client rate when the server sends no timings)", scenario="workload")
    res.figures += ttft_figures("workload_ttft", ok, f"{what}; client time to first token-bearing chunk",
                                stats=("median", "p90"), scenario="workload",
                                what_zh=f"从 {cfg.workload.name} 串行重放 {len(reqs)} 个聊天请求；客户端到第一个含 token 的块的时间")
    res.figures += stat_figures("workload_prefill_tok_s", [s.prefill_tok_s for s in ok if s.prefill_tok_s and (s.timings.get("prompt_n") or 0) > 16],
                                "tok/s", f"{what}; timings.prompt_n ÷ timings.prompt_ms (requests with > 16 new prompt tokens; cache hits are not cold)",
                                stats=("median",), scenario="workload")
    _errors(res, samples)
