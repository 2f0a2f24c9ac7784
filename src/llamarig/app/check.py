"""``check``: the one check pipeline (read, parse, lint with the cores, the planner and the
model loader, the no-invocation finding), used by ``llamarig check``, ``explain``, ``render
--from-script`` and :func:`llamarig.check_text` alike; ``fix`` on its result, and the pair every
view prices (:func:`what_runs`: what llama-server receives, what was meant)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamarig.app.resolution import Resolution, Settings, changes_between, flag_settings
from llamarig.errors import InputError, LlamarigError
from llamarig.flags.argv import Command, Reading, Use
from llamarig.flags.findings import finding
from llamarig.flags.fix import fix_text
from llamarig.flags.model import model_loader
from llamarig.flags.preset import preset_invocation
from llamarig.flags.readers import Invocation, Parsed, parse_argv, parse_text
from llamarig.flags.reading import ScriptReading, read_script, reading_of
from llamarig.flags.rules import Context, Finding, Severity, lint, physical_cores
from llamarig.flags.rules.rpc import rpc_server_findings
from llamarig.flags.schema import Schema, load_bundled, load_schema
from llamarig.hardware.types import GPU
from llamarig.i18n import _, os_error
from llamarig.plan.config import ServerConfig
from llamarig.plan.inputs import plan_for_check
from llamarig.plan.result import Plan

MAX_INPUT_BYTES = 4 * 1024 * 1024


def read_input(path: str) -> tuple[str, str]:
    """(text, display name) of a file, or of standard input for ``-``. Unreadable input is an
    InputError (exit 2): a directory, a file over 4 MiB, binary data."""
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
        raise InputError(_("{path}: cannot read: {error}").format(path=path, error=os_error(e))) from e
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(_("{name}: larger than {limit} MiB, not a launch script").format(name=name, limit=MAX_INPUT_BYTES // (1024 * 1024)))
    if b"\x00" in data[:8192]:
        raise InputError(_("{name}: binary data, not a command or script").format(name=name))
    return data.decode("utf-8", errors="replace"), name


def get_schema(server_bin: str | None = None, bundled: bool = False, no_cache: bool = False,
               schema_build: int | None = None) -> Schema:
    """The flags to check against: a bundled build (``schema_build``, or the pinned one with
    ``bundled``), else the binary's (``server_bin``, ``$LLAMARIG_SERVER_BIN``, PATH, the cache)."""
    if schema_build is not None:
        if server_bin:
            raise InputError(_("give --server-bin or --schema-build, not both"))
        return load_bundled(schema_build)
    if bundled:
        return load_bundled()
    return load_schema(server_bin, cache=not no_cache)


#: what a resolution of one command was made with (``llamarig.app.runs.price``): the command's
#: index, the model, the GPUs, the RAM, the script's directory, speed, the tokens one request needs
ResolutionKey = tuple[int, "str | None", "tuple[GPU, ...]", "int | None", "Path | None", bool, "int | None"]


@dataclass
class CheckReport:
    """What ``llamarig check`` found in one input: its commands, how llama-server reads each,
    the findings (errors, warnings, info), the schema they were judged against."""

    parsed: Parsed
    readings: list[Reading]
    findings: list[Finding]
    schema: Schema
    name: str = "<text>"
    kind: str | None = None
    origin: Path | None = field(default=None, repr=False)
    #: the commands the shell really runs and the one meant (llamarig.flags.reading); ``parsed``
    #: is its meant text's reading
    reading: ScriptReading | None = field(default=None, repr=False)
    #: each command's pair (:func:`what_runs`) and its resolutions (``llamarig.app.runs.price``),
    #: made once per report and reused by every view of it (check's findings, explain, plan
    #: --from-script)
    pairs: dict[int, WhatRuns] = field(default_factory=dict, repr=False)
    resolutions: dict[ResolutionKey, Resolution] = field(default_factory=dict, repr=False)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == Severity.ERROR]

    def to_json(self) -> dict[str, Any]:
        """``llamarig check --json`` (docs/check.md)."""
        return {
            "invocations": [
                {"argv": inv.argv, "line": inv.line, "end_line": inv.end_line, "source": inv.source,
                 "label": inv.label or None, "background": inv.background,
                 "env": [{"name": n, "value": v, "line": ln} for n, v, ln in inv.env],
                 "cut_off": [{"word": w.text, "line": w.line} for w in inv.orphans],
                 "cut_line": inv.cut_line}
                for inv in self.parsed.invocations
            ],
            "findings": [f.to_json() for f in self.findings],
            "schema": {"source": self.schema.source, "build": self.schema.build, "origin": self.schema.origin},
        }


def check(text: str, *, schema: Schema | None = None, server_bin: str | None = None, kind: str | None = None,
          cores: int | None = None, model: str | None = None, base_dir: Path | None = None,
          gpus: Sequence[GPU] = (), ram: int | None = None, need_ctx: int | None = None,
          origin: Path | None = None, name: str = "<text>") -> CheckReport:
    """`llamarig check`'s findings for a launch script, unit, compose/YAML file, preset INI or
    command line, against ``schema`` (else ``server_bin``'s flags, else the bundled schema of the
    pinned build). ``cores``: physical cores of the target machine (default this one); ``model``:
    a GGUF instead of -m; ``gpus``/``ram`` (bytes): add the memory verdict; ``origin``: the file ``text``
    was read from (its sourced files, drop-ins, .env are read too)."""
    reading = read_script(text, kind, origin)
    parsed = reading.parsed if reading.parsed is not None else parse_text(text, kind, origin)
    return _check_parsed(parsed, reading, text, schema=schema, server_bin=server_bin, kind=kind, cores=cores,
                         model=model, base_dir=base_dir, gpus=gpus, ram=ram, need_ctx=need_ctx, origin=origin,
                         name=name)


def check_command(cmd: Command, *, schema: Schema | None = None, server_bin: str | None = None,
                  cores: int | None = None, model: str | None = None, base_dir: Path | None = None,
                  gpus: Sequence[GPU] = (), ram: int | None = None, need_ctx: int | None = None,
                  name: str = "<text>") -> CheckReport:
    """:func:`check` on a command already parsed (a Deployment's): its words are read as the argv
    they are (``parse_argv``), not joined into a text and parsed again, and its pair
    (:func:`what_runs`) is ``cmd`` itself."""
    program = cmd.with_program(cmd.program or "llama-server")
    argv = tuple(program.to_argv())
    parsed = parse_argv(list(argv))
    report = _check_parsed(parsed, reading_of(parsed), "", schema=schema, server_bin=server_bin, kind=None,
                           cores=cores, model=model, base_dir=base_dir, gpus=gpus, ram=ram, need_ctx=need_ctx,
                           origin=None, name=name, pairs={0: WhatRuns(0, 1, argv, argv, None, program, program)})
    return report


def _check_parsed(parsed: Parsed, reading: ScriptReading, text: str, *, schema: Schema | None,
                  server_bin: str | None, kind: str | None, cores: int | None, model: str | None,
                  base_dir: Path | None, gpus: Sequence[GPU], ram: int | None, need_ctx: int | None,
                  origin: Path | None, name: str, pairs: dict[int, WhatRuns] | None = None) -> CheckReport:
    if schema is None:
        schema = load_schema(server_bin) if server_bin else load_bundled()
    report = CheckReport(parsed, [], [], schema, name, kind, origin, reading, dict(pairs or {}))
    ctx = Context(physical_cores=cores or physical_cores(),
                  cores_source="--cores" if cores else "this machine", gpus=tuple(gpus),
                  ram_bytes=ram, model_ref=model, need_ctx=need_ctx, planner=_planner(report))
    gguf_model = model if model and (model.endswith(".gguf") or Path(model).is_file()) else None
    readings, findings = lint(parsed, schema, ctx, model_loader(gguf_model, base_dir))
    extra = rpc_server_findings(text)  # the script's rpc-servers (not llama-server invocations)
    if extra:
        findings = sorted([*findings, *extra], key=lambda f: f.line)
    if not parsed.invocations and not parsed.others and not any(f.rule == "engine" for f in findings):
        findings.append(Finding("no-invocation", Severity.INFO, 1, None,
                                _("no llama-server command found (a program named llama-server, "
                                  "llama-*-server or server, a llama.cpp docker image, ExecStart=, "
                                  "compose command: or llama-swap cmd:)"), None, None))
    report.readings, report.findings = readings, findings
    extra = resolution_findings(report, model=model, gpus=gpus, ram=ram, need_ctx=need_ctx, base_dir=base_dir)
    if extra:
        report.findings = sorted([*findings, *extra], key=lambda f: f.line)
    return report


def _planner(report: CheckReport) -> Callable[[str | None, str | None, Sequence[GPU], int | None, list[str]], Plan]:
    """check --gpu's memory rule's planner (``Context.planner``) on the command as the report's
    pair parsed it (:func:`what_runs`), not parsed again."""
    def plan(model: str | None, mmproj: str | None, gpus: Sequence[GPU], ram: int | None, argv: list[str]) -> Plan:
        words = tuple(argv[1:])
        for k, inv in enumerate(report.parsed.invocations):
            if inv.source == "fragment" or words not in (tuple(w.text for w in inv.args),
                                                         tuple(w.text for w in inv.intended_args)):
                continue
            pair = what_runs(report, k)  # what runs, or what was meant (the rule plans both)
            cmd = pair.received_command if pair.received[1:] == words else \
                pair.meant_command if pair.meant[1:] == words else None
            if cmd is not None:
                return plan_for_check(model, mmproj, gpus, ram, cmd.with_program(argv[0]))
        return plan_for_check(model, mmproj, gpus, ram, argv)
    return plan


#: a Diagnostic of the resolved deployment -> the check rule that reports it, and the rules
#: whose finding already says it (not said twice)
_AS_RULE = {"slot-ctx-clamped": ("slot-ctx-above-train", ("slot-ctx-above-train",)),
            "need-ctx": ("per-slot-ctx", ("per-slot-ctx",)),
            "fit-cannot-act": ("fit-cannot-act", ()), "fit-context-fixed": ("fit-context-fixed", ()),
            "fit-layers-fixed": ("fit-layers-fixed", ())}


def resolution_findings(report: CheckReport, *, model: str | None = None, gpus: Sequence[GPU] = (),
                        ram: int | None = None, need_ctx: int | None = None,
                        base_dir: Path | None = None) -> list[Finding]:
    """What the resolved deployment of each command says that its flags alone do not: the
    per-slot context as the server caps it (and against ``need_ctx``), ``--fit`` written where
    it cannot act. A command is resolved when a model is given, ``need_ctx`` is, or it writes
    ``--fit``/``--fit-target`` (``llamarig.app.resolution``)."""
    from llamarig.app.runs import price  # lazy: the resolution prices check's reading

    out: list[Finding] = []
    for k, inv in enumerate(report.parsed.invocations):
        r = report.readings[k] if k < len(report.readings) else None
        if inv.source == "fragment" or r is None:
            continue
        fit_use = r.last("--fit") or r.last("--fit-target")
        if fit_use is None and model is None and need_ctx is None:
            continue
        res = price(what_runs(report, k), model=model, gpus=gpus, ram=ram, base_dir=base_dir, need_ctx=need_ctx,
                    report=report)
        have = {f.rule for f in report.findings if f.invocation == k and f.severity != Severity.INFO}
        c_use = r.last("--ctx-size")
        use: Use | None
        for d in res.diagnostics:
            rule, said = _AS_RULE.get(d.code, (d.code, ()))
            if any(x in have for x in said):
                continue
            if rule.startswith("fit-"):
                if fit_use is None:
                    continue  # fit as the default, not written as a fallback: the plan says it
                use = fit_use
            else:
                use = c_use
            out.append(finding(rule, d.severity, use.line if use else inv.line, use.spelling if use else None,
                               d.message, None, k, use.passed if use else True))
    return out


@dataclass(frozen=True)
class WhatRuns:
    """One command of a checked input as two argvs (program first): what llama-server receives,
    and what its author meant (the words a broken continuation cut off put back). Every view
    prices ``received`` and shows what ``meant`` would change (docs/explain.md, docs/logs.md)."""

    index: int  # the command's place among the input's llama-server commands
    line: int
    received: tuple[str, ...]
    meant: tuple[str, ...]
    cut_line: int | None = None  # where the command is cut off (None: nothing is)
    #: ``received`` and ``meant`` parsed, once (:meth:`Command.parse`, program first); every view
    #: reads these, not the words again
    received_command: Command = field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    meant_command: Command = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.received_command is None:
            object.__setattr__(self, "received_command", Command.parse(self.received, program=True))
        if self.meant_command is None:
            object.__setattr__(self, "meant_command", self.received_command if self.same
                               else Command.parse(self.meant, program=True))

    @property
    def same(self) -> bool:
        return self.received == self.meant


def what_runs(report: CheckReport, k: int = 0) -> WhatRuns:
    """The ``k``-th llama-server command of ``report`` as the pair every view works from: the
    argv the shell really gives it (the text as written, ``ScriptReading.received``) and the
    argv meant (``ScriptReading.meant_each``: the text as a person reads it, garbled lines
    repaired and cut-off words put back). The one place that turns the readers' result into the
    pair; commands are matched by the line of their program. Made once per report (``report.pairs``)."""
    if k in report.pairs:
        return report.pairs[k]
    inv = report.parsed.invocations[k]
    reading = report.reading if report.reading is not None else reading_of(report.parsed)
    got = next((i for i in reading.received if i.line == inv.line and i.source != "fragment"), None)
    meant_inv = next((i for i in reading.meant_each if i.line == inv.line), None)
    received = tuple(got.argv) if got is not None else tuple(inv.argv)
    meant = tuple(meant_inv.argv) if meant_inv is not None else (inv.program, *(w.text for w in inv.intended_args))
    cut = got.cut_line if got is not None and got.orphans else (inv.cut_line if inv.orphans else None)
    got_cmd = Command.parse(received, report.schema, program=True)
    meant_cmd = got_cmd if meant == received else Command.parse(meant, report.schema, program=True)
    pair = report.pairs[k] = WhatRuns(k, inv.line, received, meant, cut, got_cmd, meant_cmd)
    return pair


def check_file(path: str, **options: Any) -> CheckReport:
    """:func:`check` on a file (``-``: standard input), with the file's directory for its
    relative paths and sourced files."""
    text, name = read_input(path)
    origin = Path(path) if path != "-" else None
    return check(text, base_dir=origin.parent if origin else None, origin=origin, name=name, **options)


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


# ----------------------------------------------------------------------------- fix


def read_config(argv: Command | Sequence[str]) -> tuple[ServerConfig | LlamarigError, str, str]:
    """What the planner reads of a llama-server command (a Command, or an argv with its program
    optional), or why the server refuses it, and the KV types as written (a type llama-server
    rejects is still what the command says)."""
    cmd = Command.of(argv)
    type_k, type_v = cmd.get("--cache-type-k") or "f16", cmd.get("--cache-type-v") or "f16"
    try:
        return ServerConfig.from_command(cmd.without("--cache-type-k", "--cache-type-v")), type_k, type_v
    except LlamarigError as e:
        return e, type_k, type_v


def read_settings(argv: Command | Sequence[str]) -> Settings | LlamarigError:
    """What a llama-server argv (program optional) runs read from its flags alone
    (:func:`llamarig.app.resolution.flag_settings`: llama-server's defaults where unset), or
    why the server refuses it. With the model known the resolved deployment's settings are the
    plan's (``Resolution.settings``)."""
    cfg, type_k, type_v = read_config(argv)
    return cfg if isinstance(cfg, LlamarigError) else flag_settings(cfg, type_k, type_v)


def argv_settings(argv: Command | Sequence[str]) -> Settings | None:
    """:func:`read_settings`, None when the server refuses the command."""
    st = read_settings(argv)
    return st if isinstance(st, Settings) else None


def settings(argv: list[str]) -> dict[str, str]:
    """What a llama-server argv runs, in the terms a user compares (``Settings.rows``), from its
    flags alone; ``{"error": why}`` when the server refuses it."""
    st = read_settings(argv)
    return st.rows() if isinstance(st, Settings) else {"error": str(st)}


def behaviour_changes(before: Command | Sequence[str], after: Command | Sequence[str]) -> list[tuple[str, str, str]]:
    """(what, before, after) for every setting a fix changes in the running server."""
    a, b = read_settings(before), read_settings(after)
    if isinstance(a, Settings) and isinstance(b, Settings):
        return list(changes_between(a, b))
    if isinstance(a, Settings) or isinstance(b, Settings) or str(a) != str(b):
        # one of them does not start: that is the change, not each setting
        return [(_("the server"), str(a) if not isinstance(a, Settings) else _("starts"),
                 str(b) if not isinstance(b, Settings) else _("starts"))]
    return []


@dataclass(frozen=True)
class FixResult:
    """The repaired text, and for each command whose running server changes, (index, line,
    [(what, before, after)])."""

    text: str
    changes: tuple[tuple[int, int, tuple[tuple[str, str, str], ...]], ...] = ()
    #: lines of flags with no command before them in a text that has commands: --fix cannot tell
    #: which one they are for (it writes them, corrected, as comments) and asks (exit code 4)
    unplaced: tuple[int, ...] = ()
    #: the repaired text checked (``fix(..., recheck=)``), None when not asked
    after: CheckReport | None = field(default=None, compare=False, repr=False)


def _parsed_as(report: CheckReport, inv: Invocation) -> Command | list[str]:
    """The command ``inv`` of ``report`` as its pair parsed it (not parsed again), else its words."""
    pair = what_runs(report, next(i for i, x in enumerate(report.parsed.invocations) if x is inv))
    argv = tuple(inv.argv)
    return pair.received_command if argv == pair.received else pair.meant_command if argv == pair.meant \
        else list(argv[1:])


def fix(report: CheckReport, lang: str = "en", recheck: Callable[[str], CheckReport] | None = None) -> FixResult:
    """`llamarig check --fix`: the input with every repairable finding repaired (its comments in
    ``lang``), and what that changes in the server each command runs. ``recheck``: how to check
    the repaired text (check's options); its report is ``FixResult.after``, and the commands it
    parsed are the ones compared."""
    fixed = fix_text(report.parsed, report.readings, report.findings, report.schema, lang)
    rechecked = recheck(fixed) if recheck is not None else None
    if rechecked is not None:
        after = rechecked.parsed
    else:
        after = parse_text(fixed, report.kind, report.origin)
        after.invocations = [preset_invocation(i, report.schema) if i.preset is not None else i
                             for i in after.invocations]
    changes = []
    servers = [inv for inv in report.parsed.invocations if inv.source != "fragment"]
    for k, (inv_a, inv_b) in enumerate(zip(servers, after.invocations, strict=False)):
        now = _parsed_as(rechecked, inv_b) if rechecked is not None and inv_b.source != "fragment" else inv_b.argv[1:]
        ch = behaviour_changes(_parsed_as(report, inv_a), now)
        if ch:
            changes.append((k, inv_b.line, tuple(ch)))
    loose = [inv for inv in report.parsed.invocations if inv.source == "fragment"]
    unplaced = tuple(ln for inv in loose for ln in range(inv.line, inv.end_line + 1)) \
        if loose and (servers or report.parsed.others) else ()
    return FixResult(fixed, tuple(changes), unplaced, rechecked)
