"""``llamarig check`` and ``llamarig explain``: lint / explain llama-server launches against the
flag schema of the installed build (see docs/check.md, docs/explain.md)."""

from __future__ import annotations

import gc
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from llamarig import i18n
from llamarig.cli.lang import _, lang, localize
from llamarig.errors import ExitCode, InputError, LlamarigError
from llamarig.flags.argv import Reading
from llamarig.flags.model import model_loader
from llamarig.flags.preset import preset_invocation
from llamarig.flags.readers import Parsed, parse_argv, parse_text
from llamarig.flags.rules import Context, Finding, Severity, lint, physical_cores
from llamarig.flags.schema import Schema, load_bundled, load_schema
from llamarig.i18n import set_language
from llamarig.plan.inputs import plan_for_check

MAX_INPUT_BYTES = 4 * 1024 * 1024


def read_input(path: str) -> tuple[str, str]:
    """(text, display name). Unreadable input is an InputError (exit 2)."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
            name = "<stdin>"
        else:
            p = Path(path)
            if p.is_dir():
                raise InputError(_("{path}: is a directory").format(path=path))
            with open(p, "rb") as f:
                data = f.read(MAX_INPUT_BYTES + 1)
            name = path
    except OSError as e:
        raise InputError(_("{path}: cannot read: {error}").format(path=path, error=e.strerror or e)) from e
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(_("{name}: larger than {limit} MiB, not a launch script").format(name=name, limit=MAX_INPUT_BYTES // (1024 * 1024)))
    if b"\x00" in data[:8192]:
        raise InputError(_("{name}: binary data, not a command or script").format(name=name))
    return data.decode("utf-8", errors="replace"), name


def get_schema(server_bin: str | None, bundled: bool, no_cache: bool = False,
               schema_build: int | None = None) -> Schema:
    if schema_build is not None:
        if server_bin:
            raise InputError(_("give --server-bin or --schema-build, not both"))
        return load_bundled(schema_build)
    if bundled:
        return load_bundled()
    return load_schema(server_bin, cache=not no_cache)


_SCHEMA_BUILD_HELP = ("Use a bundled schema: build N, or the newest bundled build older than N "
                      "(`llamarig check --list-schemas` lists them).")


def run_check(text: str, schema: Schema, *, kind: str | None = None, cores: int | None = None,
              model: str | None = None, base_dir: Path | None = None, gpus: tuple[str, ...] = (),
              ram: str | None = None, need_ctx: int | None = None, origin: Path | None = None
              ) -> tuple[Parsed, list[Reading], list[Finding]]:
    """``origin``: the file ``text`` was read from (its sourced files, drop-ins, .env are read too)."""
    parsed = parse_text(text, kind, origin)
    ram_bytes = None
    if ram:
        from llamarig.units import parse_size

        ram_bytes = parse_size(ram, "g")
    ctx = Context(physical_cores=cores or physical_cores(),
                  cores_source="--cores" if cores else "this machine", gpus=tuple(gpus),
                  ram_bytes=ram_bytes, model_ref=model, need_ctx=need_ctx, planner=plan_for_check)
    gguf_model = model if model and (model.endswith(".gguf") or Path(model).is_file()) else None
    readings, findings = lint(parsed, schema, ctx, model_loader(gguf_model, base_dir))
    if not parsed.invocations:
        findings.append(Finding("no-invocation", Severity.INFO, 1, None,
                                i18n._("no llama-server command found (a program named llama-server, "
                                  "llama-*-server or server, a llama.cpp docker image, ExecStart=, "
                                  "compose command: or llama-swap cmd:)"), None, None))
    return parsed, readings, findings


def to_json(parsed: Parsed, findings: list[Finding], schema: Schema) -> dict[str, Any]:
    return {
        "invocations": [
            {"argv": inv.argv, "line": inv.line, "end_line": inv.end_line, "source": inv.source,
             "label": inv.label or None, "background": inv.background,
             "env": [{"name": n, "value": v, "line": ln} for n, v, ln in inv.env],
             "cut_off": [{"word": w.text, "line": w.line} for w in inv.orphans],
             "cut_line": inv.cut_line}
            for inv in parsed.invocations
        ],
        "findings": [f.to_json() for f in findings],
        "schema": {"source": schema.source, "build": schema.build, "origin": schema.origin},
    }


#: above this many invocations + findings, --json writes one of each per line: json.dumps with
#: an indent runs Python's encoder, not the C one, and is a fifth of a large file's time
_COMPACT_ABOVE = 2000


def dump_json(data: dict[str, Any]) -> str:
    """``data`` as indented JSON, or, when its lists are long, one list item per line (the same
    JSON value, encoded by the C encoder)."""
    if len(data["invocations"]) + len(data["findings"]) <= _COMPACT_ABOVE:
        return json.dumps(data, ensure_ascii=False, indent=1)
    parts = []
    for key, value in data.items():
        if isinstance(value, list):
            items = ",\n  ".join(json.dumps(v, ensure_ascii=False) for v in value)
            parts.append(f' {json.dumps(key)}: [\n  {items}\n ]' if value else f' {json.dumps(key)}: []')
        else:
            parts.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(parts) + "\n}"


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


def _settings(argv: list[str]) -> dict[str, str]:
    """What a llama-server argv runs, in the terms a user compares: slots, context per slot, KV
    types, batch sizes, GPU layers, flash attention (llama-server's defaults where unset)."""
    from llamarig.plan.config import parse_server_args

    try:
        cfg = parse_server_args(argv, strict=False)
    except LlamarigError as e:
        return {"error": str(e)}
    slots = cfg.n_parallel if cfg.n_parallel > 0 else 4  # server.cpp:168-173: -np unset -> 4 unified slots
    unified = cfg.kv_unified if cfg.n_parallel > 0 else True
    n_ctx = -(-cfg.n_ctx // 256) * 256 if cfg.n_ctx else 0
    per_slot = (n_ctx if unified else -(-(n_ctx // slots) // 256) * 256) if n_ctx else 0
    return {
        _("slots (-np)"): f"{slots}" + (_(" (unified KV)") if unified and slots > 1 else ""),
        _("context per slot"): str(per_slot) if per_slot else _("the model's training context"),
        _("KV cache K / V"): f"{cfg.cache_type_k} / {cfg.cache_type_v}",
        "-b / -ub": f"{cfg.n_batch} / {cfg.n_ubatch}",
        "-ngl": {-1: "auto", -2: "all"}.get(cfg.n_gpu_layers, str(cfg.n_gpu_layers)),
        _("flash attention"): cfg.flash_attn,
    }


def behaviour_changes(before: list[str], after: list[str]) -> list[tuple[str, str, str]]:
    """(what, before, after) for every setting a fix changes in the running server."""
    a, b = _settings(before), _settings(after)
    return [(k, a.get(k, "-"), b.get(k, "-")) for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]


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
    if not parsed.invocations:
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


def _check(text: str, name: str, file: str, schema: Schema, as_json: bool, fix: bool, kind: str,
           cores: int | None, model: str | None, gpus: tuple[str, ...], ram: str | None,
           need_ctx: int | None) -> None:
    base = Path(file).parent if file != "-" else None
    parsed, readings, findings = run_check(text, schema, kind=None if kind == "auto" else kind,
                                           cores=cores, model=model, base_dir=base, gpus=gpus, ram=ram,
                                           need_ctx=need_ctx, origin=Path(file) if file != "-" else None)
    if fix:
        from llamarig.flags.fix import fix_text

        fixed = fix_text(parsed, readings, findings, schema, lang())
        click.echo(fixed, nl=False)
        # what the fix changes in the running server, before and after (on stderr: stdout is the script)
        after = parse_text(fixed, None if kind == "auto" else kind, Path(file) if file != "-" else None)
        after.invocations = [preset_invocation(i, schema) if i.preset is not None else i for i in after.invocations]
        for k, (inv_a, inv_b) in enumerate(zip(parsed.invocations, after.invocations, strict=False)):
            changes = behaviour_changes(inv_a.argv[1:], inv_b.argv[1:])
            if changes:
                click.echo(_("llamarig: the fixed command {k} (line {line}) runs the server differently:").format(
                    k=k + 1, line=inv_b.line), err=True)
                for what, before, now in changes:
                    click.echo(f"  {what}: {localize(before)} -> {localize(now)}", err=True)
    elif as_json:
        click.echo(dump_json(to_json(parsed, findings, schema)))
    else:
        render_human(parsed, findings, schema, name)
    if any(f.severity == "error" for f in findings):
        sys.exit(ExitCode.PROBLEMS)


@click.command("explain", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--server-bin", type=str, default=None, help="llama-server binary whose flags are the truth.")
@click.option("--bundled", is_flag=True, help="Use the bundled schema of the pinned build.")
@click.option("--schema-build", type=click.IntRange(min=1), default=None, metavar="N", help=_SCHEMA_BUILD_HELP)
@click.option("--lang", type=click.Choice(["en", "zh"]), default=None,
              help="Language of the explanations (default: llamarig --lang, $LLAMARIG_LANG, else the locale).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--model", type=str, default=None, help="GGUF for memory effects instead of -m.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def explain_cmd(server_bin: str | None, bundled: bool, schema_build: int | None, lang: str | None, as_json: bool,
                model: str | None,
                command: tuple[str, ...]) -> None:
    """Explain every flag of a llama-server launch: FILE, - (stdin), or the command itself
    after the options (e.g. `llamarig explain -- llama-server -c 8192 -np 2`)."""
    from llamarig.flags.explain import TEXT, explain_rows
    from llamarig.i18n import language

    lang = set_language(lang) if lang is not None else language()
    if not command:
        raise InputError(_("give a file, - for stdin, or a llama-server command"))
    base = None
    if len(command) == 1 and (command[0] == "-" or Path(command[0]).is_file()):
        text, _kind = read_input(command[0])
        parsed = parse_text(text, origin=Path(command[0]) if command[0] != "-" else None)
        base = Path(command[0]).parent if command[0] != "-" else None
    elif len(command) == 1 and " " in command[0]:
        parsed = parse_text(command[0])
    else:
        argv = list(command)
        if argv and argv[0].startswith("-"):
            argv = ["llama-server"] + argv
        parsed = parse_argv(argv)
    if not parsed.invocations:
        raise InputError(_("no llama-server command found in the input"))
    schema = get_schema(server_bin, bundled, schema_build=schema_build)
    loader = model_loader(model, base)
    from llamarig.flags.argv import read_invocation
    from llamarig.flags.rules import lint_invocation

    out: list[dict[str, Any]] = []
    t = TEXT[lang]
    severity_word = {"error": _("error"), "warning": _("warning"), "info": _("info")}
    for k, inv in enumerate(parsed.invocations):
        ctx = loader(inv, Context(physical_cores=physical_cores()))
        r = read_invocation(inv, schema, k)
        rows = explain_rows(r, schema, ctx.model_spec, lang)
        _readings, fs = lint_invocation(inv, schema, k, ctx)
        notes: dict[int, list[str]] = {}
        for f in fs:
            if f.use is not None and f.severity in ("error", "warning"):
                notes.setdefault(f.use, []).append(_("{severity}: {rule}").format(
                    severity=severity_word[f.severity], rule=f.rule))
        cut = _("cut off at line {line}: never reaches llama-server").format(line=inv.cut_line)
        rows = [replace(row, effect=_("; ").join(([cut] if i < len(r.uses) and not r.uses[i].passed else [])
                                              + [x for x in [row.effect] if x] + notes.get(i, [])))
                for i, row in enumerate(rows)]
        out.append({"argv": localize(inv.argv), "line": inv.line, "model": getattr(ctx.model_spec, "path", None),
                    "cut_line": inv.cut_line if inv.orphans else None,
                    "rows": [dict(row.__dict__, reaches_server=not (i < len(r.uses) and not r.uses[i].passed))
                             for i, row in enumerate(rows)]})
    if as_json:
        click.echo(json.dumps({"invocations": out, "schema": {"source": schema.source, "build": schema.build},
                               "lang": lang}, ensure_ascii=False, indent=1))
        return
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console(highlight=False)
    for inv_out in out:
        title = escape(_("line {line}: {program} ({schema})").format(
            line=inv_out["line"], program=inv_out["argv"][0], schema=schema.label()))
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
        if inv_out["cut_line"]:
            n_cut = sum(1 for row in inv_out["rows"] if not row["reaches_server"])
            con.print(escape(_("the command is cut off at line {line}: the {n} flag(s) marked below never reach "
                               "llama-server (as `llamarig check` reports)").format(line=inv_out["cut_line"], n=n_cut)),
                      style="bold red")
        for row in inv_out["rows"]:
            style = "" if row["known"] else "bold red"
            if not row["reaches_server"]:
                style = "dim red"
            if narrow:
                what = row["what"]
                default = _("default {value}").format(value=row["default"])
                if row["default"] and not any(w in what for w in ("default", "默认")):
                    what += _(" ({default})").format(default=default)
                tab.add_row(escape(row["flag"]), escape(row["value"]), escape(what), escape(row["effect"]), style=style)
            else:
                tab.add_row(escape(row["flag"]), escape(row["value"]), escape(row["what"]),
                            escape(row["default"]), escape(row["effect"]), style=style)
        con.print(tab)
