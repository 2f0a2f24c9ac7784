"""Text renderings of a bench/logs document: rich terminal table, Markdown and JSON file, and
schema validation. The terminal and the Markdown report open with the headline (the figures a
user asks for first: decode, prefill, TTFT, concurrency, speculative acceptance, each with its
unit and n), then the full table, whose rows refer to numbered footnotes that state each
distinct method once. Labels and notes are in the ``lang`` the caller gives (llamarig.i18n); the JSON never changes."""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

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
    r"^(median|10th percentile|90th percentile|(?:maximum|minimum)(?: \((?:best|worst) request\))?|mean) "
    r"over N=\d+ requests; "
)
#: the statistic a figure row shows next to its method footnote (the prefix stat_figures writes)
_STAT_WORDS = {
    "median": N_("median"),
    "10th percentile": N_("10th percentile"),
    "90th percentile": N_("90th percentile"),
    "maximum (best request)": N_("maximum (best request)"),
    "maximum (worst request)": N_("maximum (worst request)"),
    "maximum": N_("maximum"),
    "minimum (best request)": N_("minimum (best request)"),
    "minimum (worst request)": N_("minimum (worst request)"),
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


def _concurrency_words(f: dict[str, Any], lang: str) -> str:
    """Which concurrency a decode median holds (``llamarig logs``: requests that decoded alone and
    with others active), when it mixes both or holds only parallel ones; "" otherwise."""
    _ = translator(lang)
    p = f.get("params") or {}
    if not p.get("parallel"):
        return ""
    return _("{alone} alone, {parallel} with others active (up to {most} at once)").format(
        alone=p.get("alone", 0), parallel=p["parallel"], most=p.get("max_concurrency", "?"))


def headline(doc: dict[str, Any], lang: str = "en") -> list[HeadItem]:
    """The figures a user asks for first, in this order: decode (median and spread), prefill at
    each measured length, TTFT (warm, then that of the decode requests, cold and warm apart),
    decode vs depth, concurrency (the most streams, against the fewest), speculative acceptance,
    then problems (failed requests, an aborted run, interference); in ``lang``."""
    h = _Head(doc, lang)
    return h.decode() + h.prefill() + h.ttft() + h.depth() + h.concurrency() + h.spec() + h.problems()


class _Head:
    """The headline's sections over one document's figures."""

    def __init__(self, doc: dict[str, Any], lang: str) -> None:
        self.doc, self.lang, self._ = doc, lang, translator(lang)
        self.figs = {f["name"]: f for f in doc.get("figures", [])}
        self.order = [f["name"] for f in doc.get("figures", [])]

    def item(self, label: str, f: dict[str, Any], *, stat: str | None = None, what: str = "") -> HeadItem:
        return _item_in(label, f, stat=stat, what=what, lang=self.lang)

    def named(self, pairs: Iterable[tuple[str, str]]) -> list[HeadItem]:
        return [self.item(label, self.figs[name]) for name, label in pairs if name in self.figs]

    def decode(self) -> list[HeadItem]:
        _ = self._
        return [self.item(label, self.figs[name], what=_concurrency_words(self.figs[name], self.lang))
                for name, label in (("decode_tok_s_median", _("decode")),
                                    ("log_decode_tok_s_median", _("decode (from the log)")),
                                    ("workload_decode_tok_s_median", _("decode (your workload)"))) if name in self.figs]

    def prefill(self) -> list[HeadItem]:
        _ = self._
        out = [self.item(_("prefill at {length} tokens").format(length=m.group(1)), self.figs[name])
               for name in self.order if (m := re.fullmatch(r"prefill_tok_s_(\w+?)_median", name))]
        return out + self.named((("log_prefill_tok_s_median", _("prefill (from the log)")),
                                 ("workload_prefill_tok_s_median", _("prefill (your workload)"))))

    def ttft(self) -> list[HeadItem]:
        """Warm TTFT on the cached prefix, then the TTFT of the decode requests and of a workload,
        cold and warm apart, each with the prompt tokens the cache served."""
        _ = self._
        out: list[HeadItem] = []
        if "ttft_warm_ms_median" in self.figs:
            prefix = (self.doc.get("config") or {}).get("ttft_prefix")
            what = _("cached prefix ~{tokens} tokens").format(tokens=prefix) if prefix else ""
            out.append(self.item(_("warm TTFT"), self.figs["ttft_warm_ms_median"], what=what))
        labels = {("decode", "cold"): _("TTFT, cold (decode requests)"), ("decode", "warm"): _("TTFT, warm (decode requests)"),
                  ("decode", ""): _("TTFT (decode requests)"), ("workload", "cold"): _("TTFT, cold (your workload)"),
                  ("workload", "warm"): _("TTFT, warm (your workload)"), ("workload", ""): _("TTFT (your workload)")}
        for (base, state), label in labels.items():
            f = self.figs.get(f"{base}_ttft_{state}_ms_median" if state else f"{base}_ttft_ms_median")
            if f is not None:
                out.append(self.item(label, f, what=_cached_words(f, self.lang)))
        return out

    def depth(self) -> list[HeadItem]:
        _ = self._
        depth = [self.figs[n] for n in self.order if re.fullmatch(r"decode_tok_s_at_depth_\w+?_median", n)]
        depth = [f for f in depth if f.get("value") is not None]
        if len(depth) == 1:
            d = (depth[0].get("params") or {}).get("depth_median")
            return [self.item(_("decode at depth {depth}").format(depth=fmt_value(d, "tokens")), depth[0])]
        if not depth:
            return []
        a, b = depth[0], depth[-1]
        da = (a.get("params") or {}).get("depth_median")
        db = (b.get("params") or {}).get("depth_median")
        drop = self.figs.get("decode_depth_drop_pct", {}).get("value")
        detail = _("median at depth {a} → {b} tokens, n={n} each").format(
            a=fmt_value(da, "tokens"), b=fmt_value(db, "tokens"), n=min(a.get("n", 0), b.get("n", 0)))
        if drop is not None:
            detail += _(", {pct} % slower").format(pct=fmt_value(float(drop), "%")) if drop >= 0 else \
                _(", {pct} % faster").format(pct=fmt_value(float(-drop), "%"))
        return [HeadItem(_("decode vs depth"), f"{fmt_value(a['value'], 'tok/s')} → {value_with_unit(b['value'], 'tok/s')}",
                         detail, note=localize(b.get("note") or a.get("note") or "", self.lang), figure=b["name"],
                         unit="tok/s", lang=self.lang)]

    def concurrency(self) -> list[HeadItem]:
        """The steady-state decode of the most streams, per stream, the whole round (prefill and
        queueing in), and the fewest streams for comparison."""
        _ = self._
        conc = sorted(((int(m.group(1)), self.figs[n]) for n in self.order
                       if (m := re.fullmatch(r"concurrency_(\d+)_aggregate_tok_s", n))), key=lambda p: p[0])
        if not conc:
            return []
        streams, f = conc[-1]
        per = self.figs.get(f"concurrency_{streams}_per_stream_tok_s_median", {}).get("value")
        whole = self.figs.get(f"concurrency_{streams}_round_tok_s", {}).get("value")
        context = [_("{value} per stream").format(value=value_with_unit(per, "tok/s"))] if per is not None else []
        if whole is not None:
            context.append(_("whole round with prefill and queueing {value}").format(value=value_with_unit(whole, "tok/s")))
        if len(conc) > 1 and conc[0][1].get("value") is not None:
            one = value_with_unit(conc[0][1]["value"], "tok/s")
            context.append(_("1 stream: {value}").format(value=one) if conc[0][0] == 1 else
                           _("{streams} streams: {value}").format(streams=conc[0][0], value=one))
        joined = context[0] if context else ""
        for c in context[1:]:
            joined = _("{a}; {b}").format(a=joined, b=c)
        return [self.item(_("{streams} parallel streams, steady-state decode").format(streams=streams), f,
                          stat=_("median over rounds"), what=joined)]

    def spec(self) -> list[HeadItem]:
        _ = self._
        return [self.item(label, self.figs[name], stat=stat) for name, label, stat in (
            ("spec_acceptance", _("speculative acceptance (accepted ÷ drafted)"), ""),
            ("log_spec_acceptance", _("speculative acceptance (from the log)"), ""),
            ("spec_mean_acceptance_length", _("mean acceptance length"), ""),
            ("spec_decode_tok_s_median", _("decode with speculation"), None),
            ("spec_speedup", _("speed-up over the baseline"), "")) if name in self.figs]

    def problems(self) -> list[HeadItem]:
        _, lang, doc = self._, self.lang, self.doc
        out: list[HeadItem] = []
        errors = doc.get("errors") or []
        if errors:
            out.append(HeadItem(_("failed requests"), str(len(errors)), _("left out of every figure; see Errors"),
                                warn=True, lang=lang))
        if doc.get("aborted"):
            out.append(HeadItem(_("run aborted"), "—", localize(doc["aborted"], lang), warn=True, lang=lang))
        ev = self.figs.get("interference_events")
        if ev is not None:
            polls = (ev.get("params") or {}).get("polls")
            n_ev = ev.get("value")
            detail = _("{polls} /slots polls").format(polls=polls) if polls is not None else _("n={n}").format(n=ev.get("n", 0))
            out.append(HeadItem(_("interference"), value_with_unit(n_ev, "events"), detail,
                                note=localize(ev.get("note") or "", lang), warn=bool(n_ev), figure="interference_events",
                                unit="events", lang=lang))
        return out


def _cached_words(f: dict[str, Any], lang: str) -> str:
    """How much of the prompt the cache served, for a TTFT: ``{cached} of {prompt} prompt tokens cached``."""
    p = f.get("params") or {}
    if p.get("cached_tokens_median") is None:
        return ""
    _ = translator(lang)
    return _("{cached} of {prompt} prompt tokens cached (medians)").format(
        cached=fmt_value(float(p["cached_tokens_median"]), "tokens"), prompt=fmt_value(float(p["prompt_tokens_median"]), "tokens"))


def headline_lines(doc: dict[str, Any], lang: str = "en") -> list[str]:
    return [h.line() for h in headline(doc, lang)]


# ------------------------------------------------------------------------- terminal
def terminal(doc: dict[str, Any], console: Console, *, after_headline: Iterable[RenderableType] = (),
             lang: str = "en") -> None:
    """Headline first, then the findings, ``after_headline`` (logs: the request timeline), the
    figure table with method references, the numbered methods, notes and problems; in ``lang``.
    Everything is a ``Text`` (styles, never markup), so no text of the document is read as markup."""
    for part in terminal_parts(doc, after_headline, lang):
        console.print(part, highlight=False)


def terminal_parts(doc: dict[str, Any], after_headline: Iterable[RenderableType] = (),
                   lang: str = "en") -> list[RenderableType]:
    """What :func:`terminal` prints, in order."""
    parts: list[RenderableType] = [_title_text(doc)]
    parts += [_headline_text(h, lang) for h in headline(doc, lang)]
    # the findings answer the question (what ran, what never arrived): right under the headline,
    # as in the Markdown and HTML reports, not after the tables
    parts += _findings_texts(doc, lang)
    parts += list(after_headline)
    parts += _figures_parts(doc, lang)
    parts += _problem_texts(doc, lang)
    return parts


def _title_text(doc: dict[str, Any]) -> Text:
    t = doc.get("target", {})
    head = Text(str(doc.get("kind", "bench")), style="bold")
    head.append(" " + str(t.get("url") or doc.get("source", {}).get("path", "")))
    if t.get("build_info"):
        head.append(f"  build {t['build_info']}")
    if t.get("model"):
        head.append(f"  model {Path(str(t['model'])).name}")
    return head


def _headline_text(h: HeadItem, lang: str) -> Text:
    _ = translator(lang)
    line = Text.assemble(("! ", "red") if h.warn else "  ")
    for piece, style in _fields_in(_("{label}: {value} ({detail})"), label=(h.label, "bold"), value=(h.value, ""),
                                   detail=(h.detail, "dim")):
        line.append(piece, style=style)
    if h.note:
        line.append(f" — {h.note}", style="yellow")
    return line


def _fields_in(template: str, **fields: tuple[str, str]) -> list[tuple[str, str]]:
    """``template`` (a translated message with ``{name}`` fields) cut into (text, style) pieces,
    each field with its own style: the order of the fields follows the language."""
    out: list[tuple[str, str]] = []
    for literal, name, _spec, _conv in string.Formatter().parse(template):
        if literal:
            out.append((literal, ""))
        if name is not None:
            out.append(fields[name])
    return out


def _findings_texts(doc: dict[str, Any], lang: str) -> list[Text]:
    if not doc.get("findings"):
        return []
    _ = translator(lang)
    out = [Text(_("{heading}:").format(heading=labels(lang)["findings"]), style="bold")]
    return out + [Text(f"• {localize(f, lang)}") for f in doc["findings"]]


def _figures_parts(doc: dict[str, Any], lang: str) -> list[RenderableType]:
    """The figure table (each row cites its method and note footnotes), then the footnotes."""
    figures = doc.get("figures", [])
    if not figures:
        return []
    _ = translator(lang)
    lab = labels(lang)
    # at narrow widths the figure name folds onto a second line (names have no spaces to wrap
    # at); every other column keeps its width, so N and the method reference never vanish
    table = Table(show_lines=False, header_style="bold", show_edge=False)
    table.add_column(lab["figure"], overflow="fold")
    table.add_column(lab["value"], justify="right", no_wrap=True)
    table.add_column(lab["unit"], no_wrap=True)
    table.add_column("N", justify="right", no_wrap=True)
    table.add_column("p10 … p90", no_wrap=True)
    table.add_column(lab["method"], justify="right", no_wrap=True)
    fn = footnotes(figures, lang)
    for f, (m, note) in zip(figures, fn.refs, strict=True):
        ref = Text(f"[{m}]")
        if note:
            ref.append(f" ![{note}]", style="yellow")
        table.add_row(Text(f["name"]), fmt_value(f.get("value"), f.get("unit", "")), Text(f.get("unit", "")),
                      str(f.get("n", "")), _spread_text(f).replace("p10 ", "").replace(" · p90 ", " … "), ref)
    parts: list[RenderableType] = [table, Text(_("{heading}:").format(heading=lab["methods"]), style="bold")]
    for i, (text, is_note) in enumerate(fn.texts, 1):
        parts.append(Text.assemble("  ", (f"![{i}]", "yellow"), f" {text}") if is_note else Text(f"  [{i}] {text}"))
    return parts


def _problem_texts(doc: dict[str, Any], lang: str) -> list[Text]:
    """Scenario notes, what was missing, interference events, GPU, errors, an aborted run."""
    _ = translator(lang)
    lab = labels(lang)
    out: list[Text] = []
    for sc in doc.get("scenarios", []):
        notes = [str(localize(n, lang)) for n in sc.get("notes") or []]
        if len(notes) > NOTES_SHOWN:
            notes = notes[:NOTES_SHOWN] + [_("… {n} more notes in the JSON (scenarios[].notes)").format(
                n=len(notes) - NOTES_SHOWN)]
        out += [Text.assemble((f"{sc['name']}:", "cyan"), f" {n}") for n in notes]
    inter = doc.get("interference") or {}
    out += [Text.assemble((f"{lab['missing']}:", "yellow"), f" {localize(m, lang)}") for m in inter.get("missing", [])]
    out += [Text.assemble((f"{lab['interference']}:", "red"), f" t={ev['t_s']} s {ev['kind']}: {localize(ev['detail'], lang)}")
            for ev in inter.get("events", [])[:10]]
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        out.append(Text(lab["gpu_na"].format(reason=gpu.get("reason")), style="dim"))
    out += [Text.assemble((f"{lab['error']}:", "red"), f" {localize(e, lang)}") for e in doc.get("errors", [])[:20]]
    if doc.get("aborted"):
        out.append(Text.assemble((f"{lab['aborted']}:", "red"), f" {localize(doc['aborted'], lang)}"))
    return out


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
    lines = [f"# {report_title(doc, lang)}", ""]
    lines += [f"- {m}" for m in meta_lines(doc, lang)]
    lines += _md_headline(doc, lang) + _md_findings(doc, lang) + _md_figures(doc, lang) + _md_problems(doc, lang)
    return "\n".join(lines) + "\n"


def _md_section(title: str, items: list[str]) -> list[str]:
    return ["", f"## {title}", "", *items] if items else []


def _md_headline(doc: dict[str, Any], lang: str) -> list[str]:
    _ = translator(lang)
    items = []
    for h in headline(doc, lang):
        text = _("{label}: {value} ({detail})").format(label=f"**{h.label}**", value=h.value, detail=h.detail)
        if h.note:
            text += f" — {h.note}"
        items.append(f"- {'⚠ ' if h.warn else ''}{_md_cell(text)}")
    return _md_section(labels(lang)["headline"], items)


def _md_findings(doc: dict[str, Any], lang: str) -> list[str]:
    return _md_section(labels(lang)["findings"], [f"- {localize(x, lang)}" for x in doc.get("findings") or []])


def _md_figures(doc: dict[str, Any], lang: str) -> list[str]:
    """The figure table (each row cites its method and note footnotes), then the footnotes."""
    figures = doc.get("figures", [])
    if not figures:
        return []
    _ = translator(lang)
    lab = labels(lang)
    fn = footnotes(figures, lang)
    lines = ["", f"## {lab['figures']}", "", f"| {lab['figure']} | {lab['value']} | N | {lab['method']} |",
             "|---|---|---|---|"]
    for f, (m, note) in zip(figures, fn.refs, strict=True):
        val = value_with_unit(f.get("value"), f.get("unit", ""))
        sp = _spread_text(f)
        val += f" ({sp})" if sp else ""
        ref = f"{method_stat(str(f.get('method', '')), lang)} {sup(m)}".strip() + (f" ⚠{sup(note)}" if note else "")
        lines.append(f"| {f['name']} | {val} | {f.get('n', '')} | {_md_cell(ref)} |")
    lines += ["", f"### {lab['methods_h']}", ""]
    lines += [f"- {sup(i)} " + (_("note: {text}").format(text=text) if is_note else text)
              for i, (text, is_note) in enumerate(fn.texts, 1)]
    return lines


def _md_problems(doc: dict[str, Any], lang: str) -> list[str]:
    """Scenario notes, interference, errors, GPU telemetry missing."""
    lab = labels(lang)
    notes = [f"- {sc['name']}: {localize(n, lang)}" for sc in doc.get("scenarios", []) for n in sc.get("notes") or []]
    inter = doc.get("interference") or {}
    inter_items = [f"- {lab['missing']}: {localize(m, lang)}" for m in inter.get("missing", [])]
    inter_items += [f"- t={e['t_s']} s {e['kind']}: {localize(e['detail'], lang)}" for e in inter.get("events", [])[:20]]
    lines = _md_section(lab["notes"], notes[:50]) + _md_section(lab["interference_h"], inter_items)
    lines += _md_section(lab["errors"], [f"- {localize(x, lang)}" for x in (doc.get("errors") or [])[:50]])
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        lines += ["", lab["gpu_na"].format(reason=gpu.get("reason"))]
    return lines


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
    doc: dict[str, Any] = json.loads(text)
    return doc
