"""``render_command``: a resolved llama-server command as a bash launcher, a systemd unit, a
docker compose service, a llama-swap entry or a router preset (docs/render.md)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from llamarig.app.command import Resolved, schema_of
from llamarig.app.runs import log_hint
from llamarig.errors import InputError, one_line
from llamarig.flags.argv import Command
from llamarig.i18n import _
from llamarig.plan.result import Plan
from llamarig.render.argv import absolutize_command, working_directory
from llamarig.render.bash import render_bash
from llamarig.render.common import RenderSpec, plan_figures
from llamarig.render.compose import render_compose
from llamarig.render.llamaswap import render_llamaswap
from llamarig.render.preset import preset_name, render_preset
from llamarig.render.rpc import RpcServerSpec, comment_lines, render_rpc_unit, rpc_servers
from llamarig.render.systemd import render_systemd

FORMATS = ("bash", "systemd", "compose", "llama-swap", "preset")


def default_name(args: Command | Sequence[str]) -> str:
    """llama-server-PORT (the port the command serves on, llama-server's 8080 by default)."""
    return f"llama-server-{Command.of(args, program=False).get('--port') or '8080'}"


def render_command(res: Resolved, fmt: str = "bash", *, name: str | None = None,
                   compose_backend: str | None = None, user: str | None = None, lang: str = "en",
                   out: str | None = None) -> str:
    """`llamarig render`: ``res`` (:func:`llamarig.app.command.resolve_command`) as a bash
    launcher, a systemd unit, a docker compose service, a llama-swap entry or llama-server's own
    router preset (the INI ``--models-preset`` reads), with the plan's figures and every flag
    explained as comments. ``name``: the service/script name (default
    llama-server-PORT); ``compose_backend``: the image (default: the devices' backend); ``lang``:
    the language of the comments (what programs read stays as it is); ``out``: the file it is
    written to (the preset's router command names it)."""
    if fmt not in FORMATS:
        raise InputError(_("--format {fmt}: expected one of {formats}").format(fmt=fmt, formats=", ".join(FORMATS)))
    nm = name or default_name(res.command())
    if not re.fullmatch(r"[A-Za-z0-9_.@-]+", nm):
        raise InputError(_("--name {nm}: use letters, digits, '-', '_', '.', '@' only").format(nm=nm))
    for word in [res.binary, *res.args, *(f"{k}={v}" for k, v in res.env)]:
        if any(ord(c) < 32 or ord(c) == 127 for c in word):
            raise InputError(_("argument {word}: contains a control character (newline, tab...): it cannot be rendered "
                               "safely into a script, unit or YAML file").format(word=one_line(word)))
    schema = res.schema if res.schema is not None else schema_of(res.binary)
    # every path absolute: a unit, a launcher or llama-swap runs the server from another directory
    cmd, _unused = absolutize_command(res.command(), [Path.cwd()], schema)
    args = cmd.server_args()
    figures = _figures(res, fmt)
    spec = RenderSpec(res.binary, tuple(args), nm, tuple(figures), tuple(res.env), schema,
                      wrappers=tuple(res.wrappers), workdir=res.workdir, lang=lang, parsed=cmd)
    if fmt == "bash":
        return render_bash(spec)
    if fmt == "systemd":
        return render_systemd(spec, user=user, working_dir=working_directory(cmd, schema),
                              requires=_local_units(rpc_servers_of(res), nm))
    if fmt == "compose":
        backend = compose_backend or compose_backend_for(cmd, res.plan)
        return render_compose(spec, backend)
    if fmt == "preset":
        return render_preset(spec, preset_name(spec, explicit=name is not None),
                             path=str(Path(out).resolve()) if out else None)
    return render_llamaswap(spec)


def _figures(res: Resolved, fmt: str) -> list[str]:
    """The comment lines above the command: notes on the input, the plan's figures, and what
    this format keeps or needs filled in."""
    figures = list(res.notes) + ([res.plan_note] if res.plan_note else [])
    figures += plan_figures(res.plan, res.plan.speed) if res.plan is not None else []
    if fmt in ("systemd", "llama-swap", "preset") and not Path(res.binary).is_absolute():
        figures.append(_("binary: `{name}` is not on this machine: systemd's ExecStart= and llama-swap look a bare "
                         "name up in their own search path, not your PATH: write the absolute path of llama-server "
                         "there").format(name=res.binary))
    if fmt == "compose" and (res.wrappers or res.workdir):
        figures.append(_("the script's wrappers and directory are not kept: the image runs its own llama-server"))
    elif fmt == "llama-swap" and res.workdir:
        figures.append(_("directory: llama-swap starts cmd in its own directory; every path above is absolute"))
    figures += comment_lines(rpc_servers_of(res))
    if res.script is not None and res.script != "-":  # what ran, when it differs from the script: its log says
        figures.append(log_hint(res.script))
    return [one_line(f, 1000) for f in figures]


def _local_units(rpc: list[RpcServerSpec], name: str) -> tuple[str, ...]:
    """The units of the rpc-servers on this machine, which llama-server's unit requires."""
    return tuple(f"{r.unit_name(name)}.service" for r in rpc if r.local)


def rpc_servers_of(res: Resolved) -> list[RpcServerSpec]:
    """The rpc-servers of the command's ``--rpc``, with what ``--rpc-device`` says they bring."""
    rpc = res.command().get("--rpc")
    return rpc_servers(rpc, res.hardware.rpc, res.binary)


def rpc_units(res: Resolved, *, name: str | None = None, lang: str = "en") -> list[tuple[str, str]]:
    """(file name, text) of a systemd unit per rpc-server of ``res``'s ``--rpc``, to install on
    its host (render/rpc.py)."""
    nm = name or default_name(res.command())
    return [(f"{s.unit_name(nm)}.service", render_rpc_unit(s, nm, lang)) for s in rpc_servers_of(res)]


def compose_backend_for(args: Command | Sequence[str], plan: Plan | None) -> str:
    """The image a compose service needs: the backend of the devices the command names
    (-dev CUDA1,CUDA0 / ROCm0 / Vulkan0), else of the plan's GPUs, else cpu."""
    devices = Command.of(args, program=False).get("--device") or ""
    names = [d.strip().upper() for d in devices.split(",") if d.strip()]
    if plan is not None:
        names += [d.name.upper() for d in plan.devices]
    for prefix, backend in (("CUDA", "cuda"), ("ROCM", "rocm"), ("VULKAN", "vulkan")):
        if any(n.startswith(prefix) for n in names):
            return backend
    return "cpu"


