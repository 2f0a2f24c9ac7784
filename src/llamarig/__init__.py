"""llamarig: llama-server deployments as engineering, not folklore.

The public API: ``plan_model``, ``inspect_model``, ``check_text``, ``models``, ``gpus``,
``bench_server`` (llamarig.api),
the result types and the error tree. Names are loaded on first use (PEP 562 ``__getattr__``) so
that ``import llamarig`` and the CLI's start-up stay cheap (no gguf/numpy/rich import for
``llamarig --help``); tests/test_exports.py guards the list.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from llamarig.errors import GGUFError, InputError, LlamarigError, ServerError, UnknownNameError

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY = {
    "plan_model": "llamarig.api", "inspect_model": "llamarig.api", "check_text": "llamarig.api",
    "models": "llamarig.api", "gpus": "llamarig.api", "bench_server": "llamarig.api",
    "Plan": "llamarig.plan.result", "PlanInputs": "llamarig.plan.result", "DevicePlan": "llamarig.plan.result",
    "HostPlan": "llamarig.plan.result", "Line": "llamarig.plan.result",
    "ModelSpec": "llamarig.gguf.spec", "Hardware": "llamarig.hardware.types", "GPU": "llamarig.hardware.types",
    "CpuFeatures": "llamarig.hardware.cpu", "ServerConfig": "llamarig.plan.config",
    "Finding": "llamarig.flags.findings", "Severity": "llamarig.flags.findings",
    "make_plan": "llamarig.plan.planner",
}

__all__ = [
    "CpuFeatures", "DevicePlan", "Finding", "GGUFError", "GPU", "Hardware", "HostPlan", "InputError", "Line",
    "LlamarigError", "ModelSpec", "Plan", "PlanInputs", "ServerConfig", "ServerError", "Severity", "UnknownNameError",
    "__version__", "bench_server", "check_text", "gpus", "inspect_model", "make_plan", "models", "plan_model",
]

if TYPE_CHECKING:
    from llamarig.api import bench_server, check_text, gpus, inspect_model, models, plan_model
    from llamarig.flags.findings import Finding, Severity
    from llamarig.gguf.spec import ModelSpec
    from llamarig.hardware.cpu import CpuFeatures
    from llamarig.hardware.types import GPU, Hardware
    from llamarig.plan.config import ServerConfig
    from llamarig.plan.planner import make_plan
    from llamarig.plan.result import DevicePlan, HostPlan, Line, Plan, PlanInputs


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'llamarig' has no attribute {name!r}")
    value = getattr(import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
