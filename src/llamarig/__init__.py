"""llamarig: llama-server deployments as engineering, not folklore.

The public API: one function per command (llamarig.api: ``deployment`` (with ``machine`` and
``gpu``), ``plan_command``, ``plan_model``,
``inspect_model``, ``check``, ``check_text``, ``fix_report``, ``explain_report``,
``resolve_command``, ``render_command``, ``launch_command``, ``tune_command``, ``models``,
``gpus``, ``bench_server``),
the result types and the error tree. Names are loaded on first use (PEP 562 ``__getattr__``) so
that ``import llamarig`` and the CLI's start-up stay cheap (no gguf/numpy/rich import for
``llamarig --help``); tests/test_exports.py guards the list.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: the public API, the one table: module -> the names it gives. ``__all__``, ``__getattr__`` (the
#: names load on first use) and the TYPE_CHECKING imports below are derived from it (those by
#: ``python tests/test_exports.py``, which tests/test_exports.py checks).
_EXPORTS: dict[str, tuple[str, ...]] = {
    "llamarig.api": ("bench_server", "bits_per_weight", "check", "check_resolved", "check_text", "compare_bench", "deployment", "gateway_hold", "serve_top_web",
                     "explain_report", "fix_report", "gateway_config", "gpu", "gpus", "inspect_model",
                     "launch_command", "logs_report", "machine", "model", "models", "plan_command", "plan_inputs",
                     "plan_model", "plan_targets", "quality_report", "refresh_model", "render_command", "repo_models", "rpc_units",
                     "resolve", "resolve_command", "script_deployment", "serve_gateway", "stop_server",
                     "top_snapshot", "tune_command"),
    "llamarig.app.check": ("CheckReport", "FixResult"),
    "llamarig.app.command": ("Resolved",),
    "llamarig.app.explain": ("ExplainReport",),
    "llamarig.app.targets": ("TargetResult",),
    "llamarig.app.tune": ("TuneResult", "TuneSettings"),
    "llamarig.bench.compare": ("Comparison",),
    "llamarig.bench.logs": ("LogsReport",),
    "llamarig.bench.result": ("BenchReport",),
    "llamarig.bench.runner": ("BenchConfig",),
    "llamarig.diagnostics": ("Diagnostic",),
    "llamarig.errors": ("GGUFError", "InputError", "LlamarigError", "ModelNotFoundError", "ServerError",
                        "UnknownNameError"),
    "llamarig.flags.argv": ("Command",),
    "llamarig.flags.findings": ("Finding", "Severity"),
    "llamarig.gguf.spec": ("ModelSpec",),
    "llamarig.hardware.cpu": ("CpuFeatures",),
    "llamarig.hardware.types": ("GPU", "Hardware"),
    "llamarig.plan.config": ("ServerConfig",),
    "llamarig.plan.deployment": ("Deployment",),
    "llamarig.plan.planner": ("make_plan",),
    "llamarig.plan.result": ("DevicePlan", "HostPlan", "Line", "Plan", "PlanInputs"),
    "llamarig.tune.quality": ("QualityReport",),
}
#: public name -> the module that defines it
_LAZY = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted([*_LAZY, "__version__"])

if TYPE_CHECKING:
    # generated from _EXPORTS by `python tests/test_exports.py`: do not edit
    from llamarig.api import bench_server as bench_server
    from llamarig.api import bits_per_weight as bits_per_weight
    from llamarig.api import check as check
    from llamarig.api import check_resolved as check_resolved
    from llamarig.api import check_text as check_text
    from llamarig.api import compare_bench as compare_bench
    from llamarig.api import deployment as deployment
    from llamarig.api import explain_report as explain_report
    from llamarig.api import fix_report as fix_report
    from llamarig.api import gateway_config as gateway_config
    from llamarig.api import gateway_hold as gateway_hold
    from llamarig.api import gpu as gpu
    from llamarig.api import gpus as gpus
    from llamarig.api import inspect_model as inspect_model
    from llamarig.api import launch_command as launch_command
    from llamarig.api import logs_report as logs_report
    from llamarig.api import machine as machine
    from llamarig.api import model as model
    from llamarig.api import models as models
    from llamarig.api import plan_command as plan_command
    from llamarig.api import plan_inputs as plan_inputs
    from llamarig.api import plan_model as plan_model
    from llamarig.api import plan_targets as plan_targets
    from llamarig.api import quality_report as quality_report
    from llamarig.api import refresh_model as refresh_model
    from llamarig.api import render_command as render_command
    from llamarig.api import repo_models as repo_models
    from llamarig.api import resolve as resolve
    from llamarig.api import resolve_command as resolve_command
    from llamarig.api import rpc_units as rpc_units
    from llamarig.api import script_deployment as script_deployment
    from llamarig.api import serve_gateway as serve_gateway
    from llamarig.api import serve_top_web as serve_top_web
    from llamarig.api import stop_server as stop_server
    from llamarig.api import top_snapshot as top_snapshot
    from llamarig.api import tune_command as tune_command
    from llamarig.app.check import CheckReport as CheckReport
    from llamarig.app.check import FixResult as FixResult
    from llamarig.app.command import Resolved as Resolved
    from llamarig.app.explain import ExplainReport as ExplainReport
    from llamarig.app.targets import TargetResult as TargetResult
    from llamarig.app.tune import TuneResult as TuneResult
    from llamarig.app.tune import TuneSettings as TuneSettings
    from llamarig.bench.compare import Comparison as Comparison
    from llamarig.bench.logs import LogsReport as LogsReport
    from llamarig.bench.result import BenchReport as BenchReport
    from llamarig.bench.runner import BenchConfig as BenchConfig
    from llamarig.diagnostics import Diagnostic as Diagnostic
    from llamarig.errors import GGUFError as GGUFError
    from llamarig.errors import InputError as InputError
    from llamarig.errors import LlamarigError as LlamarigError
    from llamarig.errors import ModelNotFoundError as ModelNotFoundError
    from llamarig.errors import ServerError as ServerError
    from llamarig.errors import UnknownNameError as UnknownNameError
    from llamarig.flags.argv import Command as Command
    from llamarig.flags.findings import Finding as Finding
    from llamarig.flags.findings import Severity as Severity
    from llamarig.gguf.spec import ModelSpec as ModelSpec
    from llamarig.hardware.cpu import CpuFeatures as CpuFeatures
    from llamarig.hardware.types import GPU as GPU
    from llamarig.hardware.types import Hardware as Hardware
    from llamarig.plan.config import ServerConfig as ServerConfig
    from llamarig.plan.deployment import Deployment as Deployment
    from llamarig.plan.planner import make_plan as make_plan
    from llamarig.plan.result import DevicePlan as DevicePlan
    from llamarig.plan.result import HostPlan as HostPlan
    from llamarig.plan.result import Line as Line
    from llamarig.plan.result import Plan as Plan
    from llamarig.plan.result import PlanInputs as PlanInputs
    from llamarig.tune.quality import QualityReport as QualityReport
    # end of the generated imports


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'llamarig' has no attribute {name!r}")
    value = getattr(import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
