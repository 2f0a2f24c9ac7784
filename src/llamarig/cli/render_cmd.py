"""``llamarig render``, ``llamarig launch``, ``llamarig stop`` (docs/render.md, docs/launch.md).

Input, for render and launch alike (options of llamarig first, then the server's flags; a
llamarig option written after the model is refused, exit 2, unless llama-server has that flag):
  llamarig render [OPTIONS] MODEL.gguf [LLAMA-SERVER FLAGS]
  llamarig render [OPTIONS] -- [/path/to/llama-server] -m MODEL.gguf [LLAMA-SERVER FLAGS]
  llamarig render [OPTIONS] --from-script FILE     (a script/unit/compose/llama-swap file)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from llamarig import api
from llamarig.app.render import FORMATS
from llamarig.cli.help import HelpCommand
from llamarig.cli.lang import _, lang, localize
from llamarig.cli.options import (
    CTX,
    hardware_of,
    hoist_own_options,
    input_options,
    refuse_or_warn,
    refuse_trailing_options,
    rpc_device_option,
)
from llamarig.errors import ExitCode, InputError, LlamarigError
from llamarig.i18n import os_error
from llamarig.procs import exit_description

if TYPE_CHECKING:
    from llamarig.launch.process import Launched


@click.command("render", cls=HelpCommand, context_settings=CTX)
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="bash", show_default=True,
              help="What to write.")
@click.option("--out", "-o", metavar="FILE", type=str, default=None, help="Write to FILE (bash: made executable) instead of stdout.")
@click.option("--name", metavar="NAME", type=str, default=None, help="Service/script name (default llama-server-PORT); for "
              "--format preset the model's name in the router (default: --alias, else the model file's name).")
@click.option("--compose-backend", type=click.Choice(["cpu", "cuda", "vulkan", "rocm"]), default=None,
              help="Image for --format compose (default: cuda when the plan has CUDA GPUs, else cpu).")
@click.option("--user", metavar="USER", type=str, default=None, help="systemd User= of the service.")
@click.option("--force", is_flag=True, help="Render even when the input has check errors or the plan does not fit.")
@click.option("--fix", is_flag=True, help="With --from-script: apply `llamarig check --fix` repairs first.")
@click.option("--model-path", metavar="PATH", type=str, default=None,
              help="For a catalogue MODEL (`llamarig models`): the GGUF's path on the machine that runs the output; "
                   "the plan is the catalogue's.")
@input_options
@rpc_device_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def render_cmd(ctx: click.Context, fmt: str, out: str | None, name: str | None, compose_backend: str | None, user: str | None,
               force: bool, fix: bool, model_path: str | None, from_script: str | None, invocation: int, server_bin: str | None,
               gpus: tuple[str, ...], ram: str | None, detect: bool, rpc_devices: tuple[str, ...],
               command: tuple[str, ...]) -> None:
    """Render a planned or checked llama-server command as a bash launcher, a systemd unit, a
    docker compose service, a llama-swap entry or a llama-server router preset (--models-preset
    INI), with the plan's figures as comments.
    Exit 0, 1 when the input has check errors or the plan does not fit (without --force), 2 bad input."""
    if not from_script and hoist_own_options(ctx, command):  # `render MODEL --gpu X ...`, as plan takes it
        return
    hw, notes = hardware_of(gpus, ram, detect, rpc_devices=rpc_devices)
    res = api.resolve_command(command, from_script=from_script, invocation=invocation, server_bin=server_bin,
                              hardware=hw, notes=notes, repair=fix, keep_script=True, allow_no_binary=True,
                              model_path=model_path)
    if not from_script:
        refuse_trailing_options(res)
    errors = [f for f in res.findings if f.severity == "error"]
    if errors and not force:
        for f in errors:
            click.echo(_("llamarig: line {line}: [{rule}] {message}").format(line=f.line, rule=f.rule, message=f.message), err=True)
        raise LlamarigError(_("{n_errors} check error(s) in {from_script}: pass --fix to apply `llamarig check --fix` "
                              "repairs, or --force to render as is").format(n_errors=len(errors), from_script=from_script))
    for f in errors:
        click.echo(_("llamarig: warning: line {line}: [{rule}] {message} (--force: render anyway)").format(
            line=f.line, rule=f.rule, message=f.message), err=True)
    # the rendered command itself must pass `llamarig check` (cores: of this machine only with --detect)
    refuse_or_warn(api.check_resolved(res, this_machine=detect, reported=errors), force, "render", _schema_label(res))
    if res.plan is not None and not res.plan.fits and not force:
        raise LlamarigError(_("the plan does not fit ({shortfalls}): pass --force to render anyway").format(
            shortfalls=_("; ").join(localize(res.plan.shortfalls()))))
    text = api.render_command(res, fmt, name=name, compose_backend=compose_backend, user=user, lang=lang(), out=out)
    units = api.rpc_units(res, name=name, lang=lang()) if fmt == "systemd" else []
    if out:
        _write(Path(out), text, fmt)
        for fname, unit in units:  # each rpc-server's unit beside the coordinator's
            _write(Path(out).with_name(fname), unit, fmt)
    else:
        click.echo(text, nl=False)
        for fname, unit in units:
            click.echo("\n" + _("# ---- {file}: install it on the rpc-server's host ----").format(file=fname))
            click.echo(unit, nl=False)


def _write(p: Path, text: str, fmt: str) -> None:
    try:
        p.write_text(text)
        if fmt == "bash":
            p.chmod(p.stat().st_mode | 0o111)
    except OSError as e:
        raise InputError(_("{out}: cannot write: {error}").format(out=p, error=os_error(e))) from None
    click.echo(_("wrote {path} ({format})").format(path=p, format=fmt), err=True)


def _component_label(component: str) -> str:
    """'weights CPU_Mapped' -> the component's label in the reader's language, the buffer type
    as llama.cpp names it."""
    from llamarig.cli.plan_view import DEVICE_ROWS, HOST_ROWS

    base, _sp, buf = component.partition(" ")
    labels = dict(HOST_ROWS) | dict(DEVICE_ROWS)
    label = _(labels[base]) if base in labels else base
    return f"{label} {buf}" if buf else label


def _verify_table(rows: list[Any]) -> None:
    """Planned vs actual per buffer: a table where its columns fit, a block per buffer below."""
    from rich.console import Console
    from rich.text import Text

    from llamarig.cli.layout import Column, Sheet, print_wrapped
    from llamarig.cli.plan_view import METHODS

    sheet = Sheet([Column(_("device"), key=True), Column(_("component"), key=True),
                   Column(_("planned MiB"), justify="right"), Column(_("actual MiB"), justify="right"),
                   Column(_("diff MiB"), justify="right"), Column(_("tolerance"), justify="right"),
                   Column(_("method")), Column(_("verdict"))],
                  title=_("planned vs actual (llama-server -lv 4 buffer lines)"))
    for r in rows:
        sheet.add_row(_("host") if r.device == "host" else r.device, _component_label(r.component),
                      f"{r.planned / 2**20:.2f}", "-" if r.actual_mib is None else f"{r.actual_mib:.2f}",
                      "-" if r.diff_mib is None else f"{r.diff_mib:+.2f}", f"±{r.tolerance_mib:.3f}",
                      _(METHODS[r.method]) if r.method in METHODS else r.method,
                      Text(_("ok"), style="green") if r.ok else Text(_("DIFFERS"), style="yellow"))
    con = Console(stderr=False, highlight=False)
    con.print(sheet)
    print_wrapped(con, _("tolerance: weights/KV/recurrent are llama.cpp's own arithmetic, so within the log's %.2f "
                         "MiB rounding (±0.0051 MiB per buffer); compute/output/draft are modelled: ±10 % + 0.05 MiB"),
                  indent="  ")


@click.command("launch", cls=HelpCommand, context_settings=CTX)
@click.option("--detach", "-d", is_flag=True, help="Return once healthy and verified; stop it with `llamarig stop`.")
@click.option("--host", metavar="HOST", type=str, default=None, help="--host for llama-server (default: the command's, else 127.0.0.1).")
@click.option("--port", type=int, default=None, help="--port for llama-server (default: the command's, else 8080).")
@click.option("--force", is_flag=True, help="Launch even when the command has check errors or the plan does not fit.")
@click.option("--timeout", "timeout_s", type=float, default=600, show_default=True, help="Seconds to wait for /health.")
@click.option("--log", "log_path", metavar="FILE", type=str, default=None, help="Log file (default: the state directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the verification as JSON.")
@input_options
@rpc_device_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def launch_cmd(detach: bool, host: str | None, port: int | None, force: bool, timeout_s: float,
               log_path: str | None, as_json: bool, from_script: str | None, invocation: int,
               server_bin: str | None, gpus: tuple[str, ...], ram: str | None, detect: bool,
               rpc_devices: tuple[str, ...], command: tuple[str, ...]) -> None:
    """Start llama-server, wait for /health, and compare the buffers it allocated with the plan.
    Exit 0 running (1 with --detach when verification differs is NOT used: differences are
    warnings), 1 check errors in the command or plan does not fit, 2 bad input, 3 binary missing /
    port in use / start failed."""
    if not detach:
        # foreground: SIGTERM (systemd, kill) stops the server like Ctrl-C does, from the start
        import signal

        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _interrupt)
    # the server runs here: plan for this machine's GPUs and RAM unless told otherwise
    detect = detect or not gpus
    from llamarig.launch.rpc import host_memory

    hw, notes = hardware_of(gpus, ram, detect, rpc_devices=rpc_devices)
    res = api.resolve_command(command, from_script=from_script, invocation=invocation, server_bin=server_bin,
                              hardware=hw, notes=notes, loopback_rpc_memory=host_memory())
    if not from_script:
        refuse_trailing_options(res)
    if res.plan is None and res.plan_note:
        click.echo(_("llamarig: note: {note}; launching without verification").format(note=res.plan_note), err=True)
    refuse_or_warn(api.check_resolved(res, host=host, port=port, this_machine=True), force, "launch",
                   _schema_label(res))
    lr = api.launch_command(res, host=host, port=port, log_path=log_path, timeout_s=timeout_s, force=force)
    try:
        _launch_report(lr, as_json)
    except KeyboardInterrupt:
        click.echo(localize(api.stop_server(state_file=lr.state_file)), err=True)
        sys.exit(ExitCode.INTERRUPTED)
    if detach:
        return
    _foreground(lr)


def _schema_label(res: Any) -> str:
    return res.schema.label() if res.schema is not None else "the bundled schema"


def _launch_report(lr: Any, as_json: bool) -> None:
    bad = [r for r in lr.rows if not r.ok]
    if as_json:
        click.echo(json.dumps({"pid": lr.state.pid, "url": lr.url, "state_file": str(lr.state_file),
                               "log": lr.state.log_path, "argv": list(lr.state.argv),
                               "rpc_servers": [{"pid": r.pid, "endpoint": r.endpoint, "log": str(r.log_path)}
                                               for r in lr.rpc],
                               "verification": [r.to_json() for r in lr.rows], "verified": not bad and bool(lr.rows)},
                              indent=1))
    else:
        for r in lr.rpc:
            click.echo(_("rpc-server pid {pid} listening on {endpoint}; log {log}").format(
                pid=r.pid, endpoint=r.endpoint, log=r.log_path))
        from rich.console import Console

        from llamarig.cli.layout import print_wrapped

        print_wrapped(Console(highlight=False), _("llama-server pid {pid} healthy at {url}; log {log}; state {state}").format(
            pid=lr.state.pid, url=lr.url, log=lr.state.log_path, state=lr.state_file), indent="  ")
        if lr.rows:
            _verify_table(lr.rows)
    for n in lr.notes:
        click.echo(_("llamarig: note: {note}").format(note=localize(n)), err=True)
    for r in bad:
        click.echo(_("llamarig: warning: {device} {component}: planned {planned:.2f} MiB, allocated {actual} MiB "
                     "(tolerance ±{tolerance:.3f} MiB, {method})").format(
            device=r.device, component=r.component, planned=r.planned / 2**20, actual=r.actual_mib,
            tolerance=r.tolerance_mib, method=r.method), err=True)


def _foreground(lr: Launched) -> None:
    click.echo(_("running in the foreground: Ctrl-C (or SIGTERM to llamarig) stops it"), err=True)
    try:
        code, done = lr.wait()
        for line in done:  # its rpc-servers go with it
            click.echo(localize(line), err=True)
        click.echo(_("llama-server {exit_description}").format(exit_description=exit_description(code)), err=True)
        if code:
            sys.exit(ExitCode.ENVIRONMENT)
    except KeyboardInterrupt:
        click.echo(localize(api.stop_server(state_file=lr.state_file)), err=True)
        sys.exit(ExitCode.INTERRUPTED)


@click.command("stop", cls=HelpCommand)
@click.option("--port", type=int, default=None, help="Port of the server `llamarig launch` started.")
@click.option("--state", "state_file", metavar="FILE", type=str, default=None, help="A launch state file.")
@click.option("--timeout", "timeout_s", type=float, default=30, show_default=True,
              help="Seconds to wait after SIGTERM before SIGKILL.")
def stop_cmd(port: int | None, state_file: str | None, timeout_s: float) -> None:
    """Stop the llama-server that `llamarig launch` started, and only that process (its pid, start
    time and command line must still match the state file). Exit 0, 2 when there is no state."""
    click.echo(localize(api.stop_server(port, state_file, timeout_s)))
