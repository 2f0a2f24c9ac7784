"""``llamarig check`` and ``llamarig explain``: lint / explain llama-server launches against the
flag schema of the installed build (see docs/check.md, docs/explain.md)."""

from __future__ import annotations

import functools
import gc
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from llamarig import api
from llamarig.app.check import CheckReport, dump_json, get_schema, read_input
from llamarig.cli.help import HelpCommand, lang_option
from llamarig.cli.lang import N_, _, lang, localize
from llamarig.cli.options import hardware_of
from llamarig.errors import ExitCode, InputError
from llamarig.flags.schema import Schema
from llamarig.i18n import listing, set_language

if TYPE_CHECKING:
    from llamarig.app.explain import ExplainReport

_SCHEMA_BUILD_HELP = N_("Use a bundled schema: build N, or the newest bundled build older than N "
                      "(`llamarig check --list-schemas` lists them).")


def _list_schemas(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from rich.console import Console

    from llamarig.cli.layout import Column, Sheet
    from llamarig.flags.schema import bundled_provenance
    from llamarig.i18n import data_text

    sheet = Sheet([Column(_("build"), justify="right", key=True), Column(_("flag count"), justify="right", key=True),
                   Column(_("how it was made"), prose=True, min_width=40)], rule=False)
    for build, n, how in bundled_provenance():
        sheet.add_row(str(build), str(n), localize(data_text(how)))
    Console(highlight=False).print(sheet)
    ctx.exit(0)


@click.command("check", cls=HelpCommand)
@click.argument("file", type=str)
@click.option("--server-bin", metavar="PATH", type=str, default=None, help="llama-server binary whose flags are the truth.")
@click.option("--bundled", is_flag=True, help="Use the bundled schema of the pinned build, not a binary.")
@click.option("--schema-build", type=click.IntRange(min=1), default=None, metavar="N", help=_SCHEMA_BUILD_HELP)
@click.option("--list-schemas", is_flag=True, is_eager=True, expose_value=False, callback=_list_schemas,
              help="List the bundled schemas and how each was made, then exit.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--fix", is_flag=True, help="Print the corrected script instead of findings.")
@click.option("--format", "kind", type=click.Choice(["auto", "shell", "systemd", "yaml", "ini"]), default="auto",
              show_default=True, help="Input format.")
@click.option("--cores", type=int, default=None, help="Physical cores of the target machine (default: this one).")
@click.option("--model", metavar="MODEL", type=str, default=None,
              help="GGUF (or, for the memory plan, a catalogue id) to use instead of -m.")
@click.option("--no-cache", is_flag=True, help="Re-read the binary's --help instead of the cached schema.")
@click.option("--gpu", "gpus", metavar="GPU", multiple=True, help="GPU of the target machine (repeatable, `llamarig gpus`): "
              "adds the memory verdict of `llamarig plan`.")
@click.option("--ram", metavar="SIZE", type=str, default=None, help="Host RAM of the target machine for the memory plan, e.g. 64G.")
@click.option("--need-ctx", type=click.IntRange(min=1), default=None,
              help="Tokens one request needs (prompt + output): checked against the per-slot context.")
def check_cmd(file: str, server_bin: str | None, bundled: bool, schema_build: int | None, as_json: bool,
              fix: bool, kind: str, cores: int | None, model: str | None, no_cache: bool, gpus: tuple[str, ...],
              ram: str | None, need_ctx: int | None) -> None:
    """Lint a llama-server command, bash script, systemd unit, docker-compose, Kubernetes/Helm,
    llama-swap or --models-preset INI file (FILE, or - for stdin; the files it sources, its
    drop-ins or .env next to it are read too). Exit 1 when an error is found, 0 otherwise, 2 for unreadable input."""
    text, name = read_input(file)
    schema = get_schema(server_bin, bundled, no_cache, schema_build)
    # the objects a check makes (words, invocations, findings) live until it ends and hold no
    # cycles worth collecting: the cyclic GC only re-walks them, ~40 % of a large file's time
    # (benchmarks/RESULTS.md); it is on again after
    gc.disable()
    try:
        _check(text, name, file, schema, as_json, fix, kind, cores, model, gpus, ram, need_ctx)
    finally:
        gc.enable()


def _check(text: str, name: str, file: str, schema: Schema, as_json: bool, do_fix: bool, kind: str,
           cores: int | None, model: str | None, gpus: tuple[str, ...], ram: str | None,
           need_ctx: int | None) -> None:
    origin = Path(file) if file != "-" else None
    hw, _notes = hardware_of(gpus, ram)
    run = functools.partial(api.check, schema=schema, kind=None if kind == "auto" else kind, cores=cores, model=model,
                            base_dir=origin.parent if origin else None, gpus=hw.gpus, ram=hw.ram_bytes,
                            need_ctx=need_ctx, origin=origin, name=name)
    report = run(text)
    if _no_command(report):
        raise InputError(_("{name}: no llama-server command found (a program named llama-server, llama-*-server or "
                           "server, a llama.cpp docker image, ExecStart=, compose command: or llama-swap cmd:)").format(
            name=name))
    if do_fix:
        # the repaired text checked once, and its commands the ones the changes compare
        fixed = api.fix_report(report, lang=lang(), recheck=lambda t: report if t == text else run(t))
        click.echo(fixed.text, nl=False)
        # what the fix changes in the running server, before and after (on stderr: stdout is the script)
        for k, line, changes in fixed.changes:
            click.echo(_("llamarig: the fixed command {k} (line {line}) runs the server differently:").format(
                k=k + 1, line=line), err=True)
            for what, before, now in changes:
                click.echo("  " + _("{what}: {before} -> {after}").format(
                    what=localize(what), before=localize(before), after=localize(now)), err=True)
        if fixed.unplaced:
            click.echo(_("llamarig: which command are the flags on lines {lines} for? --fix cannot tell: they are "
                         "written as comments; move them into the command they belong to").format(
                             lines=listing(str(n) for n in fixed.unplaced)), err=True)
            sys.exit(ExitCode.NEEDS_ANSWER)
        # the code says whether the repaired text still has an error: 0 when --fix repaired all
        after = fixed.after if fixed.after is not None else report
        sys.exit(ExitCode.PROBLEMS if after.errors else ExitCode.OK)
    elif as_json:
        click.echo(dump_json(report.to_json()))
    else:
        from rich.console import Console

        from llamarig.cli import check_view

        console = Console(highlight=False)
        check_view.render(report.parsed, report.findings, report.schema, name, console)
        if origin is not None and any(inv.orphans for inv in report.parsed.invocations):
            # what the cut-off command really ran, and why memory differs, is in the server's log
            from llamarig.app.runs import log_hint
            from llamarig.cli.layout import print_wrapped

            console.print()
            print_wrapped(console, localize(log_hint(file)), indent="  ", style="dim")
    if report.errors:
        sys.exit(ExitCode.PROBLEMS)


def _no_command(report: CheckReport) -> bool:
    """The input holds no server command at all (an empty file, comments only): bad input."""
    return not report.parsed.invocations and not report.parsed.others and all(
        f.rule == "no-invocation" for f in report.findings)


def _explain_translations(report: CheckReport, schema: Schema, model: str | None
                          ) -> tuple[CheckReport, list[dict[str, object]]]:
    """Another engine's commands (FastLLM): named, and their llama-server equivalents checked, to
    be explained in their place; with what was translated, for the human view and --json."""
    from llamarig.flags.engines import ENGINES
    from llamarig.flags.engines.fastllm import translation_of

    lines: list[str] = []  # each equivalent on its command's own line, so the views name that line
    seen: list[dict[str, object]] = []
    for inv in report.parsed.others:
        tr = translation_of(inv, model)
        seen.append({"line": inv.line, "program": inv.program, "engine": ENGINES[inv.engine].name,
                     "equivalent": tr.command() if tr is not None else None})
        if tr is not None:
            lines += [""] * max(0, inv.line - 1 - len(lines)) + [tr.command()]
    return (api.check("\n".join(lines), schema=schema, model=model) if lines else report), seen


def _translation_lines(seen: list[dict[str, object]]) -> None:
    for t in seen:
        click.echo(_("line {line}: `{program}` is {engine}, not llama-server").format(
            line=t["line"], program=t["program"], engine=t["engine"])
            + (_("; explained below: its llama-server equivalent `{command}`").format(command=t["equivalent"])
               if t["equivalent"] is not None else ""))


@click.command("explain", cls=HelpCommand, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--server-bin", metavar="PATH", type=str, default=None, help="llama-server binary whose flags are the truth.")
@click.option("--bundled", is_flag=True, help="Use the bundled schema of the pinned build.")
@click.option("--schema-build", type=click.IntRange(min=1), default=None, metavar="N", help=_SCHEMA_BUILD_HELP)
@lang_option(N_("Language of the explanations (default: llamarig --lang, $LLAMARIG_LANG, else the locale)."))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--model", metavar="MODEL", type=str, default=None,
              help="GGUF (or catalogue id) for the memory effects instead of -m.")
@click.option("--gpu", "gpus", metavar="GPU", multiple=True, help="GPU of the target machine (repeatable, "
              "`llamarig gpus`): the figures are then the plan's on it, after --fit.")
@click.option("--ram", metavar="SIZE", type=str, default=None, help="Host RAM of the target machine, e.g. 64G.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def explain_cmd(ctx: click.Context, server_bin: str | None, bundled: bool, schema_build: int | None,
                lang: str | None, as_json: bool, model: str | None, gpus: tuple[str, ...], ram: str | None,
                command: tuple[str, ...]) -> None:
    """Explain every flag of a llama-server launch: FILE, - (stdin), or the command itself
    after the options (e.g. `llamarig explain -- llama-server -c 8192 -np 2`). The memory
    figures are the plan of what llama-server really receives."""
    from llamarig.i18n import language

    if len(command) > 1 and _is_input(command[0]):
        # `explain FILE --model X`: the options after a file are explain's own (a file takes none)
        sub = explain_cmd.make_context(ctx.info_name or "explain", [*command[1:], command[0]], parent=ctx.parent)
        if tuple(sub.params["command"]) != (command[0],):
            raise InputError(_("give one file (or - for stdin), then explain's own options"))
        given = {k: v for k, v in ctx.params.items() if v not in (None, False, ()) and k != "command"}
        ctx.invoke(explain_cmd, **{**sub.params, **given})
        return
    lang = set_language(lang) if lang is not None else language()
    if not command:
        raise InputError(_("give a file, - for stdin, or a llama-server command"))
    text, origin = _explain_input(command)
    schema = get_schema(server_bin, bundled, schema_build=schema_build)
    base_dir = origin.parent if origin else None
    hw, _notes = hardware_of(gpus, ram)
    # checked on the machine explain prices: each command is resolved once, for both
    report = api.check(text, schema=schema, origin=origin, base_dir=base_dir, model=model, gpus=hw.gpus,
                       ram=hw.ram_bytes)
    seen: list[dict[str, object]] = []
    if not report.parsed.invocations and report.parsed.others:
        report, seen = _explain_translations(report, schema, model)
    if not report.parsed.invocations:
        raise InputError(_("no llama-server command found in the input"))
    result = api.explain_report(report, model=model, lang=lang, gpus=hw.gpus, ram=hw.ram_bytes)
    if as_json:
        doc = result.to_json()
        if seen:
            doc["other_engines"] = seen  # what was explained through its llama-server equivalent
        click.echo(json.dumps(doc, ensure_ascii=False, indent=1))
        return
    _explain_human(result, seen)


def _explain_input(command: tuple[str, ...]) -> tuple[str, Path | None]:
    """The text explain reads: a file, stdin, a quoted command line or the command's words; and
    the file it came from."""
    if len(command) == 1 and _is_input(command[0]):
        text, _kind = read_input(command[0])
        return text, Path(command[0]) if command[0] != "-" else None
    if len(command) == 1 and " " in command[0]:
        return command[0], None
    argv = list(command)
    if argv and argv[0].startswith("-"):
        argv = ["llama-server"] + argv
    return shlex.join(argv), None


def _explain_human(result: ExplainReport, seen: list[dict[str, object]]) -> None:
    """explain's view: another engine's command named first, then every flag."""
    from rich.console import Console

    from llamarig.cli import explain_view

    _translation_lines(seen)
    explain_view.render(result, Console(highlight=False))


def _is_input(word: str) -> bool:
    return word == "-" or Path(word).is_file()
