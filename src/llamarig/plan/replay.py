"""Compute buffers replayed: llama.cpp's graph (:mod:`llamarig.plan.graphs`), ggml-backend's
scheduler (:mod:`llamarig.plan.ggml_sched`) and ggml-alloc (:mod:`llamarig.plan.ggml_graph`) run
as ``sched_reserve`` runs them (src/llama-context.cpp:616-746): the prompt graph, the
one-token-per-sequence graph, the prompt graph again; ggml-alloc only ever grows a buffer
(ggml-alloc.c:906-940), so each backend's compute buffer is the larger of the two graphs' high-water
marks on it.

A replay of a 64-layer trunk costs tens of milliseconds, and the optimiser and --fit ask for the
same graphs many times: results are remembered by the model's shape and the reservation, and a
trunk whose layers repeat is replayed on two cuts of it (:func:`cut_layouts`).
"""

from __future__ import annotations

import re
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from llamarig.gguf.spec import ModelSpec
from llamarig.plan import cuda_fattn
from llamarig.plan.ggml_graph import Tensor, allocate
from llamarig.plan.ggml_sched import Backend, schedule
from llamarig.plan.graphs import GraphParams, Layout, build_graph
from llamarig.plan.memory import ContextLayout

__all__ = ["Backend", "GraphParams", "Layout", "Setup", "buffers", "cut_layouts", "graph_params", "replay"]


@dataclass(frozen=True)
class Setup:
    """Everything about a context's reservation but the graph's size: where tensors live, the
    scheduler's backends (the CPU last), its number of input copies (4 with pipeline parallelism,
    src/llama-context.cpp:431-457) and whether ops may move to a GPU for their weights
    (cparams.op_offload)."""

    layout: Layout
    backends: tuple[Backend, ...]
    n_copies: int = 1
    op_offload: bool = True

    @staticmethod
    def cpu_only(n_layer: int) -> Setup:
        """The whole context on the CPU backend: one buffer."""
        return Setup(Layout.single(n_layer), (Backend("CPU"),))


def graph_params(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, type_k: str, type_v: str) -> GraphParams:
    """The prompt reservation of sched_reserve (llama-context.cpp:620-746, graph_reserve at
    2527-2534): n_seq_max sequences, n_tokens = min(n_ctx, n_ubatch) rounded up to a multiple of
    them, n_outputs = min(n_tokens, n_outputs_max), every KV cell of a stream (the SWA cache's
    for iSWA models) and the recurrent memory's n_seq_max rows (get_n_rs() of a full context is
    mem->size, llama-memory-recurrent.cpp:1336-1338; the n_rs_seq rollback groups sit behind
    them)."""
    n_seqs = max(1, ctx.n_parallel)
    n = min(ctx.n_ctx, ctx.n_ubatch)
    n_tokens = (n + n_seqs - 1) // n_seqs * n_seqs
    n_kv = ctx.n_ctx if ctx.kv_unified else ctx.n_ctx_seq
    swa = (ctx.swa_cells // max(1, ctx.n_stream)) if ctx.swa_cells else 0
    return GraphParams(n_tokens, n_seqs, min(n, max(1, n_outputs_max)), n_kv, ctx.n_stream, n_seqs,
                       ctx.n_rs_seq, ctx.flash_attn, type_k, type_v, swa)


# ------------------------------------------------------------------------ one replay


def _alloc_size(backends: tuple[Backend, ...]) -> Callable[[int, Tensor], int] | None:
    if all(b.cuda_cc is None for b in backends):
        return None

    def size(buf: int, t: Tensor) -> int:
        cc = backends[buf].cuda_cc
        return cuda_fattn.cuda_alloc_size(cc, t) if cc is not None else t.nbytes

    return size


def replay(spec: ModelSpec, p: GraphParams, setup: Setup, mtp: bool = False) -> tuple[int, ...]:
    """Every backend's compute buffer for the graphs of ``p`` (no memo, no cut)."""
    tg = replace(p, n_tokens=p.n_seqs, n_outputs=p.n_seqs)
    sizes = [0] * len(setup.backends)
    aligns = [b.alignment for b in setup.backends]
    size_fn = _alloc_size(setup.backends)
    for q in (p, tg):
        sch = schedule(build_graph(spec, q, setup.layout, mtp), setup.backends, n_copies=setup.n_copies,
                       op_offload=setup.op_offload)
        r = allocate(sch.graph, node_buffer=sch.node_buffer, leaf_buffer=sch.leaf_buffer, alignments=aligns,
                     alloc_size=size_fn)
        sizes = [max(a, b) for a, b in zip(sizes, r.sizes, strict=True)]
    return tuple(sizes)


# ------------------------------------------------------------------------ the period cut

_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


def _layer_shapes(spec: ModelSpec) -> list[tuple[object, ...]]:
    """What a main layer's share of the graph depends on: its kind and head counts, and its
    tensors' shapes."""
    by_block: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for t in spec.tensors:
        m = _BLOCK.match(t.name)
        if m:
            by_block.setdefault(int(m.group(1)), []).append((m.group(2), tuple(t.shape)))
    return [(replace(ly, index=0), tuple(sorted(by_block.get(ly.index, []))))
            for ly in spec.layers if not ly.nextn]


def _period(shapes: list[tuple[object, ...]]) -> int | None:
    for period in range(1, 9):
        if len(shapes) < 4 * period:
            return None
        if all(shapes[i] == shapes[i % period] for i in range(len(shapes))):
            return period
    return None


def _runs(lay: Layout, n_main: int, names: dict[int, tuple[tuple[str, int], ...]]) -> list[tuple[int, int]]:
    """(start, length) of the stretches of main layers with the same device and overrides."""
    out: list[tuple[int, int]] = []
    for il in range(n_main):
        key = (lay.layers[il], names.get(il, ()))
        if out and key == (lay.layers[out[-1][0]], names.get(out[-1][0], ())):
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((il, 1))
    return out


def cut_layouts(spec: ModelSpec, lay: Layout) -> tuple[Layout, Layout] | None:
    """Two cut-down layouts of a trunk whose layers repeat with a period P (qwen35: three
    recurrent layers, then one attention layer; a dense model: P = 1): every stretch of layers on
    one device longer than 4P keeps its first 2P (then 3P) layers plus its length mod P, so that
    each stretch starts and ends on the same layer kinds as in full. ggml-alloc reaches its
    steady state within the first periods on every device, so when both cuts give the same
    buffers the full trunk gives them too (checked on catalogue models, one and several devices:
    tests/plan/test_replay_cut.py); None when the layers do not repeat or are too few to cut."""
    shapes = _layer_shapes(spec)
    period = _period(shapes)
    if period is None:
        return None
    ov: dict[int, list[tuple[str, int]]] = {}
    for name, b in lay.overrides:
        m = _BLOCK.match(name)
        if m:
            ov.setdefault(int(m.group(1)), []).append((m.group(2), b))
    names = {il: tuple(sorted(v)) for il, v in ov.items()}
    runs = _runs(lay, len(shapes), names)
    if all(n < 4 * period for _s, n in runs):
        return None
    cuts = []
    for k in (2, 3):
        keep: list[int] = []
        for start, n in runs:
            size = n if n < 4 * period else k * period + n % period
            keep += range(start, start + size)
        cuts.append(replace(lay, keep=tuple(keep)))
    return cuts[0], cuts[1]


# ------------------------------------------------------------------------ the memo


_SPEC_KEYS: dict[int, tuple[weakref.ref[ModelSpec], tuple[object, ...]]] = {}
_MEMO: OrderedDict[tuple[object, ...], tuple[int, ...]] = OrderedDict()
#: replays remembered (a few KB each); the optimiser on one model needs a few hundred at most
MEMO_SIZE = 4096


def _spec_key(spec: ModelSpec) -> tuple[object, ...]:
    """The model's shape as far as its graphs go, computed once per spec object."""
    k = id(spec)
    hit = _SPEC_KEYS.get(k)
    if hit is not None and hit[0]() is spec:
        return hit[1]
    md = spec.metadata or {}
    extra = tuple(sorted((key, str(v)) for key, v in md.items()
                         if key.endswith(("expert_shared_feed_forward_length", "final_logit_softcapping"))))
    key = (spec.architecture, spec.n_embd, spec.n_vocab, spec.n_ff, spec.n_expert, spec.n_expert_used,
           spec.n_ff_expert, spec.layers, spec.recurrent, spec.mtp_sidecar, extra,
           tuple((t.name, tuple(t.shape), t.n_bytes) for t in spec.tensors))
    _SPEC_KEYS[k] = (weakref.ref(spec, lambda _r, k=k: _SPEC_KEYS.pop(k, None)), key)  # type: ignore[misc]
    return key


def buffers(spec: ModelSpec, p: GraphParams, setup: Setup, mtp: bool = False) -> tuple[int, ...]:
    """Every backend's compute buffer (in ``setup.backends``' order) for the context reserving
    ``p``: remembered by shape; a repeating trunk is replayed on two cuts, whole only when they
    disagree."""
    key = (_spec_key(spec), p, setup, mtp)
    hit = _MEMO.get(key)
    if hit is not None:
        _MEMO.move_to_end(key)
        return hit
    cut = None if mtp else cut_layouts(spec, setup.layout)
    out = None
    if cut is not None:
        a, b = (replay(spec, p, replace(setup, layout=c)) for c in cut)
        out = a if a == b else None
    if out is None:
        out = replay(spec, p, setup, mtp)
    _MEMO[key] = out
    if len(_MEMO) > MEMO_SIZE:
        _MEMO.popitem(last=False)
    return out
