"""`llamarig.api`'s promise, "one function per thing the CLI does", is kept: every command of
the CLI has its library function, exported from llamarig, documented in docs/architecture.md."""

from __future__ import annotations

from pathlib import Path

import llamarig
from llamarig import api
from llamarig.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parent.parent

#: command -> the library functions that do it (a command that starts from a llama-server
#: command is resolve_command + its own)
FUNCTIONS = {
    "inspect": ["inspect_model"],
    "plan": ["deployment", "machine", "gpu", "plan_inputs", "plan_command", "plan_model"],
    "models": ["models"],
    "gpus": ["gpus"],
    "check": ["check", "check_text", "fix_report"],
    "explain": ["check", "explain_report"],
    "bench": ["bench_server", "compare_bench"],
    "logs": ["logs_report"],
    "gateway": ["gateway_config", "serve_gateway"],
    "render": ["resolve_command", "render_command"],
    "launch": ["resolve_command", "launch_command"],
    "stop": ["stop_server"],
    "tune": ["resolve_command", "tune_command"],
    "top": ["top_snapshot"],
    "quality": ["resolve_command", "quality_report"],
}


def test_every_command_has_its_function() -> None:
    assert set(COMMANDS) == set(FUNCTIONS), set(COMMANDS) ^ set(FUNCTIONS)
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for cmd, names in FUNCTIONS.items():
        for name in names:
            assert callable(getattr(api, name)), (cmd, name)
            assert name in llamarig.__all__, (cmd, name)
            assert f"`{name}`" in doc, (cmd, name)
            assert f":func:`{name}`" in (api.__doc__ or ""), (cmd, name)


def test_models_is_a_copy() -> None:
    """A caller changing what models() returned changes nothing the planner reads."""
    cat = llamarig.models()
    m = cat["qwen3.6-27b"]
    m.entry["n_layer"] = 1
    m.quants.clear()
    again = llamarig.models()["qwen3.6-27b"]
    assert again.entry["n_layer"] != 1 and again.quants


def test_the_cli_goes_through_the_api() -> None:
    """The commands that plan, render, launch, tune and check call llamarig.api, not the use cases
    behind it (the API is the one public signature of each)."""
    import ast

    cli = ROOT / "src" / "llamarig" / "cli"
    for name, uses in {"plan_cmd.py": ["plan_command", "deployment", "plan_inputs"],
                       "render_cmd.py": ["resolve_command", "render_command", "launch_command"],
                       "tune_cmd.py": ["resolve_command", "tune_command", "quality_report"],
                       "check_cmd.py": ["check"]}.items():
        tree = ast.parse((cli / name).read_text())
        called = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name) and n.value.id == "api"}
        assert set(uses) <= called, (name, set(uses) - called)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in ("llamarig.app.planning", "llamarig.app.command",
                                                                    "llamarig.app.tune", "llamarig.app.check"):
                bad = {a.name for a in node.names} & {"plan_with_speed", "resolve_command", "tune_command", "check"}
                assert not bad, (name, bad)
