"""Optimiser: targets in (context, decode speed, headroom, slots), ranked llama-server configs out,
or an honest "impossible" with the numbers.

Search space (each candidate is planned by the memory model, planner.make_plan, and timed by the
speed model, speed.speed_report):

- KV cache types the backend runs well: on CUDA only the default-compiled flash-attention vector
  pairs q4_0/q4_0, q8_0/q8_0, f16/f16 (ggml/CMakeLists.txt:208, fattn.cu:496-538) plus K q8_0 /
  V q4_0 (runs, converting to f16: slower); iq4_nl is never proposed on CUDA (no FA kernel:
  attention would run on the CPU, ggml/src/ggml-cuda/fattn.cu)
- ``-c`` = target context x slots, ``-np`` slots, ``-kvu`` when slots > 1
- ``-ub`` 512/1024/2048 (``-b`` >= ``-ub``)
- GPU layout: all layers on the GPUs; several GPUs: ``-ts`` filling the fastest GPU first (layer
  split runs devices one after another, so the fastest is to put as many layers as fit on the
  highest-bandwidth card), ``-ts`` proportional to bandwidth (equal time per device, best for
  pipelined prefill) and llama.cpp's default (proportional to free memory); when nothing fits:
  ``--n-cpu-moe`` (MoE) or a lower ``-ngl`` (dense)
- speculative decoding (``--spec-type draft-mtp``) when the model has nextn layers or a draft is
  given, with the draft length that the speed model prefers

Not searched, and why (docs/speed.md "Optimiser"):

- ``-b`` on its own: it is set to max(2048, ``-ub``). The speed model prefills per micro-batch
  (``-ub``); the logical batch only groups micro-batches, and its one speed effect, pipeline
  overlap of micro-batches across several GPUs, is not modelled, so a separate ``-b`` would
  change no figure here. Memory: the compute buffers follow ``-ub``.
- ``-c``: fixed at target x slots. The target is a requirement: a smaller context misses it, a
  larger one only costs memory and decode speed at depth is judged at the target anyway.
- ``-sm row`` / ``-sm tensor``: their per-layer synchronisation over PCIe/NVLink is not
  calibrated (no published multi-GPU row-split point), so ranking them against ``-sm layer``
  would rest on an assumed constant; the speed model still evaluates them when a plan gives them.
- ``--swa-full``, ``-nkvo``, ``-ot`` patterns, ``--cache-ram``: these trade speed or host RAM
  for features the targets do not express.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from llamarig.errors import InputError
from llamarig.gguf.spec import ModelSpec
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.calibration.constants import Calibration
from llamarig.plan.calibration.files import load_calibration
from llamarig.plan.config import ServerConfig
from llamarig.plan.flash_attn import kv_path
from llamarig.plan.optimise.verdict import (
    Assumption,
    TargetVerdict,
    kv_read_assumption,
    target_verdict,
)
from llamarig.plan.planner import make_plan
from llamarig.plan.result import Plan, PlanInputs
from llamarig.plan.speed.speed_model import (
    KV_QUALITY,
    LOWEST_PUBLISHED_ACCEPTANCE,
    SpeedReport,
    acceptance_from_ratio,
    kv_quality_note,
    kv_quality_short,
    mtp_draft_bytes,
    speculative_bound,
    speed_report,
    token_embd_bytes,
    tokens_per_step,
)
from llamarig.units import GiB, fmt_bytes

GB = 1e9


@dataclass(frozen=True)
class Targets:
    ctx: int  # tokens each slot must hold
    decode_tok_s: float | None = None
    decode_depth: int | None = None  # depth at which the decode target is judged (default: ctx)
    headroom: int = GiB  # free memory to keep on every GPU
    slots: int = 1
    vision: bool = False
    agent: bool = False
    acceptance: float | None = None  # llama-server's draft_n_accepted / draft_n (None = family default)

    def check(self) -> None:
        if self.ctx <= 0:
            raise InputError(_("--target-ctx {ctx}: must be a positive number of tokens").format(ctx=self.ctx))
        if self.ctx > 16 * 1024 * 1024:
            raise InputError(_("--target-ctx {ctx}: not plausible (more than 16M tokens)").format(ctx=self.ctx))
        if self.decode_tok_s is not None and not 0 < self.decode_tok_s <= 100_000:
            raise InputError(_("--target-decode {decode_tok_s}: must be between 0 and 100000 tok/s").format(decode_tok_s=self.decode_tok_s))
        if self.headroom < 0:
            raise InputError(_("--headroom must be >= 0"))
        if self.slots < 1 or self.slots > 256:
            raise InputError(_("--slots {slots}: must be between 1 and 256").format(slots=self.slots))
        if self.decode_depth is not None and not 0 <= self.decode_depth <= self.ctx:
            raise InputError(_("--target-depth {decode_depth}: must be between 0 and --target-ctx {ctx}").format(decode_depth=self.decode_depth, ctx=self.ctx))
        if self.acceptance is not None and not 0 <= self.acceptance < 1:
            raise InputError(_("--acceptance {acceptance}: must be in [0, 1)").format(acceptance=self.acceptance))

    @property
    def depth(self) -> int:
        """Where the decode target is judged: --target-depth, else the full target context (a
        slot that holds ctx tokens decodes at that depth at the end of a long session)."""
        return self.decode_depth if self.decode_depth is not None else self.ctx


@dataclass(frozen=True)
class PlannedOption:
    cfg: ServerConfig
    plan: Plan
    speed: SpeedReport
    layout: str  # how the layers are placed (method)
    fits: bool  # every GPU keeps the headroom, host RAM fits
    min_free: int | None
    decode_at_target: float  # effective (speculative when used) at the target depth
    meets_decode: bool
    notes: tuple[str, ...]
    headroom: int = 0  # the free memory every GPU must keep (Targets.headroom)
    #: yes / maybe (met only under a named, unmeasured assumption) / slow / no fit (plan.verdict)
    verdict: TargetVerdict = TargetVerdict("yes")
    #: what the decode figures at the target depth and the target context rest on that was not
    #: measured (quantized K/V read as fast per byte as f16 on a GPU with no evidence for them,
    #: plan.verdict.kv_read_assumption; a draft acceptance not given), each with the figure if it
    #: fails as measured elsewhere
    depth_assumptions: tuple[Assumption, ...] = ()
    ctx_assumptions: tuple[Assumption, ...] = ()

    @property
    def meets_all(self) -> bool:
        return self.fits and self.meets_decode

    @property
    def decode_low(self) -> float:
        """The low end of the decode at the target depth: the figure if the unmeasured
        assumption fails as measured elsewhere; the figure itself when nothing is assumed. The
        optimiser ranks by it, so no candidate rises above another on an assumption alone."""
        return _low(self.depth_assumptions, self.decode_at_target)

    def ctx_decode(self, ctx: int) -> tuple[float, float]:
        """(low end, figure) of the decode with the target context (``ctx``) full, speculative
        decoding included."""
        sp = self.speed.speculative
        d = self.speed.at_depth(ctx).decode_tok_s * (sp.speedup if sp else 1.0)
        return _low(self.ctx_assumptions, d), d

    def to_json(self) -> dict[str, Any]:
        sp = self.speed
        return {
            "command": list(self.plan.command),
            "layout": self.layout,
            "cache_type_k": self.cfg.cache_type_k,
            "cache_type_v": self.cfg.cache_type_v,
            "n_ctx": self.plan.n_ctx,
            "n_parallel": self.plan.n_parallel,
            "n_ubatch": self.plan.n_ubatch,
            "fits": self.fits,
            "meets_targets": self.meets_all,
            "min_free": self.min_free,
            "devices": [{"name": d.name, "label": d.label, "total": d.total, "capacity": d.capacity,
                         "free": d.free, "headroom": self.headroom,
                         "keeps_headroom": None if d.free is None else d.free >= self.headroom}
                        for d in self.plan.devices],
            "host_total": self.plan.host.total,
            "host_free": self.plan.host.free,
            "decode_at_target_depth_tok_s": round(self.decode_at_target, 2),
            # the figure the ranking uses: the low end when the figure above rests on an assumption
            "decode_at_target_depth_low_tok_s": round(self.decode_low, 2),
            "decode_assumed": bool(self.depth_assumptions),
            "decode_assumptions": [_assumption_json(a) for a in (*self.depth_assumptions, *self.ctx_assumptions)],
            "speed": sp.to_json(),
            "kv_quality": kv_quality_note(self.cfg.cache_type_k, self.cfg.cache_type_v),
            "kv_quality_short": kv_quality_short(self.cfg.cache_type_k, self.cfg.cache_type_v),
            "kv_note": sp.kv_note,
            "notes": list(self.notes),
            "verdict": self.verdict.word,
            "assumptions": [_assumption_json(a) for a in self.verdict.assumptions],
        }


def _low(assumptions: Sequence[Assumption], figure: float) -> float:
    """The figure with every assumption failing at once (each scales it by what it says)."""
    low = figure
    for a in assumptions:
        if a.decode_if_wrong is not None and figure > 0:
            low *= a.decode_if_wrong / figure
    return min(low, figure)


def _acceptance_assumption(rep: SpeedReport, decode: float, depth: int) -> Assumption | None:
    """A speculative figure on the family's default acceptance (none given): the decode at the
    lowest published acceptance instead. Only tokens per step change with it (the step's time
    does not: plan.speed.speculative), so the figure scales by their ratio."""
    sp = rep.speculative
    if sp is None or sp.acceptance_source.startswith("given"):
        return None
    low = acceptance_from_ratio(LOWEST_PUBLISHED_ACCEPTANCE, sp.n_max)
    if low >= sp.acceptance or sp.tokens_per_step <= 0:
        return None
    wrong = decode * tokens_per_step(low, sp.n_max) / sp.tokens_per_step
    return Assumption("spec-acceptance", _(
        "draft acceptance {ratio:.2f} (draft_n_accepted / draft_n) at n = {n}: the family default, not measured; "
        "at the lowest published {low:.2f} (the 307K-context MTP field report) {rate:.0f} tok/s at depth {depth}; "
        "--acceptance sets it").format(ratio=sp.ratio, n=sp.n_max, low=LOWEST_PUBLISHED_ACCEPTANCE,
        rate=wrong, depth=depth), wrong)


def _assumption_json(a: Assumption) -> dict[str, Any]:
    return {"code": a.code, "message": a.message,
            "decode_if_wrong_tok_s": round(a.decode_if_wrong, 2) if a.decode_if_wrong is not None else None}


@dataclass(frozen=True)
class OptimiseResult:
    targets: Targets
    candidates: tuple[PlannedOption, ...]  # ranked, best first
    verdict: str  # ok | maybe (met only under an unmeasured assumption) | unlikely (predicted below a target the physical bound allows) | impossible
    reasons: tuple[str, ...]
    elapsed_s: float
    evaluated: int

    @property
    def best(self) -> PlannedOption | None:
        return self.candidates[0] if self.candidates else None

    def to_json(self) -> dict[str, Any]:
        t = self.targets
        return {
            "targets": {"ctx": t.ctx, "decode_tok_s": t.decode_tok_s, "decode_depth": t.depth,
                        "headroom": t.headroom, "slots": t.slots, "vision": t.vision, "agent": t.agent},
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            # candidates are ranked by the low end of their decode (an assumption lifts none)
            "ranked_by": "decode_at_target_depth_low_tok_s",
            # the winner's speed figures, same schema as a plain plan's `speed` (docs/speed.md)
            "speed": self.best.speed.to_json() if self.best else None,
            "best": self.best.to_json() if self.best else None,
            "candidates": [c.to_json() for c in self.candidates],
            "evaluated": self.evaluated,
            "elapsed_s": round(self.elapsed_s, 4),
        }


# ============================================================================ search helpers


def kv_pairs(backends: Sequence[str]) -> list[tuple[str, str]]:
    if any(b in ("CUDA", "ROCm") for b in backends):
        return [("f16", "f16"), ("q8_0", "q8_0"), ("q8_0", "q4_0"), ("q4_0", "q4_0")]
    return [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")]


def _set(cfg: ServerConfig, **kw: Any) -> ServerConfig:
    return replace(cfg, set_flags=frozenset(cfg.set_flags | set(kw)), **kw)


def _fits(plan: Plan, headroom: int) -> tuple[bool, int | None]:
    frees = [d.free for d in plan.devices if d.free is not None and d.capacity]
    min_free = min(frees) if frees else None
    ok = all(f >= headroom for f in frees) and (plan.host.free_at_start is None or plan.host.free_at_start >= 0)
    return ok, min_free


def _plan(inp: PlanInputs, cfg: ServerConfig) -> Plan:
    return make_plan(replace(inp, cfg=cfg))


def fastest_first_split(inp: PlanInputs, cfg: ServerConfig, headroom: int) -> tuple[tuple[float, ...], int]:
    """-ts layer counts that fill the highest-bandwidth GPU first, each up to its capacity minus
    headroom (layer split decodes device after device, so time = sum of bytes_i / bandwidth_i is
    least when the fast cards hold the most). Returns (counts in device order, layers left over)."""
    gpus = inp.hardware.gpus
    n = len(gpus)
    n_all = inp.spec.n_layer + 1  # + output layer
    trial = _plan(inp, _set(cfg, tensor_split=tuple([1.0] * n), n_gpu_layers=-1))
    per_layer_total = 0
    fixed = []
    for d in trial.devices:
        var = d.get("weights") + d.get("kv") + d.get("recurrent") + d.get("draft")
        per_layer_total += var
        fixed.append(d.total - var)
    layer_cost = per_layer_total / max(1, n_all)
    caps = []
    for i, g in enumerate(gpus):
        room = g.memory_bytes - headroom - fixed[i]
        caps.append(max(0, int(room // layer_cost)) if layer_cost > 0 else n_all)
    order = sorted(range(n), key=lambda i: -(gpus[i].bandwidth_gbs or 0))
    counts = [0] * n
    left = n_all
    for i in order:
        take = min(caps[i], left)
        counts[i] = take
        left -= take
    return tuple(float(c) for c in counts), left


def balanced_split(inp: PlanInputs) -> tuple[float, ...]:
    """-ts proportional to bandwidth: every GPU spends the same time per token on its layers."""
    return tuple(float(g.bandwidth_gbs or 1.0) for g in inp.hardware.gpus)


def _repair_split(inp: PlanInputs, cfg: ServerConfig, counts: list[float], headroom: int,
                  tries: int = 8) -> tuple[ServerConfig, Plan]:
    """Move layers off devices that miss the headroom onto the one with the most free memory."""
    c = list(counts)
    cur = _set(cfg, tensor_split=tuple(c))
    plan = _plan(inp, cur)
    for _try in range(tries):
        frees = [(d.free if d.free is not None else 0) - headroom for d in plan.devices]
        worst = min(range(len(frees)), key=lambda i: frees[i])
        best = max(range(len(frees)), key=lambda i: frees[i])
        if frees[worst] >= 0 or worst == best or c[worst] <= 0:
            break
        per = max(1, plan.devices[worst].get("weights") // max(1.0, c[worst]))
        move = max(1, int(-frees[worst] // per) + 1)
        move = int(min(move, c[worst]))
        c[worst] -= move
        c[best] += move
        cur = _set(cfg, tensor_split=tuple(c))
        plan = _plan(inp, cur)
    return cur, plan


def _largest(lo: int, hi: int, guess: int, ok: Callable[[int], bool]) -> int | None:
    """The largest v in [lo, hi] with ok(v), where ok holds up to a bound and not past it (None
    when it never holds): probed outward from a guess in steps of 1, 2, 4, ..., then halved. A
    close guess costs two plans where halving [lo, hi] from the start costs six or seven."""
    good: int | None = None
    bad: int | None = None
    g = min(max(guess, lo), hi)
    step = 1
    if ok(g):
        good = g
        while good < hi:
            nxt = min(good + step, hi)
            if not ok(nxt):
                bad = nxt
                break
            good, step = nxt, step * 2
        if bad is None:
            return good
    else:
        bad = g
        while bad > lo:
            nxt = max(bad - step, lo)
            if ok(nxt):
                good = nxt
                break
            bad, step = nxt, step * 2
        if good is None:
            return None
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def _short(plan: Plan, headroom: int) -> int:
    """Bytes the GPUs lack for ``plan`` with ``headroom`` left on each."""
    return sum(max(0, headroom - d.free) for d in plan.devices if d.free is not None and d.capacity)


def _offload_search(inp: PlanInputs, cfg: ServerConfig, full: Plan, headroom: int,
                    plans: dict[int, tuple[ServerConfig, Plan]]) -> tuple[ServerConfig, Plan, str] | None:
    """Smallest CPU share that fits: --n-cpu-moe for MoE models, else the largest -ngl. The
    search starts from what the plan with everything on the GPUs (``full``) lacks, in layers;
    ``plans`` gets every plan it made."""
    spec = inp.spec
    n_all = spec.n_layer_main

    def fits(key: str, n: int) -> bool:
        c = _set(cfg, **{key: n})
        p = plans[n] = (c, _plan(inp, c))
        return _fits(p[1], headroom)[0]

    short = _short(full, headroom)
    if spec.n_expert:
        experts = sum(t.n_bytes for t in spec.tensors if "_exps" in t.name) / max(1, n_all)
        guess = n_all - (-(-short // int(experts)) if experts >= 1 else n_all)
        # the fewest layers' experts in host memory: the most layers' experts kept on the GPUs
        kept = _largest(0, n_all - 1, guess, lambda k: fits("n_cpu_moe", n_all - k))
        if kept is None:
            return None
        n = n_all - kept
        return (*plans[n], _("--n-cpu-moe {n}: experts of the first {n} layers in host RAM").format(n=n))
    per_layer = sum(d.get("weights") + d.get("kv") + d.get("recurrent") for d in full.devices) / max(1, spec.n_layer)
    guess = spec.n_layer - (-(-short // int(per_layer)) if per_layer >= 1 else spec.n_layer)
    ngl = _largest(0, spec.n_layer, guess, lambda k: fits("n_gpu_layers", k))
    if ngl is None:
        return None
    return (*plans[ngl], _("-ngl {n}: {cpu} layer(s) on the CPU").format(n=ngl, cpu=spec.n_layer + 1 - ngl))


def _best_draft_n(spec: ModelSpec, inp: PlanInputs, cfg: ServerConfig, cal: Calibration,
                  acceptance: float | None, host_bw: float | None, spec_type: str = "draft-mtp") -> int:
    best_n, best_v = 3, -1.0
    for n in (1, 2, 3, 4, 5, 6):
        c = _set(cfg, spec_types=(spec_type,), spec_draft_n_max=n)
        rep = speed_report(spec, c, inp.hardware, cal=cal, acceptance=acceptance, draft=inp.draft,
                           host_bandwidth_gbs=host_bw, depths=[0])
        v = rep.speculative.decode_tok_s if rep.speculative else 0.0
        if v > best_v + 1e-9:
            best_n, best_v = n, v
    return best_n


# ============================================================================ optimise


def _layouts(inp: PlanInputs, cfg: ServerConfig, targets: Targets) -> tuple[list[tuple[ServerConfig, Plan, str]], int]:
    """The layouts tried for one setting (several GPUs: the fastest first, by bandwidth, llama.cpp's
    own split; layers to the CPU when none fits), and how many plans that took."""
    hw = inp.hardware
    evaluated = 0
    layouts: list[tuple[ServerConfig, Plan, str]] = []
    if len(hw.gpus) > 1:
        counts, left = fastest_first_split(inp, _set(cfg, split_mode="layer"), targets.headroom)
        evaluated += 1
        if left == 0:
            c, p = _repair_split(inp, _set(cfg, split_mode="layer"), list(counts), targets.headroom)
            layouts.append((c, p, _("-ts fills the fastest GPU first (least time per token with -sm layer)")))
        bal = balanced_split(inp)
        c = _set(cfg, split_mode="layer", tensor_split=bal)
        layouts.append((c, _plan(inp, c), _("-ts proportional to bandwidth (equal time per GPU)")))
        layouts.append((cfg, _plan(inp, cfg), _("llama.cpp default split (proportional to free memory)")))
    else:
        layouts.append((cfg, _plan(inp, cfg), _("all layers on the GPU") if hw.gpus else _("CPU only")))
    evaluated += len(layouts)
    if hw.gpus and not any(_fits(p, targets.headroom)[0] for _, p, _ in layouts):
        searched: dict[int, tuple[ServerConfig, Plan]] = {}
        off = _offload_search(inp, layouts[0][0], layouts[0][1], targets.headroom, searched)
        evaluated += len(searched)
        if off is not None:
            layouts.append(off)
    return layouts, evaluated


def _option(inp: PlanInputs, layout: tuple[ServerConfig, Plan, str], kv: tuple[str, str], targets: Targets,
            cal: Calibration, acc_a: float | None, host_bandwidth_gbs: float | None) -> PlannedOption:
    """One layout with its speed, whether it fits and meets the targets, and its verdict."""
    c, p, how = layout
    spec, hw, depth = inp.spec, inp.hardware, targets.depth
    tk, tv = kv
    rep = speed_report(spec, c, hw, cal=cal, n_ctx=targets.ctx, acceptance=acc_a,
                       draft=inp.draft, host_bandwidth_gbs=host_bandwidth_gbs,
                       depths=sorted({0, 8192 if targets.ctx > 8192 else 0, depth, targets.ctx}))
    fits, min_free = _fits(p, targets.headroom)
    d = rep.at_depth(depth).decode_tok_s
    if rep.speculative is not None:
        d *= rep.speculative.speedup
    meets = targets.decode_tok_s is None or d >= targets.decode_tok_s
    notes = [kv_quality_note(tk, tv)]
    path = kv_path(([g.backend for g in hw.gpus] or ["CPU"])[0], tk, tv, "on")
    if path.kind != "fast":
        notes.append(path.note)
    if rep.speculative is not None:
        notes.append(f"MTP n={rep.speculative.n_max}, a={rep.speculative.acceptance:.2f} "
                     f"({rep.speculative.tokens_per_step:.2f} tokens/step)")
    split = c.split_mode if len(hw.gpus) > 1 else "layer"
    tv_ = target_verdict(rep, tk, tv, fits=fits, decode=d, target=targets.decode_tok_s, depth=depth,
                         swa_window=spec.swa_window, cal=cal, split_mode=split)
    sp = rep.speculative.speedup if rep.speculative is not None else 1.0
    at: list[tuple[Assumption, ...]] = []
    for x in (depth, targets.ctx):
        kv_a = kv_read_assumption(rep, tk, tv, x, swa_window=spec.swa_window, split_mode=split, cal=cal)
        acc_a_ = _acceptance_assumption(rep, rep.at_depth(x).decode_tok_s * sp, x)
        at.append(tuple(a for a in (kv_a, acc_a_) if a is not None))
    if tv_.word == "yes" and targets.decode_tok_s is not None and _low(at[0], d) < targets.decode_tok_s:
        # met only if the draft acceptance is as the family default says (verdict.py judges K/V)
        tv_ = TargetVerdict("maybe", tuple(a for a in at[0] if a.decode_if_wrong is not None))
    return PlannedOption(c, p, rep, how, fits, min_free, d, meets, tuple(notes), targets.headroom, tv_,
                         at[0], at[1])


def _verdict(inp: PlanInputs, targets: Targets, uniq: list[PlannedOption], cal: Calibration,
             host_bandwidth_gbs: float | None) -> tuple[str, list[str]]:
    best = uniq[0] if uniq else None
    reasons = _explain(inp, targets, uniq, cal, host_bandwidth_gbs)
    verdict = best.verdict.word if best is not None and best.meets_all else "impossible"
    if verdict in ("yes", "maybe"):
        # "maybe": met only if what nobody measured holds; the reasons name it (plan.verdict)
        verdict = "ok" if verdict == "yes" else "maybe"
        reasons = [a.message for a in best.verdict.assumptions] if best is not None else reasons
    else:
        bound = _decode_bound(uniq, targets)
        if bound is not None:
            verdict = "unlikely" if bound[0] >= (targets.decode_tok_s or 0) else "impossible"
            reasons = [bound[1], *reasons]
    return verdict, reasons


def _base_config(inp: PlanInputs, targets: Targets) -> ServerConfig:
    """The settings every candidate starts from: the target context over the slots, flash
    attention on, --fit off (the search places the layers itself)."""
    spec = inp.spec
    if spec.n_ctx_train and targets.ctx > spec.n_ctx_train:
        raise InputError(_("--target-ctx {ctx} is larger than the model's n_ctx_train {n_ctx_train}: llama-server "
                           "caps each slot there (server-context.cpp:1365-1368)").format(ctx=targets.ctx, n_ctx_train=spec.n_ctx_train))
    slots = targets.slots
    cfg0 = _set(inp.cfg, n_ctx=targets.ctx * slots, n_parallel=slots, flash_attn="on")
    return replace(cfg0, kv_unified=True if slots > 1 else None, fit=False, set_flags=frozenset(cfg0.set_flags | {"fit"}))


def optimise(inp: PlanInputs, targets: Targets, *, cal: Calibration | None = None,
             host_bandwidth_gbs: float | None = None, max_candidates: int = 12) -> OptimiseResult:
    t_start = time.perf_counter()
    targets.check()
    if targets.vision and inp.mmproj is None:
        raise InputError(_("--vision: no mmproj to plan for (give --mmproj FILE|f16|bf16, or a catalogue model that "
                           "has one)"))
    cal = cal or load_calibration()
    spec = inp.spec
    cfg0 = _base_config(inp, targets)
    use_spec = bool(spec.nextn_layers or inp.draft is not None)
    # --acceptance is the ratio llama-server reports, at the argv's --spec-draft-n-max (default 3):
    # the per-position a it implies carries over to other draft lengths
    acc_a = (acceptance_from_ratio(targets.acceptance, max(1, inp.cfg.spec_draft_n_max))
             if targets.acceptance is not None else None)
    # MTP heads (in the model or as a separate -md file, as in the 307K-context MTP field report) use draft-mtp; any other draft
    # model draft-simple (common/speculative.cpp:72-84)
    spec_type = "draft-mtp" if spec.nextn_layers or (inp.draft is not None and inp.draft.nextn_layers) else "draft-simple"
    evaluated = 0
    cands: list[PlannedOption] = []
    spec_n = _best_draft_n(spec, inp, cfg0, cal, acc_a, host_bandwidth_gbs, spec_type) if use_spec else 0
    for tk, tv in kv_pairs([g.backend for g in inp.hardware.gpus] or ["CPU"]):
        try:
            M.check_kv_types(spec, _set(cfg0, cache_type_k=tk, cache_type_v=tv))
        except InputError:
            continue
        for ub in (512, 1024, 2048):
            for spec_on in ((True, False) if use_spec else (False,)):
                cfg = _set(cfg0, cache_type_k=tk, cache_type_v=tv, n_ubatch=ub, n_batch=max(2048, ub))
                if spec_on:
                    cfg = _set(cfg, spec_types=(spec_type,), spec_draft_n_max=spec_n)
                elif use_spec:  # off is off, not the user's own --spec-type left in the base settings
                    cfg = _set(cfg, spec_types=())
                layouts, n = _layouts(inp, cfg, targets)
                evaluated += n
                cands += [_option(inp, lay, (tk, tv), targets, cal, acc_a, host_bandwidth_gbs) for lay in layouts]
    # drop duplicates (same command), best first
    seen: set[tuple[str, ...]] = set()
    uniq = []
    for cand in sorted(cands, key=lambda x: _rank_key(x, targets)):
        if cand.plan.command not in seen:
            seen.add(cand.plan.command)
            uniq.append(cand)
    verdict, reasons = _verdict(inp, targets, uniq, cal, host_bandwidth_gbs)
    return OptimiseResult(targets, tuple(uniq[:max_candidates]), verdict, tuple(reasons),
                          time.perf_counter() - t_start, evaluated)


def _decode_bound(cands: Sequence[PlannedOption], t: Targets) -> tuple[float, str] | None:
    """For a decode target no fitting candidate is predicted to meet: the hard bound (tok/s) of
    the fastest fitting candidate and a sentence naming it. The bound reads the weights and KV at
    peak bandwidth (efficiency 1, no overhead); with speculative decoding every drafted token is
    accepted (n + 1 tokens per step) and drafting and extra verification are free. A target under
    the bound is not impossible: efficiency and acceptance decide it, and published runs beat the
    model's prediction (docs/accuracy-speed.md). None when nothing fits or there is no decode target."""
    fitting = [c for c in cands if c.fits]
    if not fitting or t.decode_tok_s is None:
        return None
    top = max(fitting, key=lambda c: c.decode_at_target)
    ds = top.speed.at_depth(t.depth)
    sp = top.speed.speculative
    if sp is not None:
        bound = speculative_bound(1 / ds.limit_tok_s if ds.limit_tok_s else 0.0, sp.n_max)
        step = (sp.tokens_per_step / top.decode_at_target) if top.decode_at_target else 0.0
        need = (t.decode_tok_s * step - 1) / sp.n_max if step else float("inf")
        if bound < t.decode_tok_s:
            msg = _("impossible: decode {target:g} tok/s at depth {depth} is above the bound of {bound:.0f} tok/s "
                    "(every one of n = {n} drafts accepted, {tokens} tokens per step, weights and KV read at peak "
                    "bandwidth: {limit:.1f} tok/s without drafting)")
        elif need <= 1:
            msg = _("unlikely, not impossible: the best candidate is predicted at {pred:.0f} tok/s at depth {depth}, "
                    "below {target:g}; the bound is {bound:.0f} tok/s (every one of n = {n} drafts accepted, "
                    "{tokens} tokens per step, weights and KV read at peak bandwidth: {limit:.1f} tok/s without "
                    "drafting). Reaching {target:g} takes llama-server's draft acceptance (draft_n_accepted / "
                    "draft_n) of about {need:.2f} (predicted with {ratio:.2f}; --acceptance sets it)")
        else:
            msg = _("unlikely, not impossible: the best candidate is predicted at {pred:.0f} tok/s at depth {depth}, "
                    "below {target:g}, even with every draft accepted; the bound is {bound:.0f} tok/s (n = {n}, "
                    "{tokens} tokens per step, weights and KV read at peak bandwidth: {limit:.1f} tok/s without "
                    "drafting), so only a higher efficiency than calibrated would reach it")
        return bound, msg.format(target=t.decode_tok_s, depth=t.depth, bound=bound, n=sp.n_max, tokens=sp.n_max + 1,
                                 limit=ds.limit_tok_s, pred=top.decode_at_target, need=need, ratio=sp.ratio)
    bound = ds.limit_tok_s
    if bound < t.decode_tok_s:
        msg = _("impossible: decode {target:g} tok/s at depth {depth} is above the bound of {bound:.1f} tok/s "
                "({gb:.2f} GB read per token at peak bandwidth)")
    else:
        msg = _("unlikely, not impossible: the best candidate is predicted at {pred:.0f} tok/s at depth {depth}, "
                "below {target:g}; the bound is {bound:.1f} tok/s ({gb:.2f} GB read per token at peak bandwidth)")
    return bound, msg.format(target=t.decode_tok_s, depth=t.depth, bound=bound, gb=ds.bytes_per_token / GB,
                             pred=top.decode_at_target)


def _rank_key(c: PlannedOption, t: Targets) -> tuple[float, ...]:
    """Fitting first, then meeting the decode target, then KV quality (when the target is met),
    then speed; --agent weights prefill (long prompts) before KV quality. Speed is the low end of
    the decode (:attr:`PlannedOption.decode_low`): a figure that rests on an unmeasured rate
    (quantized K/V read as fast per byte as f16 on a GPU with no evidence for it) counts at what
    it would be if the rate is as measured elsewhere, so the assumption alone lifts no candidate
    above a measured one; the table shows both ends and the assumption beside the ranking."""
    q = -(KV_QUALITY.get(c.cfg.cache_type_k, 3) + KV_QUALITY.get(c.cfg.cache_type_v, 3))
    pf = c.speed.prefill.tok_s
    if not c.fits:
        return (2, -(c.min_free or 0), -c.decode_at_target)
    low = c.decode_low
    if not c.meets_decode:
        return (1, -round(low, 1), -q, -pf)
    maybe = c.verdict.word == "maybe"  # a target met whatever the assumptions comes first
    if t.agent:
        return (0, maybe, -round(pf, -2), -q, -low)
    return (0, maybe, -q, -round(low, 0), -pf)


def _explain(inp: PlanInputs, t: Targets, cands: Sequence[PlannedOption], cal: Calibration,
             host_bw: float | None) -> list[str]:
    out: list[str] = []
    spec = inp.spec
    best = cands[0] if cands else None
    if best is not None and best.meets_all:
        return out
    fitting = [c for c in cands if c.fits]
    if not fitting:
        smallest = min(cands, key=lambda c: sum(d.total for d in c.plan.devices), default=None)
        if smallest is not None:
            short = [_("{device} ({label}) needs {used} of {capacity}").format(
                         device=d.name, label=d.label, used=fmt_bytes(d.total), capacity=fmt_bytes(d.capacity or 0))
                     for d in smallest.plan.devices if d.free is not None and d.free < t.headroom]
            kv = smallest.plan.kv_bytes_per_token
            out.append(
                _("context {ctx} x {slots} slot(s) does not fit with {headroom} headroom even with K {k}/V {v} "
                  "({kv} B per token = {kv_total} of KV): ").format(
                    ctx=t.ctx, slots=t.slots, headroom=fmt_bytes(t.headroom), k=smallest.cfg.cache_type_k,
                    v=smallest.cfg.cache_type_v, kv=kv, kv_total=fmt_bytes(kv * t.ctx * t.slots))
                + _("; ").join(short or smallest.plan.shortfalls()))
            if inp.hardware.ram_bytes is not None:
                out.append(_("keeping layers or experts in host RAM (-ngl / --n-cpu-moe) does not fit either: host "
                             "RAM is {size} (--ram)").format(size=fmt_bytes(inp.hardware.ram_bytes)))
        return out
    if t.decode_tok_s is None:
        return out
    top = max(fitting, key=lambda c: c.decode_at_target)
    rep = top.speed
    wbytes = sum(x.weights_read for x in rep.devices)
    bytes_tok = rep.at_depth(t.depth).bytes_per_token
    need_tbs = bytes_tok * t.decode_tok_s / 1e12
    gpus = [x for x in rep.devices if x.backend != "CPU"]
    dev_desc = ", ".join(f"{x.label} {x.bandwidth_gbs:g} GB/s" for x in gpus)
    host = [x for x in rep.devices if x.backend == "CPU" and x.weights_read]
    if host:
        dev_desc = (dev_desc + ", " if dev_desc else "") + _(
            "host RAM {bw:g} GB/s for the {gb:.2f} GB kept there").format(bw=host[0].bandwidth_gbs,
                                                                          gb=host[0].weights_read / GB)
    out.append(
        _("decode {rate:g} tok/s at depth {depth} needs >= {tbs:.2f} TB/s for {gb:.2f} GB read per token ({wgb:.2f} "
          "GB of active weights); {devices}: the limit is {limit:.0f} tok/s, predicted {pred:.0f} tok/s (calibrated "
          "efficiency)").format(rate=t.decode_tok_s, depth=t.depth, tbs=need_tbs, gb=bytes_tok / GB, wgb=wbytes / GB,
                                devices=dev_desc, limit=rep.at_depth(t.depth).limit_tok_s,
                                pred=rep.at_depth(t.depth).decode_tok_s))
    if rep.speculative is not None:
        s = rep.speculative
        out.append(_("with MTP (a={a:.2f}, i.e. llama-server's draft acceptance {ratio:.2f}, n={n}) the best "
                     "candidate reaches about {rate:.0f} tok/s ({tps:.2f} tokens per step)").format(
            a=s.acceptance, ratio=s.ratio, n=s.n_max, rate=top.decode_at_target, tps=s.tokens_per_step))
    else:
        # what an MTP head or a draft model could do: a = 0.6, n = 3, a draft pass reading the
        # output head and one layer
        a, n = 0.6, 3
        base_t = 1 / rep.at_depth(t.depth).decode_tok_s
        gpu = gpus[0] if gpus else rep.devices[0]
        bw = gpu.bandwidth_gbs * GB * gpu.eff.weights
        n_main = max(1, spec.n_layer_main)
        head = mtp_draft_bytes(spec) if spec.nextn_layers else (
            sum(x.n_bytes for x in spec.tensors if x.name == "output.weight") or token_embd_bytes(spec))
        draft_s = (head + wbytes / n_main) / bw + 0.5 * gpu.eff.overhead_ms / 1000
        step = base_t * (1 + gpu.eff.verify_per_token * n) + n * draft_s
        est = tokens_per_step(a, n) / step
        out.append(_("this model has no MTP layers and no draft was given; an MTP release or draft model with "
                     "acceptance a={a} and n={n} could reach about {rate:.0f} tok/s ((1 - a^(n+1))/(1 - a) = {tps:.2f} "
                     "tokens per step)").format(a=a, n=n, rate=est, tps=tokens_per_step(a, n)))
    return out
