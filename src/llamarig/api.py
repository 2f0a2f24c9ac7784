"""llamarig as a library: one function per thing the CLI does, returning typed results.

    >>> import llamarig
    >>> d = llamarig.deployment("qwen3.6-27b:iq4_nl", ["-c", "105000"],
    ...                         hardware=llamarig.machine([llamarig.gpu("rtx3090")]))
    >>> p = llamarig.plan_command(d)
    >>> p.fits, p.devices[0].total, p.speed.decode_tok_s

| command | function |
|---|---|
| ``llamarig plan`` | :func:`deployment` (with :func:`machine`, :func:`gpu`), then :func:`plan_command` (memory and speed; :func:`plan_model`: memory only; :func:`plan_inputs`: what it reads); ``--target-*``: :func:`plan_targets` |
| ``llamarig inspect`` | :func:`inspect_model` |
| ``llamarig check`` / ``explain`` | :func:`check` (a :class:`CheckReport`), :func:`check_text`, :func:`fix_report`, :func:`explain_report` |
| ``llamarig render`` | :func:`resolve_command` then :func:`check_resolved` and :func:`render_command` (``-f systemd`` with ``--rpc``: :func:`rpc_units`) |
| ``llamarig launch`` | :func:`resolve_command` then :func:`check_resolved` and :func:`launch_command` |
| ``llamarig tune`` | :func:`resolve_command` then :func:`tune_command` (a :class:`TuneResult`) |
| ``llamarig stop`` | :func:`stop_server` |
| ``llamarig quality`` | :func:`resolve_command` then :func:`quality_report` |
| ``llamarig models`` / ``gpus`` | :func:`models`, :func:`gpus` (one entry: :func:`model`, :func:`gpu`; sizes: :func:`bits_per_weight`; a hub repo: :func:`repo_models`, :func:`refresh_model`) |
| ``llamarig bench`` / ``bench compare`` / ``bench --hold`` | :func:`bench_server`, :func:`compare_bench`, :func:`gateway_hold` |
| ``llamarig logs`` | :func:`logs_report` |
| ``llamarig top --once`` / ``top --web`` | :func:`top_snapshot`, :func:`serve_top_web` |
| ``llamarig gateway`` | :func:`gateway_config` then :func:`serve_gateway` |

(``plan``, ``render``, ``launch``, ``tune`` and ``bench`` are the subpackages llamarig.plan,
llamarig.render, ..., so the functions are named with their object.)

The ``llamarig`` command is a thin layer over these functions (llamarig.app holds the use
cases): it parses options, prints, and maps errors (the LlamarigError tree, llamarig.errors) to
exit codes (docs/exit-codes.md). tests/test_api.py checks that every command has its function.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

# lazy imports: each function imports its use case when it is called, so a command or a library
# call loads only its own path (at module level, `import llamarig.api` would load 334 modules in
# 0.8 s instead of 73 in 0.08 s; docs/architecture.md, Layers)

if TYPE_CHECKING:
    from llamarig.app.check import CheckReport, FixResult
    from llamarig.app.command import Resolved
    from llamarig.app.explain import ExplainReport
    from llamarig.app.targets import TargetResult
    from llamarig.app.tune import TuneResult, TuneSettings
    from llamarig.bench.compare import Comparison
    from llamarig.bench.logs import LogsReport
    from llamarig.bench.result import BenchReport
    from llamarig.bench.runner import BenchConfig, ProgressFn
    from llamarig.catalogue.models import CatalogueModel
    from llamarig.diagnostics import Diagnostic
    from llamarig.flags.findings import Finding
    from llamarig.flags.schema import Schema
    from llamarig.gateway.config import GatewayConfig
    from llamarig.gguf.spec import ModelSpec
    from llamarig.hardware.cpu import CpuFeatures
    from llamarig.hardware.types import GPU, Hardware
    from llamarig.launch.process import Launched
    from llamarig.plan.calibration.constants import Calibration
    from llamarig.plan.deployment import Deployment
    from llamarig.plan.result import Plan, PlanInputs
    from llamarig.top.model import Snapshot
    from llamarig.tune.quality import QualityReport
    from llamarig.web.alerts import Thresholds


def gpu(name: str) -> GPU:
    """A GPU of the built-in catalogue by id, alias or name ('rtx3090', 'RTX 3090', '3090'); another
    memory size is ``dataclasses.replace(gpu(name), memory_bytes=...)``."""
    from llamarig.catalogue.gpus import find_gpu

    return find_gpu(name)


def machine(gpus: Sequence[GPU] = (), *, ram: int | None = None, cpu: CpuFeatures | None = None,
            detect: bool = False, rpc: Sequence[GPU] = ()) -> Hardware:
    """The machine (``Hardware``) a deployment runs on: ``gpus`` in device order (:func:`gpu`), ``ram`` (host RAM,
    bytes), ``cpu`` (the CPU llama-server runs on; its features decide AMX / CPU_REPACK weight
    buffers); ``detect``: this machine's (NVML or nvidia-smi, /proc), with the given values in place;
    ``rpc``: the devices behind the rpc-servers of ``--rpc`` (``GPU.endpoint`` set,
    ``llamarig.plan.rpc.parse_rpc_device``)."""
    from llamarig.plan.deployment import hardware as _hardware

    return _hardware(gpus, ram_bytes=ram, cpu=cpu, detect=detect, rpc=rpc)


def deployment(model: str | None = None, args: Sequence[str] = (), *, command: Sequence[str] | None = None,
               hardware: Hardware | None = None, mmproj: str | None = None, draft: str | None = None,
               overhead: int | None = None, notes: Sequence[Diagnostic] = ()) -> Deployment:
    """What every use case takes: ``model`` (a GGUF path, a catalogue id (``models()``) or a remote
    reference: ``hf:OWNER/REPO:QUANT``, ``ms:OWNER/REPO:QUANT``, an https URL, of which only the
    header is read), ``args`` (llama-server flags in their own spellings, each one the planner
    reads), or ``command`` (a whole llama-server argv, other flags kept), on ``hardware``
    (:func:`machine`; none: no GPU, unknown RAM). ``mmproj``: a file, ``f16``/``bf16``/``catalogue``
    (a catalogue model's projector) or ``none``; ``draft``: a draft model; ``overhead``: bytes of
    driver/context overhead per GPU (default: the catalogue's); ``notes``: what reading the input
    found, shown first in the plan. Bad flags are an InputError here."""
    from llamarig.plan import deployment as D

    return D.deployment(model, args, command=command, hardware=hardware, mmproj=mmproj, draft=draft,
                       overhead_bytes=overhead, diagnostics=tuple(notes))


def script_deployment(path: str | Path, *, invocation: int = 1, model: str | None = None,
                      hardware: Hardware | None = None, mmproj: str | None = None, draft: str | None = None,
                      overhead: int | None = None, extra_args: Sequence[str] = ()) -> Deployment:
    """The Deployment of the ``invocation``-th llama-server command of a script, systemd unit or
    compose file (``-``: standard input) as llama-server really receives it (check's reading: a
    comment line that cuts a ``\\`` continuation cuts the command there), its files found
    against the script's directory; its diagnostics say which command was planned and what the
    meant command would change. ``model``: a GGUF or catalogue id for an ``-m`` that is not on
    this machine; ``extra_args``: llama-server flags applied after the script's."""
    from llamarig.app.runs import script_deployment as _script

    return _script(str(path), invocation=invocation, model=model, hardware=hardware, overhead_bytes=overhead,
                   draft=draft, mmproj=mmproj, extra_args=extra_args)


def plan_inputs(d: Deployment) -> PlanInputs:
    """What the planner reads for ``d``: its model's header (a file, a catalogue entry or a remote
    header, read once), projector and draft, the settings and the hardware."""
    from llamarig.plan.inputs import build_inputs

    return build_inputs(d)


def plan_model(d: Deployment) -> Plan:
    """The memory plan alone (no speed): memory per device and host RAM, each figure with its
    formula and method, after what --fit would change."""
    from llamarig.plan.inputs import build_plan

    return build_plan(d)


def plan_command(d: Deployment, *, calibration: Calibration | str | None = None,
                 host_bandwidth_gbs: float | None = None, acceptance: float | None = None,
                 inputs: PlanInputs | None = None) -> Plan:
    """What `llamarig plan` prints: the memory plan with its speed (``Plan.speed``) predicted
    on the settings llama-server runs after ``--fit``; render, launch and tune use the same.
    ``calibration``: a Calibration, a file, ``builtin`` or None (the file ``llamarig tune``
    wrote, else the built-in one); ``inputs``: :func:`plan_inputs` of ``d`` when already read."""
    from llamarig.app.planning import plan_with_speed

    return plan_with_speed(d, calibration=calibration, host_bandwidth_gbs=host_bandwidth_gbs, acceptance=acceptance,
                           inputs=inputs)


def plan_targets(d: Deployment, *, target_ctx: int | None = None, target_decode: float | None = None,
                 target_depth: int | None = None, headroom: int | None = None, slots: int | None = None,
                 vision: bool = False, agent: bool = False, acceptance: float | None = None,
                 calibration: Calibration | str | None = None, host_bandwidth_gbs: float | None = None,
                 inputs: PlanInputs | None = None) -> TargetResult:
    """`llamarig plan --target-ctx N [--target-decode T ...]`: the layouts (KV types, -ub, -ts,
    -ngl, MTP) that hold ``target_ctx`` tokens per slot with ``headroom`` bytes free on every
    GPU (default 1 GiB), ranked by decode at ``target_depth``; ``TargetResult.met`` says whether
    the winner meets every target (``exit_code`` 0, else 1: verdict ``unlikely`` or
    ``impossible``, with the bound that says so). The slots and context default to the
    command's ``-np`` and ``-c``; a target contradicting them is an InputError."""
    from llamarig.app.targets import plan_targets as _targets
    from llamarig.app.targets import targets_for

    inp = inputs if inputs is not None else plan_inputs(d)
    t = targets_for(inp, target_ctx=target_ctx, target_decode=target_decode, target_depth=target_depth,
                    headroom=headroom, slots=slots, vision=vision, agent=agent, acceptance=acceptance)
    return _targets(d, t, calibration=calibration, host_bandwidth_gbs=host_bandwidth_gbs, inputs=inp)


def inspect_model(path: str) -> ModelSpec:
    """A GGUF's model as `llamarig inspect` shows it, from the header alone: a path, a catalogue
    id (``qwen3.6-27b:iq4_nl``: its built-in entry, no file read), or a remote reference
    (``hf:OWNER/REPO:QUANT``, ``ms:…``, an https URL), of which only the header is read."""
    from llamarig.catalogue.models import resolve_model

    return resolve_model(path)[0]


def check(text: str | Deployment, *, schema: Schema | None = None, server_bin: str | None = None, kind: str | None = None,
          cores: int | None = None, model: str | None = None, base_dir: str | Path | None = None,
          gpus: Sequence[GPU] = (), ram: int | None = None, need_ctx: int | None = None,
          origin: str | Path | None = None, name: str = "<text>") -> CheckReport:
    """`llamarig check` on a text: its commands, how llama-server reads them, and the findings
    (``CheckReport.findings``; ``CheckReport.to_json()`` is ``check --json``). ``gpus`` (:func:`gpu`)
    and ``ram`` (bytes): the target machine, for the memory verdict; ``name``: what the findings
    call the input. ``text`` may be a Deployment: its command is checked, with its model and
    hardware unless given here."""
    from llamarig.app.check import check as _check
    from llamarig.app.check import check_command

    if not isinstance(text, str):  # the Deployment's command as parsed, not joined and parsed again
        d = text
        return check_command(d.command, schema=schema, server_bin=server_bin, cores=cores,
                             model=model if model is not None else d.model,
                             base_dir=Path(base_dir) if base_dir is not None else None,
                             gpus=tuple(gpus or d.hardware.gpus), ram=ram if ram is not None else d.hardware.ram_bytes,
                             need_ctx=need_ctx, name=name)
    return _check(text, schema=schema, server_bin=server_bin, kind=kind, cores=cores, model=model,
                  base_dir=Path(base_dir) if base_dir is not None else None, gpus=tuple(gpus), ram=ram,
                  need_ctx=need_ctx, origin=Path(origin) if origin is not None else None, name=name)


def check_text(text: str, *, kind: str | None = None, server_bin: str | None = None, cores: int | None = None,
               origin: str | Path | None = None) -> list[Finding]:
    """`llamarig check`'s findings for a launch script, unit, compose/YAML file or command line,
    against the flags of ``server_bin`` (else the bundled schema of the pinned build): the same
    pipeline as the CLI (:func:`check`), so the same findings as ``llamarig check --json``."""
    return check(text, kind=kind, server_bin=server_bin, cores=cores, origin=origin,
                 base_dir=Path(origin).parent if origin is not None else None).findings


def fix_report(report: CheckReport, *, lang: str = "en",
               recheck: Callable[[str], CheckReport] | None = None) -> FixResult:
    """`llamarig check --fix`: the repaired text (its comments in ``lang``, en or zh), and what
    the repair changes in each server; ``recheck``: how to check the repaired text (check's own
    options), its report then ``FixResult.after``."""
    from llamarig.app.check import fix

    return fix(report, lang, recheck)


def explain_report(report: CheckReport, *, model: str | None = None, lang: str = "en", gpus: Sequence[GPU] = (),
                   ram: int | None = None) -> ExplainReport:
    """`llamarig explain`: every flag of each command, in ``lang`` (en or zh), its effect priced
    on what llama-server receives (``ExplainReport.to_json()`` is ``explain --json``)."""
    from llamarig.app.explain import explain

    return explain(report, model=model, base_dir=report.origin.parent if report.origin else None, lang=lang,
                   gpus=gpus, ram=ram)


def resolve_command(tokens: Sequence[str] = (), *, from_script: str | None = None, invocation: int = 1,
                    server_bin: str | None = None, hardware: Hardware | None = None, notes: Sequence[Diagnostic] = (),
                    want_plan: bool = True, repair: bool = False, keep_script: bool = False,
                    allow_no_binary: bool = False, loopback_rpc_memory: int | None = None,
                    model_path: str | None = None) -> Resolved:
    """What render, launch and tune start from: ``tokens`` (``MODEL flags``, ``llama-server
    flags`` or flags) or a command of ``from_script``, as the binary, the final args, the
    environment, and the plan with its speed on ``hardware`` (:func:`machine`); its
    ``deployment`` is what the plan was made of. ``allow_no_binary``: for render, the bundled schema stands in when there is no llama-server
    here; ``loopback_rpc_memory`` (launch): the memory an rpc-server of this machine reports, for
    the ``--rpc`` endpoints on 127.0.0.1 that ``hardware.rpc`` does not describe; ``model_path``
    (render): for a catalogue MODEL, the GGUF's path where the output runs (planned as the
    catalogue's)."""
    from llamarig.app import command

    return command.resolve_command(tokens, from_script=from_script, invocation=invocation, server_bin=server_bin,
                                   hardware=hardware, notes=notes, want_plan=want_plan, repair=repair,
                                   keep_script=keep_script, allow_no_binary=allow_no_binary, loopback_rpc_memory=loopback_rpc_memory,
                                   model_path=model_path)


def resolve(d: Deployment, *, server_bin: str | None = None, allow_no_binary: bool = False,
            want_plan: bool = True) -> Resolved:
    """``d`` resolved against a llama-server binary (``server_bin``, ``$LLAMARIG_SERVER_BIN``,
    PATH) as render, launch and tune start from it: the binary, the final args (relative paths
    made absolute), and the plan with its speed of ``d`` itself on ``d.hardware`` (its projector,
    draft and overhead kept), with the settings the server runs (``Resolved.settings``). ``allow_no_binary``: the
    bundled schema stands in when there is no llama-server here (what render does)."""
    from llamarig.app import command  # lazy: keeps import llamarig light

    return command.resolve_deployment(d, server_bin=server_bin, allow_no_binary=allow_no_binary, want_plan=want_plan)


def check_resolved(res: Resolved, *, host: str | None = None, port: int | None = None, cores: int | None = None,
                   this_machine: bool = False, reported: Sequence[Finding] = ()) -> list[Finding]:
    """`llamarig check`'s errors and warnings on the command render writes or launch starts: the
    binary with ``res``'s args (``--host``/``--port`` replaced when given, as launch runs it),
    against the binary's flags; ``cores``: the physical cores it runs on (``this_machine``:
    this machine's); ``reported``: findings already shown (of a --from-script input), not
    repeated. render and launch refuse a command with errors unless forced."""
    from llamarig.app.command import final_findings
    from llamarig.app.launch import launch_args
    from llamarig.flags.rules import physical_cores

    args = launch_args(res, host, port) if host is not None or port is not None else None
    return final_findings(res, args, cores if cores is not None or not this_machine else physical_cores(),
                          reported=reported)


def rpc_units(res: Resolved, *, name: str | None = None, lang: str = "en") -> list[tuple[str, str]]:
    """`llamarig render -f systemd` of a command with ``--rpc``: (file name, text) of a systemd
    unit per rpc-server, to install on its host (comments in ``lang``)."""
    from llamarig.app.render import rpc_units as _units

    return _units(res, name=name, lang=lang)


def _resolved(r: Resolved | Deployment, *, allow_no_binary: bool = False) -> Resolved:
    from llamarig.plan import deployment as D

    return resolve(r, allow_no_binary=allow_no_binary) if isinstance(r, D.Deployment) else r


def render_command(res: Resolved | Deployment, fmt: str = "bash", *, name: str | None = None, compose_backend: str | None = None,
                   user: str | None = None, lang: str = "en", out: str | None = None) -> str:
    """`llamarig render`: a bash launcher, systemd unit, compose service, llama-swap entry or
    llama-server router preset (its comments in ``lang``, en or zh; ``out``: the file it will be
    written to). ``res``: :func:`resolve_command`'s or :func:`resolve`'s result, or a Deployment
    (resolved here; without a llama-server the bundled schema stands in)."""
    from llamarig.app.render import render_command as _render

    return _render(_resolved(res, allow_no_binary=True), fmt, name=name, compose_backend=compose_backend, user=user, lang=lang, out=out)


def launch_command(res: Resolved | Deployment, *, host: str | None = None, port: int | None = None,
                   log_path: str | None = None, timeout_s: float = 600, force: bool = False,
                   env: Mapping[str, str] | None = None) -> Launched:
    """`llamarig launch --detach`: start llama-server (with ``env`` on top of the command's
    own), wait for /health, verify its allocations against the plan. Stop it with
    ``llamarig.launch.process.stop(state_file=...)``. ``res``: a Resolved or a Deployment
    (:func:`resolve`)."""
    from llamarig.app.launch import launch_command as _launch

    return _launch(_resolved(res), host=host, port=port, log_path=log_path, timeout_s=timeout_s, force=force, env=env)


def tune_command(res: Resolved | Deployment, settings: TuneSettings | None = None, *, notify: Callable[[str], None] | None = None,
                 progress: Callable[[int, int, str], None] | None = None, lang: str = "en") -> TuneResult:
    """`llamarig tune`: the best settings by measurement (docs/tune.md), candidates planned on
    ``res.hardware``. ``notify``: one line per event (search space, pruned candidates, resumed
    measurements); ``progress(done, total, what)``: each measurement; ``lang``: the language of
    the winning launcher's comments; ``res``: a Resolved or a Deployment (:func:`resolve`)."""
    from llamarig.app.tune import TuneSettings as _Settings
    from llamarig.app.tune import tune_command as _tune

    return _tune(_resolved(res), settings or _Settings(), notify=notify, progress=progress, lang=lang)


def models() -> dict[str, CatalogueModel]:
    """The built-in model catalogue (`llamarig models`), by id, each entry with its sources: a copy,
    so that changing it changes nothing the planner reads."""
    from llamarig.catalogue.models import load_models

    return copy.deepcopy(load_models())


def gpus() -> tuple[GPU, ...]:
    """The built-in GPU catalogue (`llamarig gpus`), each entry with its sources."""
    from llamarig.catalogue.gpus import load_gpus

    return load_gpus()


def model(ref: str) -> CatalogueModel:
    """`llamarig models ID`: one entry of the model catalogue by id, ``ID:QUANT`` or alias; an
    unknown one is an UnknownNameError naming the close ones."""
    from llamarig.catalogue.models import find_model

    return copy.deepcopy(find_model(ref)[0])


def bits_per_weight() -> dict[str, float]:
    """The bits per weight of each quant type, what a catalogue entry's size is estimated from
    where its source gives no file size (``CatalogueModel.file_bytes(quant, bits_per_weight())``)."""
    from llamarig.catalogue.models import bpw_table

    return dict(bpw_table())


def repo_models(ref: str) -> dict[str, Any]:
    """`llamarig models hf:OWNER/REPO` (or ``ms:``): the repo's quants with their exact sizes and
    references to plan, from the hub's file listing (the ``--json`` document)."""
    from llamarig.hub.resolve import repo_quants

    return repo_quants(ref)


def refresh_model(ref: str, repo: str | None = None) -> dict[str, Any]:
    """`llamarig models ID --refresh [REPO]`: each quant's catalogue size next to the real file's,
    from the hub's file listing of the repo the entry names (or ``repo``)."""
    from llamarig.catalogue.models import find_model, refresh_from_repo

    return refresh_from_repo(find_model(ref)[0], bits_per_weight(), repo)


def bench_server(config: str | BenchConfig, *, progress: ProgressFn | None = None) -> BenchReport:
    """`llamarig bench --url URL`: the measurement (docs/bench.md), every figure with its method;
    ``to_json()`` is the ``--json`` document. ``config``: a URL (the defaults: decode, k 5, -n
    128) or a :class:`BenchConfig` (frozen: scenarios, k, n_predict, lengths, ...);
    ``progress(label, done, total)``: each measured request."""
    from llamarig.bench.runner import BenchConfig as _Config
    from llamarig.bench.runner import run_bench

    return run_bench(_Config(url=config) if isinstance(config, str) else config, progress)


def gateway_hold(url: str, action: str, tiers: Sequence[str], *, api_key: str | None = None) -> None:
    """`llamarig bench --hold TIERS`: ``action`` "hold" admits nothing of those tiers of the
    llamarig gateway at ``url`` (``cron``: its cron jobs) for at most an hour, "release" ends the
    hold (docs/gateway.md, "Cron that yields"); an unreachable or refusing gateway: InputError."""
    from llamarig.bench.hold import gateway_hold as _hold

    _hold(url, action, tuple(tiers), api_key=api_key)


def compare_bench(a: str | Path, b: str | Path) -> Comparison:
    """`llamarig bench compare A B --json`: two bench (or logs) documents figure by figure, with
    a noise band from each figure's spread."""
    from llamarig.bench.compare import compare
    from llamarig.bench.report import read_json

    return compare(read_json(Path(a)), read_json(Path(b)))


def logs_report(path: str | Path, script: str | Path | None = None, *, model: str | None = None,
                gpus: Sequence[GPU] = (), ram: int | None = None) -> LogsReport:
    """`llamarig logs FILE`: a llama-server log as figures, a per-request timeline and findings
    (``script``: the launch script, to compare what was meant with what ran; with ``gpus`` (and
    ``model`` instead of its -m) also with the plan of what ran); ``to_json()`` is ``--json``."""
    from llamarig.app.logs import logs_report as report

    return report(Path(path), Path(script) if script is not None else None, model=model, gpus=gpus, ram=ram)


def stop_server(port: int | None = None, state_file: str | Path | None = None, timeout_s: float = 30) -> str:
    """`llamarig stop`: stop the llama-server a launch started, and only that process (its pid,
    start time and command line must still match the state file); returns what was done."""
    from llamarig.launch.process import stop

    return stop(port, Path(state_file) if state_file is not None else None, timeout_s)


def quality_report(res: Resolved, types: Sequence[tuple[str, str]] = (("q8_0", "q8_0"), ("q4_0", "q4_0")), *,
                   n_prompts: int = 8, prompt_words: int = 200, top_k: int = 10, needle_words: int = 400,
                   depths: Sequence[float] = (0.1, 0.5, 0.9),
                   progress: Callable[[str], None] | None = None) -> QualityReport:
    """`llamarig quality`: what each quantized KV type changes against f16 KV (top-1 agreement,
    KL divergence over the returned top-k, a needle at several depths); ``to_json()`` is
    ``quality --json``. ``progress``: one line per K/V type started."""
    from llamarig.app.tune import base_args
    from llamarig.tune.quality import run_quality

    return run_quality(res.binary, base_args(res), list(types), n_prompts=n_prompts, prompt_words=prompt_words,
                       top_k=top_k, needle_words=needle_words, depths=depths, progress=progress)


def top_snapshot(url: str, *, interval_s: float = 1.0, api_key: str | None = None, metrics: bool = True,
                 gpu: bool = True) -> Snapshot:
    """`llamarig top --once --json`: one view of a llama-server or gateway (two reads
    ``interval_s`` apart, since rates need two)."""
    import asyncio

    from llamarig.top.collect import once

    return asyncio.run(once(url, api_key=api_key, interval_s=interval_s, metrics=metrics, gpu=gpu))


def serve_top_web(url: str, bind: str, *, key: str | None = None, interval_s: float = 1.0,
                  thresholds: Thresholds | None = None, collector: Mapping[str, Any] | None = None,
                  ready: Callable[[str], None] | None = None) -> None:
    """`llamarig top --web [HOST:]PORT`: serve the live page of the llama-server at ``url`` until
    interrupted (docs/top.md); off loopback only with ``key``; ``thresholds`` the alerts,
    ``collector`` the options of top's collector, ``ready(page_url)`` once it listens."""
    from llamarig.web.alerts import Thresholds as _Thresholds
    from llamarig.web.serve import run

    run(url, bind, key, interval_s, thresholds or _Thresholds(), collector or {}, ready or (lambda _page: None))


def gateway_config(path: str | Path | None = None, *, backends: Sequence[str] = (), host: str | None = None,
                   port: int | None = None, ledger: str | None = None, replica: str | None = None) -> GatewayConfig:
    """`llamarig gateway --check`: the gateway's configuration (a TOML/YAML file, else the
    built-in defaults) with the command line's overrides, validated; ``ledger``:
    ``redis://HOST:PORT/DB`` to share admission with other replicas, ``replica`` its name."""
    from llamarig.gateway.config import (
        build_config,
        load_config,
        with_overrides,
    )

    base = load_config(path) if path is not None else build_config(None, "built-in defaults")
    return with_overrides(base, backends=list(backends) or None, host=host, port=port, ledger=ledger,
                          replica=replica)


def serve_gateway(cfg: GatewayConfig) -> None:
    """`llamarig gateway`: run the gateway until SIGINT/SIGTERM."""
    from llamarig.gateway.server import serve

    serve(cfg)
