"""What runs and what was meant, priced: the plan of the command llama-server really receives
and of the command its author meant (:class:`llamarig.app.check.WhatRuns`), with the settings
that differ between them. explain, logs, check --fix and render --fix show figures from here, so
every view prices the same command the same way (the planner's figures, not a second
arithmetic)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from llamarig.app.check import (
    CheckReport,
    WhatRuns,
    behaviour_changes,
    check,
    read_config,
    read_input,
    read_settings,
    what_runs,
)
from llamarig.app.planning import plan_with_speed
from llamarig.app.resolution import (
    FitState,
    Resolution,
    Settings,
    changes_between,
    fit_state,
    meant_fit_diagnostics,
    plan_settings,
    slot_diagnostics,
)
from llamarig.app.resolution import Priced as Priced  # re-exported: app/logs.py reads it here
from llamarig.catalogue.models import is_catalogue_id
from llamarig.diagnostics import Diagnostic, info, warning
from llamarig.errors import InputError, LlamarigError
from llamarig.flags.argv import Command
from llamarig.flags.engines import ENGINES
from llamarig.flags.engines.fastllm import translation_of
from llamarig.flags.parsed import Invocation
from llamarig.hardware.types import GPU, Hardware
from llamarig.i18n import _, join
from llamarig.plan.deployment import Deployment, deployment

#: the priced pair is the resolved deployment (llamarig.app.resolution); the old name stays
PricedRuns = Resolution


def _local(path: str, base_dir: Path | None) -> str | None:
    """``path`` as a file on this machine (``~`` expanded, a relative one also tried against
    ``base_dir``, the directory of the script that names it), else None."""
    p = Path(os.path.expanduser(path))
    cands = [p] + ([base_dir / p] if base_dir is not None and not p.is_absolute() else [])
    return next((str(c.resolve()) for c in cands if c.is_file()), None)


def _projector_kind(path: str) -> str:
    """The catalogue projector a missing mmproj file stands for, by its name (``…-f16.gguf``)."""
    name = Path(path).name.lower()
    return "bf16" if "bf16" in name else "f16" if "f16" in name else "catalogue"


def _inputs(argv: Command | Sequence[str], model: str | None, base_dir: Path | None
            ) -> tuple[str | None, Command, str | None, list[str]]:
    """(model, command, mmproj, notes) for the planner: files named relative to the script taken
    from its directory, a projector or draft that is not on this machine replaced (catalogue)
    or left out, each with a note. ``argv``: a Command (not parsed again) or an argv, program first."""
    cmd = Command.of(argv, program=True)
    notes: list[str] = []
    written = cmd.get("--model")
    if model is None and written is not None:
        model = _local(written, base_dir) or (written if is_catalogue_id(written) else None)
    cmd = cmd.without("--model")
    mmproj = None
    mm = cmd.get("--mmproj")
    if mm is not None:
        mmproj = _local(mm, base_dir)
        if mmproj is None and model is not None and is_catalogue_id(model):
            mmproj = _projector_kind(mm)
            notes.append(_("--mmproj {path}: not on this machine; the catalogue's {kind} projector is planned in "
                           "its place").format(path=mm, kind=mmproj))
        elif mmproj is None:
            mmproj = "none"
            notes.append(_("--mmproj {path}: not on this machine; its memory is not counted").format(path=mm))
        cmd = cmd.without("--mmproj")
    draft = cmd.get("--model-draft")
    if draft is not None:
        found = _local(draft, base_dir) or (draft if is_catalogue_id(draft) else None)
        if found is None:
            notes.append(_("--model-draft {path}: not on this machine; the draft model is not counted").format(
                path=draft))
            cmd = cmd.without("--model-draft")
        else:
            cmd = cmd.set("--model-draft", found)
    return model, cmd, mmproj, notes


def deployment_of(argv: Command | Sequence[str], *, model: str | None = None, gpus: Sequence[GPU] = (), ram: int | None = None,
                  base_dir: Path | None = None) -> tuple[Deployment | None, list[str]]:
    """The Deployment of one llama-server argv (program first) on ``gpus`` and ``ram`` (bytes),
    and the notes on how its files were found; None when there is no model to plan (-m is not on
    this machine)."""
    m, args, mmproj, notes = _inputs(argv, model, base_dir)
    if m is None:  # no -m here (nor a catalogue id): nothing to price, nothing to note
        return None, []
    return deployment(m, command=args, hardware=Hardware(gpus=tuple(gpus), ram_bytes=ram), mmproj=mmproj), notes


def price_argv(argv: Command | Sequence[str], *, model: str | None = None, gpus: Sequence[GPU] = (),
               ram: int | None = None, base_dir: Path | None = None, speed: bool = False) -> tuple[Priced, list[str]]:
    """The plan of one llama-server command (a Command, or an argv, program first), as ``llamarig
    plan`` makes it for the same command (``model``: a GGUF or catalogue id instead of ``-m``),
    with the settings it runs (the plan's, else the flags'), and the notes on how its files were
    found."""
    cmd = Command.of(argv, program=True)
    words = tuple(cmd.to_argv())
    m, args, mmproj, notes = _inputs(cmd, model, base_dir)
    flags = read_settings(cmd)
    st = flags if isinstance(flags, Settings) else None
    if m is None:  # no -m here (nor a catalogue id): nothing to price, nothing to note
        return Priced(words, settings=st), []
    d = None
    try:
        d = deployment(m, command=args, hardware=Hardware(gpus=tuple(gpus), ram_bytes=ram), mmproj=mmproj)
        plan = plan_with_speed(d, speed=speed)
    except LlamarigError as e:
        return Priced(words, error=e, settings=st, deployment=d), notes
    return Priced(words, plan, settings=plan_settings(plan, d.config), deployment=d), notes


#: the options that name the model llama-server loads; without one it starts as a router that
#: loads none (tools/server/server.cpp:150-153)
MODEL_OPTIONS = ("--model", "--hf-repo", "--docker-repo", "--model-url")


def loads_model(argv: Command | Sequence[str]) -> bool:
    """Whether llama-server started with ``argv`` (a Command, or an argv, program first) loads a
    model at all."""
    return Command.of(argv, program=True).has(*MODEL_OPTIONS)


def price(pair: WhatRuns, *, model: str | None = None, gpus: Sequence[GPU] = (), ram: int | None = None,
          base_dir: Path | None = None, speed: bool = False, need_ctx: int | None = None,
          report: CheckReport | None = None) -> Resolution:
    """``pair`` resolved: the plan of what llama-server receives, and of what was meant when that
    differs, with the settings the meant command would change, what ``--fit`` can do and the
    coded diagnostics (``need_ctx``: tokens one request needs). A received command without a
    model (its ``-m`` cut off) loads none: it is not priced as if it did, whatever ``model``.
    ``report``: the check the pair came from; the resolution is made once per report and these
    arguments (``CheckReport.resolutions``)."""
    key = (pair.index, model, tuple(gpus), ram, base_dir, speed, need_ctx)
    if report is not None and key in report.resolutions:
        return report.resolutions[key]
    res = _price(pair, model=model, gpus=gpus, ram=ram, base_dir=base_dir, speed=speed, need_ctx=need_ctx)
    if report is not None:
        report.resolutions[key] = res
    return res


def _price(pair: WhatRuns, *, model: str | None, gpus: Sequence[GPU], ram: int | None, base_dir: Path | None,
           speed: bool, need_ctx: int | None) -> Resolution:
    got, want = pair.received_command, pair.meant_command
    if loads_model(got) or not loads_model(want):
        runs, notes = price_argv(got, model=model, gpus=gpus, ram=ram, base_dir=base_dir, speed=speed)
    else:
        runs, notes = Priced(pair.received, error=LlamarigError(_(
            "llama-server receives no model (-m): it starts as a router that loads none "
            "(tools/server/server.cpp:150-153)"))), []
    cfg = runs.deployment.config if runs.deployment is not None else None
    fit = fit_state(cfg, runs.plan) if cfg is not None else _flag_fit(got)
    diags = (*slot_diagnostics(runs.settings, need_ctx), *fit.blocked)
    if pair.same:
        return Resolution(pair, runs, None, (), tuple(notes), fit, diags)
    meant, _notes = price_argv(want, model=model, gpus=gpus, ram=ram, base_dir=base_dir, speed=speed)
    mcfg = meant.deployment.config if meant.deployment is not None else None
    meant_fit = fit_state(mcfg, meant.plan) if mcfg is not None else _flag_fit(want)
    diags = (*diags, *meant_fit_diagnostics(fit, meant_fit, pair.cut_line))
    # both planned: the plans' settings; else both read from their flags alone (never one of each)
    both = runs.settings is not None and meant.settings is not None and runs.settings.method == meant.settings.method
    changes = (changes_between(runs.settings, meant.settings) if both
               else tuple(behaviour_changes(got, want)))
    return Resolution(pair, runs, meant, changes, tuple(notes), fit, diags, meant_fit)


def _flag_fit(argv: Command) -> FitState:
    """What --fit can do, from the flags alone (no model to plan)."""
    cfg, _k, _v = read_config(argv)
    return FitState(False) if isinstance(cfg, LlamarigError) else fit_state(cfg)


def _no_command(others: Sequence[Invocation], name: str, k: int, n: int, model: str | None) -> InputError:
    """Why there is no ``k``-th llama-server command; another engine's command (FastLLM) is
    named, with the llama-server equivalent to plan instead."""
    if n:
        return InputError(_("{name}: no llama-server command number {k} (it has {n})").format(name=name, k=k, n=n))
    for inv in others:
        tr = translation_of(inv, model)
        if tr is not None:
            return InputError(_("{name} line {line}: `{program}` is {engine}, not llama-server; plan its llama-server "
                                "equivalent: llamarig plan --gpu ... -- {command}").format(
                name=name, line=inv.line, program=inv.program, engine=ENGINES[inv.engine].name, command=tr.command()))
    return InputError(_("{name}: no llama-server command found in the input").format(name=name))


def script_deployment(path: str, *, invocation: int = 1, model: str | None = None,
                      hardware: Hardware | None = None, overhead_bytes: int | None = None,
                      draft: str | None = None, mmproj: str | None = None,
                      extra_args: Sequence[str] = ()) -> Deployment:
    """The Deployment of the ``invocation``-th llama-server command of a script, unit or
    compose file (``-`` for standard input) as llama-server really receives it (a comment line
    that cuts a ``\\`` continuation cuts the command there, as bash does), on ``hardware``; its
    diagnostics name the command, and, when the author meant more, what the meant command would
    change (what ``plan --from-script`` shows first). ``model``: a GGUF or catalogue id for a
    ``-m`` that is not on this machine; ``mmproj``: a projector instead of the script's;
    ``extra_args``: llama-server flags applied after the script's (what if)."""
    text, name = read_input(path)
    base = Path(path).resolve().parent if path != "-" else None
    report = check(text, model=model, base_dir=base, origin=Path(path) if path != "-" else None, name=name)
    n = len(report.parsed.invocations)
    if not 1 <= invocation <= n:
        raise _no_command(report.parsed.others, name, invocation, n, model)
    pair = what_runs(report, invocation - 1)
    if not loads_model(pair.received_command) and loads_model(pair.meant_command):
        raise InputError(_("{name} line {line}: llama-server receives no model: the command ends at line {cut} "
                           "before its -m, so it starts as a router that loads none (tools/server/server.cpp:150-153)"
                           "; `llamarig check --fix` rebuilds the command that was meant").format(
            name=name, line=pair.line, cut=pair.cut_line if pair.cut_line is not None else pair.line))
    m, args, found_mmproj, found = _inputs(pair.received_command, model, base)
    if m is None:
        raise InputError(_("{name} line {line}: the model `-m` is not on this machine: give MODEL (a GGUF file or "
                           "a catalogue id) beside --from-script").format(name=name, line=pair.line))
    notes: list[Diagnostic] = [info("script-command", _("planned: {name} line {line}, the command llama-server "
                                                        "receives").format(name=name, line=pair.line))]
    notes += [info("script-file", x) for x in found]
    if not pair.same:
        changes = join(_("; "), [_("{what} {runs} -> {meant}").format(what=w, runs=a, meant=b) for w, a, b in
                                 behaviour_changes(pair.received_command, pair.meant_command) if w != "error"])
        notes.append(warning("script-cut", _("the script meant more than llama-server receives (cut off at line "
                                             "{cut}); the meant command would change: {changes}").format(
            cut=pair.cut_line if pair.cut_line is not None else pair.line, changes=changes or "-")))
    if extra_args:
        notes.append(info("script-extra", _("with {args} after the script's flags").format(args=" ".join(extra_args))))
    d = deployment(m, list(extra_args), command=args, hardware=hardware or Hardware(), mmproj=mmproj or found_mmproj,
                   draft=draft, overhead_bytes=overhead_bytes)
    notes += fit_state(d.config).blocked  # --fit written as a fallback where it cannot act
    if path != "-":
        notes.append(info(LOG_HINT, log_hint(path)))
    return replace(d, diagnostics=tuple(notes))


#: the diagnostic that names the command a server's log is read with
LOG_HINT = "log-explains"


def log_hint(script: str) -> str:
    """What a log of this script's server would add: what really ran, read against the script."""
    return _("with this server's log, `llamarig logs LOG --script {script}` says what really ran and why it differs "
             "(docs/logs.md)").format(script=script)
