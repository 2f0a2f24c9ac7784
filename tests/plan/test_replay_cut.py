"""The replay's shortcuts (plan/compute/replay.py): a trunk whose layers repeat is replayed on a cut of
every device's stretch of layers, and graphs are remembered by the model's and the layout's shape.
Either way the buffers must be the full replay's exactly, on one device and several, with layers
on the CPU, pinned or free norms, pipeline parallelism, and CUDA's op offload."""

from __future__ import annotations

import pytest

from llamarig.catalogue.models import build_spec, find_model
from llamarig.plan.compute import replay as R
from llamarig.plan.compute.ggml_sched import Backend, cuda_backend
from llamarig.plan.compute.graphs import GraphParams, Layout


def _layout(n_main: int, n_all: int, splits: tuple[int, ...], cpu_first: int, n_dev: int) -> Layout:
    """The first ``cpu_first`` layers on the CPU, then runs of ``splits`` layers per device."""
    layers = [n_dev] * cpu_first
    for d, n in enumerate(splits):
        layers += [d] * n
    layers += [n_dev - 1] * (n_all - len(layers))
    return Layout(tuple(layers[:n_all]), n_dev - 1, n_dev, full_offload=cpu_first == 0)


MODELS = ["qwen3.6-27b:q4_k_m", "qwen3.6-35b-a3b:q4_k_m", "llama3.1-8b:q4_k_m", "gemma3-12b:q4_k_m", "qwen3-14b:q4_k_m"]
#: (device kinds, layers per device, layers on the CPU first, n_copies)
SETUPS = [
    ("rpc", (21, 21), 0, 4),
    ("rpc", (13, 17, 14), 0, 4),
    ("cuda", (30, 9), 0, 4),
    ("cuda", (16, 11), 9, 1),
    ("rpc", (22,), 18, 1),
]
PARAMS = [GraphParams(512, 1, 1, 32768, 1, 1, 0, True, "f16", "f16"),
          GraphParams(2048, 2, 2, 16384, 1, 2, 0, True, "q8_0", "q4_0"),
          GraphParams(256, 1, 1, 8192, 1, 1, 0, False, "f16", "f16")]


@pytest.mark.parametrize("model_id", MODELS)
@pytest.mark.parametrize(("kind", "splits", "cpu_first", "n_copies"), SETUPS)
def test_cut_and_memo_equal_the_full_replay(model_id: str, kind: str, splits: tuple[int, ...], cpu_first: int,
                                           n_copies: int) -> None:
    spec = build_spec(*find_model(model_id))
    n_main = spec.n_layer_main
    n_dev = len(splits)
    devs = tuple(cuda_backend(f"CUDA{i}", 890) if kind == "cuda" else Backend(f"RPC{i}") for i in range(n_dev))
    lay = _layout(n_main, spec.n_layer, splits, cpu_first, n_dev)
    setup = R.Setup(lay, (*devs, Backend("CPU")), n_copies)
    if model_id.startswith(("qwen3.6-27b", "llama", "qwen3-")):  # a short period and long stretches: cut
        assert R.make_cut(spec, lay) is not None
    for p in PARAMS:
        if spec.architecture == "gemma3":
            p = GraphParams(**{**p.__dict__, "n_kv_swa": 2048})
        assert R.buffers(spec, p, setup) == R.replay(spec, p, setup), (model_id, kind, splits, p)


@pytest.mark.parametrize("model_id", ["qwen3.6-27b:q4_k_m", "gemma3-12b:q4_k_m", "qwen3-30b-a3b:q4_k_m"])
@pytest.mark.parametrize("kind", ["rpc", "cuda"])
def test_cache_types_of_one_class_give_the_same_buffers(model_id: str, kind: str) -> None:
    """The memo keeps one replay per class of cache types (replay.kv_class): every pair of types in
    a class must give the same buffers, prompt and one-token graphs, flash attention on and off."""
    spec = build_spec(*find_model(model_id))
    n_dev = 2
    devs = tuple(cuda_backend(f"CUDA{i}", 890) if kind == "cuda" else Backend(f"RPC{i}") for i in range(n_dev))
    half = spec.n_layer // 2
    lay = _layout(spec.n_layer_main, spec.n_layer, (half, spec.n_layer - half), 0, n_dev)
    lay = Layout(lay.layers, lay.output, lay.cpu, keep=(*range(6), *range(half, half + 6)))  # a short graph
    setup = R.Setup(lay, (*devs, Backend("CPU")), 4)
    types = ("f16", "f32", "q8_0", "q4_0", "q5_1", "iq4_nl")
    for n_tokens, fa in ((512, True), (1, True), (256, False)):
        classes: dict[tuple[object, ...], list[GraphParams]] = {}
        for tk in types:
            for tv in types:
                q = GraphParams(n_tokens, 1, 1, 8192, 1, 1, 0, fa, tk, tv, 2048 if spec.architecture == "gemma3" else 0)
                classes.setdefault(R.kv_class(q, setup.backends), []).append(q)
        assert len(classes) < len(types) ** 2
        for qs in classes.values():
            ref = R.replay_graph(spec, qs[0], setup)
            for q in qs[1:]:
                assert R.replay_graph(spec, q, setup) == ref, (model_id, kind, q, qs[0])
