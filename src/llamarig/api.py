"""llamarig as a library: one function per thing the CLI does, returning typed results.

    >>> import llamarig
    >>> p = llamarig.plan_command("qwen3.6-27b:iq4_nl", ["-c", "105000"], gpus=["rtx3090"])
    >>> p.fits, p.devices[0].total, p.speed.decode_tok_s

| command | function |
|---|---|
| ``llamarig plan`` | :func:`plan_command` (memory and speed; :func:`plan_model`: memory only) |
| ``llamarig inspect`` | :func:`inspect_model` |
| ``llamarig check`` / ``explain`` | :func:`check` (a :class:`CheckReport`), :func:`check_text`, :func:`fix_report`, :func:`explain_report` |
| ``llamarig render`` | :func:`resolve_command` then :func:`render_command` |
| ``llamarig launch`` | :func:`resolve_command` then :func:`launch_command` |
| ``llamarig tune`` | :func:`resolve_command` then :func:`tune_command` (a :class:`TuneResult`) |
| ``llamarig stop`` | :func:`stop_server` |
| ``llamarig quality`` | :func:`resolve_command` then :func:`quality_report` |
| ``llamarig models`` / ``gpus`` | :func:`models`, :func:`gpus` |
| ``llamarig bench`` / ``bench compare`` | :func:`bench_server`, :func:`compare_bench` |
| ``llamarig logs`` | :func:`logs_report` |
| ``llamarig top --once`` | :func:`top_snapshot` |
| ``llamarig gateway`` | :func:`gateway_config` then :func:`serve_gateway` |

(``plan``, ``render``, ``launch``, ``tune`` and ``bench`` are the subpackages llamarig.plan,
llamarig.render, ..., so the functions are named with their object.)

The ``llamarig`` command is a thin layer over these functions (llamarig.app holds the use
cases): it parses options, prints, and maps errors (the LlamarigError tree, llamarig.errors) to
exit codes (docs/exit-codes.md). tests/test_api.py checks that every command has its function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llamarig.app.check import CheckReport, FixResult
    from llamarig.app.command import Resolved
    from llamarig.app.explain import ExplainReport
    from llamarig.app.tune import TuneResult, TuneSettings
    from llamarig.bench.compare import Comparison
    from llamarig.bench.logs import LogsReport
    from llamarig.bench.result import BenchReport
    from llamarig.catalogue.models import CatalogueModel
    from llamarig.flags.findings import Finding
    from llamarig.flags.schema import Schema
    from llamarig.gateway.config import GatewayConfig
    from llamarig.gguf.spec import ModelSpec
    from llamarig.hardware.types import GPU
    from llamarig.launch.process import Launched
    from llamarig.plan.calibration import Calibration
    from llamarig.plan.result import Plan
    from llamarig.top.model import Snapshot


def plan_model(model: str | None, args: Sequence[str] = (), *, gpus: Sequence[str] = (), ram: str | None = None,
               mmproj: str | None = None, draft: str | None = None, cpu_features: str | None = None,
               detect: bool = False, command: Sequence[str] | None = None) -> Plan:
    """The memory plan alone (no speed): memory per device and host RAM, each figure with its
    formula and method. ``model``: a GGUF path, a catalogue id (``models()``) or a remote
    reference (``hf:OWNER/REPO:QUANT``, ``ms:OWNER/REPO:QUANT``, an https URL; header only);
    ``args``: llama-server flags in their own spellings; ``gpus``: catalogue names, optionally
    ``NAME:VRAM_GB``; ``ram``: e.g. "64G"; ``command``: a whole llama-server argv instead of args."""
    from llamarig.app.planning import plan_args  # lazy: keeps import llamarig light
    from llamarig.plan.inputs import build_plan  # lazy: keeps import llamarig light

    return build_plan(plan_args(model, args, command=command, gpus=gpus, ram=ram, detect=detect, mmproj=mmproj,
                                draft=draft, cpu_features=cpu_features))


def plan_command(model: str | None = None, args: Sequence[str] = (), *, command: Sequence[str] | None = None,
                 gpus: Sequence[str] = (), ram: str | None = None, detect: bool = False, mmproj: str | None = None,
                 draft: str | None = None, cpu_features: str | None = None,
                 calibration: Calibration | str | None = None, host_bandwidth_gbs: float | None = None,
                 acceptance: float | None = None) -> Plan:
    """What `llamarig plan` prints: the memory plan with its speed (``Plan.speed``) predicted
    on the settings llama-server runs after ``--fit``; render, launch and tune use the same."""
    from llamarig.app import planning  # lazy: keeps import llamarig light

    return planning.plan_command(model, args, command=command, gpus=gpus, ram=ram, detect=detect, mmproj=mmproj,
                                 draft=draft, cpu_features=cpu_features, calibration=calibration,
                                 host_bandwidth_gbs=host_bandwidth_gbs, acceptance=acceptance)


def inspect_model(path: str) -> ModelSpec:
    """A GGUF's model as `llamarig inspect` shows it, from the header alone: a path, or a remote
    reference (``hf:OWNER/REPO:QUANT``, ``ms:…``, an https URL), of which only the header is read."""
    from llamarig.catalogue.models import resolve_model  # lazy: keeps import llamarig light
    from llamarig.gguf import load_spec  # lazy: keeps import llamarig light
    from llamarig.hub.ref import is_remote  # lazy: keeps import llamarig light

    return resolve_model(path)[0] if is_remote(path) else load_spec(path)


def check(text: str, *, schema: Schema | None = None, server_bin: str | None = None, kind: str | None = None,
          cores: int | None = None, model: str | None = None, base_dir: str | Path | None = None,
          gpus: Sequence[str] = (), ram: str | None = None, need_ctx: int | None = None,
          origin: str | Path | None = None) -> CheckReport:
    """`llamarig check` on a text: its commands, how llama-server reads them, and the findings
    (``CheckReport.findings``; ``CheckReport.to_json()`` is ``check --json``)."""
    from llamarig.app.check import check as _check  # lazy: keeps import llamarig light

    return _check(text, schema=schema, server_bin=server_bin, kind=kind, cores=cores, model=model,
                  base_dir=Path(base_dir) if base_dir is not None else None, gpus=tuple(gpus), ram=ram,
                  need_ctx=need_ctx, origin=Path(origin) if origin is not None else None)


def check_text(text: str, *, kind: str | None = None, server_bin: str | None = None, cores: int | None = None,
               origin: str | Path | None = None) -> list[Finding]:
    """`llamarig check`'s findings for a launch script, unit, compose/YAML file or command line,
    against the flags of ``server_bin`` (else the bundled schema of the pinned build): the same
    pipeline as the CLI (:func:`check`), so the same findings as ``llamarig check --json``."""
    return check(text, kind=kind, server_bin=server_bin, cores=cores, origin=origin,
                 base_dir=Path(origin).parent if origin is not None else None).findings


def fix_report(report: CheckReport) -> FixResult:
    """`llamarig check --fix`: the repaired text, and what the repair changes in each server."""
    from llamarig.app.check import fix  # lazy: keeps import llamarig light

    return fix(report)


def explain_report(report: CheckReport, *, model: str | None = None, lang: str = "en", gpus: Sequence[str] = (),
                   ram: str | None = None) -> ExplainReport:
    """`llamarig explain`: every flag of each command, in ``lang`` (en or zh), its effect priced
    on what llama-server receives (``ExplainReport.to_json()`` is ``explain --json``)."""
    from llamarig.app.explain import explain  # lazy: keeps import llamarig light

    return explain(report, model=model, base_dir=report.origin.parent if report.origin else None, lang=lang,
                   gpus=gpus, ram=ram)


def resolve_command(tokens: Sequence[str] = (), *, from_script: str | None = None, invocation: int = 1,
                    server_bin: str | None = None, gpus: Sequence[str] = (), ram: str | None = None,
                    detect: bool = False, want_plan: bool = True, repair: bool = False,
                    keep_script: bool = False, allow_no_binary: bool = False) -> Resolved:
    """What render, launch and tune start from: ``tokens`` (``MODEL flags``, ``llama-server
    flags`` or flags) or a command of ``from_script``, as the binary, the final args, the
    environment and the plan with its speed (``allow_no_binary``: for render, the bundled
    schema stands in when there is no llama-server here)."""
    from llamarig.app import command  # lazy: keeps import llamarig light

    return command.resolve_command(tokens, from_script=from_script, invocation=invocation, server_bin=server_bin,
                                   gpus=gpus, ram=ram, detect=detect, want_plan=want_plan, repair=repair,
                                   keep_script=keep_script, allow_no_binary=allow_no_binary)


def render_command(res: Resolved, fmt: str = "bash", *, name: str | None = None, compose_backend: str | None = None,
                   user: str | None = None) -> str:
    """`llamarig render`: a bash launcher, systemd unit, compose service, llama-swap entry or
    llama-server router preset."""
    from llamarig.app.render import render_command as _render  # lazy: keeps import llamarig light

    return _render(res, fmt, name=name, compose_backend=compose_backend, user=user)


def launch_command(res: Resolved, *, host: str | None = None, port: int | None = None,
                   log_path: str | None = None, timeout_s: float = 600, force: bool = False,
                   env: Mapping[str, str] | None = None) -> Launched:
    """`llamarig launch --detach`: start llama-server (with ``env`` on top of the command's
    own), wait for /health, verify its allocations against the plan. Stop it with
    ``llamarig.launch.process.stop(state_file=...)``."""
    from llamarig.app.launch import launch_command as _launch  # lazy: keeps import llamarig light

    return _launch(res, host=host, port=port, log_path=log_path, timeout_s=timeout_s, force=force, env=env)


def tune_command(res: Resolved, settings: TuneSettings | None = None, *, gpus: Sequence[str] = (),
                 ram: str | None = None, detect: bool = False) -> TuneResult:
    """`llamarig tune`: the best settings by measurement (docs/tune.md)."""
    from llamarig.app.tune import TuneSettings as _Settings  # lazy: keeps import llamarig light
    from llamarig.app.tune import tune_command as _tune  # lazy: keeps import llamarig light

    return _tune(res, settings or _Settings(), gpus=gpus, ram=ram, detect=detect)


def models() -> dict[str, CatalogueModel]:
    """The built-in model catalogue (`llamarig models`), by id, each entry with its sources."""
    from llamarig.catalogue.models import load_models  # lazy: keeps import llamarig light

    return load_models()


def gpus() -> tuple[GPU, ...]:
    """The built-in GPU catalogue (`llamarig gpus`), each entry with its sources."""
    from llamarig.catalogue.gpus import load_gpus  # lazy: keeps import llamarig light

    return load_gpus()


def bench_server(url: str, **config: Any) -> BenchReport:
    """`llamarig bench --url URL`: the measurement (docs/bench.md), every figure with its method;
    ``to_json()`` is the ``--json`` document. ``config``: fields of llamarig.bench.runner.BenchConfig
    (scenarios, k, n_predict, ...)."""
    from llamarig.bench.runner import BenchConfig, run_bench  # lazy: keeps import llamarig light

    return run_bench(BenchConfig(url=url, **config))


def compare_bench(a: str | Path, b: str | Path) -> Comparison:
    """`llamarig bench compare A B --json`: two bench (or logs) documents figure by figure, with
    a noise band from each figure's spread."""
    from llamarig.bench.compare import compare  # lazy: keeps import llamarig light
    from llamarig.bench.report import read_json  # lazy: keeps import llamarig light

    return compare(read_json(Path(a)), read_json(Path(b)))


def logs_report(path: str | Path, script: str | Path | None = None, *, model: str | None = None,
                gpus: Sequence[str] = (), ram: str | None = None) -> LogsReport:
    """`llamarig logs FILE`: a llama-server log as figures, a per-request timeline and findings
    (``script``: the launch script, to compare what was meant with what ran; with ``gpus`` (and
    ``model`` instead of its -m) also with the plan of what ran); ``to_json()`` is ``--json``."""
    from llamarig.app.logs import logs_report as report  # lazy: keeps import llamarig light

    return report(Path(path), Path(script) if script is not None else None, model=model, gpus=gpus, ram=ram)


def stop_server(port: int | None = None, state_file: str | Path | None = None, timeout_s: float = 30) -> str:
    """`llamarig stop`: stop the llama-server a launch started, and only that process (its pid,
    start time and command line must still match the state file); returns what was done."""
    from llamarig.launch.process import stop  # lazy: keeps import llamarig light

    return stop(port, Path(state_file) if state_file is not None else None, timeout_s)


def quality_report(res: Resolved, types: Sequence[tuple[str, str]] = (("q8_0", "q8_0"), ("q4_0", "q4_0")), *,
                   n_prompts: int = 8, prompt_words: int = 200, top_k: int = 10, needle_words: int = 400,
                   depths: Sequence[float] = (0.1, 0.5, 0.9)) -> dict[str, Any]:
    """`llamarig quality --json`: what each quantized KV type changes against f16 KV (top-1
    agreement, KL divergence over the returned top-k, a needle at several depths)."""
    from llamarig.app.tune import base_args  # lazy: keeps import llamarig light
    from llamarig.tune.quality import run_quality  # lazy: keeps import llamarig light

    return run_quality(res.binary, base_args(res), list(types), n_prompts=n_prompts, prompt_words=prompt_words,
                       top_k=top_k, needle_words=needle_words, depths=depths)


def top_snapshot(url: str, *, interval_s: float = 1.0, api_key: str | None = None, metrics: bool = True,
                 gpu: bool = True) -> Snapshot:
    """`llamarig top --once --json`: one view of a llama-server or gateway (two reads
    ``interval_s`` apart, since rates need two)."""
    import asyncio  # lazy: keeps import llamarig light

    from llamarig.top.collect import once  # lazy: keeps import llamarig light

    return asyncio.run(once(url, api_key=api_key, interval_s=interval_s, metrics=metrics, gpu=gpu))


def gateway_config(path: str | Path | None = None, *, backends: Sequence[str] = (), host: str | None = None,
                   port: int | None = None, ledger: str | None = None, replica: str | None = None) -> GatewayConfig:
    """`llamarig gateway --check`: the gateway's configuration (a TOML/YAML file, else the
    built-in defaults) with the command line's overrides, validated; ``ledger``:
    ``redis://HOST:PORT/DB`` to share admission with other replicas, ``replica`` its name."""
    from llamarig.gateway.config import (  # lazy: keeps import light
        build_config,
        load_config,
        with_overrides,
    )

    base = load_config(path) if path is not None else build_config(None, "built-in defaults")
    return with_overrides(base, backends=list(backends) or None, host=host, port=port, ledger=ledger,
                          replica=replica)


def serve_gateway(cfg: GatewayConfig) -> None:
    """`llamarig gateway`: run the gateway until SIGINT/SIGTERM."""
    from llamarig.gateway.server import serve  # lazy: keeps import llamarig light

    serve(cfg)
