"""The speed report of a plan: an adapter over plan/speed/speed_model.py (the model: bytes per token against
bandwidth, prefill against compute, speculative decoding), run on the settings llama-server
runs after --fit (``effective_inputs``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llamarig.diagnostics import warning
from llamarig.errors import InputError
from llamarig.i18n import _
from llamarig.plan.calibration.constants import Calibration
from llamarig.plan.calibration.files import load_calibration
from llamarig.plan.result import Plan, PlanInputs
from llamarig.plan.speed.speed_model import SpeedReport, speed_report

#: diagnostic codes: speed cannot be predicted (a GPU without a known bandwidth), or the model failed
SPEED_UNKNOWN = "speed-unknown"
SPEED_FAILED = "speed-failed"


def effective_inputs(inp: PlanInputs, plan: Plan) -> PlanInputs:
    """``inp`` with the settings llama-server would really run after --fit (the layers and
    experts it moved, the context it chose): what the speed model should see."""
    return replace(inp, cfg=plan.effective_cfg) if plan.effective_cfg is not None else inp


def speed_for(inputs: PlanInputs, plan: Plan | None = None, *, cal: Calibration | None = None,
              host_bandwidth_gbs: float | None = None, acceptance: float | None = None,
              acceptance_ratio: float | None = None) -> SpeedReport:
    """The speed report of ``inputs`` (spec, cfg, hardware, draft); ``plan`` (optional) supplies
    n_ctx_slot for the depth table; ``cal`` None: the calibration ``plan`` uses (load_calibration)."""
    return speed_report(inputs.spec, inputs.cfg, inputs.hardware, cal=cal or load_calibration(),
                        n_ctx=plan.n_ctx_slot if plan is not None else None,
                        host_bandwidth_gbs=host_bandwidth_gbs, acceptance=acceptance,
                        draft=inputs.draft, acceptance_ratio=acceptance_ratio)


def attach_speed(plan: Plan, inputs: PlanInputs, *, cal: Calibration | None = None,
                 host_bandwidth_gbs: float | None = None, acceptance: float | None = None,
                 acceptance_ratio: float | None = None) -> Plan:
    """``plan`` with its ``speed`` filled; when speed cannot be predicted (a GPU without a
    known bandwidth) the memory plan is kept and the reason joins its warnings."""
    try:
        rep = speed_for(inputs, plan, cal=cal, host_bandwidth_gbs=host_bandwidth_gbs, acceptance=acceptance,
                        acceptance_ratio=acceptance_ratio)
    except InputError as e:
        return plan.with_diagnostics(warning(SPEED_UNKNOWN, str(e)))
    except (ArithmeticError, ValueError, KeyError, IndexError) as e:  # never let speed break a memory plan
        return plan.with_diagnostics(warning(SPEED_FAILED, _(
            "speed model failed ({error}); memory figures are unaffected").format(error=f"{type(e).__name__}: {e}")))
    return replace(plan, speed=rep)


def speed_json(inputs: PlanInputs, plan: Plan | None = None, *, cal: Calibration | None = None,
               host_bandwidth_gbs: float | None = None, acceptance: float | None = None) -> dict[str, Any]:
    """The ``speed`` object of ``plan --json`` for a plain plan (docs/speed.md)."""
    return speed_for(inputs, plan, cal=cal, host_bandwidth_gbs=host_bandwidth_gbs,
                     acceptance=acceptance).to_json()
