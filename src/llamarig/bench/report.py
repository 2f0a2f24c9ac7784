"""Text renderings of a bench/logs document: rich terminal table, Markdown and JSON file, and
schema validation. The terminal and the Markdown report open with the headline (the figures a
user asks for first: decode, prefill, TTFT, concurrency, speculative acceptance, each with its
unit and n), then the full table, whose rows refer to numbered footnotes that state each
distinct method once. Labels and notes are in the ``lang`` the caller gives (llamarig.i18n); the JSON never changes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.table import Table

from llamarig.errors import InputError
from llamarig.i18n import N_, _, localize, translator

NOTES_SHOWN = 10  # scenario notes (skipped points, rejected samples) printed per scenario


def fmt_value(v: Any, unit: str) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if v.is_integer() and unit in ("events", "checkpoints", "tokens", "requests"):
            return str(int(v))
        if unit == "ratio":
            return f"{v:.3f}"
        if abs(v) >= 100:
            return f"{v:,.0f}" if unit not in ("MiB", "GiB") else f"{v:,.1f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}"
    return str(v)


def value_with_unit(v: Any, unit: str) -> str:
    """``67.8 tok/s``, ``1.62×``, ``0.723`` (a ratio has no unit word), ``—`` for none."""
    text = fmt_value(v, unit)
    if v is None or unit in ("", "ratio"):
        return text
    return f"{text}{unit}" if unit == "×" else f"{text} {unit}"


def _spread_text(f: dict[str, Any]) -> str:
    sp = f.get("spread") or {}
    if not sp or f.get("n", 0) < 2:
        return ""
    unit = f.get("unit", "")
    return f"p10 {fmt_value(sp.get('p10'), unit)} · p90 {fmt_value(sp.get('p90'), unit)}"


_STAT_PREFIX = re.compile(
    r"^(median|10th percentile|90th percentile|maximum \(best request\)|minimum|mean) over N=\d+ requests; "
)
#: the statistic a figure row shows next to its method footnote (the prefix stat_figures writes)
_STAT_WORDS = {
    "median": N_("median"),
    "10th percentile": N_("10th percentile"),
    "90th percentile": N_("90th percentile"),
    "maximum (best request)": N_("maximum (best request)"),
    "minimum": N_("minimum"),
    "mean": N_("mean"),
}


def method_key(method: str) -> str:
    """The method without its 'median over N=… requests; ' prefix (shared by sibling figures)."""
    return _STAT_PREFIX.sub("", method)


def method_stat(method: str, lang: str = "en") -> str:
    """The statistic of a figure, in ``lang`` ('' when its method names none)."""
    _ = translator(lang)
    m = _STAT_PREFIX.match(method)
    return _(_STAT_WORDS[m.group(1)]) if m else ""


_SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def labels(lang: str = "en") -> dict[str, str]:
    """Headings and column names in ``lang`` (looked up once per rendering; Babel does not
    extract messages written inside f-strings)."""
    _ = translator(lang)
    return {
        "headline": _("Headline"), "findings": _("Findings"), "figures": _("Figures"), "plots": _("Plots"),
        "methods_h": _("Methods"), "methods": _("methods"), "notes": _("Notes (skipped points, rejected samples)"),
        "interference_h": _("Interference"), "interference": _("interference"), "errors": _("Errors"),
        "error": _("error"), "aborted": _("aborted"), "missing": _("missing"), "figure": _("figure"),
        "value": _("value"), "unit": _("unit"), "method": _("how measured"), "gpu_na": _("GPU telemetry: not available: {reason}"),
    }


def sup(n: int) -> str:
    """``12`` -> ``¹²``: a footnote mark."""
    return str(n).translate(_SUP)


@dataclass(frozen=True)
class Footnotes:
    """Each distinct method text (and each distinct note) once, numbered from 1; ``refs[i]`` is
    the (method number, note number or None) of figure ``i``."""

    texts: list[tuple[str, bool]]  # (text, is a note)
    refs: list[tuple[int, int | None]]


def footnotes(figures: Sequence[dict[str, Any]], lang: str = "en") -> Footnotes:
    texts: list[tuple[str, bool]] = []
    index: dict[tuple[str, bool], int] = {}

    def number(text: str, is_note: bool) -> int:
        key = (text, is_note)
        if key not in index:
            texts.append(key)
            index[key] = len(texts)
        return index[key]

    refs = []
    for f in figures:
        text = method_key(str(f.get("method", "")))
        if lang == "zh" and f.get("method_zh"):
            text = f"{f['method_zh']}。{text}"
        note = localize(f.get("note") or "", lang)
        refs.append((number(text, False), number(note, True) if note else None))
    return Footnotes(texts, refs)


# ------------------------------------------------------------------------- headline
@dataclass(frozen=True)
class HeadItem:
    """One headline figure: ``label`` (translated), ``value`` with its unit, ``detail`` (the
    statistic, spread and n), an optional ``note``; ``warn`` marks a problem."""

    label: str
    value: str
    detail: str
    note: str = ""
    warn: bool = False
    figure: str = ""  # the figure's name (the HTML links the card to its table row)
    unit: str = ""  # the unit that ends ``value`` (the HTML sets it smaller)
    lang: str = "en"  # the language of label, detail and note

    def line(self) -> str:
        _ = translator(self.lang)
        text = _("{label}: {value} ({detail})").format(label=self.label, value=self.value, detail=self.detail)
        return f"{text} — {self.note}" if self.note else text


def _detail(f: dict[str, Any], stat: str | None = None, what: str = "", lang: str = "en") -> str:
    """``median, p10 … · p90 …, n=5``; ``stat`` is the statistic's label (default: median; ""
    for a single derived value); ``what`` (context) follows after a semicolon."""
    _ = translator(lang)
    n = f.get("n", 0)
    sp = f.get("spread") or {}
    unit = f.get("unit", "")
    words = _("median") if stat is None else stat
    if n >= 2 and sp:
        body = _("p10 {p10} · p90 {p90}, n={n}").format(p10=fmt_value(sp.get("p10"), unit), p90=fmt_value(sp.get("p90"), unit), n=n)
    else:
        body = _("n={n}").format(n=n)
    if words:
        body = _("{a}, {b}").format(a=words, b=body)
    return _("{a}; {b}").format(a=body, b=what) if what else body


def _item_in(label: str, f: dict[str, Any], *, stat: str | None = None, what: str = "", lang: str = "en") -> HeadItem:
    _ = translator(lang)
    if f.get("value") is None:  # the reason is the detail
        return HeadItem(label=label, value="—", detail=localize(f.get("note") or _("no valid sample"), lang),
                        figure=f["name"], lang=lang)
    unit = f.get("unit", "")
    return HeadItem(label=label, value=value_with_unit(f.get("value"), unit), detail=_detail(f, stat, what, lang),
                    note=localize(f.get("note") or "", lang), figure=f["name"], unit=unit, lang=lang)


def headline(doc: dict[str, Any], lang: str = "en") -> list[HeadItem]:
    """The figures a user asks for first, in this order: decode (median and spread), prefill at
    each measured length, TTFT (warm, then that of the decode requests), decode vs depth,
    concurrency (the most streams, against one), speculative acceptance, then problems
    (failed requests, an aborted run, interference); in ``lang``."""
    _ = translator(lang)

    def _item(label: str, f: dict[str, Any], *, stat: str | None = None, what: str = "") -> HeadItem:
        return _item_in(label, f, stat=stat, what=what, lang=lang)

    figs = {f["name"]: f for f in doc.get("figures", [])}
    order = [f["name"] for f in doc.get("figures", [])]
    out: list[HeadItem] = []
    for name, label in (("decode_tok_s_median", _("decode")), ("log_decode_tok_s_median", _("decode (from the log)")),
                        ("workload_decode_tok_s_median", _("decode (your workload)"))):
        if name in figs:
            out.append(_item(label, figs[name]))
    for name in order:
        m = re.fullmatch(r"prefill_tok_s_(\w+?)_median", name)
        if m:
            out.append(_item(_("prefill at {length} tokens").format(length=m.group(1)), figs[name]))
    for name, label in (("log_prefill_tok_s_median", _("prefill (from the log)")),
                        ("workload_prefill_tok_s_median", _("prefill (your workload)"))):
        if name in figs:
            out.append(_item(label, figs[name]))
    if "ttft_warm_ms_median" in figs:
        prefix = (doc.get("config") or {}).get("ttft_prefix")
        what = _("cached prefix ~{tokens} tokens").format(tokens=prefix) if prefix else ""
        out.append(_item(_("warm TTFT"), figs["ttft_warm_ms_median"], what=what))
    for name, label in (("decode_ttft_ms_median", _("TTFT (decode requests)")),
                        ("workload_ttft_ms_median", _("TTFT (your workload)"))):
        if name in figs:
            out.append(_item(label, figs[name]))
    depth = [figs[n] for n in order if re.fullmatch(r"decode_tok_s_at_depth_\w+?_median", n)]
    depth = [f for f in depth if f.get("value") is not None]
    if len(depth) >= 2:
        a, b = depth[0], depth[-1]
        da = (a.get("params") or {}).get("depth_median")
        db = (b.get("params") or {}).get("depth_median")
        drop = figs.get("decode_depth_drop_pct", {}).get("value")
        detail = _("median at depth {a} → {b} tokens, n={n} each").format(
            a=fmt_value(da, "tokens"), b=fmt_value(db, "tokens"), n=min(a.get("n", 0), b.get("n", 0)))
        if drop is not None:
            detail += _(", {pct} % slower").format(pct=fmt_value(float(drop), "%")) if drop >= 0 else \
                _(", {pct} % faster").format(pct=fmt_value(float(-drop), "%"))
        out.append(HeadItem(_("decode vs depth"), f"{fmt_value(a['value'], 'tok/s')} → {value_with_unit(b['value'], 'tok/s')}",
                            detail, note=localize(b.get("note") or a.get("note") or "", lang), figure=b["name"],
                            unit="tok/s", lang=lang))
    elif depth:
        out.append(_item(_("decode at depth {depth}").format(depth=fmt_value((depth[0].get("params") or {}).get("depth_median"), "tokens")),
                         depth[0]))
    conc = sorted(((int(m.group(1)), figs[n]) for n in order if (m := re.fullmatch(r"concurrency_(\d+)_aggregate_tok_s", n))),
                  key=lambda p: p[0])
    if conc:
        streams, f = conc[-1]
        per = figs.get(f"concurrency_{streams}_per_stream_tok_s_median", {}).get("value")
        context = [_("{value} per stream").format(value=value_with_unit(per, "tok/s"))] if per is not None else []
        if len(conc) > 1 and conc[0][1].get("value") is not None:
            one = value_with_unit(conc[0][1]["value"], "tok/s")
            context.append(_("1 stream: {value}").format(value=one) if conc[0][0] == 1 else
                           _("{streams} streams: {value}").format(streams=conc[0][0], value=one))
        joined = _("{a}; {b}").format(a=context[0], b=context[1]) if len(context) == 2 else "".join(context)
        out.append(_item(_("{streams} parallel streams, aggregate").format(streams=streams), f,
                         stat=_("median over rounds"), what=joined))
    for name, label, stat in (("spec_acceptance", _("speculative acceptance (accepted ÷ drafted)"), ""),
                              ("log_spec_acceptance", _("speculative acceptance (from the log)"), ""),
                              ("spec_mean_acceptance_length", _("mean acceptance length"), ""),
                              ("spec_decode_tok_s_median", _("decode with speculation"), None),
                              ("spec_speedup", _("speed-up over the baseline"), "")):
        if name in figs:
            out.append(_item(label, figs[name], stat=stat))
    errors = doc.get("errors") or []
    if errors:
        out.append(HeadItem(_("failed requests"), str(len(errors)), _("left out of every figure; see Errors"), warn=True,
                            lang=lang))
    if doc.get("aborted"):
        out.append(HeadItem(_("run aborted"), "—", localize(doc["aborted"], lang), warn=True, lang=lang))
    ev = figs.get("interference_events")
    if ev is not None:
        polls = (ev.get("params") or {}).get("polls")
        n_ev = ev.get("value")
        detail = _("{polls} /slots polls").format(polls=polls) if polls is not None else _("n={n}").format(n=ev.get("n", 0))
        out.append(HeadItem(_("interference"), value_with_unit(n_ev, "events"), detail,
                            note=localize(ev.get("note") or "", lang), warn=bool(n_ev), figure="interference_events",
                            unit="events", lang=lang))
    return out


def headline_lines(doc: dict[str, Any], lang: str = "en") -> list[str]:
    return [h.line() for h in headline(doc, lang)]


# ------------------------------------------------------------------------- terminal
def terminal(doc: dict[str, Any], console: Console, *, after_headline: Iterable[RenderableType] = (),
             lang: str = "en") -> None:
    """Headline first, then the findings, ``after_headline`` (logs: the request timeline), the
    figure table with method references, the numbered methods, notes and problems; in ``lang``."""
    _ = translator(lang)

    def local_text(value: Any) -> str:
        return str(localize(value, lang))

    t = doc.get("target", {})
    head = f"[bold]{doc.get('kind', 'bench')}[/] {escape(str(t.get('url') or doc.get('source', {}).get('path', '')))}"
    if t.get("build_info"):
        head += f"  build {escape(str(t['build_info']))}"
    if t.get("model"):
        head += f"  model {escape(Path(str(t['model'])).name)}"
    console.print(head)
    lab = labels(lang)
    for h in headline(doc, lang):
        line = _("{label}: {value} ({detail})").format(label=f"[bold]{escape(h.label)}[/]", value=escape(h.value),
                                                        detail=f"[dim]{escape(h.detail)}[/]")
        if h.note:
            line += f" [yellow]— {escape(h.note)}[/]"
        console.print(f"[red]![/] {line}" if h.warn else f"  {line}", highlight=False)
    # the findings answer the question (what ran, what never arrived): right under the headline,
    # as in the Markdown and HTML reports, not after the tables
    if doc.get("findings"):
        heading = _("{heading}:").format(heading=lab["findings"])
        console.print(f"[bold]{escape(heading)}[/]")
    for f in doc.get("findings", []):
        console.print(f"• {escape(local_text(f))}", highlight=False)
    for r in after_headline:
        console.print(r)
    # at narrow widths the figure name folds onto a second line (names have no spaces to wrap
    # at); every other column keeps its width, so N and the method reference never vanish
    table = Table(show_lines=False, header_style="bold", show_edge=False)
    table.add_column(lab["figure"], overflow="fold")
    table.add_column(lab["value"], justify="right", no_wrap=True)
    table.add_column(lab["unit"], no_wrap=True)
    table.add_column("N", justify="right", no_wrap=True)
    table.add_column("p10 … p90", no_wrap=True)
    table.add_column(lab["method"], justify="right", no_wrap=True)
    figures = doc.get("figures", [])
    fn = footnotes(figures, lang)
    for f, (m, note) in zip(figures, fn.refs, strict=True):
        ref = f"[{m}]" + (f" [yellow]![{note}][/]" if note else "")
        table.add_row(escape(f["name"]), fmt_value(f.get("value"), f.get("unit", "")), f.get("unit", ""), str(f.get("n", "")),
                      _spread_text(f).replace("p10 ", "").replace(" · p90 ", " … "), escape(ref))
    if figures:
        console.print(table)
        heading = _("{heading}:").format(heading=lab["methods"])
        console.print(f"[bold]{escape(heading)}[/]")
    for i, (text, is_note) in enumerate(fn.texts, 1):
        if is_note:
            console.print(f"  [yellow]![{i}][/] {escape(text)}", highlight=False)
        else:
            console.print(f"  [{i}] {text}", highlight=False, markup=False)
    for sc in doc.get("scenarios", []):
        notes = sc.get("notes") or []
        for n in notes[:NOTES_SHOWN]:
            console.print(f"[cyan]{escape(sc['name'])}:[/] {escape(local_text(n))}", highlight=False)
        if len(notes) > NOTES_SHOWN:
            more = _("… {n} more notes in the JSON (scenarios[].notes)").format(n=len(notes) - NOTES_SHOWN)
            console.print(f"[cyan]{escape(sc['name'])}:[/] {escape(more)}", highlight=False)
    inter = doc.get("interference") or {}
    for m in inter.get("missing", []):
        console.print(f"[yellow]{escape(lab['missing'])}:[/] {escape(local_text(m))}", highlight=False)
    for ev in inter.get("events", [])[:10]:
        console.print(f"[red]{escape(lab['interference'])}:[/] t={ev['t_s']} s {ev['kind']}: {escape(local_text(ev['detail']))}", highlight=False)
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        console.print(f"[dim]{escape(lab['gpu_na'].format(reason=gpu.get('reason')))}[/]",
                      highlight=False)
    for e in doc.get("errors", [])[:20]:
        console.print(f"[red]{escape(lab['error'])}:[/] {escape(local_text(e))}", highlight=False)
    if doc.get("aborted"):
        console.print(f"[red]{escape(lab['aborted'])}:[/] {escape(local_text(doc['aborted']))}", highlight=False)


# ------------------------------------------------------------------------- markdown
def meta_lines(doc: dict[str, Any], lang: str = "en") -> list[str]:
    """What was measured (target, log, run, client), one plain line each, in ``lang``."""
    _ = translator(lang)
    t = doc.get("target") or {}
    out = []
    if t:
        out.append(_("target {url} build {build} model {model} n_ctx/slot {n_ctx} slots {slots}").format(
            url=t.get("url"), build=t.get("build_info"), model=t.get("model"), n_ctx=t.get("n_ctx_slot"), slots=t.get("total_slots")))
    src = doc.get("source") or {}
    if src:
        out.append(_("log {path}: {lines} lines, {recognised} recognised, {skipped} skipped").format(
            path=src.get("path"), lines=src.get("lines"), recognised=src.get("recognised"), skipped=src.get("skipped")))
    if doc.get("started_at"):
        out.append(_("run {start} → {end} (run id {run_id})").format(
            start=doc.get("started_at"), end=doc.get("finished_at"), run_id=doc.get("run_id")))
    c = doc.get("client") or {}
    if c:
        out.append(_("client {host} {platform} python {python}").format(
            host=c.get("hostname"), platform=c.get("platform"), python=c.get("python")))
    return out


def report_title(doc: dict[str, Any], lang: str = "en") -> str:
    _ = translator(lang)
    return _("llamarig {kind} report").format(kind=doc.get("kind", "bench"))


def _md_cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def markdown(doc: dict[str, Any], lang: str = "en") -> str:
    """Headline, then the table (指标 | 数值 | N | 测法 in Chinese, as in the 307K-context MTP field
    report, tests/fixtures/seeds/004_d9cc8479c3afbc2e.txt) whose rows cite numbered method
    footnotes, then the footnotes, notes, interference, findings and errors; in ``lang``."""
    _ = translator(lang)

    def local_text(value: Any) -> str:
        return str(localize(value, lang))

    lab = labels(lang)
    lines = [f"# {report_title(doc, lang)}", ""]
    lines += [f"- {m}" for m in meta_lines(doc, lang)]
    heads = headline(doc, lang)
    if heads:
        lines += ["", f"## {lab['headline']}", ""]
        for h in heads:
            text = _("{label}: {value} ({detail})").format(label=f"**{h.label}**", value=h.value, detail=h.detail)
            if h.note:
                text += f" — {h.note}"
            lines.append(f"- {'⚠ ' if h.warn else ''}{_md_cell(text)}")
    if doc.get("findings"):
        lines += ["", f"## {lab['findings']}", ""] + [f"- {local_text(x)}" for x in doc["findings"]]
    figures = doc.get("figures", [])
    if figures:
        fn = footnotes(figures, lang)
        lines += ["", f"## {lab['figures']}", "",
                  f"| {lab['figure']} | {lab['value']} | N | {lab['method']} |", "|---|---|---|---|"]
        for f, (m, note) in zip(figures, fn.refs, strict=True):
            val = value_with_unit(f.get("value"), f.get("unit", ""))
            sp = _spread_text(f)
            if sp:
                val += f" ({sp})"
            ref = f"{method_stat(str(f.get('method', '')), lang)} {sup(m)}".strip()
            if note:
                ref += f" ⚠{sup(note)}"
            lines.append(f"| {f['name']} | {val} | {f.get('n', '')} | {_md_cell(ref)} |")
        lines += ["", f"### {lab['methods_h']}", ""]
        for i, (text, is_note) in enumerate(fn.texts, 1):
            lines.append(f"- {sup(i)} " + (_("note: {text}").format(text=text) if is_note else text))
    notes = [f"- {sc['name']}: {local_text(n)}" for sc in doc.get("scenarios", []) for n in sc.get("notes") or []]
    if notes:
        lines += ["", f"## {lab['notes']}", ""] + notes[:50]
    inter = doc.get("interference") or {}
    if inter.get("missing") or inter.get("events"):
        lines += ["", f"## {lab['interference_h']}", ""]
        lines += [f"- {lab['missing']}: {local_text(m)}" for m in inter.get("missing", [])]
        lines += [f"- t={e['t_s']} s {e['kind']}: {local_text(e['detail'])}" for e in inter.get("events", [])[:20]]
    if doc.get("errors"):
        lines += ["", f"## {lab['errors']}", ""] + [f"- {local_text(x)}" for x in doc["errors"][:50]]
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        lines += ["", lab["gpu_na"].format(reason=gpu.get("reason"))]
    return "\n".join(lines) + "\n"


def write_json(doc: dict[str, Any], path: Path) -> None:
    try:
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        raise InputError(_("{path}: cannot write: {error}").format(path=path, error=e.strerror or e)) from e


def read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(_("{path}: cannot read: {error}").format(path=path, error=e.strerror or e)) from e
    except ValueError as e:
        raise InputError(_("{path}: not JSON: {error}").format(path=path, error=e)) from e
    if not isinstance(doc, dict) or not isinstance(doc.get("figures"), list):
        raise InputError(_("{path}: not a llamarig bench/logs JSON (no 'figures' list)").format(path=path))
    return doc


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    text = resources.files("llamarig").joinpath("data/bench.schema.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data
