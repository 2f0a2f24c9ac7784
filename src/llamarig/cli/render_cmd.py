"""``llamarig render``, ``llamarig launch``, ``llamarig stop`` (docs/render.md, docs/launch.md).

Input, for render and launch alike (options of llamarig first, then the server's flags; a
llamarig option written after the model is refused, exit 2, unless llama-server has that flag):
  llamarig render [OPTIONS] MODEL.gguf [LLAMA-SERVER FLAGS]
  llamarig render [OPTIONS] -- [/path/to/llama-server] -m MODEL.gguf [LLAMA-SERVER FLAGS]
  llamarig render [OPTIONS] --from-script FILE     (a script/unit/compose/llama-swap file)
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from llamarig import i18n
from llamarig.cli.lang import _, lang, localize
from llamarig.errors import ExitCode, InputError, LlamarigError, one_line
from llamarig.procs import exit_description

if TYPE_CHECKING:
    from llamarig.flags.findings import Finding
    from llamarig.flags.schema import Schema
    from llamarig.hardware.cpu import CpuFeatures
    from llamarig.plan.inputs import PlanArgs
    from llamarig.plan.result import Plan
    from llamarig.plan.speed import SpeedReport

FORMATS = ("bash", "systemd", "compose", "llama-swap")


@dataclass
class Resolved:
    binary: str
    args: list[str]
    env: list[tuple[str, str]] = field(default_factory=list)
    plan: Plan | None = None
    speed: SpeedReport | None = None
    plan_note: str = ""
    findings: list[Finding] = field(default_factory=list)  # check findings of a --from-script input
    notes: list[str] = field(default_factory=list)  # comment lines about the input
    schema: Schema | None = None  # flag schema of `binary` (else the bundled one)
    plan_args: PlanArgs | None = None  # the PlanArgs behind ``plan`` (launch re-plans for the server's CPU)
    wrappers: list[str] = field(default_factory=list)  # --from-script: the script's wrappers, kept
    workdir: str | None = None  # --from-script: the directory the script runs the server in, kept


def _binary(explicit: str | None, program: str | None) -> str:
    from llamarig.binary import find_binary

    if explicit:
        return os.path.abspath(find_binary("llama-server", explicit))
    if program and ("/" in program) and Path(program).is_file():
        return str(Path(program).resolve())
    return os.path.abspath(str(find_binary("llama-server")).strip())


def _split(tokens: list[str]) -> tuple[str | None, list[str]]:
    """(program or None, llama-server args) from ``MODEL flags``, ``llama-server flags`` or ``flags``."""
    from llamarig.flags.readers import is_server_program

    if not tokens:
        return None, []
    first = tokens[0]
    if is_server_program(first):
        return first, tokens[1:]
    if not first.startswith("-"):
        return None, ["-m", first] + tokens[1:]
    return None, tokens


def _plan_args(args: list[str], gpus: tuple[str, ...], ram: str | None, detect: bool) -> PlanArgs:
    from llamarig.plan.inputs import PlanArgs
    from llamarig.units import parse_size

    return PlanArgs(gpus=list(gpus), detect=detect, ram=parse_size(ram, "g") if ram else None,
                    command=["llama-server", *args])


def _plan(args: list[str], gpus: tuple[str, ...], ram: str | None,
          detect: bool) -> tuple[Plan | None, SpeedReport | None, str]:
    """(plan, speed report, note) through the planner's library (llamarig.cli.plan_cmd)."""
    from llamarig.plan.inputs import build_hardware, build_plan

    pa = _plan_args(args, gpus, ram, detect)
    try:
        plan = build_plan(pa)
    except LlamarigError as e:
        return None, None, i18n._("plan: not computed ({error})").format(error=e)
    speed = None
    note = ""
    try:
        from llamarig.gguf import load_spec
        from llamarig.plan.config import parse_server_args
        from llamarig.plan.speed import speed_report

        cfg = parse_server_args(["llama-server", *args], strict=False)
        model = cfg.model or plan.model
        if Path(model).is_file():
            spec = load_spec(model)
        else:
            from llamarig.catalogue.models import build_spec, find_model

            m, q = find_model(model)
            spec = build_spec(m, q)
            note = i18n._("model: '{model}' is a catalogue id, not a file: replace it with the GGUF's path (the figures "
                     "are for the catalogue's header)").format(model=model)
        speed = speed_report(spec, cfg, build_hardware(pa), n_ctx=plan.n_ctx_slot)
    except LlamarigError:
        speed = None
    return plan, speed, note


def _script_dir(cwd: str | None, script_dir: Path) -> str | None:
    """The directory a script runs llama-server in (its last ``cd DIR``, a unit's
    WorkingDirectory=), absolute: ``~`` is this user's home, a relative one is taken from the
    script's directory; None when it does not say or names a variable."""
    if not cwd or "$" in cwd or "`" in cwd:
        return None
    d = os.path.expanduser(cwd)
    return os.path.normpath(d if os.path.isabs(d) else os.path.join(script_dir, d))


def _script_binary(program: str, workdir: str | None, script_dir: Path) -> str:
    """The script's own program, as the output runs it: a bare name stays a name (looked up on
    PATH, as the script does), ``~`` is expanded, a relative path is joined to the directory the
    script runs it in (its ``cd``), else to the script's directory."""
    if "/" not in program:
        return program
    p = os.path.expanduser(program)
    if not os.path.isabs(p):
        p = os.path.normpath(os.path.join(workdir or str(script_dir), p))
    return p


def _keep_script_command(inv: Any, script: Path, notes: list[str]) -> tuple[str | None, list[str], str | None]:
    """(the script's binary, its wrappers, its directory) for the rendered output, each with a
    note saying it was kept. A command inside a container (compose, Kubernetes, Helm, docker
    run) names a path of the image: (None, [], None), the binary is then found here."""
    from llamarig.flags.readers import is_server_program

    if inv.source not in ("shell", "systemd", "llama-swap") or not is_server_program(inv.program):
        return None, [], None
    script_dir = script.parent.resolve()
    workdir = _script_dir(inv.cwd, script_dir)
    binary = _script_binary(inv.program, workdir, script_dir)
    if workdir:
        how = f"`cd {inv.cwd}`" if inv.source == "shell" else f"WorkingDirectory={inv.cwd}"  # as written
        notes.append(i18n._("directory: the script's {how} kept ({dir}): the server runs there").format(
            how=how, dir=workdir))
    if inv.wrappers:
        notes.append(i18n._("wrappers: the script's `{words}` kept in front of the server").format(
            words=" ".join(inv.wrappers)))
    where = "" if binary == inv.program else f" ({binary})"
    notes.append(i18n._("binary: the script's {program}{where} kept").format(program=inv.program, where=where))
    return binary, list(inv.wrappers), workdir


def _schema_binary(binary: str) -> tuple[str | None, bool]:
    """A binary on this machine whose flags stand for ``binary``'s, and whether it is ``binary``
    itself (the file, or the name's PATH hit); else the one llamarig finds
    (``$LLAMARIG_SERVER_BIN``, PATH, the build cache), or None."""
    import shutil  # lazy: only for a script that names its own binary

    if "/" in binary and Path(binary).is_file():
        return binary, True
    hit = shutil.which(binary) if "/" not in binary else None
    if hit:
        return hit, True
    try:
        return _binary(None, None), False
    except LlamarigError:
        return None, False


def own_options() -> list[str]:
    """Every spelling of the running llamarig command's own options (click's context)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return []
    out: list[str] = []
    for p in ctx.command.params:
        if isinstance(p, click.Option):
            out += [*p.opts, *p.secondary_opts]
    return out


def _refuse_catalogue_names(args: list[str]) -> None:
    """A launcher runs llama-server, which needs files: a catalogue id as -m, or plan's
    --mmproj f16/bf16/catalogue shorthand, is refused (not written as a relative path)."""
    from llamarig.render.argv import _is_catalogue_id
    from llamarig.render.common import get_value

    model = get_value(args, "-m", "--model")
    if model and not Path(os.path.expanduser(model)).exists() and _is_catalogue_id(model):
        raise InputError(_("-m {model}: a catalogue id, not a file: the launcher needs the GGUF's path (download it "
                           "first, e.g. with `huggingface-cli download REPO FILE.gguf`, or give llama-server `-hf "
                           "REPO:QUANT`); `llamarig plan {model}` plans without the file").format(model=model))
    mm = get_value(args, "--mmproj", "-mm")
    if mm and mm.lower() in ("f16", "bf16", "catalogue", "auto", "default") and not Path(mm).exists():
        raise InputError(_("--mmproj {mm}: plan's shorthand for the catalogue's projector, not a file: give the "
                           "mmproj GGUF's path").format(mm=mm))


def resolve(tokens: tuple[str, ...], from_script: str | None, invocation: int, server_bin: str | None,
            gpus: tuple[str, ...], ram: str | None, detect: bool, want_plan: bool = True,
            fix: bool = False, own: list[str] | None = None, keep_script: bool = False) -> Resolved:
    """The binary, the final llama-server args (relative paths made absolute), env and plan.
    ``own``: the calling command's option spellings; one of them among the server flags (written
    after the model) that llama-server does not know is an InputError. ``keep_script``
    (render): a --from-script command keeps its own binary, wrappers and directory."""
    from llamarig.render.argv import absolutize, misplaced_options

    env: list[tuple[str, str]] = []
    findings: list[Finding] = []
    notes: list[str] = []
    bases = [Path.cwd()]
    program: str | None  # the input's program word (None: MODEL or flags only)
    kept_binary: str | None = None
    wrappers: list[str] = []
    workdir: str | None = None
    if from_script:
        from llamarig.cli.check_cmd import get_schema, read_input, run_check

        if tokens:
            raise InputError(_("give either --from-script FILE or a command, not both"))
        text, name = read_input(from_script)
        schema = get_schema(server_bin, False)
        parsed, readings, findings = run_check(text, schema, base_dir=Path(from_script).parent,
                                                origin=Path(from_script))
        if fix and any(f.severity == "error" for f in findings):
            from llamarig.flags.fix import fix_text

            n_before = sum(1 for f in findings if f.severity == "error")
            text = fix_text(parsed, readings, findings, schema)
            parsed, readings, findings = run_check(text, schema, base_dir=Path(from_script).parent,
                                                origin=Path(from_script))
            notes.append(i18n._("input: {name}, repaired with `llamarig check --fix` ({n} error(s) before)").format(name=name, n=n_before))
        else:
            notes.append(i18n._("input: {name}").format(name=name))
        if not parsed.invocations:
            raise InputError(_("{name}: no llama-server command found").format(name=name))
        if not 1 <= invocation <= len(parsed.invocations):
            raise InputError(_("--invocation {invocation}: {name} has {n_invocations} llama-server command(s)").format(invocation=invocation, name=name, n_invocations=len(parsed.invocations)))
        inv = parsed.invocations[invocation - 1]
        findings = [f for f in findings if f.invocation in (None, invocation - 1)]
        program, args = inv.program, [w.text for w in inv.args]
        env = [(n, v) for n, v, _ in inv.env]
        bases.append(Path(from_script).parent.resolve())
        if keep_script and not server_bin:
            kept_binary, wrappers, workdir = _keep_script_command(inv, Path(from_script), notes)
            if workdir:  # the server runs there: its relative paths are there
                bases.insert(0, Path(workdir))
    else:
        program, args = _split(list(tokens))
        if not args:
            raise InputError(_("no llama-server command: give MODEL.gguf [flags], `-- llama-server -m MODEL ...` or "
                               "--from-script FILE"))
    if kept_binary is not None:
        binary = kept_binary
        found, itself = _schema_binary(binary)
        schema = _schema(found) if found else _schema(binary)
        if not itself:
            notes.append(i18n._("flags: checked against {schema} ({binary} is not on this machine)").format(
                schema=schema.label(), binary=binary))
    else:
        binary = _binary(server_bin, program)
        if program and Path(program).name != Path(binary).name or (program and "/" in program and not Path(program).is_file()):
            notes.append(i18n._("binary: {binary} (the input's {program} is not here)").format(binary=binary, program=program))
        schema = _schema(binary)
    if own and not from_script:
        bad = misplaced_options(args, schema, own)
        if bad:
            cmd = click.get_current_context().info_name
            raise InputError(_("{bad}: llamarig option(s) after the model (or after `--`) would be passed to "
                               "llama-server, which does not take them: put llamarig options before the model, e.g. "
                               "`llamarig {cmd} {first} ... MODEL.gguf [SERVER FLAGS]`").format(bad=', '.join(bad), cmd=cmd, first=bad[0]))
    if not from_script:
        _refuse_catalogue_names(args)
    args, changed = absolutize(args, schema, bases)
    if changed:
        where = i18n.join(i18n._(" or "), [str(b) for b in bases])
        notes.append(i18n._("paths: relative {paths} made absolute (against {base})").format(paths=", ".join(changed), base=where))
    res = Resolved(binary, args, env, findings=findings, notes=notes, schema=schema, wrappers=wrappers,
                   workdir=workdir)
    if want_plan:
        res.plan, res.speed, res.plan_note = _plan(args, gpus, ram, detect)
        res.plan_args = _plan_args(args, gpus, ram, detect)
    return res


def _schema(binary: str) -> Schema:
    from llamarig.flags.schema import load_bundled, load_schema

    try:
        return load_schema(binary)
    except LlamarigError:
        return load_bundled()


def _default_name(args: list[str]) -> str:
    from llamarig.render.common import get_value

    port = get_value(args, "--port") or "8080"
    return f"llama-server-{port}"


def render_text(res: Resolved, fmt: str, name: str | None, compose_backend: str | None = None,
                user: str | None = None, comments_lang: str | None = None) -> str:
    from llamarig.render.argv import absolutize, working_directory
    from llamarig.render.common import RenderSpec, plan_figures

    figures = plan_figures(res.plan, res.speed) if res.plan is not None else []
    if res.plan_note:
        figures = [res.plan_note] + figures
    figures = list(res.notes) + figures
    nm = name or _default_name(res.args)
    if not re.fullmatch(r"[A-Za-z0-9_.@-]+", nm):
        raise InputError(_("--name {nm}: use letters, digits, '-', '_', '.', '@' only").format(nm=nm))
    for word in [res.binary, *res.args, *(f"{k}={v}" for k, v in res.env)]:
        if any(ord(c) < 32 or ord(c) == 127 for c in word):
            raise InputError(_("argument {word}: contains a control character (newline, tab...): it cannot be rendered "
                               "safely into a script, unit or YAML file").format(word=one_line(word)))
    figures = [one_line(f, 1000) for f in figures]
    schema = res.schema if res.schema is not None else _schema(res.binary)
    # every path absolute: a unit, a launcher or llama-swap runs the server from another directory
    args, _unused = absolutize(res.args, schema, [Path.cwd()])
    if fmt == "compose" and (res.wrappers or res.workdir):
        figures.append(i18n._("the script's wrappers and directory are not kept: the image runs its own llama-server"))
    elif fmt == "llama-swap" and res.workdir:
        figures.append(i18n._("directory: llama-swap starts cmd in its own directory; every path above is absolute"))
    spec = RenderSpec(res.binary, tuple(args), nm, tuple(figures), tuple(res.env), schema,
                      wrappers=tuple(res.wrappers), workdir=res.workdir, lang=comments_lang or lang())
    if fmt == "bash":
        from llamarig.render.bash import render_bash

        return render_bash(spec)
    if fmt == "systemd":
        from llamarig.render.systemd import render_systemd

        return render_systemd(spec, user=user, working_dir=working_directory(args, schema))
    if fmt == "compose":
        from llamarig.render.compose import render_compose

        backend = compose_backend or compose_backend_for(args, res.plan)
        return render_compose(spec, backend)
    from llamarig.render.llamaswap import render_llamaswap

    return render_llamaswap(spec)


def compose_backend_for(args: list[str], plan: Plan | None) -> str:
    """The image a compose service needs: the backend of the devices the command names
    (-dev CUDA1,CUDA0 / ROCm0 / Vulkan0), else of the plan's GPUs, else cpu."""
    from llamarig.render.common import get_value

    names = [d.strip().upper() for d in (get_value(args, "-dev", "--device") or "").split(",") if d.strip()]
    if plan is not None:
        names += [d.name.upper() for d in plan.devices]
    for prefix, backend in (("CUDA", "cuda"), ("ROCM", "rocm"), ("VULKAN", "vulkan")):
        if any(n.startswith(prefix) for n in names):
            return backend
    return "cpu"


_CTX = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def check_final(res: Resolved, args: list[str], force: bool, what: str, cores: int | None = None,
                reported: list[Finding] | None = None) -> None:
    """Run `llamarig check`'s rules on the final command (binary + ``args``): each error and
    warning on one stderr line; with errors, exit 1 unless ``force`` (then they are warnings).
    ``reported``: findings of the --from-script input printed already; not repeated."""
    from llamarig.render.argv import check_argv, finding_line

    what = {"render": _("render"), "launch": _("launch")}.get(what, what)
    schema = res.schema
    if schema is None:  # resolve() always sets one; else check against the bundled one, as the error below says
        from llamarig.flags.schema import load_bundled

        schema = load_bundled()
    seen = {(f.rule, f.flag, f.severity) for f in reported or ()}
    findings = [f for f in check_argv([res.binary, *args], schema, cores=cores)
                if (f.rule, f.flag, f.severity) not in seen and f.severity in ("error", "warning")]
    errors = [f for f in findings if f.severity == "error"]
    for f in findings:
        if f.severity == "error" and not force:
            click.echo(_("llamarig: error: {message}").format(message=finding_line(f)), err=True)
        else:
            extra = _(" (--force: {what} anyway)").format(what=what) if f.severity == "error" else ""
            click.echo(_("llamarig: warning: {message}").format(message=finding_line(f) + extra), err=True)
    if errors and not force:
        label = res.schema.label() if res.schema is not None else "the bundled schema"
        raise LlamarigError(_("{n_errors} check error(s) in the llama-server command (flags of {label}): fix them, or "
                              "pass --force to {what} it as is").format(n_errors=len(errors), label=label, what=what))


def _input_options(f: Any) -> Any:
    for opt in reversed([
        click.option("--from-script", type=str, default=None, metavar="FILE",
                     help="Take the command from a script, systemd unit, compose or llama-swap file (checked first)."),
        click.option("--invocation", type=int, default=1, show_default=True,
                     help="Which llama-server command of --from-script."),
        click.option("--server-bin", type=str, default=None, help="llama-server binary (default: the command's, PATH, build cache)."),
        click.option("--gpu", "gpus", multiple=True, help="GPU for the plan (repeatable, `llamarig gpus`)."),
        click.option("--ram", type=str, default=None, help="Host RAM for the plan, e.g. 64G."),
        click.option("--detect", is_flag=True, help="Read GPUs/RAM of this machine for the plan."),
    ]):
        f = opt(f)
    return f


@click.command("render", context_settings=_CTX)
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="bash", show_default=True)
@click.option("--out", "-o", type=str, default=None, help="Write to FILE (bash: made executable) instead of stdout.")
@click.option("--name", type=str, default=None, help="Service/script name (default llama-server-PORT).")
@click.option("--compose-backend", type=click.Choice(["cpu", "cuda", "vulkan", "rocm"]), default=None,
              help="Image for --format compose (default: cuda when the plan has CUDA GPUs, else cpu).")
@click.option("--user", type=str, default=None, help="systemd User= of the service.")
@click.option("--force", is_flag=True, help="Render even when the input has check errors or the plan does not fit.")
@click.option("--fix", is_flag=True, help="With --from-script: apply `llamarig check --fix` repairs first.")
@_input_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def render_cmd(fmt: str, out: str | None, name: str | None, compose_backend: str | None, user: str | None,
               force: bool, fix: bool, from_script: str | None, invocation: int, server_bin: str | None,
               gpus: tuple[str, ...], ram: str | None, detect: bool, command: tuple[str, ...]) -> None:
    """Render a planned or checked llama-server command as a bash launcher, a systemd unit, a
    docker compose service or a llama-swap entry, with the plan's figures as comments.
    Exit 0, 1 when the input has check errors or the plan does not fit (without --force), 2 bad input."""
    res = resolve(command, from_script, invocation, server_bin, gpus, ram, detect, fix=fix, own=own_options(),
                  keep_script=True)
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
    from llamarig.flags.rules import physical_cores

    check_final(res, res.args, force, "render", physical_cores() if detect else None, reported=errors)
    if res.plan is not None and not res.plan.fits and not force:
        raise LlamarigError(_("the plan does not fit ({shortfalls}): pass --force to render anyway").format(
            shortfalls="; ".join(localize(res.plan.shortfalls()))))
    text = render_text(res, fmt, name, compose_backend, user)
    if out:
        p = Path(out)
        try:
            p.write_text(text)
            if fmt == "bash":
                p.chmod(p.stat().st_mode | 0o111)
        except OSError as e:
            raise InputError(_("{out}: cannot write: {error}").format(out=out, error=e.strerror or e)) from None
        click.echo(_("wrote {path} ({format})").format(path=out, format=fmt), err=True)
    else:
        click.echo(text, nl=False)


def _verify_table(rows: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=_("planned vs actual (llama-server -lv 4 buffer lines)"), title_justify="left")
    for c, right in ((_("device"), False), (_("component"), False), (_("planned MiB"), True), (_("actual MiB"), True),
                     (_("diff MiB"), True), (_("tolerance"), True), (_("method"), False), ("", False)):
        t.add_column(c, justify="right" if right else "left")
    for r in rows:
        t.add_row(r.device, r.component, f"{r.planned / 2**20:.2f}",
                  "-" if r.actual_mib is None else f"{r.actual_mib:.2f}",
                  "-" if r.diff_mib is None else f"{r.diff_mib:+.2f}", f"±{r.tolerance_mib:.3f}", r.method,
                  "[green]" + _("ok") + "[/]" if r.ok else "[yellow]" + _("DIFFERS") + "[/]")
    con = Console(stderr=False, highlight=False)
    con.print(t)
    con.print(_("tolerance: weights/KV/recurrent are llama.cpp's own arithmetic, so within the log's %.2f MiB "
                "rounding (±0.0051 MiB per buffer); compute/output/draft are modelled: ±10 % + 0.05 MiB"))


@click.command("launch", context_settings=_CTX)
@click.option("--detach", "-d", is_flag=True, help="Return once healthy and verified; stop it with `llamarig stop`.")
@click.option("--host", type=str, default=None, help="--host for llama-server (default: the command's, else 127.0.0.1).")
@click.option("--port", type=int, default=None, help="--port for llama-server (default: the command's, else 8080).")
@click.option("--force", is_flag=True, help="Launch even when the command has check errors or the plan does not fit.")
@click.option("--timeout", "timeout_s", type=float, default=600, show_default=True, help="Seconds to wait for /health.")
@click.option("--log", "log_path", type=str, default=None, help="Log file (default: the state directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the verification as JSON.")
@_input_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def launch_cmd(detach: bool, host: str | None, port: int | None, force: bool, timeout_s: float,
               log_path: str | None, as_json: bool, from_script: str | None, invocation: int,
               server_bin: str | None, gpus: tuple[str, ...], ram: str | None, detect: bool,
               command: tuple[str, ...]) -> None:
    """Start llama-server, wait for /health, and compare the buffers it allocated with the plan.
    Exit 0 running (1 with --detach when verification differs is NOT used: differences are
    warnings), 1 check errors in the command or plan does not fit, 2 bad input, 3 binary missing /
    port in use / start failed."""
    from llamarig.launch import process as L

    if not detach:
        # foreground: SIGTERM (systemd, kill) stops the server like Ctrl-C does, from the start
        import signal

        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, _interrupt)
    # the server runs here: plan for this machine's GPUs and RAM unless told otherwise
    detect = detect or not gpus
    res = resolve(command, from_script, invocation, server_bin, gpus, ram, detect, own=own_options())
    if res.plan is None and res.plan_note:
        click.echo(_("llamarig: note: {note}; launching without verification").format(note=res.plan_note), err=True)
    args = list(res.args)
    if port is not None:
        from llamarig.render.common import set_value

        args = set_value(args, ("--port",), str(port))
    if host is not None:
        from llamarig.render.common import set_value

        args = set_value(args, ("--host",), host)
    from llamarig.flags.rules import physical_cores

    check_final(res, args, force, "launch", physical_cores())
    old_env = {k: os.environ.get(k) for k, _ in res.env}
    os.environ.update(dict(res.env))
    try:
        replan = None
        if res.plan is not None and res.plan_args is not None:
            from dataclasses import replace as _replace

            from llamarig.plan.inputs import build_plan

            pa = res.plan_args

            def replan(cpu: CpuFeatures) -> Plan:
                return build_plan(_replace(pa, cpu=cpu))

        lr = L.start(res.binary, args, plan=res.plan, log_path=Path(log_path) if log_path else None,
                     timeout_s=timeout_s, force=force, replan=replan)
    finally:
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        _launch_report(lr, as_json)
    except KeyboardInterrupt:
        click.echo(localize(L.stop(state_file=lr.state_file)), err=True)
        sys.exit(ExitCode.INTERRUPTED)
    if detach:
        return
    _foreground(lr)


def _launch_report(lr: Any, as_json: bool) -> None:
    bad = [r for r in lr.rows if not r.ok]
    if as_json:
        click.echo(json.dumps({"pid": lr.state.pid, "url": lr.url, "state_file": str(lr.state_file),
                               "log": lr.state.log_path, "argv": list(lr.state.argv),
                               "verification": [r.to_json() for r in lr.rows], "verified": not bad and bool(lr.rows)},
                              indent=1))
    else:
        click.echo(_("llama-server pid {pid} healthy at {url}; log {log}; state {state}").format(
            pid=lr.state.pid, url=lr.url, log=lr.state.log_path, state=lr.state_file))
        if lr.rows:
            _verify_table(lr.rows)
    for r in bad:
        click.echo(_("llamarig: warning: {device} {component}: planned {planned:.2f} MiB, allocated {actual} MiB "
                     "(tolerance ±{tolerance:.3f} MiB, {method})").format(
            device=r.device, component=r.component, planned=r.planned / 2**20, actual=r.actual_mib,
            tolerance=r.tolerance_mib, method=r.method), err=True)


def _foreground(lr: Any) -> None:
    from llamarig.launch import process as L

    click.echo(_("running in the foreground: Ctrl-C (or SIGTERM to llamarig) stops it"), err=True)
    try:
        code = lr.proc.wait()
        lr.state_file.unlink(missing_ok=True)
        click.echo(_("llama-server {exit_description}").format(exit_description=exit_description(code)), err=True)
        if code:
            sys.exit(ExitCode.ENVIRONMENT)
    except KeyboardInterrupt:
        click.echo(localize(L.stop(state_file=lr.state_file)), err=True)
        sys.exit(ExitCode.INTERRUPTED)


@click.command("stop")
@click.option("--port", type=int, default=None, help="Port of the server `llamarig launch` started.")
@click.option("--state", "state_file", type=str, default=None, help="A launch state file.")
@click.option("--timeout", "timeout_s", type=float, default=30, show_default=True,
              help="Seconds to wait after SIGTERM before SIGKILL.")
def stop_cmd(port: int | None, state_file: str | None, timeout_s: float) -> None:
    """Stop the llama-server that `llamarig launch` started, and only that process (its pid, start
    time and command line must still match the state file). Exit 0, 2 when there is no state."""
    from llamarig.launch import process as L

    click.echo(localize(L.stop(port, Path(state_file) if state_file else None, timeout_s)))
