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

from llamarig.errors import (
    GGUFError,
    InputError,
    LlamarigError,
    ModelNotFoundError,
    ServerError,
    UnknownNameError,
)

__version__ = "0.1.0"

#: public name -> module that defines it
_LAZY = {
    "plan_model": "llamarig.api", "inspect_model": "llamarig.api", "check_text": "llamarig.api",
    "models": "llamarig.api", "gpus": "llamarig.api", "bench_server": "llamarig.api",
    "plan_command": "llamarig.api", "check": "llamarig.api", "fix_report": "llamarig.api",
    "explain_report": "llamarig.api", "resolve_command": "llamarig.api", "resolve": "llamarig.api", "script_deployment": "llamarig.api", "render_command": "llamarig.api",
    "launch_command": "llamarig.api", "tune_command": "llamarig.api", "compare_bench": "llamarig.api",
    "logs_report": "llamarig.api", "stop_server": "llamarig.api", "quality_report": "llamarig.api",
    "top_snapshot": "llamarig.api", "gateway_config": "llamarig.api", "serve_gateway": "llamarig.api",
    "deployment": "llamarig.api", "machine": "llamarig.api", "gpu": "llamarig.api", "plan_inputs": "llamarig.api",
    "Deployment": "llamarig.plan.deployment", "Diagnostic": "llamarig.diagnostics",
    "CheckReport": "llamarig.app.check", "FixResult": "llamarig.app.check", "Resolved": "llamarig.app.command",
    "ExplainReport": "llamarig.app.explain", "BenchReport": "llamarig.bench.result",
    "Comparison": "llamarig.bench.compare", "LogsReport": "llamarig.bench.logs", "QualityReport": "llamarig.tune.quality",
    "TuneResult": "llamarig.app.tune", "TuneSettings": "llamarig.app.tune", "Command": "llamarig.flags.argv",
    "Plan": "llamarig.plan.result", "PlanInputs": "llamarig.plan.result", "DevicePlan": "llamarig.plan.result",
    "HostPlan": "llamarig.plan.result", "Line": "llamarig.plan.result",
    "ModelSpec": "llamarig.gguf.spec", "Hardware": "llamarig.hardware.types", "GPU": "llamarig.hardware.types",
    "CpuFeatures": "llamarig.hardware.cpu", "ServerConfig": "llamarig.plan.config",
    "Finding": "llamarig.flags.findings", "Severity": "llamarig.flags.findings",
    "make_plan": "llamarig.plan.planner",
}

__all__ = [
    "BenchReport", "CheckReport", "Comparison", "LogsReport", "QualityReport", "Command", "CpuFeatures", "Deployment", "DevicePlan", "Diagnostic", "ExplainReport", "Finding",
    "FixResult", "GGUFError", "GPU", "Hardware", "HostPlan", "InputError", "Line", "LlamarigError",
    "ModelNotFoundError", "ModelSpec", "Plan", "PlanInputs", "Resolved", "ServerConfig", "ServerError", "Severity",
    "TuneResult", "TuneSettings", "UnknownNameError", "__version__", "bench_server", "check", "check_text",
    "compare_bench", "deployment", "explain_report", "fix_report", "gateway_config", "gpu", "gpus", "inspect_model",
    "launch_command", "logs_report", "machine", "make_plan", "models", "plan_command", "plan_inputs", "plan_model",
    "quality_report", "render_command", "resolve", "resolve_command", "script_deployment", "serve_gateway", "stop_server", "top_snapshot",
    "tune_command",
]

if TYPE_CHECKING:
    from llamarig.api import (
        bench_server,
        check,
        check_text,
        compare_bench,
        deployment,
        explain_report,
        fix_report,
        gateway_config,
        gpu,
        gpus,
        inspect_model,
        launch_command,
        logs_report,
        machine,
        models,
        plan_command,
        plan_inputs,
        plan_model,
        quality_report,
        render_command,
        resolve,
        resolve_command,
        script_deployment,
        serve_gateway,
        stop_server,
        top_snapshot,
        tune_command,
    )
    from llamarig.app.check import CheckReport, FixResult
    from llamarig.app.command import Resolved
    from llamarig.app.explain import ExplainReport
    from llamarig.app.tune import TuneResult, TuneSettings
    from llamarig.bench.compare import Comparison
    from llamarig.bench.logs import LogsReport
    from llamarig.bench.result import BenchReport
    from llamarig.diagnostics import Diagnostic
    from llamarig.flags.argv import Command
    from llamarig.flags.findings import Finding, Severity
    from llamarig.gguf.spec import ModelSpec
    from llamarig.hardware.cpu import CpuFeatures
    from llamarig.hardware.types import GPU, Hardware
    from llamarig.plan.config import ServerConfig
    from llamarig.plan.deployment import Deployment
    from llamarig.plan.planner import make_plan
    from llamarig.plan.result import DevicePlan, HostPlan, Line, Plan, PlanInputs
    from llamarig.tune.quality import QualityReport


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'llamarig' has no attribute {name!r}")
    value = getattr(import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
