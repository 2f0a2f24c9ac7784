"""``llamarig check`` and ``llamarig explain``: lint / explain llama-server launches against the
flag schema of the installed build (see docs/check.md, docs/explain.md)."""

from __future__ import annotations

import gc
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from llamarig import api
from llamarig.app.check import CheckReport, dump_json, fix, get_schema, read_input
from llamarig.cli.lang import _, lang, localize
from llamarig.cli.options import hardware_of
from llamarig.errors import ExitCode, InputError
from llamarig.flags.readers import Parsed
from llamarig.flags.reading import verdict
from llamarig.flags.rules import Finding
from llamarig.flags.schema import Schema
from llamarig.i18n import set_language

if TYPE_CHECKING:
    from llamarig.app.explain import ExplainReport

_SCHEMA_BUILD_HELP = ("Use a bundled schema: build N, or the newest bundled build older than N "
                      "(`llamarig check --list-schemas` lists them).")


_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _q(word: str) -> str:
    import shlex

    return word if word and all(c.isalnum() or c in "-_./:=,+@%~${}" for c in word) else shlex.quote(word)


def _clip(text: str, n: int = 600) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def render_human(parsed: Parsed, findings: list[Finding], schema: Schema, name: str) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console(highlight=False, soft_wrap=False)
    for line, style in verdict_lines(parsed, findings, name):
        con.print(f"[{style}]{escape(line)}[/]" if style else escape(line))
    con.print(escape(_("{kind}, {n} llama-server invocation(s); flags checked against {schema}").format(
        kind=parsed.kind, n=len(parsed.invocations), schema=schema.label())), style="dim")
    groups: list[tuple[str, list[Finding]]] = []
    by_inv: dict[int | None, list[Finding]] = {}
    for f in findings:  # grouped once: a file of many commands stays linear
        by_inv.setdefault(f.invocation, []).append(f)
    general = by_inv.get(None, [])
    script_head = _("the script")
    if general:
        groups.append((script_head, general))
    for k, inv in enumerate(parsed.invocations):
        lines_at = f"{inv.line}" + (f"-{inv.end_line}" if inv.end_line != inv.line else "")
        head = _("invocation {k}: line {lines} {program}{label} receives {n} argument(s)").format(
            k=k + 1, lines=lines_at, program=inv.program, label=" [" + inv.label + "]" if inv.label else "",
            n=len(inv.args))
        if inv.orphans:
            head += _(", {n} cut off at line {line}").format(n=len(inv.orphans), line=inv.cut_line)
        groups.append((head, by_inv.get(k, [])))
    argv_of = {}
    receives, environment, fix_head, none = _("receives:"), _("environment:"), _("fix:"), _("no findings")
    gap = "" if receives.endswith("：") else " "  # a full-width colon carries its own space
    for k, inv in enumerate(parsed.invocations):
        shown = " ".join(_q(localize(a)) for a in inv.argv)
        lines = [f"[dim]{escape(receives)}[/dim]{gap}{escape(_clip(shown))}"]
        if inv.orphans:
            cut = " ".join(_q(w.text) for w in inv.orphans)
            cut_head = _("cut off (lines {first}-{last}):").format(first=inv.orphans[0].line, last=inv.orphans[-1].line)
            lines.append(f"[dim]{escape(cut_head)}[/dim]{gap}[red]{escape(_clip(cut))}[/red]")
        if inv.env:
            lines.append(f"[dim]{escape(environment)}[/dim]{gap}"
                         + escape(" ".join(f"{n}={v}" for n, v, _line in inv.env)))
        argv_of[k] = lines
    severity = {"error": _("error"), "warning": _("warning"), "info": _("info")}
    for gi, (head, fs) in enumerate(groups):
        con.print()
        con.rule(f"[bold]{escape(head)}[/bold]", align="left")
        k = gi - (1 if general else 0)
        for ln in argv_of.get(k, []) if not (general and gi == 0) else []:
            con.print("  " + ln)
        if not fs:
            con.print(f"  [green]{escape(none)}[/green]")
            continue
        t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
        t.add_column(_("line"), justify="right", no_wrap=True)
        t.add_column(_("severity"), no_wrap=True)
        t.add_column(_("rule"), no_wrap=True)
        # fold, never cut: a Chinese sentence has no blanks to wrap at, and an ellipsis would
        # drop the rest of the finding
        t.add_column(_("finding"), overflow="fold")
        for f in fs:
            msg = escape(localize(f.message))
            if f.fix:
                msg += f"\n[green]{escape(fix_head)}[/green]{gap}{escape(localize(f.fix))}"
            t.add_row(str(f.line), f"[{_STYLE.get(f.severity, '')}]{severity.get(f.severity, f.severity)}[/]",
                      escape(f.rule), msg)
        con.print(t)


def verdict_lines(parsed: Parsed, findings: list[Finding], name: str) -> list[tuple[str, str]]:
    """The answer first: how many errors and warnings, and for each command what llama-server
    really receives when the script cuts it off."""
    n = {sev: sum(1 for f in findings if f.severity == sev) for sev in ("error", "warning", "info")}
    style = "bold red" if n["error"] else ("yellow" if n["warning"] else "bold green")
    out = [(_("{name}: {errors} error(s), {warnings} warning(s), {info} info").format(
        name=name, errors=n["error"], warnings=n["warning"], info=n["info"]), style)]
    for k, inv in enumerate(parsed.invocations):
        if inv.orphans:
            out.append((_("command {k} (line {line}) is cut off at line {cut}: {words} word(s) after it never reach "
                          "{program}").format(k=k + 1, line=inv.line, cut=inv.cut_line, words=len(inv.orphans),
                                              program=inv.program), "red"))
    first = next((f for f in findings if f.severity == "error"), None)
    if first is not None and not any(inv.orphans for inv in parsed.invocations):
        out.append((_("first error, line {line}: {message}").format(line=first.line, message=_clip(localize(first.message), 160)),
                    "red"))
    out += [(localize(v), "yellow") for v in verdict(parsed)]
    if not parsed.invocations and not parsed.others and not any(f.rule == "engine" for f in findings):
        out.append((_("no llama-server command found"), "yellow"))
    return out


def _list_schemas(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from llamarig.flags.schema import bundled_provenance

    for build, n, how in bundled_provenance():
        click.echo(f"{build:>6}  {n:>3} " + _("options") + f"  {how}")
    ctx.exit(0)


@click.command("check")
@click.argument("file", type=str)
@click.option("--server-bin", type=str, default=None, help="llama-server binary whose flags are the truth.")
@click.option("--bundled", is_flag=True, help="Use the bundled schema of the pinned build, not a binary.")
@click.option("--schema-build", type=click.IntRange(min=1), default=None, metavar="N", help=_SCHEMA_BUILD_HELP)
@click.option("--list-schemas", is_flag=True, is_eager=True, expose_value=False, callback=_list_schemas,
              help="List the bundled schemas and how each was made, then exit.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--fix", is_flag=True, help="Print the corrected script instead of findings.")
@click.option("--format", "kind", type=click.Choice(["auto", "shell", "systemd", "yaml", "ini"]), default="auto",
              show_default=True, help="Input format.")
@click.option("--cores", type=int, default=None, help="Physical cores of the target machine (default: this one).")
@click.option("--model", type=str, default=None,
              help="GGUF (or, for the memory plan, a catalogue id) to use instead of -m.")
@click.option("--no-cache", is_flag=True, help="Re-read the binary's --help instead of the cached schema.")
@click.option("--gpu", "gpus", multiple=True, help="GPU of the target machine (repeatable, `llamarig gpus`): "
              "adds the memory verdict of `llamarig plan`.")
@click.option("--ram", type=str, default=None, help="Host RAM of the target machine for the memory plan, e.g. 64G.")
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
    report = api.check(text, schema=schema, kind=None if kind == "auto" else kind, cores=cores, model=model,
                       base_dir=origin.parent if origin else None, gpus=hw.gpus, ram=hw.ram_bytes, need_ctx=need_ctx,
                       origin=origin, name=name)
    if do_fix:
        fixed = fix(report, lang())
        click.echo(fixed.text, nl=False)
        # what the fix changes in the running server, before and after (on stderr: stdout is the script)
        for k, line, changes in fixed.changes:
            click.echo(_("llamarig: the fixed command {k} (line {line}) runs the server differently:").format(
                k=k + 1, line=line), err=True)
            for what, before, now in changes:
                click.echo(f"  {localize(what)}: {localize(before)} -> {localize(now)}", err=True)
        if fixed.unplaced:
            click.echo(_("llamarig: which command are the flags on lines {lines} for? --fix cannot tell: they are "
                         "written as comments; move them into the command they belong to").format(
                             lines=", ".join(str(n) for n in fixed.unplaced)), err=True)
            sys.exit(ExitCode.NEEDS_ANSWER)
    elif as_json:
        click.echo(dump_json(report.to_json()))
    else:
        render_human(report.parsed, report.findings, report.schema, name)
    if report.errors:
        sys.exit(ExitCode.PROBLEMS)


def _explain_translations(report: CheckReport, schema: Schema, model: str | None
                          ) -> tuple[CheckReport, list[dict[str, object]]]:
    """Another engine's commands (FastLLM): named, and their llama-server equivalents checked, to
    be explained in their place; with what was translated, for the human view and --json."""
    from llamarig.flags.engines import ENGINES
    from llamarig.flags.engines.fastllm import translation_of

    lines, seen = [], []
    for inv in report.parsed.others:
        tr = translation_of(inv, model)
        seen.append({"line": inv.line, "program": inv.program, "engine": ENGINES[inv.engine].name,
                     "equivalent": tr.command() if tr is not None else None})
        if tr is not None:
            lines.append(tr.command())
    return (api.check("\n".join(lines), schema=schema, model=model) if lines else report), seen


def _translation_lines(seen: list[dict[str, object]]) -> None:
    for t in seen:
        click.echo(_("line {line}: `{program}` is {engine}, not llama-server").format(
            line=t["line"], program=t["program"], engine=t["engine"])
            + (_("; explained below: its llama-server equivalent `{command}`").format(command=t["equivalent"])
               if t["equivalent"] is not None else ""))


@click.command("explain", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--server-bin", type=str, default=None, help="llama-server binary whose flags are the truth.")
@click.option("--bundled", is_flag=True, help="Use the bundled schema of the pinned build.")
@click.option("--schema-build", type=click.IntRange(min=1), default=None, metavar="N", help=_SCHEMA_BUILD_HELP)
@click.option("--lang", type=click.Choice(["en", "zh"]), default=None,
              help="Language of the explanations (default: llamarig --lang, $LLAMARIG_LANG, else the locale).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--model", type=str, default=None,
              help="GGUF (or catalogue id) for the memory effects instead of -m.")
@click.option("--gpu", "gpus", multiple=True, help="GPU of the target machine (repeatable, `llamarig gpus`): the "
              "figures are then the plan's on it, after --fit.")
@click.option("--ram", type=str, default=None, help="Host RAM of the target machine, e.g. 64G.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def explain_cmd(ctx: click.Context, server_bin: str | None, bundled: bool, schema_build: int | None,
                lang: str | None, as_json: bool, model: str | None, gpus: tuple[str, ...], ram: str | None,
                command: tuple[str, ...]) -> None:
    """Explain every flag of a llama-server launch: FILE, - (stdin), or the command itself
    after the options (e.g. `llamarig explain -- llama-server -c 8192 -np 2`). The memory
    figures are the plan of what llama-server really receives."""
    from llamarig.flags.explain import TEXT
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
    origin: Path | None = None
    if len(command) == 1 and _is_input(command[0]):
        text, _kind = read_input(command[0])
        origin = Path(command[0]) if command[0] != "-" else None
    elif len(command) == 1 and " " in command[0]:
        text = command[0]
    else:
        argv = list(command)
        if argv and argv[0].startswith("-"):
            argv = ["llama-server"] + argv
        text = shlex.join(argv)
    schema = get_schema(server_bin, bundled, schema_build=schema_build)
    base_dir = origin.parent if origin else None
    report = api.check(text, schema=schema, origin=origin, base_dir=base_dir, model=model)
    seen: list[dict[str, object]] = []
    if not report.parsed.invocations and report.parsed.others:
        report, seen = _explain_translations(report, schema, model)
    if not report.parsed.invocations:
        raise InputError(_("no llama-server command found in the input"))
    hw, _notes = hardware_of(gpus, ram)
    result = api.explain_report(report, model=model, lang=lang, gpus=hw.gpus, ram=hw.ram_bytes)
    if as_json:
        doc = result.to_json()
        if seen:
            doc["other_engines"] = seen  # what was explained through its llama-server equivalent
        click.echo(json.dumps(doc, ensure_ascii=False, indent=1))
        return
    _translation_lines(seen)
    _explain_tables(result, schema, TEXT[lang])


def _is_input(word: str) -> bool:
    return word == "-" or Path(word).is_file()


def _explain_tables(result: ExplainReport, schema: Schema, t: dict[str, str]) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console(highlight=False)
    for cmd in result.commands:
        title = escape(_("line {line}: {program} ({schema})").format(
            line=cmd.line, program=cmd.argv[0], schema=schema.label()))
        # no outer border and flags never broken: at 80 columns the explanations get the room
        tab = Table(title=title, title_justify="left", show_lines=False, header_style="bold", box=box.SIMPLE_HEAD, expand=True,
                    show_edge=False, pad_edge=False)
        tab.add_column(t["flag"], no_wrap=True)
        tab.add_column(t["value"], overflow="fold", ratio=3, min_width=10)
        tab.add_column(t["what"], overflow="fold", ratio=7)
        # below 100 columns the default joins "what it does": five columns leave each one too narrow
        narrow = con.width < 100
        if not narrow:
            tab.add_column(t["default"], overflow="fold", ratio=2)
        tab.add_column(t["effect"], overflow="fold", ratio=5 if narrow else 4)
        if cmd.cut_line:
            n_cut = sum(1 for row in cmd.rows if not row.reaches_server)
            con.print(escape(_("the command is cut off at line {line}: the {n} flag(s) marked below never reach "
                               "llama-server (as `llamarig check` reports)").format(line=cmd.cut_line, n=n_cut)),
                      style="bold red")
        for line in cmd.summary:  # what runs, priced, and what the meant command would change
            con.print(escape(line))
        for row in cmd.rows:
            style = "" if row.known else "bold red"
            if not row.reaches_server:
                style = "dim red"
            if narrow:
                what = row.what
                default = _("default {value}").format(value=row.default)
                if row.default and not any(w in what for w in ("default", "默认")):
                    what += _(" ({default})").format(default=default)
                tab.add_row(escape(row.flag), escape(row.value), escape(what), escape(row.effect), style=style)
            else:
                tab.add_row(escape(row.flag), escape(row.value), escape(row.what), escape(row.default),
                            escape(row.effect), style=style)
        con.print(tab)
