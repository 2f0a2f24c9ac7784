"""``llamarig plan --target-*``: the best layout for a context, a decode rate and a headroom,
searched by the optimiser (llamarig.plan.optimise.search), with the verdict the command exits on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llamarig.app.planning import host_bandwidth
from llamarig.errors import ExitCode, InputError
from llamarig.i18n import _
from llamarig.plan.calibration.constants import Calibration
from llamarig.plan.calibration.files import load_calibration
from llamarig.plan.deployment import Deployment
from llamarig.plan.inputs import build_inputs
from llamarig.plan.optimise.search import OptimiseResult, Targets, optimise
from llamarig.plan.result import PlanInputs
from llamarig.units import GiB


@dataclass(frozen=True)
class TargetResult:
    """The optimiser's answer (``result``: the ranked candidates, the verdict and its reasons)
    and whether the winner meets every target (``met``: verdict ``ok`` or ``maybe``); a target
    that is not met is an answer, not an error: ``exit_code`` 1."""

    result: OptimiseResult
    met: bool

    @classmethod
    def of(cls, result: OptimiseResult) -> TargetResult:
        return cls(result, met=result.verdict in ("ok", "maybe"))

    @property
    def targets(self) -> Targets:
        return self.result.targets

    @property
    def exit_code(self) -> int:
        return int(ExitCode.OK if self.met else ExitCode.PROBLEMS)

    def to_json(self) -> dict[str, Any]:
        return self.result.to_json()


def targets_for(inp: PlanInputs, *, target_ctx: int | None = None, target_decode: float | None = None,
                target_depth: int | None = None, headroom: int | None = None, slots: int | None = None,
                vision: bool = False, agent: bool = False, acceptance: float | None = None) -> Targets:
    """The targets for these inputs (the slots from ``-np``, the context from ``-c`` where not
    given); a target that contradicts the command's own flags is an InputError."""
    cfg = inp.cfg
    if slots is not None and "n_parallel" in cfg.set_flags and cfg.n_parallel != slots:
        raise InputError(_("--slots {slots} contradicts -np {n_parallel}: give one of them").format(
            slots=slots, n_parallel=cfg.n_parallel))
    slots = slots or (cfg.n_parallel if "n_parallel" in cfg.set_flags and cfg.n_parallel > 0 else 1)
    ctx = target_ctx
    if ctx is None:
        ctx = (cfg.n_ctx // max(1, slots)) if "n_ctx" in cfg.set_flags and cfg.n_ctx else 8192
    elif "n_ctx" in cfg.set_flags and cfg.n_ctx and cfg.n_ctx < ctx * slots:
        raise InputError(_("--target-ctx {ctx} x {slots} slot(s) contradicts -c {n_ctx}: give one of them").format(
            ctx=ctx, slots=slots, n_ctx=cfg.n_ctx))
    return Targets(ctx=ctx, decode_tok_s=target_decode, decode_depth=target_depth,
                   headroom=GiB if headroom is None else headroom, slots=slots, vision=vision, agent=agent,
                   acceptance=acceptance)


def plan_targets(d: Deployment, targets: Targets | None = None, *, calibration: Calibration | str | None = None,
                 host_bandwidth_gbs: float | None = None, inputs: PlanInputs | None = None) -> TargetResult:
    """The optimiser's search for ``d`` against ``targets`` (default: :func:`targets_for` of its
    inputs), on the host bandwidth :func:`llamarig.app.planning.host_bandwidth` gives."""
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
    inp = inputs if inputs is not None else build_inputs(d)
    res = optimise(inp, targets or targets_for(inp), cal=cal,
                   host_bandwidth_gbs=host_bandwidth(d, cal, host_bandwidth_gbs))
    return TargetResult.of(res)
