"""``explain``: every flag of each command of a checked input, what it does in this build, and
its effect priced by the planner on what llama-server really receives (the same figures as
``llamarig plan`` for that command); what the command as meant (the cut-off flags put back)
would change is said once per command (docs/explain.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamarig.app.check import CheckReport, what_runs
from llamarig.app.resolution import Priced, Resolution, Settings
from llamarig.app.runs import price
from llamarig.errors import GGUFError, UnknownNameError
from llamarig.flags.argv import read_invocation
from llamarig.flags.explain import Row, explain_rows
from llamarig.flags.schema import Schema
from llamarig.hardware.types import GPU
from llamarig.i18n import _, join, localize
from llamarig.plan.result import Plan
from llamarig.units import fmt_bytes


@dataclass(frozen=True)
class ExplainedCommand:
    """One command explained: its rows (one per flag as written), and ``summary``: what runs
    (the plan of the received command), what the meant command would change, how the model's
    files were found (each line a catalogue message, in the report's language)."""

    argv: tuple[str, ...]
    line: int
    rows: tuple[Row, ...]
    model: str | None = None
    cut_line: int | None = None
    summary: tuple[str, ...] = ()
    priced: Resolution | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        pr = self.priced
        return {"argv": list(self.argv), "line": self.line, "model": self.model, "cut_line": self.cut_line,
                "rows": [r.to_json() for r in self.rows], "summary": list(self.summary),
                "runs": _priced_json(pr.runs) if pr is not None else None,
                "meant": _priced_json(pr.meant) if pr is not None and pr.meant is not None else None,
                "changes": [{"what": w, "runs": a, "meant": b} for w, a, b in pr.changes] if pr is not None else [],
                "fit": pr.fit.to_json() if pr is not None else None,
                "diagnostics": [d.to_json() for d in pr.diagnostics] if pr is not None else []}


@dataclass(frozen=True)
class ExplainReport:
    """``llamarig explain``'s result: each command explained, the flag schema it was read with,
    and the language its text is in (``to_json()`` is ``explain --json``)."""

    commands: tuple[ExplainedCommand, ...]
    schema: Schema
    lang: str = "en"

    def to_json(self) -> dict[str, Any]:
        return {"invocations": [c.to_json() for c in self.commands],
                "schema": {"source": self.schema.source, "build": self.schema.build}, "lang": self.lang}


def _priced_json(p: Priced) -> dict[str, Any]:
    plan = p.plan
    return {"argv": list(p.argv), "kv_bytes": p.kv_bytes, "error": str(p.error) if p.error is not None else None,
            "n_ctx_slot": plan.n_ctx_slot if plan is not None else None,
            "n_parallel": plan.n_parallel if plan is not None else None,
            "cache_type_k": plan.cache_type_k if plan is not None else None,
            "cache_type_v": plan.cache_type_v if plan is not None else None,
            "settings": p.settings.to_json() if p.settings is not None else None}


def _total(plan: Plan, comp: str) -> int:
    return sum(d.get(comp) for d in plan.devices) + plan.host.get(comp)


def _formula(plan: Plan, comp: str) -> str:
    """The plan's formula of a component: the one device (or host) that has it, else each named."""
    where = [(d.name, d.lines[comp].formula) for d in plan.devices if d.get(comp)]
    if plan.host.get(comp):
        where.append((_("host"), plan.host.lines[comp].formula))
    if len(where) == 1:
        return where[0][1]
    return join(_("; "), [n + ": " + f for n, f in where])


def plan_effects(plan: Plan, lang: str = "en") -> dict[str, str]:
    """The effect of each option on memory, from the plan of the command (option name -> text in
    ``lang``): KV for -c/-ctk/-ctv, slots and recurrent state for -np, weights, projector,
    compute buffers, the MTP/draft context."""
    kv = _total(plan, "kv")
    out: dict[str, str] = {}
    if kv:
        size = _("KV {size} with {tk}/{tv}").format(size=fmt_bytes(kv), tk=plan.cache_type_k, tv=plan.cache_type_v)
        out["--ctx-size"] = size + " = " + _formula(plan, "kv") + " (src/llama-kv-cache.cpp)"
        out["--cache-type-k"] = out["--cache-type-v"] = size
    slots = (_("{n} slots share one pool of {ctx} tokens").format(n=plan.n_parallel, ctx=plan.n_ctx)
             if plan.kv_unified else
             _("{n} slots x {per} tokens").format(n=plan.n_parallel, per=plan.n_ctx_seq))
    rec = _total(plan, "recurrent")
    if rec:
        slots = join(_("; "), [slots, _("recurrent state {size} = {formula}").format(
            size=fmt_bytes(rec), formula=_formula(plan, "recurrent"))])
    out["--parallel"] = out["--kv-unified"] = slots
    out["--model"] = _("weights {size} (file)").format(size=fmt_bytes(_total(plan, "weights")))
    for comp, flags, text in (("mmproj", ("--mmproj",), _("projector {size} (weights and its compute buffer)")),
                              ("draft", ("--spec-type", "--model-draft"), _("draft context {size} = {formula}")),
                              ("compute", ("--ubatch-size",), _("compute buffers {size} = {formula}"))):
        n = _total(plan, comp)
        if n:
            for f in flags:
                out[f] = text.format(size=fmt_bytes(n), formula=_formula(plan, comp))
    return {k: localize(v, lang) for k, v in out.items()}


#: the settings "what runs" names: how the context is shared and stored (check's settings())
_RUNS_KEYS = 3


def _describe(st: Settings | None) -> str:
    rows = st.rows() if st is not None else {}
    return join(_(", "), [_("{what} {value}").format(what=k, value=v) for k, v in list(rows.items())[:_RUNS_KEYS]])


def summary_lines(pr: Resolution) -> list[str]:
    """What runs (the received command priced), and what the command as meant would change."""
    pair, runs = pr.pair, pr.runs
    head = _("what runs (line {line}): {settings}").format(line=pair.line, settings=_describe(runs.settings))
    out = [join(_("; "), [head, _("KV {size} (the plan of this command)").format(size=fmt_bytes(runs.kv_bytes))])
           if runs.kv_bytes is not None else head]
    if runs.error is not None:
        out.append(_("not priced: {error}").format(error=runs.error))
    if pr.meant is not None:
        parts = [_("{what} {runs} -> {meant}").format(what=w, runs=a, meant=b) for w, a, b in pr.changes if w not in ("error", _("the server"))]
        if pr.meant.error is not None:
            parts.append(_("llama-server would not start: {error}").format(error=pr.meant.error))
        elif pr.meant.kv_bytes is not None and runs.kv_bytes is not None:
            parts.append(_("KV {runs} -> {meant}").format(runs=fmt_bytes(runs.kv_bytes),
                                                          meant=fmt_bytes(pr.meant.kv_bytes)))
        elif pr.meant.kv_bytes is not None:
            parts.append(_("KV {size}").format(size=fmt_bytes(pr.meant.kv_bytes)))
        if parts:
            out.append(_("as meant (the flags cut off at line {line} put back): {changes}").format(
                line=pair.cut_line, changes=join(_("; "), parts)))
    out += [d.message for d in pr.diagnostics]
    out += list(pr.notes)
    return out


def explain(report: CheckReport, *, model: str | None = None, base_dir: Path | None = None, lang: str = "en",
            gpus: Sequence[GPU] = (), ram: int | None = None) -> ExplainReport:
    """`llamarig explain`: each command of a checked input, every flag with what it does, its
    default, its effect on memory (the plan of what llama-server receives: ``model`` instead of
    -m, on ``gpus`` with ``ram`` when given), and whether it reaches llama-server; the check
    findings of each flag are noted on its row (the report's, not a second lint)."""
    severity_word = {"error": _("error"), "warning": _("warning"), "info": _("info")}
    commands = []
    for k, inv in enumerate(report.parsed.invocations):
        # a fragment (flags with no command in front, source "fragment") starts nothing: no figures
        pr = price(what_runs(report, k), model=model, gpus=gpus, ram=ram, base_dir=base_dir, report=report) \
            if inv.source != "fragment" else None
        if pr is not None and model is not None and isinstance(pr.runs.error, (GGUFError, UnknownNameError)):
            raise pr.runs.error  # the model the user named cannot be read: bad input, not a row
        effects = plan_effects(pr.runs.plan, lang) if pr is not None and pr.runs.plan is not None else {}
        r = report.readings[k] if k < len(report.readings) else read_invocation(inv, report.schema, k)
        notes: dict[int, list[str]] = {}
        for f in report.findings:
            if f.invocation == k and f.use is not None and f.severity in ("error", "warning"):
                notes.setdefault(f.use, []).append(_("{severity}: {rule}").format(
                    severity=severity_word[f.severity], rule=f.rule))
        cut = _("cut off at line {line}: never reaches llama-server").format(line=inv.cut_line)
        rows = []
        for i, row in enumerate(explain_rows(r, report.schema, effects, lang)):
            # a cut-off flag has no effect on what runs: its row says so instead of a figure
            parts = [cut] if not row.reaches_server else [x for x in [row.effect] if x]
            rows.append(Row(row.flag, row.value, row.what, row.default,
                            localize(join(_("; "), parts + notes.get(i, [])), lang), row.line, row.known,
                            row.reaches_server, row.original))
        summary = tuple(localize(s, lang) for s in summary_lines(pr)) if pr is not None else ()
        plan_model = pr.runs.plan.model if pr is not None and pr.runs.plan is not None else None
        commands.append(ExplainedCommand(tuple(localize(list(inv.argv), lang)), inv.line, tuple(rows), plan_model,
                                         inv.cut_line if inv.orphans else None, summary, pr))
    return ExplainReport(tuple(commands), report.schema, lang)
