"""A self-contained HTML report (no scripts, no external resources): figure table plus inline
SVG plots (decode vs depth, prefill vs length, concurrency curve, per-request distributions,
GPU telemetry and busy slots over time)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from llamarig.bench.report import fmt_value

COLORS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#718096")
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 560, 300, 60, 20, 30, 44


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    step = (hi - lo) / n
    return [lo + i * step for i in range(n + 1)]


Point = tuple[float | None, float | None]  # (x, y); a point with a None coordinate is not drawn


def line_chart(title: str, series: Sequence[tuple[str, Sequence[Point]]], xlabel: str, ylabel: str,
               *, points_only: bool = False) -> str:
    pts = [(x, y) for _, s in series for x, y in s if x is not None and y is not None]
    if not pts:
        return ""
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(p[1] for p in pts)
    y0 = 0.0
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 <= y0:
        y1 = y0 + 1
    y1 *= 1.08
    iw, ih = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * iw

    def sy(y: float) -> float:
        return PAD_T + ih - (y - y0) / (y1 - y0) * ih

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{_e(title)}">',
           f'<text x="{W / 2}" y="18" text-anchor="middle" class="t">{_e(title)}</text>',
           f'<line x1="{PAD_L}" y1="{PAD_T + ih}" x2="{PAD_L + iw}" y2="{PAD_T + ih}" class="ax"/>',
           f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{PAD_T + ih}" class="ax"/>']
    for ty in _ticks(y0, y1):
        out.append(f'<line x1="{PAD_L}" y1="{sy(ty):.1f}" x2="{PAD_L + iw}" y2="{sy(ty):.1f}" class="grid"/>'
                   f'<text x="{PAD_L - 6}" y="{sy(ty) + 4:.1f}" text-anchor="end" class="l">{_e(fmt_value(float(ty), ""))}</text>')
    for tx in _ticks(x0, x1):
        out.append(f'<text x="{sx(tx):.1f}" y="{PAD_T + ih + 16}" text-anchor="middle" class="l">{_e(fmt_value(float(tx), ""))}</text>')
    out.append(f'<text x="{PAD_L + iw / 2}" y="{H - 6}" text-anchor="middle" class="l">{_e(xlabel)}</text>')
    out.append(f'<text x="14" y="{PAD_T + ih / 2}" text-anchor="middle" class="l" transform="rotate(-90 14 {PAD_T + ih / 2})">{_e(ylabel)}</text>')
    for i, (label, s) in enumerate(series):
        col = COLORS[i % len(COLORS)]
        drawn = sorted(((x, y) for x, y in s if x is not None and y is not None), key=lambda p: p[0])
        if not points_only and len(drawn) > 1:
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in drawn)
            out.append(f'<polyline points="{d}" fill="none" stroke="{col}" stroke-width="2"/>')
        for x, y in drawn:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{col}"><title>{_e(label)}: {_e(fmt_value(float(x), ""))}, {_e(fmt_value(float(y), ""))}</title></circle>')
        out.append(f'<text x="{PAD_L + 8}" y="{PAD_T + 14 + 14 * i}" class="l" style="fill:{col}">■ {_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def strip_chart(title: str, groups: list[tuple[str, list[float]]], unit: str) -> str:
    """Per-figure sample distributions: one row of dots per figure, with the median tick."""
    groups = [(n, v) for n, v in groups if v]
    if not groups:
        return ""
    lo = min(min(v) for _, v in groups)
    hi = max(max(v) for _, v in groups)
    lo = min(lo, 0.0)
    if hi <= lo:
        hi = lo + 1
    row = 26
    h = PAD_T + row * len(groups) + PAD_B
    left = 230
    iw = W + 160 - left - PAD_R

    def sx(x: float) -> float:
        return left + (x - lo) / (hi - lo) * iw

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + 160}" height="{h}" viewBox="0 0 {W + 160} {h}" role="img" aria-label="{_e(title)}">',
           f'<text x="{(W + 160) / 2}" y="18" text-anchor="middle" class="t">{_e(title)}</text>']
    for i, (name, vals) in enumerate(groups):
        y = PAD_T + row * i + row / 2
        col = COLORS[i % len(COLORS)]
        out.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" class="l">{_e(name)}</text>')
        out.append(f'<line x1="{left}" y1="{y}" x2="{left + iw}" y2="{y}" class="grid"/>')
        for v in vals:
            out.append(f'<circle cx="{sx(v):.1f}" cy="{y}" r="3.5" fill="{col}" fill-opacity="0.6"><title>{_e(fmt_value(float(v), unit))} {_e(unit)}</title></circle>')
        med = sorted(vals)[len(vals) // 2]
        out.append(f'<line x1="{sx(med):.1f}" y1="{y - 8}" x2="{sx(med):.1f}" y2="{y + 8}" stroke="#000" stroke-width="2"/>')
    yb = PAD_T + row * len(groups) + 16
    for tx in _ticks(lo, hi):
        out.append(f'<text x="{sx(tx):.1f}" y="{yb}" text-anchor="middle" class="l">{_e(fmt_value(float(tx), unit))}</text>')
    out.append(f'<text x="{left + iw / 2}" y="{yb + 20}" text-anchor="middle" class="l">{_e(unit)}</text>')
    out.append("</svg>")
    return "".join(out)


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI","Noto Sans CJK SC",sans-serif;margin:24px;color:#1a202c;max-width:1200px}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{border:1px solid #cbd5e0;padding:4px 6px;vertical-align:top}
th{background:#edf2f7;text-align:left}td.v{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.note{color:#b7791f}.t{font-size:14px;font-weight:600}.l{font-size:11px;fill:#4a5568}.ax{stroke:#4a5568}.grid{stroke:#e2e8f0}
.plots{display:flex;flex-wrap:wrap;gap:16px}.warn{color:#c53030}code{background:#edf2f7;padding:0 3px}
"""


def _series_from_scenarios(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    for sc in doc.get("scenarios", []):
        if key in (sc.get("series") or {}):
            return sc["series"][key]
    return []


def plots(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    depth = _series_from_scenarios(doc, "decode_vs_depth") or (doc.get("series") or {}).get("decode_vs_depth", [])
    if depth:
        out.append(line_chart("Decode vs context depth 解码速度-深度", [("decode tok/s", [(p["depth"], p["tok_s"]) for p in depth])],
                              "depth (tokens)", "tok/s", points_only=doc.get("kind") == "logs"))
    pre = _series_from_scenarios(doc, "prefill_vs_length") or (doc.get("series") or {}).get("prefill_vs_length", [])
    if pre:
        out.append(line_chart("Cold prefill vs prompt length 冷 prefill", [("prefill tok/s", [(p["length"], p["tok_s"]) for p in pre])],
                              "prompt tokens", "tok/s", points_only=doc.get("kind") == "logs"))
    conc = _series_from_scenarios(doc, "concurrency")
    if conc:
        out.append(line_chart("Concurrency 并发", [("aggregate tok/s", [(p["streams"], p["aggregate_tok_s"]) for p in conc]),
                                                    ("per-stream tok/s", [(p["streams"], p["per_stream_tok_s"]) for p in conc])],
                              "parallel streams", "tok/s"))
    by_unit: dict[tuple[str, str], list[tuple[str, list[float]]]] = {}
    seen: set[tuple[float, ...]] = set()
    for f in doc.get("figures", []):
        s = tuple(x for x in f.get("samples", []) if isinstance(x, (int, float)))
        if len(s) >= 2 and s not in seen:
            seen.add(s)
            base = f["name"].rsplit("_", 1)[0] if f["name"].endswith(("_median", "_p10", "_p90", "_max")) else f["name"]
            by_unit.setdefault((f.get("scenario", ""), f.get("unit", "")), []).append((base, list(s)))
    for (scen, unit), groups in by_unit.items():
        out.append(strip_chart(f"{scen} per-request distributions ({unit}) 分布", groups[:16], unit))
    gpu = (doc.get("gpu") or {}).get("samples") or []
    if gpu:
        by: dict[str, list[Point]] = {}
        for s in gpu:
            if s.get("power_w") is not None:
                by.setdefault(f"GPU{s.get('index')} W", []).append((s["t_s"], s["power_w"]))
        out.append(line_chart("GPU power over time 功耗", list(by.items()), "time (s)", "W"))
        tb: dict[str, list[Point]] = {}
        for s in gpu:
            if s.get("temp_c") is not None:
                tb.setdefault(f"GPU{s.get('index')} °C", []).append((s["t_s"], s["temp_c"]))
        out.append(line_chart("GPU temperature 温度", list(tb.items()), "time (s)", "°C"))
    busy = (doc.get("interference") or {}).get("busy_series") or []
    if busy:
        out.append(line_chart("Busy slots (/slots) vs ours in flight 槽位", [("busy slots", [(b[0], b[1]) for b in busy]),
                                                                              ("ours in flight", [(b[0], b[2]) for b in busy])],
                              "time (s)", "slots"))
    timeline = (doc.get("series") or {}).get("timeline") or []
    if timeline:
        out.append(line_chart("Requests over time (from log) 请求时间线",
                              [("decode tok/s", [(i, t.get("decode_tok_s")) for i, t in enumerate(timeline)]),
                               ("prefill tok/s ÷ 10", [(i, (t.get("prefill_tok_s") or 0) / 10 if t.get("prefill_tok_s") else None) for i, t in enumerate(timeline)])],
                              "request # in log", "tok/s"))
    return [p for p in out if p]


def render_html(doc: dict[str, Any]) -> str:
    t = doc.get("target") or {}
    title = f"llamarig {doc.get('kind', 'bench')} report"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_e(title)}</title><style>{CSS}</style></head><body>", f"<h1>{_e(title)}</h1>"]
    meta = []
    if t:
        meta.append(f"target <code>{_e(t.get('url'))}</code> build <code>{_e(t.get('build_info'))}</code> "
                    f"model <code>{_e(t.get('model'))}</code> n_ctx/slot {_e(t.get('n_ctx_slot'))} slots {_e(t.get('total_slots'))}")
    if doc.get("source"):
        src = doc["source"]
        meta.append(f"log <code>{_e(src.get('path'))}</code>: {_e(src.get('lines'))} lines, {_e(src.get('recognised'))} recognised, "
                    f"{_e(src.get('skipped'))} skipped")
    if doc.get("started_at"):
        meta.append(f"run {_e(doc['started_at'])} → {_e(doc.get('finished_at'))}")
    parts += [f"<p>{m}</p>" for m in meta]
    if doc.get("findings"):
        parts.append("<h2>Findings 结论</h2><ul>" + "".join(f"<li>{_e(x)}</li>" for x in doc["findings"]) + "</ul>")
    parts.append("<h2>Figures 指标</h2><table><tr><th>指标 figure</th><th>数值 value</th><th>unit</th><th>N</th><th>p10 / p90</th><th>测法 method</th></tr>")
    for f in doc.get("figures", []):
        sp = f.get("spread") or {}
        spread = f"{fmt_value(sp.get('p10'), f.get('unit', ''))} / {fmt_value(sp.get('p90'), f.get('unit', ''))}" if sp and f.get("n", 0) > 1 else ""
        note = f'<br><span class="note">{_e(f["note"])}</span>' if f.get("note") else ""
        zh = f"{_e(f['method_zh'])}<br>" if f.get("method_zh") else ""
        parts.append(f"<tr><td>{_e(f['name'])}</td><td class=v>{_e(fmt_value(f.get('value'), f.get('unit', '')))}</td>"
                     f"<td>{_e(f.get('unit'))}</td><td class=v>{_e(f.get('n'))}</td><td class=v>{_e(spread)}</td><td>{zh}{_e(f.get('method'))}{note}</td></tr>")
    parts.append("</table>")
    ps = plots(doc)
    if ps:
        parts.append('<h2>Plots 图</h2><div class="plots">' + "".join(ps) + "</div>")
    inter = doc.get("interference") or {}
    if inter:
        parts.append("<h2>Interference 干扰</h2><ul>")
        parts += [f'<li class="warn">missing: {_e(m)}</li>' for m in inter.get("missing", [])]
        parts += [f'<li class="warn">t={_e(e["t_s"])} s {_e(e["kind"])}: {_e(e["detail"])}</li>' for e in inter.get("events", [])[:50]]
        rec = inter.get("reconciliation") or {}
        for k, v in (rec.get("counters") or {}).items():
            parts.append(f"<li>/metrics {_e(k)}: Δ {_e(v['server_delta'])} vs ours {_e(v['ours'])} (excess {_e(v['excess'])})</li>")
        parts.append("</ul>")
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        parts.append(f"<p>GPU telemetry: not available ({_e(gpu.get('reason'))})</p>")
    if doc.get("errors"):
        parts.append("<h2>Errors</h2><ul>" + "".join(f'<li class="warn">{_e(x)}</li>' for x in doc["errors"][:100]) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
