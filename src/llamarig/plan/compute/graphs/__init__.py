"""llama.cpp's compute graphs, rebuilt tensor by tensor for the architectures plan replays
(:mod:`llamarig.plan.compute.replay` runs ggml-backend's scheduler and ggml-alloc over them): llama,
qwen3, qwen3moe, gemma3 (:mod:`.transformer`), qwen35 / qwen35moe and their MTP draft context
(:mod:`.qwen35`)."""

from __future__ import annotations

from llamarig.gguf.spec import ModelSpec
from llamarig.plan.compute.ggml_graph import Graph
from llamarig.plan.compute.graphs import qwen35, transformer
from llamarig.plan.compute.graphs.base import GraphParams, Layout
from llamarig.plan.specmemo import per_spec

__all__ = ["GraphParams", "Layout", "build_graph", "supports", "supports_mtp"]


@per_spec
def _support(spec: ModelSpec) -> tuple[bool, bool]:
    """(trunk, MTP draft) support, worked out once per spec object."""
    return _supports(spec), _supports_mtp(spec)


def supports(spec: ModelSpec) -> bool:
    """A trunk this package can rebuild: one of the architectures above, as written by
    llama.cpp's converter (separate Q/K/V weights; no MTP-only sidecar)."""
    return _support(spec)[0]


def supports_mtp(spec: ModelSpec) -> bool:
    """A qwen35 / qwen35moe file with one MTP (nextn) block: its draft context runs graph_mtp
    (a sidecar file too: it holds the block and the head, qwen35.cpp:36)."""
    return _support(spec)[1]


def _supports(spec: ModelSpec) -> bool:
    if spec.mtp_sidecar or not spec.n_embd or not spec.n_vocab:
        return False
    if spec.architecture in transformer.ARCHS:
        return _plain_attention(spec)
    if spec.architecture in qwen35.ARCHS:
        return spec.recurrent is not None and qwen35.separate_qkv(spec)
    return False


def _supports_mtp(spec: ModelSpec) -> bool:
    return (spec.architecture in qwen35.ARCHS and sum(1 for ly in spec.layers if ly.nextn) == 1
            and qwen35.separate_qkv(spec) and bool(spec.n_embd) and bool(spec.n_vocab))


def _plain_attention(spec: ModelSpec) -> bool:
    """Every layer an attention layer with separate Q/K/V weights and no biases, and no MTP
    layers (what llama.cpp's llama/qwen3/gemma3 graphs do with anything else is not rebuilt)."""
    if any(ly.kind == "recurrent" or ly.nextn for ly in spec.layers):
        return False
    names = {t.name for t in spec.tensors}
    if not names:
        return True  # a catalogue entry: the converter's layout
    return "blk.0.attn_q.weight" in names and not any(n.endswith((".attn_qkv.weight", "attn_q.bias")) for n in names)


def build_graph(spec: ModelSpec, p: GraphParams, lay: Layout, mtp: bool = False) -> Graph:
    """The graph ``sched_reserve`` reserves for ``p`` (``mtp``: the MTP draft context's)."""
    if spec.architecture in qwen35.ARCHS:
        b = qwen35.Qwen35Builder(spec, p, lay)
        return b.build_mtp() if mtp else b.build()
    return transformer.TransformerBuilder(spec, p, lay).build()
