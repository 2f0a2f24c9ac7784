"""llamarig as a library: one function per thing the CLI does, returning typed results.

    >>> import llamarig
    >>> p = llamarig.plan_model("qwen3.6-27b:iq4_nl", ["-c", "105000"], gpus=["rtx3090"])
    >>> p.fits, p.devices[0].total

(``plan``, ``bench`` and ``check``-like short names would collide with the subpackages
llamarig.plan and llamarig.bench, hence the verbs with objects.)

The CLI (llamarig.cli) is a thin layer over these functions: it parses options, prints, and maps
errors (the LlamarigError tree, llamarig.errors) to exit codes (docs/exit-codes.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llamarig.catalogue.models import CatalogueModel
    from llamarig.flags.rules import Finding
    from llamarig.gguf.spec import ModelSpec
    from llamarig.hardware.types import GPU
    from llamarig.plan.result import Plan


def plan_model(model: str | None, args: Sequence[str] = (), *, gpus: Sequence[str] = (), ram: str | None = None,
         mmproj: str | None = None, draft: str | None = None, cpu_features: str | None = None,
         detect: bool = False, command: Sequence[str] | None = None) -> Plan:
    """The plan `llamarig plan MODEL [ARGS]` prints: memory per device and host RAM, each figure
    with its formula and method. ``model``: a GGUF path, a catalogue id (``models()``) or a remote
    reference (``hf:OWNER/REPO:QUANT``, ``ms:OWNER/REPO:QUANT``, an https URL; header only);
    ``args``: llama-server flags in their own spellings; ``gpus``: catalogue names, optionally
    ``NAME:VRAM_GB``; ``ram``: e.g. "64G"; ``command``: a whole llama-server argv instead of args."""
    from llamarig.plan.inputs import PlanArgs, build_plan  # lazy: keeps import llamarig light
    from llamarig.units import parse_size  # lazy: keeps import llamarig light

    pa = PlanArgs(model=model, mmproj=mmproj, draft=draft, gpus=list(gpus), detect=detect,
                  ram=parse_size(ram, "g") if ram else None, cpu_features=cpu_features,
                  server_args=list(args), command=list(command) if command is not None else None)
    return build_plan(pa)


def inspect_model(path: str) -> ModelSpec:
    """A GGUF's model as `llamarig inspect` shows it, from the header alone: a path, or a remote
    reference (``hf:OWNER/REPO:QUANT``, ``ms:…``, an https URL), of which only the header is read."""
    from llamarig.catalogue.models import resolve_model  # lazy: keeps import llamarig light
    from llamarig.gguf import load_spec  # lazy: keeps import llamarig light
    from llamarig.hub.ref import is_remote  # lazy: keeps import llamarig light

    return resolve_model(path)[0] if is_remote(path) else load_spec(path)


def check_text(text: str, *, kind: str | None = None, server_bin: str | None = None) -> list[Finding]:
    """`llamarig check`'s findings for a launch script, unit, compose/YAML file or command line,
    against the flags of ``server_bin`` (else the bundled schema of the pinned build)."""
    from llamarig.flags.readers import parse_text  # lazy: keeps import llamarig light
    from llamarig.flags.rules import Context, lint  # lazy: keeps import llamarig light
    from llamarig.flags.schema import load_bundled, load_schema  # lazy: keeps import llamarig light

    schema = load_schema(server_bin) if server_bin else load_bundled()
    _, findings = lint(parse_text(text, kind), schema, Context())
    return findings


def models() -> dict[str, CatalogueModel]:
    """The built-in model catalogue (`llamarig models`), by id, each entry with its sources."""
    from llamarig.catalogue.models import load_models  # lazy: keeps import llamarig light

    return load_models()


def gpus() -> tuple[GPU, ...]:
    """The built-in GPU catalogue (`llamarig gpus`), each entry with its sources."""
    from llamarig.catalogue.gpus import load_gpus  # lazy: keeps import llamarig light

    return load_gpus()


def bench_server(url: str, **config: Any) -> dict[str, Any]:
    """`llamarig bench --url URL`: the measurement document (docs/bench.md), every figure with its
    method. ``config``: fields of llamarig.bench.runner.BenchConfig (scenarios, k, n_predict, ...)."""
    from llamarig.bench.runner import BenchConfig, run_bench  # lazy: keeps import llamarig light

    return run_bench(BenchConfig(url=url, **config))
