"""Memory: the verdict of ``llamarig plan`` for the command (``check --gpu``), rule ``memory``."""

from __future__ import annotations

import os

from llamarig.flags.findings import Finding, Severity, finding
from llamarig.flags.rules.context import Subject
from llamarig.i18n import _
from llamarig.units import fmt_bytes


def memory_plan(s: Subject) -> list[Finding]:
    """The memory verdict of ``llamarig plan`` when GPUs are given (``check --gpu``) and the model
    is known (``-m`` GGUF, or ``--model`` GGUF/catalogue id). The planner sits a layer above the
    flag rules, so the caller passes it in (``Context.planner``, llamarig.plan.inputs.plan_for_check);
    if it fails, check goes on without it."""
    inv, r, k, ctx = s.inv, s.reading, s.k, s.ctx
    if not ctx.gpus or ctx.planner is None:
        return []
    # what runs is priced: the words llama-server receives (a cut-off flag never applies); what
    # the cut-off words would change is said after it
    argv = ["llama-server"] + [w.text for w in inv.args]
    meant = ["llama-server"] + [w.text for w in inv.intended_args] if inv.orphans else None
    mm = r.last("--mmproj")
    mm_note = ""
    mm_arg = None
    if mm is not None and mm.value and not os.path.isfile(os.path.expanduser(mm.value)) and ctx.model_ref \
            and not ctx.model_ref.endswith(".gguf"):
        mm_arg, mm_note = "catalogue", _(" (mmproj {path} not found here: the catalogue's mmproj is used)").format(
            path=mm.value)
    try:
        plan = ctx.planner(ctx.model_ref, mm_arg, list(ctx.gpus), ctx.ram_bytes, argv)
    except Exception as e:  # an unknown model / a flag the planner rejects: say so, don't fail
        return [finding("memory", Severity.INFO, inv.line, None, _("no memory plan: {why}").format(why=e), None, k)]
    try:
        parts = []
        for d in plan.devices:
            used = getattr(d, "total", None)
            free = getattr(d, "free", None)
            label = f"{d.name} ({getattr(d, 'label', '')})"
            if used is not None:
                parts.append(_("{device}: {used} needed").format(device=label, used=fmt_bytes(used))
                             + (_(", {free} left").format(free=fmt_bytes(free)) if free is not None else ""))
        detail = _("; ").join(parts)
    except Exception:  # pragma: no cover - result shape changed
        detail = ""
    if meant is not None:
        mm_note = mm_note + _meant_note(ctx, mm_arg, meant, inv.cut_line)
    if plan.fits:
        return [finding("memory", Severity.INFO, inv.line, None,
                        _("memory plan (llamarig plan): fits. {detail}{mm_note} (formulas: `llamarig plan --gpu "
                          "... -- <command>`)").format(detail=detail, mm_note=mm_note),
                        None, k)]
    return [finding("memory", Severity.WARNING, inv.line, None,
                    _("memory plan (llamarig plan): does not fit: {short}. {detail}{mm_note}").format(
                        short=_("; ").join(plan.shortfalls()), detail=detail, mm_note=mm_note),
                    _("lower -c, quantize the KV cache (-ctk/-ctv q8_0 or q4_0), or offload fewer layers"), k)]


def _meant_note(ctx: object, mm_arg: str | None, meant: list[str], cut_line: int | None) -> str:
    """What the command as meant (the cut-off words put back) would need, or why it has no plan."""
    planner = getattr(ctx, "planner", None)
    try:
        plan = planner(getattr(ctx, "model_ref", None), mm_arg, list(getattr(ctx, "gpus", ())),  # type: ignore[misc]
                       getattr(ctx, "ram_bytes", None), meant)
    except Exception as e:  # the meant command may be one llama-server refuses (a KV type it rejects)
        return _("; as meant (the words cut off at line {line} put back): no plan: {why}").format(line=cut_line, why=e)
    totals = _("; ").join(_("{device}: {used}").format(device=d.name, used=fmt_bytes(d.total)) for d in plan.devices)
    return _("; as meant (the words cut off at line {line} put back): {verdict}, {totals}").format(
        line=cut_line, verdict=_("fits") if plan.fits else _("does not fit"), totals=totals)
