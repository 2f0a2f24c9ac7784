"""What several commands share: click options, context settings, and how a command's check
findings are reported before it renders or launches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from llamarig.cli.lang import N_, _, localize
from llamarig.cli.layout import echo
from llamarig.errors import InputError, LlamarigError
from llamarig.flags.findings import Finding
from llamarig.units import parse_size

if TYPE_CHECKING:
    from llamarig.app.command import Resolved
    from llamarig.diagnostics import Diagnostic
    from llamarig.hardware.types import Hardware

F = TypeVar("F", bound=Callable[..., Any])

#: the server's flags follow the command's own options, untouched by click
CTX = {"ignore_unknown_options": True, "allow_interspersed_args": False}


def input_options(f: F) -> F:
    """The options every command that takes a llama-server command has (render, launch, tune,
    quality): --from-script, --invocation, --server-bin, --gpu, --ram, --detect."""
    for opt in reversed([
        click.option("--from-script", type=str, default=None, metavar="FILE",
                     help="Take the command from a script, systemd unit, compose or llama-swap file (checked first)."),
        click.option("--invocation", type=int, default=1, show_default=True,
                     help="Which llama-server command of --from-script."),
        click.option("--server-bin", metavar="PATH", type=str, default=None, help="llama-server binary (default: the command's, PATH, build cache)."),
        click.option("--gpu", "gpus", metavar="GPU", multiple=True, help="GPU for the plan (repeatable, `llamarig gpus`)."),
        click.option("--ram", metavar="SIZE", type=str, default=None, help="Host RAM for the plan, e.g. 64G."),
        click.option("--detect", is_flag=True, help="Read GPUs/RAM of this machine for the plan."),
    ]):
        f = opt(f)
    return f


def rpc_device_option(f: F) -> F:
    """``--rpc-device HOST:PORT=SPEC`` (repeatable): what an rpc-server of ``--rpc`` brings
    (render, launch; plan has it in its own parser)."""
    return click.option("--rpc-device", "rpc_devices", multiple=True, metavar="HOST:PORT=SPEC",
                        help="What an rpc-server of --rpc brings: a GPU (=rtx3090) or its CPU's RAM (=64G); "
                             "repeatable, see docs/plan.md.")(f)


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


def _set_lang(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None and not ctx.resilient_parsing:
        from llamarig.i18n import set_language

        set_language(value)


LANG_HELP = N_("Language of the output (default: llamarig --lang, $LLAMARIG_LANG, else the locale).")


def lang_param() -> click.Option:
    """``--lang en|zh`` as every subcommand takes it (cli/main.py adds it to those that do not
    declare their own): read first (eager), so the help and the errors are in that language too."""
    return click.Option(["--lang"], type=click.Choice(["en", "zh"]), default=None, is_eager=True,
                        expose_value=False, callback=_set_lang, help=LANG_HELP)


#: the options that say what the command is planned on or written in, taken after the model as
#: ``plan`` takes them (``render MODEL --gpu rtx3090 -c 8192``); the others (-o, -f, --force, ...)
#: stay refused there: a typo'd server flag must not silently change what is written
AFTER_MODEL = frozenset({"--gpu", "--ram", "--detect", "--rpc-device", "--lang", "--model-path"})


def hoist_own_options(ctx: click.Context, command: Sequence[str]) -> bool:
    """MODEL-first order, as ``plan`` takes it (``render MODEL --gpu rtx3090 -c 8192``): the
    options of :data:`AFTER_MODEL` written after the model (llama-server has none of them) are
    moved in front and the command invoked again with them (True); False when there are none."""
    from llamarig.flags.schema import (
        load_bundled,  # lazy: the schema only when options trail the model
    )
    from llamarig.render.argv import misplaced_options

    own = {o: p for p in ctx.command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
    toks = list(command)
    if not toks or toks[0].startswith("-"):
        return False
    if "--" in toks:  # after `--` everything is the server's, as written
        return False
    if not any(t.split("=", 1)[0] in own for t in toks[1:]):  # nothing to move: the command is not read here
        return False
    bad = set(misplaced_options(toks[1:], load_bundled(), own))
    if not bad or not bad <= AFTER_MODEL:  # another llamarig option after the model: refused as before
        return False
    moved: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        key = t.split("=", 1)[0]
        if i > 0 and key in bad:
            moved.append(t)
            if "=" not in t and not own[key].is_flag and i + 1 < len(toks):
                moved.append(toks[i + 1])
                i += 1
        else:
            rest.append(t)
        i += 1
    given = [*_given_args(ctx), *moved, *rest]
    sub = ctx.command.make_context(ctx.info_name or "", given, parent=ctx.parent)
    with sub:
        ctx.command.invoke(sub)
    return True


def _given_args(ctx: click.Context) -> list[str]:
    """The options given before the model, as words again (the command is parsed once more)."""
    out: list[str] = []
    for p in ctx.command.params:
        if not isinstance(p, click.Option) or p.name is None or not p.expose_value:
            continue
        if ctx.get_parameter_source(p.name) != click.core.ParameterSource.COMMANDLINE:
            continue
        v = ctx.params.get(p.name)
        name = p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0]
        if p.is_flag:
            out.append(name if v else (p.secondary_opts[0] if p.secondary_opts else name))
        elif p.multiple:
            for x in v or ():
                out += [name, str(x)]
        elif v is not None:
            out += [name, str(v)]
    return out


def command_name() -> str:
    ctx = click.get_current_context(silent=True)
    return (ctx.info_name or "") if ctx is not None else ""


def refuse_trailing_options(res: Resolved) -> None:
    """The running command's own options (:func:`own_options`) among the resolved server flags
    (written after the model, or after ``--``), where llama-server would receive them: those this
    llama-server does not know (``res.schema``) and those always llamarig's are an InputError,
    before anything is written or started."""
    from llamarig.render.argv import misplaced_options  # lazy: render's argv helpers

    bad = misplaced_options(res.command(), res.schema, own_options())
    if bad:
        raise InputError(_("{bad}: llamarig option(s) after the model (or after `--`) would be passed to "
                           "llama-server, which does not take them: put llamarig options before the model, e.g. "
                           "`llamarig {cmd} {first} ... MODEL.gguf [SERVER FLAGS]`").format(
            bad=", ".join(bad), cmd=command_name(), first=bad[0]))


def refuse_or_warn(findings: Sequence[Finding], force: bool, what: str, label: str) -> None:
    """Each error and warning of the final command on one stderr line; with errors, a
    LlamarigError (exit 1) unless ``force`` (then they are warnings). ``label``: the schema."""
    from llamarig.render.argv import finding_line  # lazy: render's argv helpers

    word = {"render": _("render"), "launch": _("launch")}.get(what, what)
    errors = [f for f in findings if f.severity == "error"]
    for f in findings:
        if f.severity == "error" and not force:
            echo(_("llamarig: error: {message}").format(message=localize(finding_line(f))), err=True)
        else:
            extra = _(" (--force: {what} anyway)").format(what=word) if f.severity == "error" else ""
            echo(_("llamarig: warning: {message}").format(message=localize(finding_line(f)) + extra), err=True)
    if errors and not force:
        raise LlamarigError(_("{n_errors} check error(s) in the llama-server command (flags of {label}): fix them, or "
                              "pass --force to {what} it as is").format(n_errors=len(errors), label=label, what=word))


def hardware_of(gpus: Sequence[str], ram: str | None, detect: bool = False, cpu_features: str | None = None,
                rpc_devices: Sequence[str] = ()) -> tuple[Hardware, tuple[Diagnostic, ...]]:
    """The hardware options as the API takes them (``llamarig.api.machine``): ``--gpu
    NAME[:VRAM_GB]`` as catalogue GPUs, ``--ram SIZE`` in bytes, ``--cpu-features LIST``,
    ``--rpc-device HOST:PORT=SPEC`` as the devices behind each rpc-server, ``--detect``; and a note
    for each GPU name that matched several catalogue entries."""
    from llamarig import api
    from llamarig.catalogue.gpus import read_gpu_args
    from llamarig.hardware.cpu import parse_cpu_features
    from llamarig.plan.rpc import parse_rpc_device

    values, notes = read_gpu_args(gpus)
    rpc = tuple(g for text in rpc_devices for g in parse_rpc_device(text))
    cpu = parse_cpu_features(cpu_features) if cpu_features is not None else None
    return api.machine(values, ram=parse_size(ram, "g") if ram else None, cpu=cpu, detect=detect, rpc=rpc), notes
