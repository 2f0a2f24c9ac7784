"""Honest verdicts on a plan, from its public figures (:class:`~llamarig.plan.result.Plan`,
:class:`~llamarig.plan.speed.speed_model.SpeedReport`):

- a target met only under an unmeasured assumption is "maybe", the assumption named with what
  the figure would be if it fails as measured elsewhere (quantized K/V read as fast per byte
  as f16: on the H200 of benchmarks/evidence q8_0 read 9.4x and q4_0 21x slower,
  data/speed_calibration.json ``h200.kv_by_type``);
- a headline decode with speculative decoding says so, with the acceptance it assumes, and its
  physical limit is recomputed for it (the same tokens per step at peak bandwidth), so the
  figure never stands above its own limit;
- "fits" is qualified when layers live in host RAM (``--fit`` moved them, or ``-ngl``) or host
  RAM holds part of the model and was not checked.

The views (plan's headline, the optimiser's table, render's comments) print these values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llamarig.i18n import _
from llamarig.plan.calibration.constants import Calibration, Efficiency, builtin
from llamarig.plan.result import Plan
from llamarig.plan.speed.speed_model import (
    KV_MEASURED_TYPES,
    DeviceLoad,
    SpeedReport,
    decode_seconds,
)
from llamarig.units import fmt_bytes

#: the GPU whose quantized K/V read speed was measured (benchmarks/evidence/h200-qwen3.8-27b-a.json)
EVIDENCE_GPU = "h200"


@dataclass(frozen=True)
class Assumption:
    """What a figure rests on that was not measured. ``code``: a stable id; ``message``: the
    assumption named (a catalogue message); ``decode_if_wrong``: the decode (tok/s, at the depth
    judged) if it fails as measured elsewhere, None when nothing says by how much."""

    code: str
    message: str
    decode_if_wrong: float | None = None


@dataclass(frozen=True)
class TargetVerdict:
    """A candidate against its targets: ``yes`` (met, whatever the assumptions), ``maybe`` (met
    only if ``assumptions`` hold), ``slow`` (fits, below the decode target), ``no fit``."""

    word: str
    assumptions: tuple[Assumption, ...] = ()


def _measured_types(eff: Efficiency) -> set[str]:
    """The K/V types whose read speed was measured on the device this efficiency is for (an
    entry copied from another GPU, marked "assumed", measured none)."""
    if eff.source.startswith("assumed"):
        return set()
    return {t for t, _e in eff.kv_by_type}


def _evidence_ratio(type_k: str, type_v: str) -> tuple[float, Efficiency] | None:
    """How much slower per byte these K/V types read than f16 on the evidence GPU (``kv_for``
    of its measured types over its f16 ``kv``), and its efficiency; None without evidence."""
    ref = builtin().gpus.get(EVIDENCE_GPU)
    if ref is None or not ref.kv_by_type or ref.kv <= 0:
        return None
    return ref.kv_for(type_k, type_v) / ref.kv, ref


def kv_read_assumption(speed: SpeedReport, type_k: str, type_v: str, depth: int, *, swa_window: int | None,
                       split_mode: str, cal: Calibration) -> Assumption | None:
    """The assumption a decode figure at ``depth`` rests on when a GPU reads quantized K/V whose
    speed was not measured on it: that they read as fast per byte as f16 (speed.py uses the f16
    efficiency for them). None when nothing quantized is read at depth, or it was measured."""
    quant = [t for t in (type_k, type_v) if t not in KV_MEASURED_TYPES]
    if not quant or depth <= 0:
        return None
    reading = [x for x in speed.devices if x.backend != "CPU" and not x.kv_on_cpu and (x.kv_per_depth or x.swa_per_cell)]
    unmeasured = [x for x in reading if not set(quant) <= _measured_types(x.eff)]
    if not unmeasured:
        return None
    names = ", ".join(x.label for x in unmeasured)
    ev = _evidence_ratio(type_k, type_v)
    if ev is None:
        return Assumption("kv-quant-read", _("K {k} / V {v} read as fast per byte as f16 on {gpus} (not measured)").format(
            k=type_k, v=type_v, gpus=names))
    ratio, _ref = ev
    slow: list[DeviceLoad] = [replace(x, eff=replace(x.eff, kv=x.eff.kv * ratio)) if x in unmeasured else x
                              for x in speed.devices]
    t_slow = decode_seconds(slow, depth, swa_window, cal, split_mode)
    spec = speed.speculative.speedup if speed.speculative is not None else 1.0
    wrong = spec / t_slow if t_slow > 0 else 0.0
    return Assumption("kv-quant-read", _(
        "K {k} / V {v} read as fast per byte as f16 on {gpus} (not measured there; on an H200 they read {x:.1f}x "
        "slower per byte, benchmarks/evidence: then {rate:.0f} tok/s at depth {depth})").format(
        k=type_k, v=type_v, gpus=names, x=1 / ratio, rate=wrong, depth=depth), wrong)


def target_verdict(speed: SpeedReport, type_k: str, type_v: str, *, fits: bool, decode: float,
                   target: float | None, depth: int, swa_window: int | None, split_mode: str,
                   cal: Calibration) -> TargetVerdict:
    """A candidate's verdict: ``decode`` is its modelled decode at ``depth`` (speculative
    decoding included), ``target`` the decode target (None: none)."""
    if not fits:
        return TargetVerdict("no fit")
    if target is not None and decode < target:
        return TargetVerdict("slow")
    if target is None:
        return TargetVerdict("yes")
    a = kv_read_assumption(speed, type_k, type_v, depth, swa_window=swa_window, split_mode=split_mode, cal=cal)
    if a is not None and (a.decode_if_wrong is None or a.decode_if_wrong < target):
        return TargetVerdict("maybe", (a,))
    return TargetVerdict("yes")


# ============================================================================ the decode headline


@dataclass(frozen=True)
class DecodeHeadline:
    """The decode figures a headline shows, and the limit they stand under. With speculative
    decoding (``n_max`` set) the figures include it, ``limit`` is the same tokens per step at
    peak bandwidth (drafting free), and ``base``/``base_limit`` are without it."""

    d0: float
    deep: float
    depth: int
    limit: float
    base: float
    base_limit: float
    n_max: int | None = None
    tokens_per_step: float | None = None
    acceptance: float | None = None
    acceptance_given: bool = False  # the acceptance was given (measured), not the family default
    kind: str = ""

    def lines(self, prefill_tok_s: float) -> list[str]:
        """The headline's decode line(s) (catalogue messages)."""
        if self.n_max is None:
            return [_("decode {d0:.1f} tok/s at depth 0, {dn:.1f} at depth {depth} (modelled; physical limit "
                      "{limit:.0f}); prefill {pp:.0f} tok/s").format(d0=self.d0, dn=self.deep, depth=self.depth,
                                                                      limit=self.limit, pp=prefill_tok_s)]
        how = (_("acceptance {a:.2f} given") if self.acceptance_given else
               _("acceptance {a:.2f} assumed: the family default, not measured; --acceptance sets it"))
        return [
            _("decode {d0:.1f} tok/s at depth 0, {dn:.1f} at depth {depth} with {kind} speculative decoding (modelled; "
              "physical limit {limit:.0f} at {tps:.2f} tokens per step); prefill {pp:.0f} tok/s").format(
                d0=self.d0, dn=self.deep, depth=self.depth, kind=self.kind, limit=self.limit,
                tps=self.tokens_per_step or 1.0, pp=prefill_tok_s),
            _("{kind}: n {n}, {how}; without it decode {base:.1f} tok/s at depth 0 (physical limit {limit:.0f})").format(
                kind=self.kind, n=self.n_max, how=how.format(a=self.acceptance or 0.0), base=self.base,
                limit=self.base_limit),
        ]


def decode_headline(speed: SpeedReport) -> DecodeHeadline:
    """The headline decode of a speed report, speculative decoding named and under its limit."""
    first, deep = speed.by_depth[0], speed.by_depth[-1]
    sp = speed.speculative
    if sp is None:
        return DecodeHeadline(first.decode_tok_s, deep.decode_tok_s, deep.depth, speed.decode_limit_tok_s,
                              first.decode_tok_s, speed.decode_limit_tok_s)
    # the modelled step reads the weights once per verified batch at calibrated efficiency, plus
    # drafting: tokens per step / (weights at peak) bounds it at the same acceptance
    return DecodeHeadline(first.decode_tok_s * sp.speedup, deep.decode_tok_s * sp.speedup, deep.depth,
                          speed.decode_limit_tok_s * sp.tokens_per_step, first.decode_tok_s,
                          speed.decode_limit_tok_s, sp.n_max, sp.tokens_per_step, sp.ratio,
                          sp.acceptance_source.startswith("given"), sp.kind.upper())


# ============================================================================ "fits", qualified


@dataclass(frozen=True)
class FitQualifier:
    """What a "fits" rests on beyond the GPUs: layers in host RAM (``host_layers`` of
    ``n_layers``; ``by_fit``: --fit moved them) and host RAM the plan needs at start but did not
    check (``unchecked_bytes``: only when host RAM holds part of the model)."""

    host_layers: int = 0
    n_layers: int = 0
    by_fit: bool = False
    unchecked_bytes: int | None = None

    @property
    def qualified(self) -> bool:
        return bool(self.host_layers) or self.unchecked_bytes is not None

    def verdict(self, fits: bool) -> str:
        """The verdict word(s) of the headline."""
        if not fits:
            return _("does not fit")
        if self.unchecked_bytes is not None:
            return _("may not fit (host RAM not checked)")
        if self.host_layers:
            return _("fits, with {n} of {m} layers in host RAM").format(n=self.host_layers, m=self.n_layers)
        return _("fits")

    def lines(self, decode_tok_s: float | None) -> list[str]:
        """Why the verdict is qualified, one line each (catalogue messages)."""
        out = []
        if self.host_layers:
            how = _("--fit moved them") if self.by_fit else _("-ngl keeps them there")
            speed = (_("; decode {rate:.1f} tok/s").format(rate=decode_tok_s) if decode_tok_s is not None else "")
            out.append(_("{n} of {m} layers run from host RAM ({how}){speed}").format(
                n=self.host_layers, m=self.n_layers, how=how, speed=speed))
        if self.unchecked_bytes is not None:
            out.append(_("host RAM must hold {size} at start, not checked: give --ram or --detect").format(
                size=fmt_bytes(self.unchecked_bytes)))
        return out


def _fit_placement(plan: Plan, n_layers: int) -> int | None:
    """The layers --fit placed on the devices (its -ngl, the output layer counted), as the plan's
    JSON and its --fit note have them; None when fit placed none. The speed model counts an
    rpc-server's CPU device with the host's (both run on the CPU backend), so the layer count
    on the devices is read here from fit's placement (plan.fit), not from the speed devices."""
    eff = plan.effective_cfg
    ngl = getattr(eff, "n_gpu_layers", -1)
    if eff is None or ngl < 0 or n_layers <= 0:
        return None
    return min(ngl, n_layers)


def fit_qualifier(plan: Plan) -> FitQualifier:
    """How "fits" must be qualified for this plan (no GPU: nothing to qualify, the host is the
    device). Layers are counted where the speed model (on the planner's placement) puts them."""
    if not plan.devices:
        return FitQualifier()
    loads = plan.speed.devices if isinstance(plan.speed, SpeedReport) else ()
    host_layers = sum(x.n_layers for x in loads if x.backend == "CPU")
    gpu_layers = sum(x.n_layers for x in loads if x.backend != "CPU")
    # -ngl counts the output layer as one more, offloaded first (src/llama-model.cpp:1558-1610)
    n_layers = host_layers + gpu_layers + 1 if loads else 0
    host_layers += 1 if loads and host_layers and not gpu_layers else 0
    placed = _fit_placement(plan, n_layers)
    if placed is not None:  # --fit chose the layers per device: the plan's placement, not the speed model's
        host_layers = n_layers - placed
    host_weights = sum(x.weights_read for x in loads if x.backend == "CPU")
    # without speed figures (a GPU of unknown bandwidth) the count is unknown: --fit having set
    # -ngl still says the host holds layers
    fit_ngl = getattr(plan.effective_cfg, "n_gpu_layers", -1) if not loads else -1
    holds_model = bool(host_layers or host_weights or fit_ngl >= 0) or plan.host.get("kv") > 0
    unchecked = plan.host.start_total if plan.host.capacity is None and holds_model else None
    by_fit = plan.effective_cfg is not None and bool(host_layers)
    return FitQualifier(host_layers, n_layers, by_fit, unchecked)
