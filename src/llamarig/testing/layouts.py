"""Random reservations of catalogue models, to hold the replay's shortcuts (a cut trunk, the memo's
classes) against the whole-trunk replay: tests/plan/test_steady.py runs a seeded few,
benchmarks/check_cut.py as many as asked.

A case is what llama.cpp could be asked to reserve and some it would not be (pipeline copies with
layers on the CPU): the shortcuts must be exact on any graph the replay builds."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace

from llamarig.catalogue.models import build_spec, find_model
from llamarig.gguf.spec import ModelSpec
from llamarig.plan.compute.ggml_sched import Backend, cuda_backend
from llamarig.plan.compute.graphs import GraphParams, Layout
from llamarig.plan.compute.replay import Setup

#: catalogue models of every replayed architecture (qwen35, qwen35moe, llama, qwen3, gemma3)
MODELS = ("qwen3.6-27b:q4_k_m", "qwen3.8-27b:ud-q4_k_xl", "qwen3.6-35b-a3b:q4_k_m", "qwen3.5-9b", "llama3.1-8b:q4_k_m",
          "llama3.1-70b", "gemma3-12b:q4_k_m", "qwen3-14b:q4_k_m", "qwen3-32b", "mistral-small-24b", "gemma3-27b",
          "deepseek-r1-distill-llama-8b")
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass(frozen=True)
class Case:
    model: str
    spec: ModelSpec
    params: GraphParams
    setup: Setup


def _overrides(rng: random.Random, spec: ModelSpec, cpu: int) -> tuple[tuple[str, int], ...]:
    """-ot / --n-cpu-moe style: the experts of the first layers, every layer's ffn_up, or every
    third layer's ffn_down, in host memory."""
    style, first = rng.choice(("moe", "up", "some")), rng.randint(1, spec.n_layer)
    out = []
    for t in spec.tensors:
        m = _BLOCK.match(t.name)
        if not m:
            continue
        il, rest = int(m.group(1)), m.group(2)
        if ((style == "moe" and "_exps" in rest and il < first) or (style == "up" and rest.startswith("ffn_up"))
                or (style == "some" and rest.startswith("ffn_down") and il % 3 == 0)):
            out.append((t.name, cpu))
    return tuple(out)


def _layout(rng: random.Random, spec: ModelSpec, n_dev: int, overrides: bool) -> Layout:
    n = spec.n_layer
    cpu_first = rng.choice((0, 0, 0, rng.randint(1, n // 2)))
    rest = n - cpu_first
    cuts = sorted(rng.sample(range(1, rest), n_dev - 1)) if n_dev > 1 else []
    layers = [n_dev] * cpu_first
    for d, k in enumerate(b - a for a, b in zip([0, *cuts], [*cuts, rest], strict=True)):
        layers += [d] * k
    ov = _overrides(rng, spec, n_dev) if overrides else ()
    return Layout(tuple(layers), n_dev - 1 if rng.random() < 0.9 else n_dev, n_dev, ov,
                  kv_on_cpu=rng.random() < 0.15, full_offload=cpu_first == 0 and not ov and rng.random() < 0.8,
                  pinned=rng.random() < 0.8)


def _params(rng: random.Random, spec: ModelSpec) -> GraphParams:
    ub, n_seqs = rng.choice((1, 2, 64, 256, 512, 1024, 2048)), rng.choice((1, 1, 2, 4))
    fa = rng.random() < 0.8
    tk = rng.choice(("f16", "q8_0", "q4_0", "bf16", "f32", "q5_1"))
    tv = rng.choice((tk, "q4_0", "f16"))
    if not fa:  # a quantized V cache needs flash attention
        tk = tv = tk if tk in ("f16", "f32", "bf16") else "f16"
    return GraphParams(ub * n_seqs, n_seqs, n_seqs, rng.choice((4096, 32768, 65536)), rng.choice((1, n_seqs)), n_seqs,
                       0, fa, tk, tv, 2048 if spec.architecture == "gemma3" else 0)


def quant_mix(spec: ModelSpec) -> ModelSpec:
    """The spec with Q4_K_M's mix: ffn_down half again as big in llama.cpp's use_more_bits layers
    (the first and last eighth, and every third between: src/llama-quant.cpp), so that the
    layers' sizes do not repeat where their kinds do."""
    n = spec.n_layer_main
    out = []
    for t in spec.tensors:
        m = _BLOCK.match(t.name)
        if m and m.group(2).startswith("ffn_down"):
            i = int(m.group(1))
            if i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2:
                t = replace(t, n_bytes=t.n_bytes * 3 // 2, ggml_type="q6_K")
        out.append(t)
    return replace(spec, tensors=tuple(out))


def random_case(rng: random.Random, specs: dict[str, ModelSpec] | None = None, overrides: bool = False) -> Case:
    """One model (its weights a quant mix one time in three), 1-3 CUDA GPUs (compute capability
    7.5-12.0) or RPC servers behind the CPU, layers on the CPU first or not, and one reservation's
    parameters."""
    model = rng.choice(MODELS)
    spec = specs[model] if specs is not None and model in specs else build_spec(*find_model(model))
    if rng.random() < 1 / 3:
        spec = quant_mix(spec)
    n_dev = rng.choice((1, 2, 3))
    cuda = rng.random() < 0.5
    devs = tuple(cuda_backend(f"CUDA{k}", rng.choice((750, 860, 890, 1200))) if cuda else Backend(f"RPC{k}")
                 for k in range(n_dev))
    lay = _layout(rng, spec, n_dev, overrides)
    n_copies = 4 if n_dev > 1 and lay.cpu not in lay.layers and rng.random() < 0.7 else 1
    setup = Setup(lay, (*devs, Backend("CPU")), n_copies, op_offload=rng.random() < 0.8)
    return Case(model, spec, _params(rng, spec), setup)
