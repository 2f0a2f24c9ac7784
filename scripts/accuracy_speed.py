#!/usr/bin/env python3
"""Regenerate docs/accuracy-speed.md: the speed model's predictions vs published measurements,
in-sample (the built-in constants) and out-of-sample (leave-one-out refits).

Every point (GPU, model, KV, depth or prompt length, measured tok/s, source) lives in
src/llamarig/data/speed_calibration.json. The built-in constants were fitted to these same
points, so their errors are in-sample; the leave-one-out (LOO) column refits each fitted constant
without the point (the procedure is in ``refit_decode`` / ``refit_prefill`` / ``refit_verify``
below and in the generated document) and predicts the point with the refitted constants.

The speed model is linear in the inverse efficiencies (decode time = c + x_w / e_weights +
x_kv / e_kv + overhead), so each point's coefficients are read off the model itself by
predicting it with probe calibrations (``decode_terms``); no formula is duplicated here.

Run:  .venv/bin/python scripts/accuracy_speed.py [--check] [--fit]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from llamarig.plan.calibration.constants import Calibration, Efficiency, builtin, builtin_data
from llamarig.plan.calibration.points import (
    PointResult,
    evaluate_points,
    evidence_points,
    is_evidence,
    point_gpu,
    points,
    predict_point,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "accuracy-speed.md"
#: GPU evidence files (benchmarks/gpu_evidence.py) committed with their method; read by default
EVIDENCE_DIR = ROOT / "benchmarks" / "evidence"

GOAL = 0.15  # +-15 % for full-GPU decode (issue 4)
DEEP = 8192  # decode points at least this deep set e_kv
SHORT_PROMPT = 4096  # prefill points below this are not fitted (fixed per-request costs)
#: decode points kept out of the fit (a reason each); they are still predicted
_CAPPED = "RTX 3090 capped at 250 W (decodes below an uncapped card)"
EXCLUDED = {k: _CAPPED for k in ("sudoingx-nomtp", "sudoingx-mtp", "sx77-3090-250w-nomtp", "sx77-3090-250w-mtp2",
                                 "sx77-3090-250w-mtp3", "sx77-3090-250w-mtp4")}
#: the RTX 3090 field report's deep figures (f16 K/V, 4 unified slots: the decode reads at least this
#: request's depth, at most the whole 95232-cell cache)
DEEP_IDS = ("seed000-deep30k", "seed000-deep45k")

Point = dict[str, Any]


# ============================================================================ calibration probes


def with_backend(cal: Calibration, backend: str, **values: float) -> Calibration:
    """``cal`` with decode fields replaced for a backend and every per-GPU entry of it (per-GPU
    entries inherit the backend's values when the file is read)."""
    backends = dict(cal.backends)
    backends[backend] = replace(backends[backend], **values)
    gpus = {k: (replace(e, **values) if e.backend == backend else e) for k, e in cal.gpus.items()}
    return replace(cal, backends=backends, gpus=gpus)


def eff_key(cal: Calibration, p: Point) -> str:
    """Which calibration entry a point's GPU uses: a GPU id with its own entry, else the backend."""
    g = point_gpu(p["gpu"])
    return g.id if g.id in cal.gpus else g.backend


def with_entry(cal: Calibration, key: str, **values: float) -> Calibration:
    if key in cal.gpus:
        return replace(cal, gpus={**cal.gpus, key: replace(cal.gpus[key], **values)})
    return replace(cal, backends={**cal.backends, key: replace(cal.backends[key], **values)})


def seconds(p: Point, cal: Calibration) -> float:
    return 1.0 / predict_point(p, cal).predicted


@dataclass(frozen=True)
class DecodeTerms:
    """t = c + x_w / e_weights + x_kv / e_kv + overhead_ms / 1000 (one GPU, no hops)."""

    x_w: float
    x_kv: float
    c: float
    t_meas: float

    def t(self, e_w: float, e_kv: float, overhead_ms: float) -> float:
        return self.c + self.x_w / e_w + self.x_kv / e_kv + overhead_ms / 1000


def decode_terms(p: Point, cal: Calibration) -> DecodeTerms:
    be = point_gpu(p["gpu"]).backend
    t1 = seconds(p, with_backend(cal, be, weights=1.0, kv=1.0, overhead_ms=0.0))
    t2 = seconds(p, with_backend(cal, be, weights=0.5, kv=1.0, overhead_ms=0.0))
    t3 = seconds(p, with_backend(cal, be, weights=1.0, kv=0.5, overhead_ms=0.0))
    x_w, x_kv = t2 - t1, t3 - t1
    return DecodeTerms(x_w, x_kv, t1 - x_w - x_kv, 1.0 / p["measured"])


@dataclass(frozen=True)
class PrefillTerms:
    """t = c + (a + b / e_attn) / e_prefill (e_weights fixed at the built-in value)."""

    a: float
    b: float
    c: float
    t_meas: float
    key: str

    def t(self, e_p: float, e_a: float) -> float:
        return self.c + (self.a + self.b / e_a) / e_p


def prefill_terms(p: Point, cal: Calibration) -> PrefillTerms:
    key = eff_key(cal, p)
    t1 = seconds(p, with_entry(cal, key, prefill=1.0, attn_prefill=1.0))
    t2 = seconds(p, with_entry(cal, key, prefill=0.5, attn_prefill=1.0))
    t3 = seconds(p, with_entry(cal, key, prefill=1.0, attn_prefill=0.5))
    a, b = t2 - t3, t3 - t1
    return PrefillTerms(a, b, t1 - a - b, 1.0 / p["measured"], key)


def verify_terms(p: Point, cal: Calibration) -> tuple[float, float, float]:
    """(t at verify_per_token 0, dt / dverify, measured t): MTP step time is linear in it."""
    key = eff_key(cal, p)
    t0 = seconds(p, with_entry(cal, key, verify_per_token=0.0))
    t1 = seconds(p, with_entry(cal, key, verify_per_token=1.0))
    return t0, t1 - t0, 1.0 / p["measured"]


# ============================================================================ fitting procedures


def _ls1(xs: Sequence[float], ys: Sequence[float], ts: Sequence[float]) -> float:
    """argmin_u sum(((x u - y) / t)^2): least squares of the relative time error, one unknown."""
    num = sum(x * y / t**2 for x, y, t in zip(xs, ys, ts, strict=True))
    den = sum(x * x / t**2 for x, t in zip(xs, ts, strict=True))
    return num / den if den else float("nan")


def _ls2(rows: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """argmin over (u >= 1, t0 >= 0) of sum(((x u + t0 - y) / t)^2) for rows (x, y, t)."""

    def obj(u: float, t0: float) -> float:
        return sum(((x * u + t0 - y) / t) ** 2 for x, y, t in rows)

    w = [1 / t**2 for _, _, t in rows]
    sw = sum(w)
    sx = sum(wi * x for wi, (x, _, _) in zip(w, rows, strict=True))
    sy = sum(wi * y for wi, (_, y, _) in zip(w, rows, strict=True))
    sxx = sum(wi * x * x for wi, (x, _, _) in zip(w, rows, strict=True))
    sxy = sum(wi * x * y for wi, (x, y, _) in zip(w, rows, strict=True))
    det = sxx * sw - sx * sx
    cands = []
    if len(rows) >= 2 and det > 0:
        u, t0 = (sxy * sw - sx * sy) / det, (sxx * sy - sx * sxy) / det
        if u >= 1 and t0 >= 0:
            cands.append((u, t0))
    u = _ls1([x for x, _, _ in rows], [y for _, y, _ in rows], [t for _, _, t in rows])  # t0 = 0
    cands.append((max(1.0, u), 0.0))
    t0 = max(0.0, sum(wi * (y - x) for wi, (x, y, _) in zip(w, rows, strict=True)) / sw)  # u = 1
    cands.append((1.0, t0))
    return min(cands, key=lambda c: obj(*c))


@dataclass(frozen=True)
class DecodeFit:
    weights: float
    kv: float
    overhead_ms: float
    kv_basis: str  # what set kv

    def short(self) -> str:
        return f"w {self.weights:.2f}, kv {self.kv:.2f}{'*' if self.kv_basis == 'prior' else ''}, oh {self.overhead_ms:.2f}"


def refit_decode(terms: dict[str, DecodeTerms]) -> DecodeFit:
    """The decode procedure: (1) ``weights`` and ``overhead`` by least squares of the relative time
    error over the points shallower than DEEP (efficiency <= 1, overhead >= 0), their small KV term
    at the prior ``kv = weights``; (2) ``kv`` by least squares of the relative time error over the
    points at depth >= DEEP, their weights and overhead terms at (1) (KV read at most at peak:
    kv <= 1); (3) (1) again with the KV term at (2). With no deep point, the prior ``kv = weights``
    (marked * in the tables)."""
    deep = [k for k in terms if DEPTH[k] >= DEEP]
    short = [k for k in terms if k not in deep]
    u_w, t0 = _ls2([(terms[k].x_w + terms[k].x_kv, terms[k].t_meas - terms[k].c, terms[k].t_meas) for k in short])
    if not deep:
        return DecodeFit(1 / u_w, 1 / u_w, t0 * 1000, "prior")
    u_kv = max(1.0, _ls1([terms[k].x_kv for k in deep],
                         [terms[k].t_meas - terms[k].c - terms[k].x_w * u_w - t0 for k in deep],
                         [terms[k].t_meas for k in deep]))
    u_w, t0 = _ls2([(terms[k].x_w, terms[k].t_meas - terms[k].c - terms[k].x_kv * u_kv, terms[k].t_meas)
                    for k in short])
    return DecodeFit(1 / u_w, 1 / u_kv, t0 * 1000, "deep points")


@dataclass(frozen=True)
class PrefillFit:
    prefill: dict[str, float]  # calibration entry -> e_prefill
    attn_prefill: float


def refit_prefill(terms: dict[str, PrefillTerms]) -> PrefillFit:
    """The prefill procedure: e_attn (shared) on a grid of 0.005 steps; for each, e_prefill per
    calibration entry (GPU id with its own entry, else backend) in closed form by least squares of
    the relative time error; the grid value with the least total wins. Prompts shorter than
    SHORT_PROMPT are not fitted (fixed per-request costs are not modelled)."""
    keys = sorted({t.key for t in terms.values()})
    best: tuple[float, PrefillFit] | None = None
    for i in range(10, 301):
        e_a = i * 0.005
        eps: dict[str, float] = {}
        total = 0.0
        for key in keys:
            rows = [t for t in terms.values() if t.key == key]
            u = _ls1([r.a + r.b / e_a for r in rows], [r.t_meas - r.c for r in rows], [r.t_meas for r in rows])
            u = max(u, 1 / 1.5)
            eps[key] = 1 / u
            total += sum(((r.t(eps[key], e_a) - r.t_meas) / r.t_meas) ** 2 for r in rows)
        if best is None or total < best[0] - 1e-15:
            best = (total, PrefillFit(eps, e_a))
    assert best is not None
    return best[1]


def refit_verify(rows: Sequence[tuple[float, float, float]]) -> float:
    """verify_per_token by least squares of the relative time error over the MTP points (>= 0)."""
    return max(0.0, _ls1([s for _, s, _ in rows], [t - t0 for t0, _, t in rows], [t for _, _, t in rows]))


# ============================================================================ evaluation


DEPTH: dict[str, int] = {}
SETUP: dict[str, tuple[str, ...]] = {}  # same GPU, model, file size and KV types -> same key


@dataclass(frozen=True)
class Row:
    res: PointResult
    loo: float | None  # leave-one-out predicted tok/s (None: nothing left to fit it)
    loo_how: str

    @property
    def loo_error(self) -> float | None:
        return None if self.loo is None else (self.loo - self.res.measured) / self.res.measured


@dataclass(frozen=True)
class Evaluation:
    decode: list[Row]
    mtp: list[Row]
    prefill: list[Row]
    decode_all: DecodeFit
    prefill_all: PrefillFit
    verify_all: dict[str, float]  # calibration entry -> verify_per_token on all its points
    decode_fitted: list[str]
    prefill_fitted: list[str]


def _is_mtp(p: Point) -> bool:
    return "spec" in p


def _backend(p: Point) -> str:
    return point_gpu(p["gpu"]).backend


def evaluate() -> Evaluation:
    cal = builtin()
    pts = {p["id"]: p for p in points()}
    res = {r.id: r for r in evaluate_points()}
    for p in pts.values():
        DEPTH[p["id"]] = int(p.get("depth", 0))
        SETUP[p["id"]] = tuple(str(p.get(k)) for k in ("gpu", "model", "file_gb", "ctk", "ctv", "spec"))
    dec = [p for p in pts.values() if p["kind"] == "decode" and not _is_mtp(p)]
    cuda_fit = [p["id"] for p in dec if _backend(p) == "CUDA" and p["id"] not in EXCLUDED]
    dterms = {p["id"]: decode_terms(p, cal) for p in dec}
    d_all = refit_decode({k: dterms[k] for k in cuda_fit})

    def dpred(k: str, f: DecodeFit) -> float:
        return 1 / dterms[k].t(f.weights, f.kv, f.overhead_ms)

    drows = []
    for p in dec:
        k = p["id"]
        if k in cuda_fit:
            f = refit_decode({j: dterms[j] for j in cuda_fit if j != k})
            drows.append(Row(res[k], dpred(k, f), f.short()))
        elif _backend(p) == "CUDA":
            drows.append(Row(res[k], dpred(k, d_all), "not fitted: " + EXCLUDED.get(k, "")))
        else:  # the only point of its backend: without it, the prior is the CUDA fit
            drows.append(Row(res[k], dpred(k, d_all), f"no other {_backend(p)} point: CUDA fit ({d_all.short()})"))

    mtp = [p for p in pts.values() if p["kind"] == "decode" and _is_mtp(p)]
    vterms = {p["id"]: verify_terms(p, cal) for p in mtp}
    vkey = {p["id"]: eff_key(cal, p) for p in mtp}
    v_fit = [k for k in vterms if k not in EXCLUDED]

    def vfit(ids: Sequence[str], key: str) -> tuple[float, str] | None:
        """verify_per_token for a calibration entry: its own points, else the backend's (CUDA)."""
        own = [vterms[j] for j in ids if vkey[j] == key]
        if own:
            return refit_verify(own), key
        rest = [vterms[j] for j in ids if vkey[j] not in cal.gpus]
        return (refit_verify(rest), "CUDA") if rest else None

    v_all = {key: v for key in sorted(set(vkey.values())) if (r := vfit(v_fit, key)) and (v := r[0]) is not None}
    mrows = []
    for p in mtp:
        k = p["id"]
        t0, s_, _ = vterms[k]
        if k in EXCLUDED:
            got = vfit(v_fit, vkey[k])
            assert got is not None
            mrows.append(Row(res[k], 1 / (t0 + s_ * got[0]), "not fitted: " + EXCLUDED[k]))
            continue
        got = vfit([j for j in v_fit if j != k], vkey[k])
        if got is None:
            mrows.append(Row(res[k], None, "no other MTP point"))
        else:
            mrows.append(Row(res[k], 1 / (t0 + s_ * got[0]), f"verify/token {got[0]:.2f} ({got[1]} points)"))

    pre = [p for p in pts.values() if p["kind"] == "prefill"]
    pterms = {p["id"]: prefill_terms(p, cal) for p in pre}
    p_fit = [p["id"] for p in pre if int(p.get("prompt", 0)) >= SHORT_PROMPT]
    p_all = refit_prefill({k: pterms[k] for k in p_fit})
    prows = []
    for p in pre:
        k = p["id"]
        key = pterms[k].key
        rest = {j: pterms[j] for j in p_fit if j != k}
        if not any(t.key == key for t in rest.values()):
            prows.append(Row(res[k], None, f"no other point uses the '{key}' prefill entry"))
            continue
        f = refit_prefill(rest) if k in p_fit else p_all
        how = f"prefill {f.prefill[key]:.2f}, attn {f.attn_prefill:.2f}"
        if k not in p_fit:
            how = f"not fitted (prompt < {SHORT_PROMPT}); " + how
        prows.append(Row(res[k], 1 / pterms[k].t(f.prefill[key], f.attn_prefill), how))
    return Evaluation(drows, mrows, prows, d_all, p_all, v_all, cuda_fit, p_fit)


def kv_uncertainty() -> list[str]:
    """Decode at depth: the e_kv each deep point implies with the built-in weights efficiency and
    overhead (the seed points at their own depth, and, since four slots share a unified cache, at
    the whole 95232-cell cache), then the KV-type ranking the built-in constants give."""
    cal = builtin()
    pts = {p["id"]: p for p in points()}
    deep = [p for p in points() if p["kind"] == "decode" and "spec" not in p and int(p.get("depth", 0)) >= DEEP]
    lines = ["| point | GPU | KV | depth read | measured tok/s | implied e_kv |", "|---|---|---|---:|---:|---:|"]

    def implied(p: Point) -> float:
        g = point_gpu(p["gpu"])
        e = cal.for_device(g.backend, g.id if g.id in cal.gpus else None)
        tr = decode_terms(p, cal)
        u = (tr.t_meas - tr.c - tr.x_w / e.weights - e.overhead_ms / 1000) / tr.x_kv
        return 1 / u if u > 0 else float("inf")

    for p in deep:
        reads = [int(p["depth"])] + ([95232] if p["id"] in DEEP_IDS else [])
        for d in reads:
            q = {**p, "depth": d}
            k = implied(q)
            kv = f"{p.get('ctk', 'f16')}/{p.get('ctv', 'f16')}"
            lines.append(f"| {p['id']} | {point_gpu(p['gpu']).name} | {kv} | {d} | {p['measured']:g} | "
                         + ("> 1 (faster than the weights term allows)" if k == float("inf") else f"{k:.2f}") + " |")
    base = pts[DEEP_IDS[0]]
    lines += ["", "The KV-type ranking at depth for the RTX 3090 field report's set-up (RTX 3090, Qwen3.6-27B "
              "IQ4_NL 15.8 GB), built-in constants (decode tok/s; CUDA flash attention, all three types have "
              "compiled vector kernels):", "", "| depth | f16 | q8_0 | q4_0 |", "|---:|---:|---:|---:|"]
    for d in (8192, 32768, 65536, 105000):
        vals = [predict_point({**base, "depth": d, "ctk": t, "ctv": t}, cal).predicted for t in ("f16", "q8_0", "q4_0")]
        lines.append(f"| {d} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
    s4 = pts["seed004-nomtp"]
    q4, q8 = (predict_point({**s4, "depth": 35000, "ctk": t, "ctv": t}, cal).predicted for t in ("q4_0", "q8_0"))
    lines += ["", "The one published statement on quantized K/V speed at depth is qualitative: the 307K-context MTP "
              "field report finds q4_0 K/V 'speed on par with q8_0' (速度与 q8_0 持平; no figures, its 35K-token "
              f"prompts). The model agrees: at 35000 tokens on that card {q4:.1f} vs {q8:.1f} tok/s "
              f"({(q4 / q8 - 1) * 100:+.1f} %)."]
    return lines


# ============================================================================ rendering


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def _summary(rows: Sequence[Row]) -> tuple[str, dict[str, Any]]:
    ins = [abs(r.res.error) for r in rows]
    loo = [abs(e) for e in (r.loo_error for r in rows) if e is not None]
    s = {"n": len(rows), "in_med": statistics.median(ins), "in_max": max(ins),
         "in_ok": sum(e <= GOAL for e in ins), "loo_n": len(loo),
         "loo_med": statistics.median(loo) if loo else None, "loo_max": max(loo) if loo else None,
         "loo_ok": sum(e <= GOAL for e in loo)}
    text = (f"{s['n']} points. In-sample (built-in constants): median |error| {s['in_med'] * 100:.1f} %, "
            f"max {s['in_max'] * 100:.1f} %, {s['in_ok']} of {s['n']} within +-15 %.")
    if loo:
        text += (f" Leave-one-out ({len(loo)} points): median |error| {s['loo_med'] * 100:.1f} %, "
                 f"max {s['loo_max'] * 100:.1f} %, {s['loo_ok']} of {len(loo)} within +-15 %.")
    return text, s


def summary_lines(ev: Evaluation | None = None) -> list[str]:
    """A short speed summary for docs/accuracy.md."""
    ev = ev or evaluate()
    _, d = _summary(ev.decode)
    _, pf = _summary(ev.prefill)
    _, m = _summary(ev.mtp)
    pf_loo = "-" if pf["loo_med"] is None else f"{pf['loo_med'] * 100:.1f} %"
    return [
        f"- Decode, every layer on the GPU ({d['n']} published points; goal +-15 %): in-sample "
        f"{d['in_ok']} of {d['n']} within the goal (median |error| {d['in_med'] * 100:.1f} %); "
        f"out-of-sample (leave-one-out refit) {d['loo_ok']} of {d['loo_n']} (median "
        f"{d['loo_med'] * 100:.1f} %, max {d['loo_max'] * 100:.1f} %).",
        f"- Prefill ({pf['n']} points, no goal): in-sample median |error| {pf['in_med'] * 100:.1f} %, "
        f"out-of-sample median {pf_loo} "
        f"({pf['loo_n']} points can be refitted without themselves).",
        f"- MTP speculative decoding ({m['n']} published runs, {sum(r.res.id in EXCLUDED for r in ev.mtp)} of them "
        "on 250 W-capped cards): in-sample "
        f"median |error| {m['in_med'] * 100:.1f} %, {m['in_ok']} of {m['n']} within +-15 %; out-of-sample "
        f"{m['loo_ok']} of {m['loo_n']} (median {m['loo_med'] * 100:.1f} %): the verification cost differs by GPU.",
        "- Decode at depth: f16 K/V fitted to four published deep decodes (the RTX 3090 field report's log, read "
        "as the f16 run it was, and llama.cpp pulls #17505 / #17891); q8_0 / q4_0 at depth have no published "
        "CUDA figure and are assumed to read like f16.",
    ]


def _table(rows: Sequence[Row], with_limit: bool) -> list[str]:
    head = "| id | GPU | model | setting | measured tok/s | predicted | error | LOO predicted | LOO error |"
    sep = "|---|---|---|---|---:|---:|---:|---:|---:|"
    if with_limit:
        head += " limit (eff. 1) |"
        sep += "---:|"
    out = [head, sep]
    for r in rows:
        x = r.res
        line = (f"| {x.id} | {x.gpu} | {x.model} | {x.setting} | {x.measured:g} | {x.predicted:.1f} | "
                f"{_pct(x.error)} | {'-' if r.loo is None else f'{r.loo:.1f}'} | {_pct(r.loo_error)} |")
        if with_limit:
            line += f" {x.limit:.1f} |" if x.limit else " - |"
        out.append(line)
    out += ["", "Refit without the point (LOO constants):", ""]
    out += [f"- {r.res.id}: {r.loo_how}" for r in rows]
    return out


def _miss_notes(ev: Evaluation) -> list[str]:
    """Why each full-GPU decode point outside +-15 % misses (in-sample or LOO); numbers from the model."""
    cal = builtin()
    pts = {p["id"]: p for p in points()}
    out = []
    for r in ev.decode:
        le = r.loo_error
        if abs(r.res.error) <= GOAL and (le is None or abs(le) <= GOAL):
            continue
        k = r.res.id
        p = pts[k]
        t = decode_terms(p, cal)
        e = cal.for_device(point_gpu(p["gpu"]).backend, point_gpu(p["gpu"]).id)
        tw, tk, oh = t.x_w / e.weights, t.x_kv / e.kv, e.overhead_ms / 1000
        tot = t.t(e.weights, e.kv, e.overhead_ms)
        parts = (f"predicted {tot * 1000:.2f} ms per token = weights {tw * 1000:.2f} + KV {tk * 1000:.2f} + "
                 f"overhead {oh * 1000:.2f} ms; measured {t.t_meas * 1000:.2f} ms")
        if k in EXCLUDED:
            deep = predict_point({**p, "depth": 37000}).predicted
            why = (f"{parts}. The card is capped at 250 W (sudoingX/qwen38-mtp #42, #77); a memory-bound decode "
                   f"on a capped 3090 loses clock and bandwidth, and the calibration is for uncapped cards "
                   f"(the same model family decodes 31 tok/s on the 307K-context MTP field report's 736 GB/s card, i.e. "
                   f"{31 / 736 * 1000:.1f} tok/s per TB/s, against {p['measured'] / 936 * 1000:.1f} here). "
                   f"The measurement depth is not published (2000 assumed); even at 37K depth the model "
                   f"predicts {deep:.1f} tok/s. Kept out of the fit for the power cap.")
        elif tk > 0.1 * tot and DEPTH[k] < DEEP:
            need = t.x_w / max(1e-12, t.t_meas - t.c - oh - tk)
            why = (f"{parts}. A small model at shallow depth: the KV term is the f16 cache read at the "
                   f"deep-context e_kv {e.kv:g}, {tk / tot * 100:.0f} % of the "
                   f"predicted time, and the fixed overhead another {oh / tot * 100:.0f} %; the measured time "
                   f"leaves room for the weights alone only at e_weights {need:.2f}. At a few hundred tokens "
                   "the FA kernel is not bandwidth-bound and the per-token overhead of a 0.6B model is below "
                   "the 27B-fitted figure: e_kv and the overhead are not constant across model sizes.")
        elif DEPTH[k] >= DEEP:
            why = (f"{parts}. A deep point: its error is mostly the KV term, i.e. e_kv (see 'Decode at depth'). "
                   + ("Four slots share this cache, so the decode read at least this request's depth and at "
                      "most the 95232-cell cache; the model uses the lower bound." if k in DEEP_IDS else
                      f"The refit without it ({r.loo_how}) rests on the other deep points."))
        elif _backend(p) != "CUDA":
            why = (f"{parts}. The leave-one-out column uses the CUDA refit ({ev.decode_all.short()}) as the "
                   f"prior for {_backend(p)}, whose own constants rest on one source each "
                   f"({e.source.split(';')[0]}); that prior misses {_backend(p)}'s larger per-token overhead "
                   "and lower weights efficiency.")
        else:
            why = (f"{parts}. In-sample {_pct(r.res.error)}; the refit without it ({r.loo_how}) predicts "
                   f"{r.loo:.1f} tok/s. The small-model points disagree by about +-10 % among themselves "
                   "(llama.cpp builds from 2024 to 2026, drivers, how each author measured), and a fixed per-token "
                   "overhead fitted mostly on 27B models weighs more on a small one.")
        out.append(f"- **{k}** (in-sample {_pct(r.res.error)}, LOO {_pct(le)}): {why}")
    return out


def evidence_section(files: Sequence[Path]) -> list[str]:
    """Every GPU evidence file's points predicted twice: with the built-in constants, and with the
    CUDA backend's defaults alone (no GPU-specific entry: what plan said before the evidence, so
    out-of-sample). A built-in GPU entry fitted to a file names it in its source: that file's
    built-in column is then in-sample."""
    import json  # lazy: only here

    cal = builtin()
    lines = ["## GPU evidence files", "",
             "Files written by `benchmarks/gpu_evidence.py` on a GPU machine (synthetic GGUFs with the",
             "catalogue models' shapes; see benchmarks/RESULTS.md), predicted with the built-in constants",
             "and with the CUDA defaults alone (no entry for that GPU: out-of-sample, what plan said before",
             "the file existed). A built-in GPU entry fitted to a file makes that file's built-in column",
             "in-sample; the entry's source names the file.",
             "On an NVIDIA machine: `python benchmarks/gpu_evidence.py --server-bin /path/to/llama-server",
             "--gpu rtx4090 --out benchmarks/evidence/rtx4090-b<build>.json` (under 10 minutes on a fast GPU; it",
             "writes the -lv 4 buffer lines and llama-server's prefill / decode timings at depths 0, 8K and 32K",
             "for f16, q8_0 and q4_0 K/V at -ub 512 and 2048); `llamarig plan --calibration FILE` fits that",
             "GPU's efficiencies to it.",
             ""]
    if not files:
        return lines + ["None yet: no GPU machine was available when the kit was written (the kit's CPU",
                        "smoke run is a test, not evidence). Run it on an NVIDIA machine and commit the file",
                        "under benchmarks/evidence/ with its method; this section then lists every point.", ""]
    for f in files:
        doc = json.loads(Path(f).read_text())
        if not is_evidence(doc):
            continue
        rel = Path(f).resolve().relative_to(ROOT) if Path(f).resolve().is_relative_to(ROOT) else Path(f)
        gpu = doc.get("gpu")
        entry = cal.gpus.get(gpu) if isinstance(gpu, str) else None
        generic = replace(cal, gpus={k: v for k, v in cal.gpus.items() if k != gpu})
        fitted_here = entry is not None and f"to {rel}" in entry.source
        kind = ("in-sample: the built-in entry for this GPU was fitted to this file" if fitted_here else
                "a built-in entry for this GPU exists, fitted to other measurements" if entry is not None else
                "no built-in entry for this GPU: both columns are the CUDA defaults")
        pts = evidence_points(doc, str(rel))
        res = [predict_point(p) for p in pts]
        gen = [predict_point(p, generic) for p in pts]
        errs = sorted(abs(r.error) for r in res)
        gerrs = sorted(abs(r.error) for r in gen)
        lines += [f"### {rel}", "", f"GPU {gpu}, server `{str(doc['server'].get('version', '')).splitlines()[0] if doc.get('server') else ''}`, "
                  f"{len(res)} points; built-in column: {kind}. Median |error|: built-in "
                  f"{statistics.median(errs) * 100:.1f} %, CUDA defaults {statistics.median(gerrs) * 100:.1f} %.", "",
                  "| id | kind | setting | measured tok/s | built-in | error | CUDA defaults | error |",
                  "|---|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.id} | {r.kind} | {r.setting} | {r.measured:.1f} | {r.predicted:.1f} | {_pct(r.error)} | "
                  f"{g.predicted:.1f} | {_pct(g.error)} |" for r, g in zip(res, gen, strict=True)]
        lines.append("")
    return lines


def cpu_section() -> list[str]:
    """The host (CPU) model's accuracy: measured against the real llama-server on this repository's
    machine (benchmarks/bench_cpu_speed.py; the table is in benchmarks/RESULTS.md)."""
    hu = builtin_data().get("host_uncalibrated") or {}
    if not hu:
        return []
    cpu = builtin().for_device("CPU")

    def rng(k: str, what: str) -> str:
        r = hu.get(k) or {}
        return (f"- {what}: measured decode x{r['decode'][0]:g}-x{r['decode'][1]:g} of the plan, prefill "
                f"x{r['prefill'][0]:g}-x{r['prefill'][1]:g}")

    return ["## CPU and host-side speed (the real llama-server on this repository's machine)", "",
            "Measured with `benchmarks/bench_cpu_speed.py` (`llamarig bench` against the portable build,",
            "synthetic models; table and method in benchmarks/RESULTS.md, \"CPU speed model\"). Without",
            "`llamarig tune`'s calibration the plan carries these ranges (`speed.host_range` in `plan --json`):",
            "", rng("builtin", "built-in host figures"), rng("measured_bandwidth", "host bandwidth measured (`plan --detect`)"),
            "", f"Source: {hu.get('source', '')}.", "",
            "After tune's calibration (host bandwidth measured, `weights`/`overhead_ms` solved from the",
            "tuned decode, `attn_decode` and `attn_decode_depths` from a depth ladder of four decodes up to",
            f"about 20 s of prefill (built in: `attn_decode` {cpu.attn_decode:g}), `host_gflops` from the tuned",
            "prefill, `attn_prefill` from the ladder's prefills, `host_threads` recorded): 28-29 of 30 bench",
            "points within +-15 % in each of four quiet runs (115 of 120; prefill 60 of 60, decode at",
            "1024-3584 tokens 40 of 40, max 13 %, also at depths and prompt lengths between the ladder's).",
            "Every miss is a decode at depth 0 of the three smallest models (6 and 31 MB, a 16-expert",
            "qwen3moe, 0.3-5 ms per token): the 31 MB model decodes at about 190 or about 300 tok/s",
            "depending on the server start, and a second bench from a fresh start disagreed with the first",
            "by up to 60 % (benchmarks/RESULTS.md).", ""]


def render(ev: Evaluation | None = None, evidence: Sequence[Path] | None = None) -> str:
    ev = ev or evaluate()
    if evidence is None:
        evidence = sorted(EVIDENCE_DIR.glob("*.json")) if EVIDENCE_DIR.is_dir() else []
    cal = builtin()
    d_text, d = _summary(ev.decode)
    lines = [
        "# Speed model accuracy",
        "",
        "Generated by `scripts/accuracy_speed.py` (do not edit by hand; `scripts/accuracy.py` runs it",
        "too). Predictions use the built-in calibration (`src/llamarig/data/speed_calibration.json`);",
        "each point names its source there and below. Error = (predicted - measured) / measured. The",
        "model and its constants are described in [speed.md](speed.md); the memory side is in",
        "[accuracy.md](accuracy.md).",
        "",
        "**In-sample vs out-of-sample.** The built-in CUDA constants were fitted to these same points,",
        "so the *error* column is in-sample. The *LOO* (leave-one-out) columns refit every fitted",
        "constant without the point, with the procedure below, and predict the point with the refit:",
        "that is the out-of-sample error a new user's set-up can expect.",
        "",
        "## Goal: +-15 % for decode with every layer on the GPU (no speculative decoding)",
        "",
        f"- In-sample: **{d['in_ok']} of {d['n']}** points within +-15 % (median |error| "
        f"{d['in_med'] * 100:.1f} %, max {d['in_max'] * 100:.1f} %).",
        f"- Out-of-sample (leave-one-out): **{d['loo_ok']} of {d['loo_n']}** within +-15 % (median "
        f"{d['loo_med'] * 100:.1f} %, max {d['loo_max'] * 100:.1f} %).",
        f"- The goal is met for the typical case (median) both ways; it is not met for every point: "
        f"{d['n'] - d['in_ok']} in-sample and {d['loo_n'] - d['loo_ok']} out-of-sample misses, explained "
        "below.",
        "",
        "## Decode, full GPU",
        "",
        d_text,
        "",
        *_table(ev.decode, True),
        "",
        "### Misses",
        "",
        *_miss_notes(ev),
        "",
        "## Decode at depth",
        "",
        f"The KV read efficiency `kv` (CUDA {cal.backends['CUDA'].kv:g}) sets how fast decode slows with depth. It is",
        "fitted to the decode points at least 8K deep (all f16 K/V): the RTX 3090 field report's log (30.5K and",
        "45.2K; the report's script says q4_0, but its KV flags never reached the server: see the point's",
        "'ran' note under Sources) and llama.cpp pulls #17505 and #17891 (llama-bench -ub 1 at 32K). The",
        "earlier constant (0.22) came from reading the report's run as q4_0 K/V; with the real f16 the",
        "same slowdown means KV is read about as fast as the weights. Implied e_kv per deep point",
        "(built-in `weights` and overhead; the seed points also at the full 95232-cell cache their four",
        "unified slots share, the other bound of what the decode read):",
        "",
        *kv_uncertainty(),
        "",
        "An implied e_kv above 1 means the point read its weights faster than the built-in `weights`",
        "(llama-bench's one-token steps of an 8B model on an idle card); the fit caps `kv` at 1. At the",
        "whole 95232-cell cache the RTX 3090 report's figures would need e_kv about 1.8, beyond the bandwidth:",
        "its other slots held far fewer cells than that, so the lower bound is the better reading.",
        "",
        "No published CUDA decode figure at depth with q8_0 or q4_0 K/V that names its build was found",
        "(searched: llama-bench `tg128 @ d32768` / `-d` tables with `-ctk`/`-ctv`), so quantized K/V",
        "share the f16 constant: the ranking above follows their bytes only, and `plan` says so in its",
        "depth note (`speed.depth_note` in `--json`). The GPU evidence kit (`benchmarks/gpu_evidence.py`)",
        "measures all three types at several depths on the next GPU machine.",
        "",
    ]
    if ev.mtp:
        lines += ["## Decode with MTP speculative decoding", "", _summary(ev.mtp)[0], "",
                  *_table(ev.mtp, False), ""]
    if ev.prefill:
        lines += ["## Prefill", "", _summary(ev.prefill)[0], "", *_table(ev.prefill, False), ""]
    lines += evidence_section(evidence)
    lines += cpu_section()
    lines += ["## Fitting procedure (what the LOO columns rerun)", "",
              f"- Decode, CUDA (points: {', '.join(ev.decode_fitted)}; not fitted: "
              + "; ".join(f"{k} - {v}" for k, v in EXCLUDED.items()) + "):",
              "  each point's time is linear in the inverse efficiencies, `t = c + x_w / weights + x_kv / kv"
              " + overhead`,",
              "  with `x_w`, `x_kv`, `c` read off the speed model by probe predictions. (1) `kv` from",
              f"  same-set-up pairs (a point >= {DEEP} tokens deep and a shallower one of the same GPU, model",
              "  and KV types): `t_deep - t_short = (x_kv_deep - x_kv_short) / kv`, free of `weights` and",
              "  overhead; no pair: the prior `kv = weights` (marked *). (2) `weights` and `overhead` by least",
              f"  squares of the relative time error over the points shallower than {DEEP} tokens",
              "  (efficiency <= 1, overhead >= 0), the KV term at (1).",
              "- Vulkan: its one point set the built-in overhead; without it the prior is the CUDA fit.",
              f"- Prefill (prompts >= {SHORT_PROMPT} tokens; shorter ones have fixed per-request costs the model "
              "does not have): `t = c + (a + b / attn_prefill) / prefill`; `attn_prefill` shared, on a 0.005",
              "  grid; `prefill` per calibration entry (the RTX 3090 has its own) in closed form; `ub_half` and",
              "  `weights` fixed at the built-in values.",
              "- MTP: `verify_per_token` by least squares of the relative time error over the MTP points.",
              "",
              "The same procedure on all points, next to the built-in constants (which were rounded and set",
              "by hand from earlier fits, so the in-sample column is not exactly this refit):",
              "",
              "| constant | built-in | procedure, all points |", "|---|---:|---:|",
              f"| CUDA weights | {cal.backends['CUDA'].weights:g} | {ev.decode_all.weights:.3f} |",
              f"| CUDA kv | {cal.backends['CUDA'].kv:g} | {ev.decode_all.kv:.3f} |",
              f"| CUDA overhead_ms | {cal.backends['CUDA'].overhead_ms:g} | {ev.decode_all.overhead_ms:.3f} |"]
    for key, ep in sorted(ev.prefill_all.prefill.items()):
        built = cal.gpus[key].prefill if key in cal.gpus else cal.backends[key].prefill
        lines.append(f"| prefill ({key}) | {built:g} | {ep:.3f} |")
    lines.append(f"| attn_prefill | {cal.backends['CUDA'].attn_prefill:g} | {ev.prefill_all.attn_prefill:.3f} |")
    for key, v in ev.verify_all.items():
        built = cal.gpus[key].verify_per_token if key in cal.gpus else cal.backends[key].verify_per_token
        lines.append(f"| verify_per_token ({key}) | {built:g} | {v:.3f} |")
    lines += ["", "## Sources (and the configuration that really ran)", ""]
    for p in points():
        lines.append(f"- **{p['id']}**: {p.get('source', '')}. Ran: {p.get('ran', '')}")
    lines += ["", "## Constants used", "", "| backend | GPU | weights | kv | overhead ms | prefill | ub_half | attn prefill | verify/token | source |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for key, e in list(cal.backends.items()) + list(cal.gpus.items()):
        gpu = key if key in cal.gpus else ""
        lines.append(f"| {e.backend} | {gpu} | {e.weights:g} | {e.kv:g} | {e.overhead_ms:g} | {e.prefill:g} | "
                     f"{e.ubatch_half:g} | {e.attn_prefill:g} | {e.verify_per_token:g} | {e.source} |")
    lines += ["", "## Known gaps", "",
              "- MTP: the step is verify (one decode step, plus `verify_per_token` decode steps per extra",
              "  token) + n drafts + the MTP context's catch-up pass; tokens per step = 1 + n x llama-server's",
              "  draft_n_accepted / draft_n. `verify_per_token` differs by GPU: about 0.05 on Ada/Blackwell",
              "  (sudoingX/qwen38-mtp #5, #15, #43), 0.22 on the RTX 3090 (#21, and the 250 W runs #42/#77), 0",
              "  on the one RTX 4080 SUPER run (the 32 GB field report; at 0 the model is still 12.6 % low, so",
              "  that run beats every other published card's verification cost). Out-of-sample, a card",
              "  without its own entry gets the Ada/Blackwell value.",
              "- MTP runs whose draft length is not published (club-3090 #85, #94, #1111, #1380) are not",
              "  used: tokens per step cannot be derived without n.",
              "- Power-capped cards (250 W RTX 3090s) decode about 20 % below the uncapped calibration.",
              "- Short prompts (1K) prefill slower than modelled: fixed per-request costs are not modelled.",
              "- Decode at depth: f16 only (above); q8_0/q4_0 K/V at depth are assumed to read like f16.",
              "- Metal and ROCm constants are assumed (no published point yet); a `bench` calibration",
              "  file replaces them for a given machine.", ""]
    return "\n".join(lines)


def fit_report(ev: Evaluation | None = None) -> str:
    ev = ev or evaluate()
    f = ev.decode_all
    return (f"CUDA decode over {len(ev.decode_fitted)} points: weights {f.weights:.3f}, kv {f.kv:.3f} "
            f"({f.kv_basis}), overhead {f.overhead_ms:.3f} ms\n"
            f"prefill over {len(ev.prefill_fitted)} points: "
            + ", ".join(f"{k} {v:.3f}" for k, v in sorted(ev.prefill_all.prefill.items()))
            + f"; attn_prefill {ev.prefill_all.attn_prefill:.3f}\nverify_per_token "
            + ", ".join(f"{k} {v:.3f}" for k, v in ev.verify_all.items()))


def write_or_check(path: Path, text: str, check: bool, how: str, say: Callable[[str], None] = print) -> bool:
    """Write ``text`` to ``path``, or (check) report whether it is current. Returns True when current."""
    if check:
        ok = path.exists() and path.read_text() == text
        if not ok:
            print(f"{path.relative_to(ROOT)} is stale: run {how}", file=sys.stderr)
        return ok
    path.write_text(text)
    say(f"wrote {path.relative_to(ROOT)}")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/accuracy_speed.py",
        description="Regenerate docs/accuracy-speed.md: speed-model predictions vs the published points in "
                    "src/llamarig/data/speed_calibration.json, in-sample and leave-one-out.")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the file on disk is stale")
    ap.add_argument("--fit", action="store_true", help="print the constants the fitting procedure gives on all points")
    ap.add_argument("--evidence", nargs="*", type=Path, default=None,
                    help="GPU evidence files (benchmarks/gpu_evidence.py) to add out-of-sample; default: "
                         "benchmarks/evidence/*.json")
    a = ap.parse_args(argv)
    ev = evaluate()
    if a.fit:
        print(fit_report(ev))
        return 0
    return 0 if write_or_check(OUT, render(ev, a.evidence), a.check, "scripts/accuracy_speed.py") else 1


__all__ = ["Efficiency", "evaluate", "render", "summary_lines", "main"]

if __name__ == "__main__":
    sys.exit(main())
