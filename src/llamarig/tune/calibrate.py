"""Turn a measured decode speed into a calibration file for the speed model
(llamarig.plan.calibration.constants, format in its module docstring).

Method: the speed model predicts decode time per token as bytes read / (bandwidth x
``weights`` efficiency) + ``overhead_ms`` (llamarig.plan.speed.speed_model.decode_seconds). On the CPU the
bandwidth is the host's: the caller measures it (llamarig.plan.calibration.constants.measure_host_bandwidth,
a numpy copy) and the file records it as ``host_bandwidth_gbs``, so that the efficiency below is
relative to this machine's bandwidth, not to the built-in 40 GB/s default. On a GPU it is the
catalogue figure of the card. We then solve, by bisection, for the ``weights`` efficiency of the
first device's backend at which the predicted decode speed of the tuned configuration, at the
measured depth (prompt tokens), equals the measured one. When even an efficiency of 1.5
predicts slower than measured, or 0.01 faster (a tiny model: the fixed overhead dominates), the
efficiency is clamped; on the CPU, when the measured speed is faster than the copy bandwidth
allows even at 1.5, the bandwidth is solved instead (an effective figure: a one-thread copy
understates what several threads reach); then, if still off by more than 2 %, ``overhead_ms``
is solved. On the CPU, when the measured prefill is given, ``host_gflops`` is solved first (the
host's effective matmul rate, at the threads of the run, recorded as ``host_threads``) so that
the model predicts the measured prefill of the tuned prompt; the decode fit then includes the
host's decode attention at that rate. On the CPU, decodes measured deeper in the context (tune's
depth ladder) set the host's decode attention: ``attn_decode`` from the first, and the average
efficiency at each further depth (``attn_decode_depths``), so that every measured decode is given
back; the prefills measured on the way up the ladder set the host's prefill attention
``attn_prefill``."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamarig.plan.calibration.constants import Calibration, builtin
from llamarig.plan.speed.speed_model import device_loads, speed_report

if TYPE_CHECKING:
    from llamarig.gguf.spec import ModelSpec
    from llamarig.hardware.types import Hardware
    from llamarig.plan.config import ServerConfig


def _predict(spec: ModelSpec, cfg: ServerConfig, hw: Hardware, cal: Calibration, depth: int) -> float:
    return speed_report(spec, cfg, hw, cal=cal, depths=[depth]).by_depth[0].decode_tok_s


def _with(cal: Calibration, backend: str, **changes: Any) -> Calibration:
    """``cal`` with the efficiency of ``backend`` changed in the fields given (those not None)."""
    eff = cal.for_device(backend)
    eff = replace(eff, **{k: v for k, v in changes.items() if v is not None})
    return replace(cal, backends={**cal.backends, backend: eff})


#: tune's deep decode measurements on the CPU (a depth ladder, llamarig.tune.measure.DepthLadder):
#: the deepest prompt is as long as the host prefills in about CALIBRATION_DEEP_SECONDS (at the
#: first measurement's prefill speed; CALIBRATION_DEEP_MIN when that is unknown), at most
#: CALIBRATION_DEEP_MAX tokens, and never longer than the slot holds; the ladder has
#: CALIBRATION_LADDER_RUNGS rungs evenly spaced up to it (none shallower than twice the first
#: measurement's depth), CALIBRATION_DEEP_RUNS requests at each. One server start: each rung's
#: prompt extends the previous one (the prompt cache prefills only the new tokens), so the whole
#: ladder prefills about as much as its deepest prompt once. A host too slow to prefill twice the
#: first depth in that time gets no deep measurement (tune stays bounded; the calibration is then
#: the one-depth fit). Deep, because the plan's decode table runs to the whole context; several
#: depths, because the host's attention cost per cell can grow with depth, so that a line through
#: two depths misses the middle by up to 20 % (benchmarks/RESULTS.md, "CPU speed model").
CALIBRATION_DEEP_SECONDS = 20.0
CALIBRATION_DEEP_MIN = 2048
CALIBRATION_DEEP_MAX = 32768
CALIBRATION_DEEP_RUNS = 3
CALIBRATION_LADDER_RUNGS = 4


def calibration_deep_depth(n_ctx_slot: int, depth: int, n_predict: int, prefill_tok_s: float | None = None) -> int | None:
    """The prompt length of the deepest decode measurement (the constants above); None when it is
    not at least twice the first measurement's ``depth`` (two depths that close cannot separate
    the attention's cost per KV cell from the rest)."""
    target = CALIBRATION_DEEP_MIN
    if prefill_tok_s:
        target = int(min(CALIBRATION_DEEP_MAX, prefill_tok_s * CALIBRATION_DEEP_SECONDS))
    d = min(target, n_ctx_slot - n_predict - 1)
    return d if d >= max(2 * depth, 64) else None


def calibration_ladder(n_ctx_slot: int, depth: int, n_predict: int, prefill_tok_s: float | None = None) -> list[int]:
    """The prompt lengths of the deep decode measurements, ascending: CALIBRATION_LADDER_RUNGS
    evenly spaced up to calibration_deep_depth, those shallower than twice ``depth`` left out
    (empty: no deep measurement)."""
    deepest = calibration_deep_depth(n_ctx_slot, depth, n_predict, prefill_tok_s)
    if deepest is None:
        return []
    n = CALIBRATION_LADDER_RUNGS
    return sorted({r for r in (deepest * k // n for k in range(1, n + 1)) if r >= max(2 * depth, 64)})


#: the range attn_decode is solved in (calibration.py accepts efficiencies up to 1.5)
ATTN_DECODE_RANGE = (1e-4, 1.5)


@dataclass(frozen=True)
class _DecodeFit:
    """The decode fit of one measurement, and the deeper decodes that solve the host's attention."""

    spec: ModelSpec
    cfg: ServerConfig
    hw: Hardware
    backend: str
    measured_tok_s: float
    depth: int
    host_bandwidth_gbs: float | None
    rungs: tuple[tuple[int, float], ...]

    def fit(self, cal: Calibration) -> tuple[_Fit, str]:
        """The decode fit at ``depth``, with ``attn_decode`` (and its depths) solved from the rungs."""
        cal = _with(cal, self.backend, attn_decode_depths=())
        if not self.rungs:
            return self._decode(cal), ""
        d1, v1 = self.rungs[0]
        a = _solve(lambda x: self._first(cal, x, d1)[1], v1, *ATTN_DECODE_RANGE)
        fit, p1 = self._first(cal, a, d1)
        fit.fields["attn_decode"] = round(a, 6)
        got = [(d1, v1, p1)]
        knots: list[tuple[int, float]] = [(d1, round(a, 6))]
        for d, v in self.rungs[1:]:
            knots.append(self._knot(fit.cal, knots, d, v))
            got.append((d, v, self._at(fit.cal, knots[:-1], d, knots[-1][1])))
        if len(knots) > 1:
            fit.cal = _with(fit.cal, self.backend, attn_decode_depths=tuple(knots))
            fit.fields["attn_decode_depths"] = [list(k) for k in knots]
        shown = ", ".join(f"{v:.2f} tok/s at depth {d} (the plan gives {p:.2f})" for d, v, p in got)
        what = "a second measured decode" if len(got) == 1 else f"{len(got)} measured decodes deeper in the context"
        return fit, f"; attn_decode solved from {what}: {shown}"

    def _decode(self, cal: Calibration) -> _Fit:
        return _fit_decode(self.spec, self.cfg, self.hw, cal, self.backend, self.measured_tok_s, self.depth,
                           self.host_bandwidth_gbs)

    def _first(self, cal: Calibration, a: float, d1: int) -> tuple[_Fit, float]:
        f = self._decode(_with(cal, self.backend, attn_decode=a))
        return f, _predict(self.spec, self.cfg, self.hw, f.cal, d1)

    def _at(self, cal: Calibration, knots: list[tuple[int, float]], d: int, e: float) -> float:
        return _predict(self.spec, self.cfg, self.hw, _with(cal, self.backend, attn_decode_depths=(*knots, (d, e))), d)

    def _knot(self, cal: Calibration, knots: list[tuple[int, float]], d: int, v: float) -> tuple[int, float]:
        """The attention's average efficiency at depth ``d``: it never falls with depth, so at most
        flat from the last point."""
        pd, pe = knots[-1]
        hi = min(ATTN_DECODE_RANGE[1], pe * d / pd)
        e = round(_solve(lambda x: self._at(cal, knots, d, x), v, ATTN_DECODE_RANGE[0], hi), 6)
        return d, min(e, hi)


def _document(fit: _Fit, backend: str, cfg: ServerConfig, measured_tok_s: float, depth: int, attn_note: str,
              prefill: tuple[float, int] | None, prefill_note: str, host_threads: int | None) -> dict[str, Any]:
    """The calibration file's JSON for a fit (``prefill``: the measured (tok/s, prompt tokens))."""
    fields, cal, p = fit.fields, fit.cal, fit.predicted
    src = f"llamarig tune: measured decode {measured_tok_s:.2f} tok/s at depth {depth}{attn_note}"
    if prefill_note:
        fields["attn_prefill"] = round(cal.for_device(backend).attn_prefill, 6)
    data: dict[str, Any] = {"version": 1, "efficiency": [{"backend": backend, **fields, "source": src}]}
    if fit.host_bandwidth_gbs:
        data["host_bandwidth_gbs"] = round(float(fit.host_bandwidth_gbs), 3)
        data["_host"] = fit.bw_note or "host_bandwidth_gbs: measured by llamarig tune (numpy copy, one thread, best of 3)"
    if prefill is not None:
        data["host_gflops"] = round(cal.host_gflops, 3)
        data["_prefill"] = (f"host_gflops: solved so that the speed model predicts the measured prefill "
                            f"{prefill[0]:.1f} tok/s of a {prefill[1]}-token prompt at -ub {cfg.n_ubatch} "
                            f"(an effective matmul rate of llama.cpp on this host, these threads and weight types)"
                            f"{prefill_note}")
    threads = host_threads or (cfg.threads_batch if cfg.threads_batch > 0 else cfg.threads if cfg.threads > 0 else None)
    if backend == "CPU" and threads:
        data["host_threads"] = int(threads)
    data["_method"] = (__doc__ or "").split("\n\n", 1)[1].replace("\n", " ").strip()
    if abs(p - measured_tok_s) > 0.02 * measured_tok_s:
        data["_note"] = (f"the speed model cannot reproduce {measured_tok_s:.1f} tok/s with a plausible efficiency "
                         f"(best {p:.1f}): the bandwidth figure of the device is probably wrong")
    return data


def fit_calibration(spec: ModelSpec, cfg: ServerConfig, hw: Hardware, measured_tok_s: float, base: Calibration | None = None,
                    *, host_bandwidth_gbs: float | None = None, depth: int = 0, prefill_tok_s: float | None = None,
                    prompt_tokens: int | None = None, host_threads: int | None = None,
                    deep: Sequence[tuple[int, float]] = (),
                    deep_prefill: Sequence[tuple[int, int, float]] = ()) -> tuple[dict[str, Any], float]:
    """(calibration JSON, predicted tok/s with it at ``depth``). ``base`` defaults to the built-in
    constants (never an earlier tune's file: a refit starts from the same point).
    ``host_bandwidth_gbs``: the measured host bandwidth, recorded in the file.
    ``prefill_tok_s`` at ``prompt_tokens`` (CPU only): the measured prefill, from which
    ``host_gflops`` is solved (fit_host_gflops); ``host_threads``: the threads llama-server ran
    batches on (recorded as ``host_threads``: plan scales the host's compute by its own -tb / this).
    ``deep`` (CPU only): decodes measured deeper than ``depth``, (depth, tok/s) ascending: from
    the first the host's decode attention ``attn_decode`` is solved (the decode fit at ``depth`` is
    redone for each trial value, so both measurements are reproduced), from each further one the
    attention's average efficiency at its depth (``attn_decode_depths``: the attention's time
    through every measured depth, Efficiency.attn_cells). ``deep_prefill`` (CPU only, with
    ``prefill_tok_s``): prefills measured deeper in the context, (cached tokens, new tokens, tok/s)
    (the ladder's rungs extending each other): the host's prefill attention ``attn_prefill`` is
    solved from them (the median of each one's value), alternating with ``host_gflops`` until both
    settle, so that the plan gives back the prompt's prefill and, in the median, the deeper ones."""
    cal = base or builtin()
    if host_bandwidth_gbs:
        cal = replace(cal, host_bandwidth_gbs=float(host_bandwidth_gbs))
    loads = device_loads(spec, cfg, hw, cal)
    backend = loads[0].backend if loads else "CPU"
    prefill = (prefill_tok_s, prompt_tokens) if backend == "CPU" and prefill_tok_s and prompt_tokens else None
    prefill_note = ""
    if prefill is not None:
        # the host's compute first: decode at depth includes the host's attention, which runs at it
        cal, prefill_note = _fit_prefill(spec, cfg, hw, cal, prefill[0], prefill[1], deep_prefill)
    rungs = tuple((int(d), float(v)) for d, v in deep if d > depth and v > 0) if backend == "CPU" else ()
    decode = _DecodeFit(spec, cfg, hw, backend, measured_tok_s, depth, host_bandwidth_gbs, rungs)
    fit, attn_note = decode.fit(cal)
    if prefill is not None:
        # the host's compute again with the fitted decode figures (prefill reads the weights once
        # per micro-batch at them), then the decode fit once more at that compute rate (the host's
        # decode attention runs at it)
        # (only the prefill figures are taken from the refit: the decode fit starts again from the
        # calibration it started from the first time)
        c2, prefill_note = _fit_prefill(spec, cfg, hw, fit.cal, prefill[0], prefill[1], deep_prefill)
        cal = _with(replace(cal, host_gflops=c2.host_gflops), backend, attn_prefill=c2.for_device(backend).attn_prefill)
        fit, attn_note = decode.fit(cal)
    return _document(fit, backend, cfg, measured_tok_s, depth, attn_note, prefill, prefill_note, host_threads), \
        fit.predicted


def _solve(pred: Callable[[float], float], target: float, lo: float, hi: float, steps: int = 40) -> float:
    """The value in [lo, hi] at which ``pred`` (tok/s, rising with it) gives ``target``
    (bisection on a log scale; clamped to the range's end when it cannot)."""
    if pred(hi) < target:  # slower than measured even at the fastest
        return hi
    if pred(lo) > target:
        return lo
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        if pred(mid) < target:
            lo = mid
        else:
            hi = mid
    return float((lo * hi) ** 0.5)


@dataclass
class _Fit:
    fields: dict[str, Any]  # the efficiency fields solved (weights, maybe overhead_ms, attn_decode...)
    cal: Calibration  # the calibration with them (and a solved host bandwidth)
    predicted: float  # tok/s at the fitted depth
    host_bandwidth_gbs: float | None
    bw_note: str


def _fit_decode(spec: ModelSpec, cfg: ServerConfig, hw: Hardware, cal: Calibration, backend: str,
                measured_tok_s: float, depth: int, host_bandwidth_gbs: float | None) -> _Fit:
    """Solve ``weights`` (then the host bandwidth, then ``overhead_ms``) so that the plan gives
    ``measured_tok_s`` at ``depth`` (the module docstring's method)."""
    lo, hi = 0.01, 1.5

    def pred(*, weights: float | None = None, overhead_ms: float | None = None) -> float:
        return _predict(spec, cfg, hw, _with(cal, backend, weights=weights, overhead_ms=overhead_ms), depth)

    fields: dict[str, float] = {}
    if pred(weights=hi) < measured_tok_s:
        e = hi
    elif pred(weights=lo) > measured_tok_s:
        e = lo
    else:
        for _ in range(40):
            mid = (lo + hi) / 2
            if pred(weights=mid) < measured_tok_s:
                lo = mid
            else:
                hi = mid
        e = (lo + hi) / 2
    fields["weights"] = round(e, 6)
    p = pred(weights=e)
    # the fitted figures reproduce the measurement to 0.5 %: a plan with this file must give back
    # what was measured (tests/tune/test_tune_server.py holds it to 2 %)
    if host_bandwidth_gbs and backend == "CPU" and p < 0.995 * measured_tok_s:
        # faster than the measured copy bandwidth allows even at efficiency 1.5: the one-thread
        # numpy copy understates what llama.cpp's threads reach; solve the bandwidth instead
        blo, bhi = float(host_bandwidth_gbs), 10000.0
        for _ in range(60):
            mid = (blo * bhi) ** 0.5
            c = replace(_with(cal, backend, weights=e), host_bandwidth_gbs=mid)
            if _predict(spec, cfg, hw, c, depth) < measured_tok_s:
                blo = mid
            else:
                bhi = mid
        host_bandwidth_gbs = bhi
        bw_note = (f"the measured copy bandwidth {cal.host_bandwidth_gbs:.1f} GB/s cannot explain the measured decode "
                   f"speed at efficiency {e:g}: host_bandwidth_gbs is the effective figure solved from it")
        cal = replace(cal, host_bandwidth_gbs=bhi)
        p = pred(weights=e)
    else:
        bw_note = ""
    if abs(p - measured_tok_s) > 0.005 * measured_tok_s:
        # solve overhead_ms: 1/measured = 1/pred - old_overhead + new_overhead
        old = cal.for_device(backend).overhead_ms / 1000
        new = max(0.0, 1 / measured_tok_s - (1 / p - old))
        fields["overhead_ms"] = round(new * 1000, 6)
    cal = _with(cal, backend, **fields)
    return _Fit(fields, cal, _predict(spec, cfg, hw, cal, depth), host_bandwidth_gbs, bw_note)


def _fit_prefill(spec: ModelSpec, cfg: ServerConfig, hw: Hardware, cal: Calibration, prefill_tok_s: float,
                 prompt_tokens: int, deep_prefill: Sequence[tuple[int, int, float]]) -> tuple[Calibration, str]:
    """``cal`` with ``host_gflops`` solved from the prompt's prefill and, given deeper prefills,
    the CPU's ``attn_prefill`` from them (fit_calibration's docstring); and a note saying so."""
    cal = replace(cal, host_threads=None, host_gflops=fit_host_gflops(spec, cfg, hw, cal, prefill_tok_s, prompt_tokens))
    deep = [(int(s), int(n), float(v)) for s, n, v in deep_prefill if n > 0 and v > 0]
    if not deep:
        return cal, ""
    for _ in range(4):
        vals = []
        for start, n, v in deep:
            def pf(a: float, start: int = start, n: int = n, c: Calibration = cal) -> float:
                return speed_report(spec, cfg, hw, cal=_with(c, "CPU", attn_prefill=a), prompt_tokens=n,
                                    prompt_start=start, depths=[0]).prefill.tok_s
            vals.append(_solve(pf, v, *ATTN_PREFILL_RANGE))
        cal = _with(cal, "CPU", attn_prefill=statistics.median(vals))
        cal = replace(cal, host_gflops=fit_host_gflops(spec, cfg, hw, cal, prefill_tok_s, prompt_tokens))
    shown = ", ".join(f"{v:.1f} tok/s for {n} tokens after {start}" for start, n, v in deep)
    return cal, f"; attn_prefill solved from prefills deeper in the context: {shown}"


#: the range attn_prefill is solved in
ATTN_PREFILL_RANGE = (0.01, 1.5)


def fit_host_gflops(spec: ModelSpec, cfg: ServerConfig, hw: Hardware, cal: Calibration, measured_tok_s: float,
                    prompt_tokens: int) -> float:
    """The ``host_gflops`` at which the speed model's prefill of ``prompt_tokens`` equals the
    measured one (bisection on a log scale, 0.1-1e6 GFLOPS; prefill time falls monotonically with
    it). Threads: the figure is for the calibrated run's -tb, so ``host_threads`` is unset here."""
    base = replace(cal, host_threads=None)

    def pf(g: float) -> float:
        return speed_report(spec, cfg, hw, cal=replace(base, host_gflops=g), prompt_tokens=prompt_tokens,
                            depths=[0]).prefill.tok_s

    return _solve(pf, measured_tok_s, 0.1, 1e6, steps=60)


def write_calibration(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
