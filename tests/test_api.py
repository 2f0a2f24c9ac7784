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
    "plan": ["deployment", "machine", "gpu", "plan_inputs", "plan_command", "plan_model", "plan_targets"],
    "models": ["models", "model", "bits_per_weight", "repo_models", "refresh_model"],
    "gpus": ["gpus", "gpu"],
    "check": ["check", "check_text", "fix_report"],
    "explain": ["check", "explain_report"],
    "bench": ["bench_server", "compare_bench", "gateway_hold"],
    "logs": ["logs_report"],
    "gateway": ["gateway_config", "serve_gateway"],
    "render": ["resolve_command", "check_resolved", "render_command", "rpc_units"],
    "launch": ["resolve_command", "check_resolved", "launch_command"],
    "stop": ["stop_server"],
    "tune": ["resolve_command", "tune_command"],
    "top": ["top_snapshot", "serve_top_web"],
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
    """Each command calls its llamarig.api functions, not the use cases behind them (the API is
    the one public signature of each; tests/architecture/test_layers.py holds every command
    module to importing no use case)."""
    import ast

    cli = ROOT / "src" / "llamarig" / "cli"
    for name, uses in {"plan_cmd.py": ["plan_command", "deployment", "plan_inputs", "plan_targets"],
                       "render_cmd.py": ["resolve_command", "check_resolved", "render_command", "rpc_units",
                                         "launch_command", "stop_server"],
                       "tune_cmd.py": ["resolve_command", "tune_command", "quality_report"],
                       "check_cmd.py": ["check", "fix_report", "explain_report"],
                       "bench_cmd.py": ["bench_server", "compare_bench", "gateway_hold", "logs_report"],
                       "catalogue_cmd.py": ["models", "model", "bits_per_weight", "repo_models", "refresh_model",
                                            "gpus", "gpu"],
                       "inspect_cmd.py": ["inspect_model"]}.items():
        tree = ast.parse((cli / name).read_text())
        called = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                  and isinstance(n.value, ast.Name) and n.value.id == "api"}
        assert set(uses) <= called, (name, set(uses) - called)


def test_public_signatures_hold_no_cli_options() -> None:
    """What only the CLI needs (its own option spellings, its name) is not in a public signature;
    bench's settings are typed, not ``**kwargs``."""
    import inspect

    for name in llamarig.__all__:
        obj = getattr(llamarig, name)
        if not inspect.isfunction(obj):
            continue
        params = inspect.signature(obj).parameters
        assert not {"own", "command_name"} & set(params), name
        assert all(p.kind is not p.VAR_KEYWORD for p in params.values()), name


def test_plan_targets_answers_with_its_verdict(tmp_path: Path) -> None:
    """``plan --target-*`` as a library call: the verdict the command exits on is a field."""
    from llamarig.testing.synth import write_model

    write_model(str(tmp_path / "tiny.gguf"), "qwen3")
    d = llamarig.deployment(str(tmp_path / "tiny.gguf"), hardware=llamarig.machine([llamarig.gpu("rtx3090")]))
    found = llamarig.plan_targets(d, target_ctx=4096)
    assert found.met and found.exit_code == 0 and found.targets.ctx == 4096
    assert found.to_json()["verdict"] in ("ok", "maybe")
    slow = llamarig.plan_targets(d, target_ctx=4096, target_decode=99_999)
    assert not slow.met and slow.exit_code == 1 and slow.result.verdict in ("unlikely", "impossible")
