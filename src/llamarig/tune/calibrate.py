"""Turn a measured decode speed into a calibration file for the speed model
(llamarig.plan.calibration, format in its module docstring).

Method: the speed model predicts decode time per token as bytes read / (bandwidth x
``weights`` efficiency) + ``overhead_ms`` (llamarig.plan.speed.decode_seconds). We solve, by
bisection, for the ``weights`` efficiency of the first device's backend at which the predicted
decode speed of the tuned configuration equals the measured one. When even an efficiency of
1.5 predicts slower than measured, or 0.01 faster (a tiny model: the fixed overhead dominates),
the efficiency is clamped and ``overhead_ms`` is solved instead."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from llamarig.plan.calibration import Calibration, load_calibration


def _predict(spec: Any, cfg: Any, hw: Any, cal: Calibration) -> float:
    from llamarig.plan.speed import speed_report

    return speed_report(spec, cfg, hw, cal=cal).decode_tok_s


def _with(cal: Calibration, backend: str, **kw: float) -> Calibration:
    eff = replace(cal.for_device(backend), **kw)
    return replace(cal, backends={**cal.backends, backend: eff})


def fit_calibration(spec: Any, cfg: Any, hw: Any, measured_tok_s: float, base: Calibration | None = None
                    ) -> tuple[dict[str, Any], float]:
    """(calibration JSON, predicted tok/s with it)."""
    from llamarig.plan.speed import device_loads

    cal = base or load_calibration()
    loads = device_loads(spec, cfg, hw, cal)
    backend = loads[0].backend if loads else "CPU"
    lo, hi = 0.01, 1.5
    fields: dict[str, float] = {}
    if _predict(spec, cfg, hw, _with(cal, backend, weights=hi)) < measured_tok_s:
        e = hi
    elif _predict(spec, cfg, hw, _with(cal, backend, weights=lo)) > measured_tok_s:
        e = lo
    else:
        for _ in range(40):
            mid = (lo + hi) / 2
            if _predict(spec, cfg, hw, _with(cal, backend, weights=mid)) < measured_tok_s:
                lo = mid
            else:
                hi = mid
        e = (lo + hi) / 2
    fields["weights"] = round(e, 6)
    cal2 = _with(cal, backend, weights=e)
    pred = _predict(spec, cfg, hw, cal2)
    if abs(pred - measured_tok_s) > 0.02 * measured_tok_s:
        # solve overhead_ms: 1/measured = 1/pred - old_overhead + new_overhead
        old = cal2.for_device(backend).overhead_ms / 1000
        new = max(0.0, 1 / measured_tok_s - (1 / pred - old))
        fields["overhead_ms"] = round(new * 1000, 6)
    pred = _predict(spec, cfg, hw, _with(cal, backend, **fields))
    data = {"version": 1, "efficiency": [{"backend": backend, **fields,
                                          "source": f"llamarig tune: measured decode {measured_tok_s:.2f} tok/s"}],
            "_method": __doc__.split("\n\n", 1)[1].replace("\n", " ").strip()}
    if abs(pred - measured_tok_s) > 0.02 * measured_tok_s:
        data["_note"] = (f"the speed model cannot reproduce {measured_tok_s:.1f} tok/s with a plausible efficiency "
                         f"(best {pred:.1f}): the bandwidth figure of the device is probably wrong")
    return data, pred


def write_calibration(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
