"""``plan_command``: the plan with its speed, one way for every caller. Memory per device from
the planner, then the speed model on the settings llama-server really runs after ``--fit``
(:func:`llamarig.plan.planner.effective_inputs`), with the calibration ``plan`` uses. ``llamarig
plan``, ``render``, ``launch`` and ``tune`` all get their figures here, so the same command
gets the same figures everywhere (tests/app/test_app.py)."""

from __future__ import annotations

from collections.abc import Sequence

from llamarig.plan.calibration import Calibration, load_calibration, measure_host_bandwidth
from llamarig.plan.estimators.speed import attach_speed, effective_inputs
from llamarig.plan.inputs import PlanArgs, build_inputs
from llamarig.plan.planner import make_plan
from llamarig.plan.result import Plan, PlanInputs
from llamarig.units import parse_size


def plan_args(model: str | None = None, args: Sequence[str] = (), *, command: Sequence[str] | None = None,
              gpus: Sequence[str] = (), ram: str | int | None = None, detect: bool = False,
              mmproj: str | None = None, draft: str | None = None, overhead: int | None = None,
              cpu_features: str | None = None) -> PlanArgs:
    """The planner's inputs from what a user types: ``model`` (a GGUF path or catalogue id),
    ``args`` (llama-server flags without the program), or ``command`` (a whole argv)."""
    return PlanArgs(model=model, mmproj=mmproj, draft=draft, gpus=list(gpus), detect=detect,
                    ram=parse_size(ram, "g") if isinstance(ram, str) else ram, overhead=overhead,
                    cpu_features=cpu_features, server_args=list(args),
                    command=list(command) if command is not None else None)


def host_bandwidth(pa: PlanArgs, cal: Calibration, given: float | None = None) -> float | None:
    """The host bandwidth the speed model uses: ``given``; else, with ``--detect`` and the
    built-in calibration, this machine's, measured (a calibration file that ``llamarig tune``
    wrote already recorded the bandwidth its efficiencies were solved against); else None (the
    model's default)."""
    if given is None and pa.detect and cal.source == "built-in":
        return measure_host_bandwidth()
    return given


def plan_with_speed(pa: PlanArgs, *, calibration: Calibration | str | None = None,
                    host_bandwidth_gbs: float | None = None, acceptance: float | None = None,
                    speed: bool = True, inputs: PlanInputs | None = None) -> Plan:
    """The plan for ``pa`` with ``Plan.speed`` filled (unless ``speed`` is False). Errors are the
    LlamarigError tree: ModelNotFoundError for a model that is not there, GGUFError,
    UnknownNameError, InputError for bad flags. ``calibration``: a Calibration, a file,
    ``builtin``, or None (the file ``llamarig tune`` wrote, else built-in); with ``pa.detect``
    and the built-in calibration the host's bandwidth is measured here. ``inputs``:
    ``build_inputs(pa)`` when the caller already has it (it read a remote header once)."""
    inp = inputs if inputs is not None else build_inputs(pa)
    plan = make_plan(inp)
    if not speed:
        return plan
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
    host_bw = host_bandwidth(pa, cal, host_bandwidth_gbs)
    return attach_speed(plan, effective_inputs(inp, plan), cal=cal, host_bandwidth_gbs=host_bw,
                        acceptance_ratio=acceptance)


def plan_command(model: str | None = None, args: Sequence[str] = (), *, command: Sequence[str] | None = None,
                 gpus: Sequence[str] = (), ram: str | int | None = None, detect: bool = False,
                 mmproj: str | None = None, draft: str | None = None, overhead: int | None = None,
                 cpu_features: str | None = None, calibration: Calibration | str | None = None,
                 host_bandwidth_gbs: float | None = None, acceptance: float | None = None) -> Plan:
    """What `llamarig plan` prints: memory per device and host RAM, each figure with its
    formula and method, and the speed (``Plan.speed``) on the effective (post-``--fit``) config.

        >>> p = plan_command("qwen3.6-27b:iq4_nl", ["-c", "65536"], gpus=["rtx3090"])
        >>> p.fits, p.speed.decode_tok_s
    """
    pa = plan_args(model, args, command=command, gpus=gpus, ram=ram, detect=detect, mmproj=mmproj, draft=draft,
                   overhead=overhead, cpu_features=cpu_features)
    return plan_with_speed(pa, calibration=calibration, host_bandwidth_gbs=host_bandwidth_gbs,
                           acceptance=acceptance)
