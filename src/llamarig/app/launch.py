"""``launch_command``: start llama-server for a resolved command, wait for /health and compare
the buffers it allocated with the plan (docs/launch.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from llamarig.app.command import Resolved
from llamarig.flags.argv import Command
from llamarig.hardware.cpu import CpuFeatures
from llamarig.launch.process import Launched, start
from llamarig.plan.inputs import build_plan
from llamarig.plan.result import Plan


def launch_args(res: Resolved, host: str | None = None, port: int | None = None) -> list[str]:
    """The command's llama-server args with ``--host``/``--port`` replaced when given."""
    return launch_command_of(res, host, port).server_args()


def launch_command_of(res: Resolved, host: str | None = None, port: int | None = None) -> Command:
    """:func:`launch_args` as the resolved Command (not parsed again)."""
    cmd = res.command()
    if port is not None:
        cmd = cmd.set("--port", str(port))
    if host is not None:
        cmd = cmd.set("--host", host)
    return cmd


def launch_command(res: Resolved, *, host: str | None = None, port: int | None = None,
                   log_path: str | Path | None = None, timeout_s: float = 600, force: bool = False,
                   env: Mapping[str, str] | None = None) -> Launched:
    """Start ``res`` (:func:`llamarig.app.command.resolve_command`) detached, wait for /health,
    and verify its allocations against ``res.plan`` (re-planned for the CPU features the
    server's own system_info line names). The server's environment is this process's, plus the
    command's own (a script's ``export``/``Environment=``), plus ``env``; nothing is changed in
    this process. Raises ServerError (exit 3) for a missing binary, a port in use or a failed
    start; LlamarigError (exit 1) for a plan that does not fit unless ``force``."""
    replan = None
    d = res.deployment
    if res.plan is not None and d is not None:
        def replan(cpu: CpuFeatures) -> Plan:
            return build_plan(d.on(replace(d.hardware, cpu=cpu)))

    return start(res.binary, launch_command_of(res, host, port), plan=res.plan,
                 log_path=Path(log_path) if log_path else None, timeout_s=timeout_s, force=force, replan=replan,
                 env={**dict(res.env), **dict(env or {})})
