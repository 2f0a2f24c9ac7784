"""Planning: the plan of a Deployment with its speed, one way for every caller. Memory per device
from the planner, then the speed model on the settings llama-server really runs after ``--fit``
(:func:`llamarig.plan.speed.speed_estimator.effective_inputs`), with the calibration ``plan`` uses.
``llamarig plan``, ``render``, ``launch`` and ``tune`` all get their figures here, so the same
command gets the same figures everywhere (tests/app/test_app.py)."""

from __future__ import annotations

from llamarig.plan.calibration.constants import Calibration
from llamarig.plan.calibration.files import load_calibration
from llamarig.plan.deployment import Deployment
from llamarig.plan.inputs import build_inputs
from llamarig.plan.planner import make_plan
from llamarig.plan.result import Plan, PlanInputs
from llamarig.plan.speed.host_probes import measure_host_bandwidth
from llamarig.plan.speed.speed_estimator import attach_speed, effective_inputs


def host_bandwidth(d: Deployment, cal: Calibration, given: float | None = None) -> float | None:
    """The host bandwidth the speed model uses: ``given``; else, on this machine's detected
    hardware with the built-in calibration, this machine's, measured (a calibration file that
    ``llamarig tune`` wrote already recorded the bandwidth its efficiencies were solved
    against); else None (the model's default)."""
    if given is None and d.hardware.source == "detected" and cal.source == "built-in":
        return measure_host_bandwidth()
    return given


def plan_with_speed(d: Deployment, *, calibration: Calibration | str | None = None,
                    host_bandwidth_gbs: float | None = None, acceptance: float | None = None,
                    speed: bool = True, inputs: PlanInputs | None = None) -> Plan:
    """The plan of ``d`` with ``Plan.speed`` filled (unless ``speed`` is False). Errors are the
    LlamarigError tree: ModelNotFoundError for a model that is not there, GGUFError,
    UnknownNameError, InputError for bad flags. ``calibration``: a Calibration, a file,
    ``builtin``, or None (the file ``llamarig tune`` wrote, else built-in); on detected hardware
    with the built-in calibration the host's bandwidth is measured here. ``inputs``:
    ``build_inputs(d)`` when the caller already has it (it read a remote header once)."""
    inp = inputs if inputs is not None else build_inputs(d)
    plan = make_plan(inp)
    if not speed:
        return plan
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
    host_bw = host_bandwidth(d, cal, host_bandwidth_gbs)
    return attach_speed(plan, effective_inputs(inp, plan), cal=cal, host_bandwidth_gbs=host_bw,
                        acceptance_ratio=acceptance)
