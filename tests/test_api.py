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
    "plan": ["plan_command", "plan_model"],
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
