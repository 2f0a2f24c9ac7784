"""The terminal report of ``llamarig bench`` and ``llamarig logs``: the headline first, the
findings, the request timeline (logs), then the figures with a numbered method per figure, the
notes and problems. Tables are layout.Sheets: at 80 columns the timeline and the figures become
one block per request and per figure instead of cutting metric names and headers; every method
and note is wrapped, never cut. The words come from bench.report (labels, headline, footnotes)
in the user's language; the document (``--json``) stays English."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from llamarig.bench.report import NOTES_SHOWN, fmt_value, footnotes, headline, labels
from llamarig.cli.lang import N_, _, localize
from llamarig.cli.layout import Column, Sheet, labelled, print_wrapped

if TYPE_CHECKING:
    from rich.console import Console

#: unit words of the figures, as a person reads them (symbols like tok/s and MiB stay)
UNITS = {"checkpoints": N_("checkpoints"), "ratio": N_("ratio"), "tokens": N_("tokens"), "requests": N_("requests"),
         "tokens/step": N_("tokens/step"), "prompt tokens": N_("prompt tokens"), "events": N_("events")}

#: the timeline's columns: the doc's keys (the last two: how many requests ran at once, how it ended)
TIMELINE = ("slot", "task", "depth", "cached", "prompt_eval_n", "prefill_tok_s", "eval_n", "decode_tok_s")


def timeline(doc: dict[str, Any], run: int | None = None) -> tuple[Sheet, bool] | None:
    """logs: one row per request (a block per request where its columns do not fit): depth and
    cache, rates, how many requests were active at once and how each ended; a decode rate from a
    progress line (a request that ended early) is marked ~. Also whether one is. ``run``: that
    run's rows only."""
    rows = [r for r in doc.get("timeline") or [] if run is None or r.get("run", 1) == run]
    if not rows:
        return None
    from llamarig.bench.logs import outcome_words

    heads = (_("slot"), _("task"), _("depth"), _("cached"), _("new"), _("prefill tok/s"), _("gen"), _("decode tok/s"),
             _("at once"))
    cols = [Column(h, justify="right", key=i < 2) for i, h in enumerate(heads)] + [Column(_("outcome"))]
    t = Sheet(cols, title=Text(_("requests (timeline)"), style="bold"))
    words = outcome_words()
    approx = False
    for r in rows:
        cells = [fmt_value(r.get(k), "") if r.get(k) is not None else "—" for k in TIMELINE]
        if r.get("decode_from") == "progress":
            cells[-1], approx = "~" + cells[-1], True
        outcome = r.get("outcome")
        cells += [str(r.get("concurrency") or 1), localize(words.get(outcome, outcome)) if outcome else "—"]
        t.add_row(*cells, style="yellow" if outcome in ("context_exceeded", "error", "cancelled") else "")
    return t, approx


def _timeline(doc: dict[str, Any], run: int | None, console: Console) -> None:
    tl = timeline(doc, run)
    if tl is not None:
        console.print(tl[0])
        if tl[1]:
            print_wrapped(console, _("~ decode so far, from the last progress line (n_gen, tg) of a request that did "
                                     "not finish"), indent="  ", style="dim")


def _run_section(doc: dict[str, Any], r: dict[str, Any], n: int, console: Console) -> None:
    """logs, one run of the server: its lines and settings, its findings, its requests."""
    head = _("Run {k} of {n} (lines {a}-{b}): {settings}").format(k=r["run"], n=n, a=r["line"], b=r["line_end"],
                                                                 settings=localize(r["settings"]))
    print_wrapped(console, head, style="bold")
    for f in r["findings"]:
        print_wrapped(console, "• " + localize(f), indent="  ")
    _timeline(doc, r["run"], console)


def _spread(f: dict[str, Any]) -> str:
    s = f.get("spread") or {}
    if not s or f.get("n", 0) < 2 or s.get("p10") is None or s.get("p90") is None:
        return ""
    unit = f.get("unit", "")
    return f"{fmt_value(s['p10'], unit)} … {fmt_value(s['p90'], unit)}"


def figures(doc: dict[str, Any], lang: str) -> tuple[Sheet, list[tuple[str, bool]]]:
    """The figures (name, value, unit, N, p10 … p90, method reference) and the numbered methods."""
    lab = labels(lang)
    sheet = Sheet([Column(lab["figure"], key=True), Column(lab["value"], justify="right"), Column(lab["unit"]),
                   Column("N", justify="right"), Column("p10 … p90"), Column(lab["method"], justify="right")])
    figs = doc.get("figures", [])
    fn = footnotes(figs, lang)
    for f, (m, note) in zip(figs, fn.refs, strict=True):
        ref = Text(f"[{m}]")
        if note:
            ref.append(f" ![{note}]", style="yellow")
        unit = f.get("unit", "")
        sheet.add_row(f["name"], fmt_value(f.get("value"), unit), _(UNITS[unit]) if unit in UNITS else unit,
                      str(f.get("n", "")), _spread(f), ref)
    return sheet, fn.texts


def _head(doc: dict[str, Any]) -> Text:
    t = doc.get("target", {})
    head = Text.assemble((str(doc.get("kind", "bench")), "bold"), " ",
                         str(t.get("url") or doc.get("source", {}).get("path", "")))
    if t.get("build_info"):
        head.append("  " + _("build {build}").format(build=t["build_info"]))
    if t.get("model"):
        head.append("  " + _("model {m}").format(m=Path(str(t["model"])).name))
    return head


def _headline(doc: dict[str, Any], console: Console, lang: str) -> None:
    for h in headline(doc, lang):
        line = Text(h.line(), style="yellow" if h.warn else "")
        print_wrapped(console, line, indent="    ", first_indent="! " if h.warn else "  ")


def _problems(doc: dict[str, Any], console: Console, lang: str) -> None:
    """Notes, missing figures, interference, GPU telemetry, errors and an abort, one wrapped line each."""
    lab = labels(lang)
    for sc in doc.get("scenarios", []):
        notes = sc.get("notes") or []
        for n in notes[:NOTES_SHOWN]:
            print_wrapped(console, labelled(sc["name"] + ":", localize(n), "cyan"), indent="  ")
        if len(notes) > NOTES_SHOWN:
            more = _("… {n} more notes in the JSON (scenarios[].notes)").format(n=len(notes) - NOTES_SHOWN)
            print_wrapped(console, labelled(sc["name"] + ":", more, "cyan"), indent="  ")
    inter = doc.get("interference") or {}
    for m in inter.get("missing", []):
        print_wrapped(console, labelled(lab["missing"] + _(": "), localize(m), "yellow"), indent="  ")
    for ev in inter.get("events", [])[:10]:
        print_wrapped(console, labelled(lab["interference"] + _(": "),
                                        f"t={ev['t_s']} s {ev['kind']}: {localize(ev['detail'])}", "red"), indent="  ")
    gpu = doc.get("gpu") or {}
    if gpu and not gpu.get("available"):
        reason = (_("no NVML and no nvidia-smi on this machine (“{error}”)").format(error=gpu["library_error"])
                  if gpu.get("reason_kind") == "no_nvml" and gpu.get("library_error") else localize(gpu.get("reason")))
        print_wrapped(console, lab["gpu_na"].format(reason=reason), indent="  ", style="dim")
    for e in doc.get("errors", [])[:20]:
        print_wrapped(console, labelled(lab["error"] + _(": "), localize(e), "red"), indent="  ")
    if doc.get("aborted"):
        print_wrapped(console, labelled(lab["aborted"] + _(": "), localize(doc["aborted"]), "red"),
                      indent="  ")


def render(doc: dict[str, Any], console: Console, lang: str) -> None:
    """The whole report (see the module)."""
    lab = labels(lang)
    if doc.get("kind") != "logs":  # logs: the command's own first line names the log
        print_wrapped(console, _head(doc), indent="  ")
    _headline(doc, console, lang)
    runs = doc.get("runs") or []
    findings = list(doc.get("findings", []))
    if len(runs) > 1:  # the log-wide findings (script, restarts), then one section per run
        findings = findings[:len(findings) - sum(len(r["findings"]) for r in runs)]
    if findings:
        print_wrapped(console, _("{heading}:").format(heading=lab["findings"]), style="bold")
    for f in findings:
        print_wrapped(console, "• " + localize(f), indent="  ")
    if len(runs) > 1:
        for r in runs:
            _run_section(doc, r, len(runs), console)
    else:
        _timeline(doc, None, console)
    if doc.get("figures"):
        sheet, methods = figures(doc, lang)
        console.print(sheet)
        print_wrapped(console, _("{heading}:").format(heading=lab["methods"]), style="bold")
        for i, (text, is_note) in enumerate(methods, 1):
            mark = Text(f"![{i}]" if is_note else f"[{i}]", style="yellow" if is_note else "")
            print_wrapped(console, Text.assemble(mark, " ", text), indent="      ", first_indent="  ")
    _problems(doc, console, lang)


#: bench compare's verdicts (bench.compare.Row.verdict), as a person reads them
VERDICTS = {"noise unknown (N<2)": N_("noise unknown (N<2)"), "within noise": N_("within noise"),
            "only in A": N_("only in A"), "only in B": N_("only in B"), "no value": N_("no value"),
            "B better": N_("B better"), "B worse": N_("B worse"), "B higher": N_("B higher"), "B lower": N_("B lower")}


def comparison(rows: list[Any], console: Console, label_a: str, label_b: str) -> None:
    """``bench compare``: one row per figure (a block per figure where it does not fit), then
    how Δ and the noise band are computed."""
    print_wrapped(console, f"A = {label_a}   B = {label_b}", indent="  ", style="bold")
    t = Sheet([Column(_("figure"), key=True), Column(_("unit")), Column("A", justify="right"),
               Column("B", justify="right"), Column("Δ %", justify="right"), Column(_("noise %"), justify="right"),
               Column(_("verdict"), prose=True, min_width=8)])
    for r in rows:
        color = {"B better": "green", "B worse": "red"}.get(r.verdict, "")
        unit = _(UNITS[r.unit]) if r.unit in UNITS else r.unit
        t.add_row(r.name, unit, fmt_value(r.a, r.unit), fmt_value(r.b, r.unit),
                  "—" if r.delta_pct is None else f"{r.delta_pct:+.1f}",
                  "—" if r.band_pct is None else f"{r.band_pct:.1f}",
                  Text(_(VERDICTS[r.verdict]) if r.verdict in VERDICTS else r.verdict, style=color))
    console.print(t)
    print_wrapped(console, _("Δ = (B − A) ÷ |A|; noise = ± band in %, the larger of A's and B's (p90 − p10) ÷ 2 ÷ "
                             "value; a verdict only outside it."), indent="  ", style="dim")
