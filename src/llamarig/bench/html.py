"""A self-contained HTML report (no scripts, no external resources), in the order a user reads
it: the headline (decode, prefill, TTFT, concurrency, speculative acceptance, each with its unit
and n), findings, inline SVG plots (decode vs depth, prefill vs length, concurrency curve,
per-request distributions, GPU telemetry and busy slots over time), then the full figure table
whose rows cite numbered method footnotes (each method text once). Labels and notes are in the
``lang`` the caller gives (llamarig.i18n); the page declares it (``lang``) and a font stack with common CJK fonts."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from llamarig.bench.report import (
    fmt_value,
    footnotes,
    headline,
    labels,
    meta_lines,
    method_stat,
    report_title,
)
from llamarig.i18n import localize, translator

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


@dataclass(frozen=True)
class _PlotFrame:
    """The axes of a chart: data ranges and the plot area inside the padding."""

    x0: float
    x1: float
    y0: float
    y1: float
    iw: float = W - PAD_L - PAD_R
    ih: float = H - PAD_T - PAD_B

    @staticmethod
    def around(pts: Sequence[tuple[float, float]]) -> _PlotFrame:
        x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
        if x1 == x0:
            x0, x1 = x0 - 1, x1 + 1
        y1 = max(p[1] for p in pts)
        return _PlotFrame(x0, x1, 0.0, (y1 if y1 > 0 else 1.0) * 1.08)

    def sx(self, x: float) -> float:
        return PAD_L + (x - self.x0) / (self.x1 - self.x0) * self.iw

    def sy(self, y: float) -> float:
        return PAD_T + self.ih - (y - self.y0) / (self.y1 - self.y0) * self.ih


def _axes(f: _PlotFrame, title: str, xlabel: str, ylabel: str) -> list[str]:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{_e(title)}">',
           f'<text x="{W / 2}" y="18" text-anchor="middle" class="t">{_e(title)}</text>',
           f'<line x1="{PAD_L}" y1="{PAD_T + f.ih}" x2="{PAD_L + f.iw}" y2="{PAD_T + f.ih}" class="ax"/>',
           f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{PAD_T + f.ih}" class="ax"/>']
    for ty in _ticks(f.y0, f.y1):
        out.append(f'<line x1="{PAD_L}" y1="{f.sy(ty):.1f}" x2="{PAD_L + f.iw}" y2="{f.sy(ty):.1f}" class="grid"/>'
                   f'<text x="{PAD_L - 6}" y="{f.sy(ty) + 4:.1f}" text-anchor="end" class="l">{_e(fmt_value(float(ty), ""))}</text>')
    for tx in _ticks(f.x0, f.x1):
        out.append(f'<text x="{f.sx(tx):.1f}" y="{PAD_T + f.ih + 16}" text-anchor="middle" class="l">{_e(fmt_value(float(tx), ""))}</text>')
    out.append(f'<text x="{PAD_L + f.iw / 2}" y="{H - 6}" text-anchor="middle" class="l">{_e(xlabel)}</text>')
    out.append(f'<text x="14" y="{PAD_T + f.ih / 2}" text-anchor="middle" class="l" transform="rotate(-90 14 {PAD_T + f.ih / 2})">{_e(ylabel)}</text>')
    return out


def _series_svg(f: _PlotFrame, i: int, label: str, s: Sequence[Point], points_only: bool) -> list[str]:
    col = COLORS[i % len(COLORS)]
    drawn = sorted(((x, y) for x, y in s if x is not None and y is not None), key=lambda p: p[0])
    out = []
    if not points_only and len(drawn) > 1:
        d = " ".join(f"{f.sx(x):.1f},{f.sy(y):.1f}" for x, y in drawn)
        out.append(f'<polyline points="{d}" fill="none" stroke="{col}" stroke-width="2"/>')
    for x, y in drawn:
        out.append(f'<circle cx="{f.sx(x):.1f}" cy="{f.sy(y):.1f}" r="3" fill="{col}"><title>{_e(label)}: {_e(fmt_value(float(x), ""))}, {_e(fmt_value(float(y), ""))}</title></circle>')
    # a white halo keeps the legend readable where a line crosses it
    out.append(f'<text x="{PAD_L + 8}" y="{PAD_T + 14 + 14 * i}" class="l" style="fill:{col}" paint-order="stroke" '
               f'stroke="#fff" stroke-width="3" stroke-linejoin="round">■ {_e(label)}</text>')
    return out


def line_chart(title: str, series: Sequence[tuple[str, Sequence[Point]]], xlabel: str, ylabel: str,
               *, points_only: bool = False) -> str:
    pts = [(x, y) for _label, s in series for x, y in s if x is not None and y is not None]
    if not pts:
        return ""
    f = _PlotFrame.around(pts)
    out = _axes(f, title, xlabel, ylabel)
    for i, (label, s) in enumerate(series):
        out += _series_svg(f, i, label, s, points_only)
    out.append("</svg>")
    return "".join(out)


def strip_chart(title: str, groups: list[tuple[str, list[float]]], unit: str) -> str:
    """Per-figure sample distributions: one row of dots per figure, with the median tick."""
    groups = [(n, v) for n, v in groups if v]
    if not groups:
        return ""
    lo = min(min(v) for _name, v in groups)
    hi = max(max(v) for _name, v in groups)
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


#: system UI fonts, then CJK fonts for Chinese labels on Linux (Noto / Source Han / WenQuanYi),
#: macOS (PingFang) and Windows (Microsoft YaHei), so no label falls back to boxes
FONT_STACK = ('system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans CJK SC","Source Han Sans SC",'
              '"PingFang SC","Hiragino Sans GB","Microsoft YaHei","WenQuanYi Micro Hei",sans-serif')

CSS = "\nbody{font-family:" + FONT_STACK + """;margin:24px;color:#1a202c;max-width:1200px}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{border:1px solid #cbd5e0;padding:4px 6px;vertical-align:top}
th{background:#edf2f7;text-align:left}td.v{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
.note{color:#b7791f}.t{font-size:14px;font-weight:600}.l{font-size:11px;fill:#4a5568}.ax{stroke:#4a5568}.grid{stroke:#e2e8f0}
.plots{display:flex;flex-wrap:wrap;gap:16px}.warn{color:#c53030}code{background:#edf2f7;padding:0 3px}
.meta{color:#4a5568;font-size:13px;margin:2px 0}
.head{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:10px;margin:16px 0}
.card{border:1px solid #cbd5e0;border-radius:6px;padding:8px 12px;background:#f7fafc}
.card .k{font-size:13px;color:#4a5568}.card .big{font-size:26px;font-weight:600;font-variant-numeric:tabular-nums}
.card .u{font-size:15px;font-weight:400;color:#4a5568}.card .d{font-size:12px;color:#4a5568}
.card .d a{color:inherit;text-decoration:none}.card.warn{border-color:#c53030;background:#fff5f5}.card .note{font-size:12px}
td.m{white-space:nowrap}sup a{text-decoration:none}ol.fn{font-size:12px;color:#2d3748;padding-left:2.2em}ol.fn li{margin:2px 0}
"""


def _series_from_scenarios(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    for sc in doc.get("scenarios", []):
        if key in (sc.get("series") or {}):
            found: list[dict[str, Any]] = sc["series"][key]
            return found
    return []


def plots(doc: dict[str, Any], lang: str = "en") -> list[str]:
    """Every plot the document has data for, in order."""
    _ = translator(lang)
    out = _speed_plots(doc, _) + _distribution_plots(doc, _) + _gpu_plots(doc, _)
    busy = (doc.get("interference") or {}).get("busy_series") or []
    if busy:
        out.append(line_chart(_("Busy slots (/slots) vs ours in flight"), [(_("busy slots"), [(b[0], b[1]) for b in busy]),
                                                                 (_("ours in flight"), [(b[0], b[2]) for b in busy])],
                              _("time (s)"), _("slots")))
    timeline = (doc.get("series") or {}).get("timeline") or []
    if timeline:
        out.append(line_chart(_("Requests over time (from log)"),
                              [(_("decode tok/s"), [(i, t.get("decode_tok_s")) for i, t in enumerate(timeline)]),
                               (_("prefill tok/s ÷ 10"), [(i, (t.get("prefill_tok_s") or 0) / 10 if t.get("prefill_tok_s") else None) for i, t in enumerate(timeline)])],
                              _("request # in log"), "tok/s"))
    return [p for p in out if p]


def _speed_plots(doc: dict[str, Any], _: Callable[[str], str]) -> list[str]:
    """Decode vs depth, prefill vs length, the concurrency curve."""
    out: list[str] = []
    logs = doc.get("kind") == "logs"
    depth = _series_from_scenarios(doc, "decode_vs_depth") or (doc.get("series") or {}).get("decode_vs_depth", [])
    if depth:
        out.append(line_chart(_("Decode vs context depth"), [(_("decode tok/s"), [(p["depth"], p["tok_s"]) for p in depth])],
                              _("depth (tokens)"), "tok/s", points_only=logs))
    pre = _series_from_scenarios(doc, "prefill_vs_length") or (doc.get("series") or {}).get("prefill_vs_length", [])
    if pre:
        out.append(line_chart(_("Cold prefill vs prompt length"), [(_("prefill tok/s"), [(p["length"], p["tok_s"]) for p in pre])],
                              _("prompt tokens"), "tok/s", points_only=logs))
    conc = _series_from_scenarios(doc, "concurrency")
    if conc:
        out.append(line_chart(_("Concurrency"), [
            (_("steady-state tok/s, all streams"), [(p["streams"], p["aggregate_tok_s"]) for p in conc
                                                    if p.get("aggregate_tok_s") is not None]),
            (_("per-stream tok/s"), [(p["streams"], p["per_stream_tok_s"]) for p in conc])],
            _("parallel streams"), "tok/s"))
    return out


def _distribution_plots(doc: dict[str, Any], _: Callable[[str], str]) -> list[str]:
    """One strip chart per scenario and unit: each figure's samples (siblings shown once)."""
    by_unit: dict[tuple[str, str], list[tuple[str, list[float]]]] = {}
    seen: set[tuple[float, ...]] = set()
    for f in doc.get("figures", []):
        s = tuple(x for x in f.get("samples", []) if isinstance(x, (int, float)))
        if len(s) >= 2 and s not in seen:
            seen.add(s)
            base = f["name"].rsplit("_", 1)[0] if f["name"].endswith(("_median", "_p10", "_p90", "_max")) else f["name"]
            by_unit.setdefault((f.get("scenario", ""), f.get("unit", "")), []).append((base, list(s)))
    return [strip_chart(_("{scenario} per-request distributions ({unit})").format(scenario=scen, unit=unit), groups[:16], unit)
            for (scen, unit), groups in by_unit.items()]


def _gpu_plots(doc: dict[str, Any], _: Callable[[str], str]) -> list[str]:
    gpu = (doc.get("gpu") or {}).get("samples") or []
    if not gpu:
        return []
    out = []
    for key, unit, title in (("power_w", "W", _("GPU power over time")), ("temp_c", "°C", _("GPU temperature"))):
        by: dict[str, list[Point]] = {}
        for s in gpu:
            if s.get(key) is not None:
                by.setdefault(f"GPU{s.get('index')} {unit}", []).append((s["t_s"], s[key]))
        out.append(line_chart(title, list(by.items()), _("time (s)"), unit))
    return out


def _headline_html(doc: dict[str, Any], lang: str) -> str:
    lab = labels(lang)
    cards = []
    for h in headline(doc, lang):
        value = _e(h.value)
        if h.unit and h.value.endswith(" " + h.unit):
            value = f'{_e(h.value[:-len(h.unit) - 1])} <span class="u">{_e(h.unit)}</span>'
        note = f'<div class="note">{_e(h.note)}</div>' if h.note else ""
        cls = "card warn" if h.warn else "card"
        detail = f'<a href="#f-{_e(h.figure)}">{_e(h.detail)}</a>' if h.figure else _e(h.detail)
        cards.append(f'<div class="{cls}"><div class="k">{_e(h.label)}</div><div class="big">{value}</div>'
                     f'<div class="d">{detail}</div>{note}</div>')
    if not cards:
        return ""
    return f'<h2>{_e(lab["headline"])}</h2><div class="head">' + "".join(cards) + "</div>"


def _table_html(figures: list[dict[str, Any]], lang: str) -> list[str]:
    _ = translator(lang)
    lab = labels(lang)
    fn = footnotes(figures, lang)
    parts = [f"<h2>{_e(lab['figures'])}</h2><table><tr><th>{_e(lab['figure'])}</th><th>{_e(lab['value'])}</th><th>{_e(lab['unit'])}</th>"
             f"<th>N</th><th>p10 / p90</th><th>{_e(lab['method'])}</th></tr>"]
    for f, (m, note) in zip(figures, fn.refs, strict=True):
        sp = f.get("spread") or {}
        unit = f.get("unit", "")
        spread = f"{fmt_value(sp.get('p10'), unit)} / {fmt_value(sp.get('p90'), unit)}" if sp and f.get("n", 0) > 1 else ""
        ref = f'{_e(method_stat(str(f.get("method", "")), lang))}<sup><a href="#m{m}">{m}</a></sup>'
        if note:
            ref += f' <span class="note">⚠<sup><a href="#m{note}">{note}</a></sup></span>'
        parts.append(f'<tr id="f-{_e(f["name"])}"><td>{_e(f["name"])}</td><td class=v>{_e(fmt_value(f.get("value"), unit))}</td>'
                     f"<td>{_e(unit)}</td><td class=v>{_e(f.get('n'))}</td><td class=v>{_e(spread)}</td><td class=m>{ref}</td></tr>")
    parts.append("</table>")
    parts.append(f"<h3>{_e(lab['methods_h'])}</h3><ol class=fn>")
    for i, (text, is_note) in enumerate(fn.texts, 1):
        body = _e(_("note: {text}").format(text=text)) if is_note else _e(text)
        parts.append(f'<li id="m{i}"{" class=note" if is_note else ""}>{body}</li>')
    parts.append("</ol>")
    return parts


def render_html(doc: dict[str, Any], lang: str = "en") -> str:
    """Headline, findings, plots, then the table with its method footnotes, notes, interference
    and errors; in ``lang`` (llamarig.i18n)."""
    _ = translator(lang)

    def local_text(value: Any) -> str:
        return str(localize(value, lang))

    lab = labels(lang)
    title = report_title(doc, lang)
    html_lang = "zh-CN" if lang == "zh" else "en"
    parts = ["<!DOCTYPE html>", f'<html lang="{html_lang}"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{_e(title)}</title><style>{CSS}</style></head><body>", f"<h1>{_e(title)}</h1>"]
    parts += [f'<p class="meta">{_e(m)}</p>' for m in meta_lines(doc, lang)]
    parts.append(_headline_html(doc, lang))
    if doc.get("findings"):
        parts.append(f"<h2>{_e(lab['findings'])}</h2><ul>" + "".join(f"<li>{_e(local_text(x))}</li>" for x in doc["findings"]) + "</ul>")
    ps = plots(doc, lang)
    if ps:
        parts.append(f'<h2>{_e(lab["plots"])}</h2><div class="plots">' + "".join(ps) + "</div>")
    if doc.get("figures"):
        parts += _table_html(doc["figures"], lang)
    notes = [(sc["name"], n) for sc in doc.get("scenarios", []) for n in sc.get("notes") or []]
    if notes:
        parts.append(f"<h2>{_e(lab['notes'])}</h2><ul>"
                     + "".join(f"<li>{_e(sc)}: {_e(local_text(n))}</li>" for sc, n in notes[:100]) + "</ul>")
    inter = doc.get("interference") or {}
    if inter:
        parts.append(f"<h2>{_e(lab['interference_h'])}</h2><ul>")
        parts += [f'<li class="warn">{_e(lab["missing"])}: {_e(local_text(m))}</li>' for m in inter.get("missing", [])]
        parts += [f'<li class="warn">t={_e(e["t_s"])} s {_e(e["kind"])}: {_e(local_text(e["detail"]))}</li>' for e in inter.get("events", [])[:50]]
        rec = inter.get("reconciliation") or {}
        for k, v in (rec.get("counters") or {}).items():
            parts.append("<li>" + _e(_("/metrics {counter}: Δ {delta} vs ours {ours} (excess {excess})").format(
                counter=k, delta=v["server_delta"], ours=v["ours"], excess=v["excess"])) + "</li>")
        parts.append("</ul>")
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        parts.append(f"<p>{_e(lab['gpu_na'].format(reason=gpu.get('reason')))}</p>")
    if doc.get("errors"):
        parts.append(f"<h2>{_e(lab['errors'])}</h2><ul>" + "".join(f'<li class="warn">{_e(local_text(x))}</li>' for x in doc["errors"][:100]) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)
