"""Efficiencies fitted to measurements by least squares: the weights efficiency and per-token
overhead of a set of decode times (``fit_weights_efficiency``), and a whole user calibration from
a GPU evidence file (``calibration_from_evidence``), each point's time read off the speed model
by probe predictions (plan/calibration/points.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from llamarig.errors import InputError
from llamarig.i18n import _
from llamarig.plan.calibration.constants import (
    Calibration,
    Efficiency,
    builtin,
    calibration_from_json,
)
from llamarig.plan.calibration.points import EVIDENCE_DEEP, evidence_points, predict_point


def fit_weights_efficiency(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least-squares fit of ``t = bytes / (bw x e) + t0`` to (bytes, bandwidth B/s, measured s)
    points: returns (e, t0 seconds). Linear in (1/e, t0)."""
    if len(points) < 2:
        raise ValueError("need at least two points")
    xs = [b / bw for b, bw, _ in points]
    ys = [t for _, _, t in points]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False))
    slope = sxy / sxx if sxx else my / mx
    t0 = max(0.0, my - slope * mx)
    return 1.0 / slope, t0


def _ls_rel(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """argmin over (u >= 1, t0 >= 0) of sum(((x u + t0 - y) / y)^2): u = 1 / efficiency."""
    best = (1.0, 0.0, float("inf"))
    w = [1 / y**2 for _, y, _ in rows]
    sw, sx, sy = sum(w), sum(wi * x for wi, (x, _, _) in zip(w, rows, strict=True)), sum(
        wi * y for wi, (_, y, _) in zip(w, rows, strict=True))
    sxx = sum(wi * x * x for wi, (x, _, _) in zip(w, rows, strict=True))
    sxy = sum(wi * x * y for wi, (x, y, _) in zip(w, rows, strict=True))
    cands = []
    det = sxx * sw - sx * sx
    if det > 0:
        cands.append(((sxy * sw - sx * sy) / det, (sxx * sy - sx * sxy) / det))
    cands.append((sxy / sxx if sxx else 1.0, 0.0))
    cands.append((1.0, max(0.0, (sy - sx) / sw)))
    for u, t0 in cands:
        u, t0 = max(1.0, u), max(0.0, t0)
        err = sum(((x * u + t0 - y) / y) ** 2 for x, y, _ in rows)
        if err < best[2]:
            best = (u, t0, err)
    return best[0], best[1]


def _identified(xs: list[float]) -> bool:
    """Whether the shallow decode points tell ``weights`` from ``overhead_ms``: they need weight
    terms that differ (two models or quantizations); one model gives one straight line through the
    origin's neighbourhood that any split fits equally well."""
    return bool(xs) and (max(xs) - min(xs)) > 0.05 * max(xs)


def _ls2_rel(rows: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """argmin over (u >= 1, v >= 1) of sum(((a u + b v - y) / t)^2) for rows (a, b, y, t)."""
    w = [1 / t**2 for *_, t in rows]
    saa = sum(wi * a * a for wi, (a, _, _, _) in zip(w, rows, strict=True))
    sbb = sum(wi * b * b for wi, (_, b, _, _) in zip(w, rows, strict=True))
    sab = sum(wi * a * b for wi, (a, b, _, _) in zip(w, rows, strict=True))
    say = sum(wi * a * y for wi, (a, _, y, _) in zip(w, rows, strict=True))
    sby = sum(wi * b * y for wi, (_, b, y, _) in zip(w, rows, strict=True))
    cands = []
    det = saa * sbb - sab * sab
    if det > 1e-30 * max(1.0, saa * sbb):
        cands.append(((say * sbb - sab * sby) / det, (saa * sby - sab * say) / det))
    if saa > 0:
        cands.append(((say - sab) / saa, 1.0))
    if sbb > 0:
        cands.append((1.0, (sby - sab) / sbb))
    best = (1.0, 1.0, float("inf"))
    for u, v in cands:
        u, v = max(1.0, u), max(1.0, v)
        err = sum(((a * u + b * v - y) / t) ** 2 for a, b, y, t in rows)
        if err < best[2]:
            best = (u, v, err)
    return best[0], best[1]


#: one decode point's time, split by the speed model: (point, constant, weights term, kv term,
#: measured seconds per token); the terms are at efficiency 1 (a term / e is its time)
_Terms = tuple[dict[str, Any], float, float, float, float]
_Probe = Callable[..., Calibration]


def _prober(base: Calibration, backend: str, gpu: str | None) -> _Probe:
    """A calibration with the given efficiencies for the evidence's GPU (or backend), one kv for
    every K/V type: what a probe prediction reads a term off."""
    def probe(**kw: Any) -> Calibration:
        def set_(e: Efficiency) -> Efficiency:  # one kv for every K/V type while probing
            return replace(e, kv_by_type=(), **kw)

        if gpu and gpu in base.gpus:
            return replace(base, gpus={**base.gpus, gpu: set_(base.gpus[gpu])})
        backends = {**base.backends, backend: replace(set_(base.for_device(backend)), backend=backend)}
        gpus = {k: (set_(e) if e.backend == backend else e) for k, e in base.gpus.items()}
        if gpu:
            gpus[gpu] = replace(set_(base.for_device(backend)), backend=backend)
        return replace(base, backends=backends, gpus=gpus)

    return probe


def _decode_terms(pts: list[dict[str, Any]], probe: _Probe) -> list[_Terms]:
    terms = []
    for p in pts:
        t1 = 1 / predict_point(p, probe(weights=1.0, kv=1.0, overhead_ms=0.0)).predicted
        x_w = 1 / predict_point(p, probe(weights=0.5, kv=1.0, overhead_ms=0.0)).predicted - t1
        x_kv = 1 / predict_point(p, probe(weights=1.0, kv=0.5, overhead_ms=0.0)).predicted - t1
        terms.append((p, t1 - x_w - x_kv, x_w, x_kv, 1 / p["measured"]))
    return terms


def _fit_weights(short: list[_Terms], overhead_ms: float) -> tuple[float, float, str]:
    """(1 / weights, overhead seconds, what the source adds) from the shallow points; when one
    model's points cannot tell the two apart (:func:`_identified`) the overhead stays
    ``overhead_ms`` and weights takes the rest."""
    if _identified([x_w + x_kv for _, _, x_w, x_kv, _ in short]):
        u_w, t0 = _ls_rel([(x_w + x_kv, y - c, y) for _, c, x_w, x_kv, y in short])
        return u_w, t0, ""
    t0 = overhead_ms / 1000
    num = sum((x_w + x_kv) * (y - c - t0) / y**2 for _, c, x_w, x_kv, y in short)
    den = sum((x_w + x_kv) ** 2 / y**2 for _, c, x_w, x_kv, y in short)
    split = (f"; one model's weight bytes only, so weights and overhead_ms are not told apart: overhead_ms "
             f"kept at the built-in {overhead_ms:g} and weights takes the rest")
    return (max(1.0, num / den) if den > 0 else 1.0), t0, split


def _fit_kv(rows: list[_Terms], u_w: float, t0: float) -> float:
    """1 / kv from the deep points, weights and overhead as fitted."""
    num = sum(x_kv * (y - c - x_w * u_w - t0) / y**2 for _, c, x_w, x_kv, y in rows)
    den = sum(x_kv * x_kv / y**2 for _, c, x_w, x_kv, y in rows)
    return max(1.0, num / den) if den > 0 else u_w


def _kv_entry(deep: list[_Terms], u_w: float, t0: float) -> tuple[float, dict[str, float], list[str]]:
    """(1 / kv, kv per K/V type, the types): one kv per type (K and V of one type) when the deep
    points cover several; ``kv`` is then f16's (or all points' when f16 is absent)."""
    u_kv = _fit_kv(deep, u_w, t0) if deep else u_w
    by_type: dict[str, list[_Terms]] = {}
    for t in deep:
        if t[0]["ctk"] == t[0]["ctv"]:
            by_type.setdefault(str(t[0]["ctk"]).lower(), []).append(t)
    if len(by_type) <= 1:
        return u_kv, {}, sorted(by_type)
    if "f16" in by_type:
        u_kv = _fit_kv(by_type["f16"], u_w, t0)
    return u_kv, {k: round(1 / _fit_kv(v, u_w, t0), 4) for k, v in sorted(by_type.items()) if k != "f16"}, sorted(by_type)


def _fit_prefill(pre: list[dict[str, Any]], probe: _Probe) -> tuple[float, float]:
    """(prefill, attn_prefill): prefill time = c + x_p / prefill + x_a / attn_prefill."""
    rows = []
    for p in pre:
        t1 = 1 / predict_point(p, probe(prefill=1.0, attn_prefill=1.0)).predicted
        x_p = 1 / predict_point(p, probe(prefill=0.5, attn_prefill=1.0)).predicted - t1
        x_a = 1 / predict_point(p, probe(prefill=1.0, attn_prefill=0.5)).predicted - t1
        y = 1 / p["measured"]
        rows.append((x_p, x_a, y - (t1 - x_p - x_a), y))
    u_p, u_a = _ls2_rel(rows)
    return round(1 / u_p, 4), round(1 / u_a, 4)


def _fit_verify(mtp: list[dict[str, Any]], entry: dict[str, Any], gpu: str | None, source: str) -> float:
    """verify_per_token: the MTP step time is linear in it (weights, kv, overhead as fitted)."""
    def with_v(v: float) -> Calibration:
        e = {**entry, "verify_per_token": v, **({"gpu": gpu} if gpu else {})}
        return calibration_from_json({"version": 1, "efficiency": [e]}, source)

    rows = []
    for p in mtp:
        t_0 = 1 / predict_point(p, with_v(0.0)).predicted
        t_1 = 1 / predict_point(p, with_v(1.0)).predicted
        rows.append((t_1 - t_0, 1 / p["measured"] - t_0, 1 / p["measured"]))
    den = sum(x * x / t**2 for x, _, t in rows)
    return round(max(0.0, sum(x * y / t**2 for x, y, t in rows) / den) if den > 0 else 0.0, 4)


def calibration_from_evidence(doc: dict[str, Any], source: str = "evidence") -> dict[str, Any]:
    """A user calibration (the JSON load_calibration reads) fitted to a GPU evidence file:
    ``weights`` and ``overhead_ms`` by least squares of the relative decode-time error over the
    points shallower than EVIDENCE_DEEP (their KV term at kv = weights), then ``kv`` over the
    deeper ones, for the evidence's GPU (or backend). Each point's time is linear in the inverse
    efficiencies; the coefficients are read off the speed model itself by probe predictions.

    One model's shallow points cannot tell ``weights`` from ``overhead_ms`` (:func:`_identified`):
    then ``overhead_ms`` stays the built-in one for that GPU or backend and ``weights`` takes all of
    the rest, and the source says so. ``prefill`` and ``attn_prefill`` are fitted to the prefill
    points the same way (the matmul term and the attention term, which grows with the prompt)."""
    every = [p for p in evidence_points(doc, source) if p["kind"] == "decode"]
    pts = [p for p in every if "spec" not in p]
    mtp = [p for p in every if "spec" in p]
    pre = [p for p in evidence_points(doc, source) if p["kind"] == "prefill"]
    if not pts:
        raise InputError(_("{source}: no decode measurement to fit").format(source=source))
    backend = "CPU" if doc.get("backend") == "CPU" else str(doc.get("backend") or "CUDA")
    gpu = doc.get("gpu") if backend != "CPU" else None
    base = builtin()
    probe = _prober(base, backend, gpu)
    terms = _decode_terms(pts, probe)
    short = [t for t in terms if int(t[0]["depth"]) < EVIDENCE_DEEP] or terms
    deep = [t for t in terms if int(t[0]["depth"]) >= EVIDENCE_DEEP]
    u_w, t0, split = _fit_weights(short, base.for_device(backend, gpu).overhead_ms)
    u_kv, kv_by_type, kv_types = _kv_entry(deep, u_w, t0)
    entry: dict[str, Any] = {"backend": backend, "weights": round(1 / u_w, 4), "kv": round(1 / u_kv, 4),
                             "overhead_ms": round(t0 * 1000, 4),
                             "source": f"{source}: {len(short)} shallow + {len(deep)} deep decode points "
                                       f"(benchmarks/gpu_evidence.py){split}"}
    if kv_by_type:
        entry["kv_by_type"] = kv_by_type
        entry["source"] += f"; kv per K/V type ({', '.join(kv_types)})"
    if pre:
        entry["prefill"], entry["attn_prefill"] = _fit_prefill(pre, probe)
        entry["source"] += f"; prefill / attn_prefill from {len(pre)} prefill points"
    if mtp:
        entry["verify_per_token"] = _fit_verify(mtp, entry, gpu, source)
        entry["source"] += f"; verify_per_token from {len(mtp)} MTP step points"
    if gpu:
        entry["gpu"] = gpu
    return {"version": 1, "efficiency": [entry]}
