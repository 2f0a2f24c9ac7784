"""Figures: every number llamarig bench/logs prints is a :class:`Figure` record.

A figure carries its value *and* how it was obtained: ``method`` is a sentence (what was sent,
how it was timed, which field), ``n`` the number of samples behind it (always
``len(samples)``), ``samples`` the raw values, ``spread`` their distribution. Percentiles use linear interpolation between closest
ranks (NumPy's default, Hyndman & Fan type 7), stated in every spread as ``percentile_method``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from llamarig.i18n import _

#: a JSON value: the free-form parts of a figure (its spread, its parameters) and of a document
Json: TypeAlias = "str | int | float | bool | None | Sequence[Json] | Mapping[str, Json]"

PERCENTILE_METHOD = "linear interpolation between closest ranks (NumPy default, type 7)"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of ``values``, type 7 (NumPy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def spread_of(values: Sequence[float]) -> dict[str, Any]:
    """min, p10, median, p90, max, mean, stdev (sample) of ``values``; empty dict for none."""
    if not values:
        return {}
    out: dict[str, Any] = {
        "min": float(min(values)),
        "p10": percentile(values, 10),
        "median": percentile(values, 50),
        "p90": percentile(values, 90),
        "max": float(max(values)),
        "mean": float(statistics.fmean(values)),
        "stdev": float(statistics.stdev(values)) if len(values) > 1 else 0.0,
        "percentile_method": PERCENTILE_METHOD,
    }
    return out


@dataclass(frozen=True)
class Figure:
    """One reported number with its method. ``value`` is None when no valid sample exists
    (then ``note`` says why)."""

    name: str
    value: float | None
    unit: str
    method: str
    n: int
    samples: tuple[float, ...] = ()
    spread: Mapping[str, Json] = field(default_factory=dict)
    scenario: str = ""
    params: Mapping[str, Json] = field(default_factory=dict)
    note: str = ""
    method_zh: str = ""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "value": _clean(self.value),
            "unit": self.unit,
            "method": self.method,
            "n": self.n,
            "samples": [_clean(s) for s in self.samples],
            "spread": {k: _clean(v) if isinstance(v, float) else v for k, v in self.spread.items()},
        }
        if self.scenario:
            d["scenario"] = self.scenario
        if self.params:
            d["params"] = dict(self.params)
        if self.note:
            d["note"] = self.note
        if self.method_zh:
            d["method_zh"] = self.method_zh
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Figure:
        return Figure(
            name=str(d["name"]),
            value=d.get("value"),
            unit=str(d.get("unit", "")),
            method=str(d.get("method", "")),
            n=int(d.get("n", 0)),
            samples=tuple(x for x in d.get("samples", []) if x is not None),
            spread=dict(d.get("spread", {})),
            scenario=str(d.get("scenario", "")),
            params=dict(d.get("params", {})),
            note=str(d.get("note", "")),
            method_zh=str(d.get("method_zh", "")),
        )


def _clean(x: Any) -> Any:
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, float):
        return round(x, 6)
    return x


STATS = ("median", "p10", "p90", "max")

#: units where a larger value is better (rates, ratios) and where a smaller one is (latencies):
#: which end of a distribution is the best request, and which way ``bench compare`` judges
HIGHER_IS_BETTER_UNITS = ("tok/s", "tok/J", "ratio", "×", "tokens/step")
LOWER_IS_BETTER_UNITS = ("ms", "s")


def direction(unit: str) -> int:
    """+1 when a higher value of ``unit`` is better, -1 when a lower one is, 0 when neither."""
    if unit in HIGHER_IS_BETTER_UNITS:
        return 1
    return -1 if unit in LOWER_IS_BETTER_UNITS else 0


def stat_words(stat: str, unit: str) -> str:
    """How a method names the statistic ``stat`` of a figure in ``unit``: the maximum of a rate is
    the best request, the maximum of a latency the worst."""
    if stat in ("max", "min"):
        best = (stat == "max") == (direction(unit) > 0)
        word = "maximum" if stat == "max" else "minimum"
        return f"{word} ({'best' if best else 'worst'} request)" if direction(unit) else word
    return {"median": "median", "p10": "10th percentile", "p90": "90th percentile", "mean": "mean"}[stat]


def stat_figures(
    base: str,
    values: Iterable[float],
    unit: str,
    method: str,
    *,
    stats: Sequence[str] = STATS,
    scenario: str = "",
    params: dict[str, Any] | None = None,
    note: str = "",
    method_zh: str = "",
) -> list[Figure]:
    """``base_median``, ``base_p10``… figures sharing the same samples and method."""
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    spread = spread_of(vals)
    out = []
    for st in stats:
        value = spread.get(st) if vals else None
        what = stat_words(st, unit)
        out.append(
            Figure(
                name=f"{base}_{st}",
                value=value,
                unit=unit,
                method=f"{what} over N={len(vals)} requests; {method}",
                n=len(vals),
                samples=tuple(vals),
                spread=spread,
                scenario=scenario,
                params=dict(params or {}),
                note=note if vals else (note or "no valid sample"),
                method_zh=method_zh,
            )
        )
    return out


def single_figure(
    name: str,
    value: float | None,
    unit: str,
    method: str,
    *,
    samples: Sequence[float] = (),
    scenario: str = "",
    params: dict[str, Any] | None = None,
    note: str = "",
    method_zh: str = "",
) -> Figure:
    """A figure that is not a percentile of per-request samples. ``samples`` are the values it
    was derived from in its own unit (e.g. per-round aggregates, per-request ratios); without
    them a single derived value is its own one sample (n = 1, a zero-width spread), so every
    figure carries ``n == len(samples)`` and a spread. Counts behind a derived value (polls,
    checkpoints created, drafts) belong in ``params``."""
    vals = [float(v) for v in samples if v is not None and math.isfinite(v)]
    if not vals and value is not None and math.isfinite(value):
        vals = [float(value)]
    return Figure(
        name=name,
        value=value,
        unit=unit,
        method=method,
        n=len(vals),
        samples=tuple(vals),
        spread=spread_of(vals),
        scenario=scenario,
        params=dict(params or {}),
        note=note,
        method_zh=method_zh,
    )


def note_text(msgid: str, words: tuple[str, ...] = (), **fields: Any) -> str:
    """A scenario note from a catalogue message (marked ``N_``), as a Message: English in the
    JSON, in the reader's language in the reports (llamarig.i18n.localize). ``words``: the fields
    that are themselves catalogue words ("length", "depth"), made Messages too."""
    return _(msgid).format(**{k: _(v) if k in words else v for k, v in fields.items()})
