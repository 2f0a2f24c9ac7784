"""Efficiencies fitted to measurements by least squares: the weights efficiency and per-token
overhead of a set of decode times (``fit_weights_efficiency``), and a whole user calibration from
a GPU evidence file (``calibration_from_evidence``), each point's time read off the speed model
by probe predictions (plan/calibration_points.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llamarig.errors import InputError
from llamarig.i18n import _
from llamarig.plan.calibration import Calibration, Efficiency, builtin, calibration_from_json
from llamarig.plan.calibration_points import EVIDENCE_DEEP, evidence_points, predict_point


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
    base_eff = base.for_device(backend, gpu)

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

    terms = []
    for p in pts:
        t1 = 1 / predict_point(p, probe(weights=1.0, kv=1.0, overhead_ms=0.0)).predicted
        x_w = 1 / predict_point(p, probe(weights=0.5, kv=1.0, overhead_ms=0.0)).predicted - t1
        x_kv = 1 / predict_point(p, probe(weights=1.0, kv=0.5, overhead_ms=0.0)).predicted - t1
        terms.append((p, t1 - x_w - x_kv, x_w, x_kv, 1 / p["measured"]))
    short = [t for t in terms if int(t[0]["depth"]) < EVIDENCE_DEEP] or terms
    deep = [t for t in terms if int(t[0]["depth"]) >= EVIDENCE_DEEP]
    split = ""
    if _identified([x_w + x_kv for _, _, x_w, x_kv, _ in short]):
        u_w, t0 = _ls_rel([(x_w + x_kv, y - c, y) for _, c, x_w, x_kv, y in short])
    else:
        t0 = base_eff.overhead_ms / 1000
        num = sum((x_w + x_kv) * (y - c - t0) / y**2 for _, c, x_w, x_kv, y in short)
        den = sum((x_w + x_kv) ** 2 / y**2 for _, c, x_w, x_kv, y in short)
        u_w = max(1.0, num / den) if den > 0 else 1.0
        split = (f"; one model's weight bytes only, so weights and overhead_ms are not told apart: overhead_ms "
                 f"kept at the built-in {base_eff.overhead_ms:g} and weights takes the rest")
    def fit_kv(rows: list[tuple[dict[str, Any], float, float, float, float]]) -> float:
        num = sum(x_kv * (y - c - x_w * u_w - t0) / y**2 for _, c, x_w, x_kv, y in rows)
        den = sum(x_kv * x_kv / y**2 for _, c, x_w, x_kv, y in rows)
        return max(1.0, num / den) if den > 0 else u_w

    u_kv = fit_kv(deep) if deep else u_w
    # K/V types read at their own rate: one kv per type (K and V of one type) when the deep points
    # cover several; ``kv`` is then f16's (or all points' when f16 is absent)
    by_type: dict[str, list[tuple[dict[str, Any], float, float, float, float]]] = {}
    for t in deep:
        if t[0]["ctk"] == t[0]["ctv"]:
            by_type.setdefault(str(t[0]["ctk"]).lower(), []).append(t)
    kv_by_type: dict[str, float] = {}
    if len(by_type) > 1:
        if "f16" in by_type:
            u_kv = fit_kv(by_type["f16"])
        kv_by_type = {k: round(1 / fit_kv(v), 4) for k, v in sorted(by_type.items()) if k != "f16"}
    entry: dict[str, Any] = {"backend": backend, "weights": round(1 / u_w, 4), "kv": round(1 / u_kv, 4),
                             "overhead_ms": round(t0 * 1000, 4),
                             "source": f"{source}: {len(short)} shallow + {len(deep)} deep decode points "
                                       f"(benchmarks/gpu_evidence.py){split}"}
    if kv_by_type:
        entry["kv_by_type"] = kv_by_type
        entry["source"] += f"; kv per K/V type ({', '.join(sorted(by_type))})"
    if pre:  # prefill time = c + x_p / prefill + x_a / attn_prefill
        prows = []
        for p in pre:
            t1 = 1 / predict_point(p, probe(prefill=1.0, attn_prefill=1.0)).predicted
            x_p = 1 / predict_point(p, probe(prefill=0.5, attn_prefill=1.0)).predicted - t1
            x_a = 1 / predict_point(p, probe(prefill=1.0, attn_prefill=0.5)).predicted - t1
            y = 1 / p["measured"]
            prows.append((x_p, x_a, y - (t1 - x_p - x_a), y))
        u_p, u_a = _ls2_rel(prows)
        entry.update(prefill=round(1 / u_p, 4), attn_prefill=round(1 / u_a, 4))
        entry["source"] += f"; prefill / attn_prefill from {len(pre)} prefill points"
    if mtp:  # verify_per_token: the MTP step time is linear in it (weights, kv, overhead as fitted)
        def with_v(v: float) -> Calibration:
            e = {**entry, "verify_per_token": v, **({"gpu": gpu} if gpu else {})}
            return calibration_from_json({"version": 1, "efficiency": [e]}, source)

        rows = []
        for p in mtp:
            t_0 = 1 / predict_point(p, with_v(0.0)).predicted
            t_1 = 1 / predict_point(p, with_v(1.0)).predicted
            rows.append((t_1 - t_0, 1 / p["measured"] - t_0, 1 / p["measured"]))
        den = sum(x * x / t**2 for x, _, t in rows)
        v = max(0.0, sum(x * y / t**2 for x, y, t in rows) / den) if den > 0 else 0.0
        entry["verify_per_token"] = round(v, 4)
        entry["source"] += f"; verify_per_token from {len(mtp)} MTP step points"
    if gpu:
        entry["gpu"] = gpu
    return {"version": 1, "efficiency": [entry]}
