"""``llamarig bench compare A.json B.json``: per-figure differences with a noise band.

Noise band of one run's figure = half its p10..p90 spread relative to its value,
(p90 − p10) ÷ 2 ÷ |value|; the comparison's band is the larger of A's and B's. A difference
counts only outside that band; with fewer than 2 samples on either side the noise is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from llamarig.bench.records import HIGHER_IS_BETTER_UNITS, LOWER_IS_BETTER_UNITS
from llamarig.bench.report import fmt_value


@dataclass(frozen=True)
class CompareRow:
    name: str
    unit: str
    a: float | None
    b: float | None
    delta_pct: float | None
    band_pct: float | None
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _band(f: dict[str, Any]) -> float | None:
    sp = f.get("spread") or {}
    v = f.get("value")
    if f.get("n", 0) < 2 or not sp or not v or sp.get("p10") is None or sp.get("p90") is None:
        return None
    return 100.0 * float(sp["p90"] - sp["p10"]) / 2.0 / abs(float(v))


METHOD = "delta = (B − A) ÷ |A|; noise band = max over A, B of (p90 − p10) ÷ 2 ÷ |value|; verdict only outside the band"


@dataclass(frozen=True)
class RunRef:
    """Which run a side of the comparison is: its run id, target URL and build."""

    run_id: str | None
    target: str | None
    build: str | None

    @staticmethod
    def of(doc: dict[str, Any]) -> RunRef:
        t = doc.get("target") or {}
        return RunRef(doc.get("run_id"), t.get("url"), t.get("build_info"))

    def to_json(self) -> dict[str, str | None]:
        return {"run_id": self.run_id, "target": self.target, "build": self.build}


@dataclass(frozen=True)
class Comparison:
    """``llamarig bench compare A B``: one row per figure; ``to_json()`` is ``--json``."""

    a: RunRef
    b: RunRef
    rows: tuple[CompareRow, ...]
    method: str = METHOD

    def to_json(self) -> dict[str, Any]:
        return {"kind": "compare", "a": self.a.to_json(), "b": self.b.to_json(), "method": self.method,
                "rows": [r.to_json() for r in self.rows]}


def compare(a: dict[str, Any], b: dict[str, Any]) -> Comparison:
    """Two bench (or logs) documents figure by figure."""
    return Comparison(RunRef.of(a), RunRef.of(b), tuple(compare_docs(a, b)))


def compare_docs(a: dict[str, Any], b: dict[str, Any]) -> list[CompareRow]:
    fa = {f["name"]: f for f in a.get("figures", [])}
    fb = {f["name"]: f for f in b.get("figures", [])}
    rows = []
    for name in [n for n in fa if n in fb] + [n for n in fb if n not in fa]:
        x, y = fa.get(name), fb.get(name)
        if x is None or y is None:
            rows.append(CompareRow(name, (x or y or {}).get("unit", ""), (x or {}).get("value"), (y or {}).get("value"), None, None,
                            "only in A" if y is None else "only in B"))
        else:
            rows.append(_row(name, x, y))
    return rows


def _row(name: str, x: dict[str, Any], y: dict[str, Any]) -> CompareRow:
    va, vb, unit = x.get("value"), y.get("value"), x.get("unit", "")
    if va is None or vb is None or va == 0:
        return CompareRow(name, unit, va, vb, None, None, "no value")
    delta = 100.0 * (vb - va) / abs(va)
    ba, bb = _band(x), _band(y)
    band = None if ba is None or bb is None else max(ba, bb)
    if band is None:
        verdict = "noise unknown (N<2)"
    elif abs(delta) <= band:
        verdict = "within noise"
    elif unit not in HIGHER_IS_BETTER_UNITS + LOWER_IS_BETTER_UNITS:
        verdict = "B higher" if delta > 0 else "B lower"
    else:
        verdict = "B better" if (delta > 0) == (unit in HIGHER_IS_BETTER_UNITS) else "B worse"
    return CompareRow(name, unit, va, vb, delta, band, verdict)


def print_compare(rows: list[CompareRow], console: Console, label_a: str, label_b: str) -> None:
    """The comparison table. Figure names are never cut: at narrow widths the name column folds
    onto the next line (names have no spaces to wrap at); the unit has its own column."""
    t = Table(header_style="bold", title=escape(f"A = {label_a}   B = {label_b}"), show_edge=False)
    t.add_column("figure", overflow="fold")
    t.add_column("unit", overflow="fold")
    for col in ("A", "B", "Δ %", "noise %"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("verdict", max_width=13)
    for r in rows:
        color = {"B better": "green", "B worse": "red"}.get(r.verdict, "")
        t.add_row(escape(r.name), escape(r.unit), fmt_value(r.a, r.unit), fmt_value(r.b, r.unit),
                  "—" if r.delta_pct is None else f"{r.delta_pct:+.1f}", "—" if r.band_pct is None else f"{r.band_pct:.1f}",
                  f"[{color}]{r.verdict}[/]" if color else r.verdict)
    console.print(t)
    console.print("Δ = (B − A) ÷ |A|; noise = ± band in %, the larger of A's and B's (p90 − p10) ÷ 2 ÷ value; "
                  "a verdict only outside it.")
