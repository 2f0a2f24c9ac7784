"""What ``--fit`` (on by default) changes before llama-server loads the model: an adapter over
plan/fit/fit_replay.py (the port of common/fit.cpp), which replays it on the planner's own trial plans."""

from __future__ import annotations

from dataclasses import replace

from llamarig.diagnostics import Diagnostic, Severity, info
from llamarig.i18n import _
from llamarig.plan.fit.fit_replay import PlanFn, fit
from llamarig.plan.result import Plan, PlanInputs
from llamarig.plan.settings import CPU_LAYERS

#: diagnostic code: -sm tensor stops --fit at once (what --fit did: plan/fit/fit_replay.py's FIT_* codes)
FIT_TENSOR_SPLIT = "fit-tensor-split"


def _tensor_split_note(n_ctx_unset: bool) -> Diagnostic:
    return info(FIT_TENSOR_SPLIT, _("-sm tensor: --fit gives up at once ('not implemented for SPLIT_MODE_TENSOR', "
                                    "common/fit.cpp:183-185): ")
                + (_("the context is not lowered (n_ctx_train is planned) and ") if n_ctx_unset else "")
                + _("no layers are moved to the CPU"))


def apply_fit(inp: PlanInputs, plan: Plan, trial: PlanFn) -> Plan:
    """``plan`` (of ``inp``'s settings) after what --fit would change (common/fit.cpp): a lower
    context when -c is unset, and, when -ngl, -ts (several GPUs), -sm row and -ot/--n-cpu-moe are
    not given, layers (dense) or expert tensors (MoE) moved to the CPU until every device keeps
    --fit-target MiB free. ``trial``: the planner for one trial's settings."""
    cfg = inp.cfg
    if not cfg.fit:
        return plan
    if cfg.split_mode == "tensor":
        return plan.with_diagnostics(_tensor_split_note(cfg.n_ctx == 0))
    fo = fit(inp, plan, trial)
    if fo is None:
        return plan
    out = fo.plan
    # the trial's own "-ngl N: k layers stay on the CPU" is --fit's choice, said by its notes
    kept = [d for d in out.diagnostics if (d.code != CPU_LAYERS or fo.cfg is cfg) and d not in inp.diagnostics]
    # fit's notes first, its warnings after the trial's (each with its own code, plan/fit/fit_replay.py)
    diags = (*inp.diagnostics, *(d for d in fo.diagnostics if d.severity is Severity.INFO), *kept,
             *(d for d in fo.diagnostics if d.severity is not Severity.INFO))
    return replace(out, diagnostics=diags, command=plan.command, effective_cfg=fo.cfg)
