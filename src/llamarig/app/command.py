"""``resolve_command``: what render, launch, tune and quality start from. A MODEL with flags,
a whole llama-server command, or a command taken from a script/unit/compose/llama-swap file
(checked first, optionally repaired), becomes the binary, the final llama-server args (relative
paths made absolute), the environment and the plan with its speed."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from llamarig.app.check import CheckReport, check, fix, get_schema, read_input, what_runs
from llamarig.app.planning import plan_with_speed
from llamarig.app.resolution import FitState, Settings, fit_state, plan_settings
from llamarig.binary import find_binary
from llamarig.diagnostics import Diagnostic
from llamarig.errors import InputError, LlamarigError, ServerError
from llamarig.flags.argv import Command
from llamarig.flags.findings import Finding
from llamarig.flags.readers import is_server_program
from llamarig.flags.schema import Schema, load_bundled, load_schema
from llamarig.hardware.types import Hardware
from llamarig.hub.ref import is_remote, parse_ref
from llamarig.i18n import _, join
from llamarig.plan.deployment import Deployment, deployment
from llamarig.plan.result import Plan
from llamarig.plan.rpc import loopback_descriptions, parse_rpc_device
from llamarig.plan.speed.speed_model import SpeedReport
from llamarig.render.argv import (
    absolutize_command,
    catalogue_id,
    check_argv,
    placeholders,
)


@dataclass(frozen=True)
class Resolved:
    """What render, launch and tune start from, computed once per input: the binary, the final
    llama-server args (relative paths made absolute), the environment, the plan of its
    Deployment, the settings the server runs and what ``--fit`` can do there
    (llamarig.app.resolution), and what reading the input found."""

    binary: str
    args: list[str]
    env: list[tuple[str, str]] = field(default_factory=list)
    plan: Plan | None = None
    plan_note: str = ""  # why there is no plan (the planner's error), or a note on its input
    plan_error: LlamarigError | None = None  # the planner's error, typed
    findings: list[Finding] = field(default_factory=list)  # check findings of a --from-script input
    notes: list[str] = field(default_factory=list)  # comment lines about the input
    schema: Schema | None = None  # flag schema of `binary` (else the bundled one)
    #: the Deployment behind ``plan`` (launch re-plans it for the server's CPU); None when the
    #: command could not be read as one (``plan_error``)
    deployment: Deployment | None = None
    #: what the command is planned on (its rpc-servers' devices included)
    hardware: Hardware = field(default_factory=Hardware)
    wrappers: list[str] = field(default_factory=list)  # --from-script: the script's wrappers, kept
    workdir: str | None = None  # --from-script: the directory the script runs the server in, kept
    #: what the server runs (the plan's settings: slots, the per-slot context as the server caps
    #: it, KV types, after --fit); None without a plan
    settings: Settings | None = None
    #: what --fit can do for this command (why it cannot act), None without a Deployment
    fit: FitState | None = None
    #: ``args`` as parsed once where the input was read (None: parsed on first use)
    parsed: Command | None = field(default=None, compare=False, repr=False)
    #: the script the command was read from (``--from-script``), None for tokens or a Deployment
    script: str | None = None

    @property
    def speed(self) -> SpeedReport | None:
        """The plan's speed report (None without a plan or when speed cannot be predicted)."""
        return self.plan.speed if self.plan is not None else None

    def command(self) -> Command:
        """The final llama-server args, parsed against the binary's flags (once)."""
        return self._command

    @cached_property
    def _command(self) -> Command:
        return self.parsed if self.parsed is not None else Command.parse(self.args, self.schema, program=False)


def _binary(explicit: str | None, program: str | None) -> str:
    if explicit:
        return os.path.abspath(find_binary("llama-server", explicit))
    if program and ("/" in program) and Path(program).is_file():
        return str(Path(program).resolve())
    return os.path.abspath(str(find_binary("llama-server")).strip())


def _split(tokens: list[str]) -> tuple[str | None, list[str]]:
    """(program or None, llama-server args) from ``MODEL flags``, ``llama-server flags`` or ``flags``."""
    if not tokens:
        return None, []
    first = tokens[0]
    if is_server_program(first):
        return first, tokens[1:]
    if not first.startswith("-"):
        return None, _model_args(first) + tokens[1:]
    return None, tokens


def _model_args(model: str) -> list[str]:
    """MODEL as llama-server takes it: ``-m PATH``, or for a remote reference the flags with which
    llama-server downloads that file itself (``-hf OWNER/REPO[:QUANT]`` [``-hff FILE``], ``-mu URL``)."""
    if Path(model).exists() or not is_remote(model):
        return ["-m", model]
    ref = parse_ref(model)
    if ref.hub == "url":
        return ["-mu", ref.url]
    if ref.hub == "ms":
        raise InputError(_("{model}: llama-server downloads from Hugging Face (or an HF_ENDPOINT mirror), not "
                           "ModelScope: download the file first (`modelscope download {repo} FILE.gguf`) and give "
                           "its path; `llamarig plan {model}` plans it without the download").format(
            model=model, repo=ref.repo))
    return ["-hf", ref.hf_repo_arg] + (["-hff", ref.file] if ref.file else [])


def _plan(args: Command, hardware: Hardware, notes: Sequence[Diagnostic], base: Deployment | None = None
          ) -> tuple[Plan | None, str, LlamarigError | None, Deployment | None]:
    """(plan with speed, note, error, the Deployment behind it) for the final llama-server args;
    ``base``: the Deployment the args were taken from (the API's): planned as it is, on
    ``hardware``, not rebuilt from the args."""
    d = None
    try:
        d = (replace(base, hardware=hardware) if base is not None else
             deployment(command=args.with_program("llama-server"), hardware=hardware, diagnostics=tuple(notes)))
        plan = plan_with_speed(d)
    except LlamarigError as e:
        return None, _("plan: not computed ({error})").format(error=e), e, d
    note = ""
    model = plan.model
    if model.startswith("<") and model.endswith(".gguf>"):
        m = d.model or d.config.model or model
        note = _("model: '{model}' is a catalogue id, not a file: replace it with the GGUF's path (the figures "
                 "are for the catalogue's header)").format(model=m)
    return plan, note, None, d


def _script_dir(cwd: str | None, script_dir: Path) -> str | None:
    """The directory a script runs llama-server in (its last ``cd DIR``, a unit's
    WorkingDirectory=), absolute: ``~`` is this user's home, a relative one is taken from the
    script's directory; None when it does not say or names a variable."""
    if not cwd or "$" in cwd or "`" in cwd:
        return None
    d = os.path.expanduser(cwd)
    return os.path.normpath(d if os.path.isabs(d) else os.path.join(script_dir, d))


def _script_binary(program: str, workdir: str | None, script_dir: Path) -> str:
    """The script's own program, as the output runs it, absolute: a bare name is the file PATH
    finds here (the script finds it the same way; a unit's ExecStart= and llama-swap look only
    in their own search path), else stays a name; ``~`` is expanded, a relative path is joined to
    the directory the script runs it in (its ``cd``), else to the script's directory."""
    if "/" not in program:
        import shutil  # lazy: only for a script that names its binary bare

        return shutil.which(program) or program
    p = os.path.expanduser(program)
    if not os.path.isabs(p):
        p = os.path.normpath(os.path.join(workdir or str(script_dir), p))
    return p


def _keep_script_command(inv: Any, script: Path, notes: list[str]) -> tuple[str | None, list[str], str | None]:
    """(the script's binary, its wrappers, its directory) for the rendered output, each with a
    note saying it was kept. A command inside a container (compose, Kubernetes, Helm, docker
    run) names a path of the image: (None, [], None), the binary is then found here."""
    if inv.source not in ("shell", "systemd", "llama-swap") or not is_server_program(inv.program):
        return None, [], None
    script_dir = script.parent.resolve()
    workdir = _script_dir(inv.cwd, script_dir)
    binary = _script_binary(inv.program, workdir, script_dir)
    if workdir:
        how = f"`cd {inv.cwd}`" if inv.source == "shell" else f"WorkingDirectory={inv.cwd}"  # as written
        notes.append(_("directory: the script's {how} kept ({dir}): the server runs there").format(
            how=how, dir=workdir))
    if inv.wrappers:
        notes.append(_("wrappers: the script's `{words}` kept in front of the server").format(
            words=" ".join(inv.wrappers)))
    where = "" if binary == inv.program else f" ({binary})"
    notes.append(_("binary: the script's {program}{where} kept").format(program=inv.program, where=where))
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


def _refuse_catalogue_names(cmd: Command) -> None:
    """A launcher runs llama-server, which needs files: a catalogue id as -m, or plan's
    --mmproj f16/bf16/catalogue shorthand, is refused (not written as a relative path)."""
    model = cmd.get("--model")
    if model and not Path(os.path.expanduser(model)).exists() and catalogue_id(model):
        raise InputError(_("-m {model}: a catalogue id, not a file: the launcher needs the GGUF's path (download it "
                           "first, e.g. with `huggingface-cli download REPO FILE.gguf`, or give llama-server `-hf "
                           "REPO:QUANT`); `llamarig plan {model}` plans without the file").format(model=model))
    mm = cmd.get("--mmproj")
    if mm and mm.lower() in ("f16", "bf16", "catalogue", "auto", "default") and not Path(mm).exists():
        raise InputError(_("--mmproj {mm}: plan's shorthand for the catalogue's projector, not a file: give the "
                           "mmproj GGUF's path").format(mm=mm))


@dataclass
class _Input:
    """What the input gives before the binary is resolved: the program word (None: MODEL or
    flags only), the server args, env, the check findings and notes, where relative paths are
    taken from, and what a script keeps (its binary, wrappers, directory)."""

    program: str | None
    args: list[str]
    env: list[tuple[str, str]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    bases: list[Path] = field(default_factory=lambda: [Path.cwd()])
    kept_binary: str | None = None
    wrappers: list[str] = field(default_factory=list)
    workdir: str | None = None
    #: a catalogue id the command is planned with (render of ``qwen3.6-27b:iq4_nl``): its server
    #: args name the file as it will be found where it runs (``--model-path``, ``-hf REPO:QUANT``)
    planned_model: str | None = None
    #: ``args`` as the input's reading parsed them (a script's command, from its check)
    command: Command | None = None


def _checked_script(path: str, schema: Schema, repair: bool, notes: list[str]) -> CheckReport:
    """The script checked, and with ``repair`` fixed first by exactly `llamarig check --fix`'s
    repairs (warnings' too), the notes saying so and what the fix changes in what runs."""
    text, name = read_input(path)
    report = check(text, schema=schema, base_dir=Path(path).parent, origin=Path(path))
    fixed = fix(report) if repair else None
    if fixed is None or fixed.text == text:
        notes.append(_("input: {name}").format(name=name))
        return report
    n_warnings = sum(1 for f in report.findings if f.severity == "warning")
    notes.append(_("input: {name}, repaired with `llamarig check --fix` ({n} error(s), {w} warning(s) "
                   "before)").format(name=name, n=len(report.errors), w=n_warnings))
    for _k, line, changes in fixed.changes:
        notes.append(_("the fix changes what the server at line {line} runs: {changes}").format(
            line=line, changes=join(_("; "), [_("{what} {before} -> {after}").format(what=w, before=b, after=a)
                                             for w, b, a in changes])))
    return check(fixed.text, schema=schema, base_dir=Path(path).parent, origin=Path(path))


def _from_script(path: str, invocation: int, server_bin: str | None, repair: bool, keep_script: bool) -> _Input:
    """The ``invocation``-th llama-server command of a script/unit/compose/llama-swap file."""
    notes: list[str] = []
    report = _checked_script(path, get_schema(server_bin, False), repair, notes)
    parsed, name = report.parsed, path
    if not parsed.invocations:
        raise InputError(_("{name}: no llama-server command found").format(name=name))
    if not 1 <= invocation <= len(parsed.invocations):
        raise InputError(_("--invocation {invocation}: {name} has {n_invocations} llama-server command(s)").format(
            invocation=invocation, name=name, n_invocations=len(parsed.invocations)))
    inv = parsed.invocations[invocation - 1]
    inp = _Input(inv.program, [w.text for w in inv.args], [(n, v) for n, v, _line in inv.env],
                 [f for f in report.findings if f.invocation in (None, invocation - 1)], notes)
    got = what_runs(report, invocation - 1).received_command
    if got.server_args() == inp.args:  # the command as the script's check parsed it
        inp.command = got.with_program(None)
    # the script's relative paths are the script's: from its `cd DIR` (or WorkingDirectory=),
    # else from its directory, never from wherever render runs
    inp.bases = [Path(path).parent.resolve()]
    if keep_script and not server_bin:
        inp.kept_binary, inp.wrappers, inp.workdir = _keep_script_command(inv, Path(path), notes)
    script_cwd = inp.workdir or _script_dir(inv.cwd, inp.bases[0])
    if script_cwd:  # the server runs there: its relative paths are there
        inp.bases = [Path(script_cwd)]
    return inp


def _catalogue_source(model: str, model_path: str | None) -> list[str] | None:
    """The server args that load a catalogue model where the rendered file runs: ``-m
    model_path``, else ``-hf OWNER/REPO:QUANT`` when the catalogue names its repo; None when it
    is no catalogue id (or a file of that name is here)."""
    from llamarig.catalogue.models import find_model  # lazy: the catalogue only for a catalogue id

    if Path(os.path.expanduser(model)).exists() or model.startswith("-") or not catalogue_id(model):
        return None
    if model_path:
        return ["-m", model_path]
    entry, quant = find_model(model)
    repo = str(entry.entry.get("repo") or "")
    if repo.startswith("hf:"):
        return ["-hf", f"{repo[3:]}:{quant}"]
    raise InputError(_("{model}: a catalogue id, not a file: give the GGUF's path on the machine that runs it with "
                       "--model-path PATH (the plan is the catalogue's), or its Hugging Face repo as MODEL "
                       "(hf:OWNER/REPO:QUANT, which llama-server downloads with -hf)").format(model=model))


def _from_tokens(tokens: Sequence[str], model_path: str | None = None, catalogue: bool = False) -> _Input:
    """``MODEL flags``, ``llama-server flags`` or ``flags``; with ``catalogue`` (render: a file
    for another machine) a catalogue MODEL is planned as the catalogue's and loaded from
    ``model_path`` (or its repo); launch and tune need the file itself."""
    source = _catalogue_source(tokens[0], model_path) if tokens and (catalogue or model_path) else None
    if source is not None:
        inp = _Input(None, [*source, *tokens[1:]], planned_model=tokens[0])
        inp.notes.append(_("model: {model} planned from the catalogue; the server loads {source}").format(
            model=tokens[0], source=" ".join(source)))
        return inp
    if model_path:
        raise InputError(_("--model-path is for a catalogue MODEL (`llamarig models`): give the file as MODEL instead"))
    program, args = _split(list(tokens))
    inp = _Input(program, args)
    if ("-hf" in args or "-mu" in args) and os.environ.get("HF_ENDPOINT") and tokens and not tokens[0].startswith("-"):
        # the mirror the plan read the header from is where llama-server downloads it
        # (common/common.cpp:1521 reads MODEL_ENDPOINT, else HF_ENDPOINT)
        inp.env.append(("HF_ENDPOINT", os.environ["HF_ENDPOINT"]))
    if not args:
        raise InputError(_("no llama-server command: give MODEL.gguf [flags], `-- llama-server -m MODEL ...` or "
                           "--from-script FILE"))
    return inp


def _resolve_binary(inp: _Input, server_bin: str | None, allow_no_binary: bool) -> tuple[str, Schema]:
    """The binary the output runs and the flags it is checked against, with notes on both."""
    program = inp.program
    if inp.kept_binary is not None:
        found, itself = _schema_binary(inp.kept_binary)
        schema = schema_of(found) if found else schema_of(inp.kept_binary)
        if not itself:
            inp.notes.append(_("flags: checked against {schema} ({binary} is not on this machine)").format(
                schema=schema.label(), binary=inp.kept_binary))
        return inp.kept_binary, schema
    try:
        binary = _binary(server_bin, program)
    except ServerError:
        if server_bin or not allow_no_binary:
            raise
        # render writes a file for another machine: the bundled schema stands for the flags,
        # and the output names the program for the user to point at the real binary
        binary = Path(program).name if program else "llama-server"
        inp.notes.append(_("binary: no llama-server on this machine: the output runs `{name}` (found on PATH, or "
                           "write its absolute path there); flags checked against the bundled schema of build "
                           "{build}").format(name=binary, build=load_bundled().build))
        return binary, load_bundled()
    if program and Path(program).name != Path(binary).name or (program and "/" in program and not Path(program).is_file()):
        inp.notes.append(_("binary: {binary} (the input's {program} is not here)").format(binary=binary, program=program))
    return binary, schema_of(binary)


def resolve_command(tokens: Sequence[str] = (), *, from_script: str | None = None, invocation: int = 1,
                    server_bin: str | None = None, hardware: Hardware | None = None,
                    notes: Sequence[Diagnostic] = (), want_plan: bool = True, repair: bool = False,
                    keep_script: bool = False,
                    allow_no_binary: bool = False, loopback_rpc_memory: int | None = None,
                    base: Deployment | None = None, model_path: str | None = None) -> Resolved:
    """The binary, the final llama-server args (relative paths made absolute), env and plan.
    ``tokens``: ``MODEL flags``, ``llama-server flags`` or ``flags``; ``from_script``: a file
    instead (its ``invocation``-th command; checked, and with ``repair`` fixed first by
    `llamarig check --fix`'s repairs). ``keep_script`` (render): a --from-script
    command keeps its own binary, wrappers and directory. ``allow_no_binary`` (render): without
    a llama-server here, the bundled schema and the program's name stand in (a note says so),
    instead of a ServerError. ``hardware``: what the command is planned on (``Hardware.rpc``: what
    each rpc-server of ``--rpc`` brings); ``notes``: what reading it found;
    ``loopback_rpc_memory`` (launch): the memory an rpc-server of this machine will report, for
    the ``--rpc`` endpoints on 127.0.0.1 that ``hardware.rpc`` does not describe. ``base``: the
    Deployment ``tokens`` were written from (:func:`resolve_deployment`): it is what is planned
    (its projector, draft and overhead kept), not a Deployment rebuilt from the tokens.
    ``model_path`` (render): for a catalogue MODEL, the GGUF's path where the output runs; the
    plan is the catalogue's (without it, the catalogue's repo as ``-hf``, else an InputError)."""
    if from_script and tokens:
        raise InputError(_("give either --from-script FILE or a command, not both"))
    inp = (_from_script(from_script, invocation, server_bin, repair, keep_script) if from_script
           else _from_tokens(tokens, model_path, catalogue=allow_no_binary))
    binary, schema = _resolve_binary(inp, server_bin, allow_no_binary)
    # the input's args parsed once (a script's: as its check did, against the same flags)
    cmd = inp.command if inp.command is not None and (inp.command.schema is schema or
                                                      inp.command.schema.options == schema.options) \
        else Command.parse(inp.args, schema, program=False)
    if not from_script and inp.planned_model is None:
        _refuse_catalogue_names(cmd)
    for p in placeholders(cmd, schema):
        inp.notes.append(_("path: {path} is a placeholder, not a file: it is written as given; put the real path "
                           "there before running it").format(path=p))
    cmd, changed = absolutize_command(cmd, inp.bases, schema)
    args = cmd.server_args()
    if changed:
        where = _(" or ").join(str(b) for b in inp.bases)
        inp.notes.append(_("paths: relative {paths} made absolute (against {base})").format(
            paths=", ".join(changed), base=where))
    hw = hardware or Hardware()
    if loopback_rpc_memory is not None:
        loopback = loopback_descriptions(cmd.get("--rpc"), [g.endpoint for g in hw.rpc],
                                         loopback_rpc_memory)
        hw = replace(hw, rpc=(*hw.rpc, *(g for text in loopback for g in parse_rpc_device(text))))
    if inp.planned_model is not None and base is None:  # the catalogue's model, with the command's flags
        base = deployment(inp.planned_model, command=cmd.without("--model", "--hf-repo").with_program("llama-server"),
                          hardware=hw, diagnostics=tuple(notes))
    plan, note, error, d = _plan(cmd, hw, notes, base) if want_plan else (None, "", None, None)
    return Resolved(binary, args, inp.env, plan, note, error, inp.findings, inp.notes, schema, d, hw, inp.wrappers,
                    inp.workdir, plan_settings(plan, d.config) if plan is not None and d is not None else None,
                    fit_state(d.config, plan) if d is not None else None, cmd, from_script)


def resolve_deployment(d: Deployment, *, server_bin: str | None = None, allow_no_binary: bool = False,
                       want_plan: bool = True) -> Resolved:
    """``d`` resolved against a llama-server binary: its command as llama-server takes it (the
    model as ``-m`` or ``-hf``), and ``d`` itself planned (no round trip through tokens)."""
    tokens = [*([d.model] if d.model is not None else []), *d.command.server_args()]
    return resolve_command(tokens, server_bin=server_bin, hardware=d.hardware, notes=d.diagnostics,
                           want_plan=want_plan, allow_no_binary=allow_no_binary, base=d)


def schema_of(binary: str) -> Schema:
    """The flags of ``binary`` (its --help, cached), else the bundled schema of the pinned build."""
    try:
        return load_schema(binary)
    except LlamarigError:
        return load_bundled()


def final_findings(res: Resolved, args: Sequence[str] | None = None, cores: int | None = None,
                   reported: Sequence[Finding] = ()) -> list[Finding]:
    """`llamarig check`'s errors and warnings on the final command (binary + ``args``, default
    ``res.args``), against the binary's flags; ``reported``: findings of the --from-script input
    already shown, not repeated. render and launch refuse a command with errors unless forced."""
    schema = res.schema
    if schema is None:  # resolve_command() always sets one; else check against the bundled one
        schema = load_bundled()
    seen = {(f.rule, f.flag, f.severity) for f in reported}
    return [f for f in check_argv([res.binary, *(res.args if args is None else args)], schema, cores=cores)
            if (f.rule, f.flag, f.severity) not in seen and f.severity in ("error", "warning")]

