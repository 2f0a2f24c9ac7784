"""Compute buffers replayed: llama.cpp's graph (:mod:`llamarig.plan.compute.graphs`), ggml-backend's
scheduler (:mod:`llamarig.plan.compute.ggml_sched`) and ggml-alloc (:mod:`llamarig.plan.compute.ggml_graph`) run
as ``sched_reserve`` runs them (src/llama-context.cpp:616-746): the prompt graph, the
one-token-per-sequence graph, the prompt graph again; ggml-alloc only ever grows a buffer
(ggml-alloc.c:906-940), so each backend's compute buffer is the larger of the two graphs' high-water
marks on it.

A replay of a 64-layer trunk costs tens of milliseconds, and the optimiser and --fit ask for the
same graphs many times: results are remembered by the model's shape and the reservation (cache
types by what the allocations see of them, :func:`kv_class`), and a trunk whose layers repeat is
replayed on a cut of it (:func:`make_cut`), whole only when the cut's replay does not show
ggml-alloc's steady state (:mod:`llamarig.plan.compute.steady`).
"""

from __future__ import annotations

import gc
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TypeVar

from llamarig.gguf.ggml_types import CUDA_FA_KV_TYPES, CUDA_FA_VEC_PAIRS, TYPE_SIZES
from llamarig.gguf.spec import ModelSpec
from llamarig.plan.compute import cuda_fattn, steady
from llamarig.plan.compute.ggml_graph import Tensor, allocate, tensor_bytes
from llamarig.plan.compute.ggml_sched import Backend, schedule
from llamarig.plan.compute.graphs import GraphParams, Layout, build_graph
from llamarig.plan.memory import ContextLayout
from llamarig.plan.specmemo import per_spec

__all__ = ["Backend", "Cut", "GraphParams", "Layout", "Setup", "buffers", "forget", "graph_params", "kv_class", "make_cut",
           "replay", "replay_graph", "token_graph"]


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

#: types whose CUDA allocation is their bytes: not quantized (no row padding)
_PLAIN = frozenset(name for name, (block, _size) in TYPE_SIZES.items() if block == 1)


def _alloc_size(backends: tuple[Backend, ...]) -> Callable[[int, Tensor], int] | None:
    if all(b.cuda_cc is None for b in backends):
        return None

    ccs = [b.cuda_cc for b in backends]

    def size(buf: int, t: Tensor) -> int:
        cc = ccs[buf]
        if cc is None or (t.type in _PLAIN and t.op != "FLASH_ATTN_EXT"):
            n = t.size
            if n < 0:
                n = t.size = tensor_bytes(t.type, t.ne, t.nb)
            return n
        return cuda_fattn.cuda_alloc_size(cc, t)

    return size


def replay_graph(spec: ModelSpec, q: GraphParams, setup: Setup, mtp: bool = False) -> tuple[int, ...]:
    """Every backend's high-water mark for the one graph of ``q`` (no memo, no cut)."""
    with _no_gc():
        sch = schedule(build_graph(spec, q, setup.layout, mtp), setup.backends, n_copies=setup.n_copies,
                       op_offload=setup.op_offload)
        r = allocate(sch.graph, node_buffer=sch.node_buffer, leaf_buffer=sch.leaf_buffer,
                     alignments=[b.alignment for b in setup.backends], alloc_size=_alloc_size(setup.backends))
        del sch  # freed while the collector is paused: it would look at every tensor once more
    return r.sizes


@contextmanager
def _no_gc() -> Iterator[None]:
    """Python's cycle collector paused while a graph is made: a graph is thousands of objects
    with no cycle (tensors point to their sources only), freed by reference counting, and the
    collections their allocation would trigger cost a sixth of a replay."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def token_graph(p: GraphParams) -> GraphParams:
    """The one-token-per-sequence graph sched_reserve reserves after the prompt graph
    (llama-context.cpp:696-709: n_seqs tokens, n_seqs outputs)."""
    return replace(p, n_tokens=p.n_seqs, n_outputs=p.n_seqs)


def replay(spec: ModelSpec, p: GraphParams, setup: Setup, mtp: bool = False) -> tuple[int, ...]:
    """Every backend's compute buffer for the graphs of ``p``: the larger of the prompt graph's
    and the one-token graph's high-water marks (no memo, no cut)."""
    a = replay_graph(spec, p, setup, mtp)
    b = replay_graph(spec, token_graph(p), setup, mtp)
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


# ------------------------------------------------------------------------ the model's shape

_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")


@dataclass(frozen=True)
class _Shape:
    """What a model's graphs depend on, computed once per spec object: the shape of everything
    but the repeating layers (``key``), and each main layer's class (layers of one class build the
    same share of the graph) without and with its tensors' sizes (which matter only when a
    weight is copied to a GPU for an offloaded op)."""

    key: tuple[object, ...]
    classes: tuple[int, ...]
    classes_sized: tuple[int, ...]


def _classes(sigs: list[tuple[object, ...]]) -> tuple[int, ...]:
    ids: dict[tuple[object, ...], int] = {}
    return tuple(ids.setdefault(sig, len(ids)) for sig in sigs)


def _make_shape(spec: ModelSpec) -> _Shape:
    by_block: dict[int, list[tuple[str, tuple[int, ...], int]]] = {}
    other = []
    for t in spec.tensors:
        m = _BLOCK.match(t.name)
        if m:
            by_block.setdefault(int(m.group(1)), []).append((m.group(2), tuple(t.shape), t.n_bytes))
        else:
            other.append((t.name, tuple(t.shape), t.n_bytes))
    main = [ly for ly in spec.layers if not ly.nextn]
    sigs = [(replace(ly, index=0), tuple(sorted((n, sh) for n, sh, _b in by_block.get(ly.index, []))))
            for ly in main]
    sized = [(sig, tuple(sorted(by_block.get(ly.index, [])))) for sig, ly in zip(sigs, main, strict=True)]
    md = spec.metadata or {}
    extra = tuple(sorted((k, str(v)) for k, v in md.items()
                         if k.endswith(("expert_shared_feed_forward_length", "final_logit_softcapping"))))
    nextn = tuple((replace(ly, index=0), tuple(sorted(by_block.get(ly.index, [])))) for ly in spec.layers if ly.nextn)
    key = (spec.architecture, spec.n_embd, spec.n_vocab, spec.n_ff, spec.n_expert, spec.n_expert_used,
           spec.n_ff_expert, spec.recurrent, spec.mtp_sidecar, len(main), extra, tuple(sorted(other)), nextn)
    return _Shape(key, _classes(sigs), _classes(sized))  # type: ignore[arg-type]


_shape = per_spec(_make_shape)


def _sized(setup: Setup) -> bool:
    """Whether weights' sizes matter: a backend may take over an op whose weight sits in host
    memory and copy the weight in."""
    lay = setup.layout
    host = lay.cpu in lay.layers or any(b == lay.cpu for _n, b in lay.overrides)
    return setup.op_offload and host and any(b.offload_min_batch is not None for b in setup.backends)


def _layer_overrides(lay: Layout) -> tuple[dict[int, tuple[tuple[str, int], ...]], tuple[tuple[str, int], ...]]:
    """-ot and friends per main layer (the name inside its block) and for the other tensors."""
    per: dict[int, list[tuple[str, int]]] = {}
    other = []
    for name, b in lay.overrides:
        m = _BLOCK.match(name)
        if m:
            per.setdefault(int(m.group(1)), []).append((m.group(2), b))
        else:
            other.append((name, b))
    return {il: tuple(sorted(v)) for il, v in per.items()}, tuple(other)


def _canonical(shape: _Shape, lay: Layout, sized: bool) -> tuple[object, ...]:
    """A layout as far as the graph goes: for every layer built, its class, device and overrides
    (not its index: layers of one class build the same graph wherever they are)."""
    per, other = _layer_overrides(lay)
    classes = shape.classes_sized if sized else shape.classes
    keep = lay.keep if lay.keep is not None else range(len(classes))
    return (tuple((classes[il], lay.layers[il], per.get(il, ())) for il in keep), lay.layers[len(classes):],
            lay.output, lay.cpu, lay.kv_on_cpu, lay.full_offload, lay.pinned, other)


# ------------------------------------------------------------------------ the period cut


def _period(classes: tuple[int, ...]) -> int | None:
    for period in range(1, 9):
        if len(classes) < 4 * period:
            return None
        if all(classes[i] == classes[i % period] for i in range(len(classes))):
            return period
    return None


def _repeats(classes: tuple[int, ...], start: int, n: int, step: int) -> bool:
    """Whether the layers start .. start + n - 1 repeat every ``step`` layers."""
    return all(classes[i] == classes[i + step] for i in range(start, start + n - step))


def _runs(lay: Layout, n_main: int, per: dict[int, tuple[tuple[str, int], ...]]) -> list[tuple[int, int]]:
    """(start, length) of the stretches of main layers with the same device and overrides."""
    out: list[tuple[int, int]] = []
    for il in range(n_main):
        key = (lay.layers[il], per.get(il, ()))
        if out and key == (lay.layers[out[-1][0]], per.get(out[-1][0], ())):
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((il, 1))
    return out


@dataclass(frozen=True)
class Cut:
    """A cut-down layout of the trunk and its long stretches: (index of the stretch's first
    layer among those kept, layers kept of it); stretches kept whole are not listed. What it
    leaves out of each stretch is a multiple of ``every`` periods."""

    layout: Layout
    stretches: tuple[tuple[int, int], ...]
    period: int
    every: int = 1


def make_cut(spec: ModelSpec, lay: Layout, sized: bool = False, every: int = 1, freed: bool = True) -> Cut | None:
    """A cut-down layout of a trunk whose layers repeat with a period P (qwen35: three recurrent
    layers, then one attention layer; gemma3: five sliding-window layers, then a global one; a
    dense model: P = 1). Every long stretch of layers on one device keeps its first layers and
    leaves out a multiple of ``every`` P, so that it starts and ends on the same layer kinds as
    in full and ggml-alloc's state, which may repeat only every other period, ends in the same
    phase. What it keeps: ``every`` P layers to compare (:mod:`llamarig.plan.compute.steady`), after
    the stretch's first layer (it reads the copies from the previous device), and after a whole
    first period for a stretch in host memory or with weights there (a GPU takes over its ops
    and makes its copies of the graph inputs where the stretch first needs them); then its last
    layer, or with ``freed`` its last period (without pipeline parallelism those copies die
    after their last use, ggml-backend.cpp:1547-1745). ``sized``: a GPU copies in the weights
    of the ops it takes over, so a stretch in host memory repeats only if its tensors' sizes do
    too (a quant mix such as Q4_K_M gives some layers bigger tensors: llama.cpp's
    use_more_bits), else it is kept whole; the GPUs' own weights are never copied. One replay of
    the cut gives the whole trunk's buffers when it shows the steady state; None when the layers
    do not repeat or no stretch is long enough to cut."""
    shape = _shape(spec)
    period = _period(shape.classes)
    if period is None:
        return None
    per, _other = _layer_overrides(lay)
    step = every * period
    keep: list[int] = []
    long: list[tuple[int, int]] = []
    for start, n in _runs(lay, len(shape.classes), per):
        # a stretch in host memory (or with weights there) hands ops to a GPU layer by layer, and
        # the GPU's copies of the graph inputs are made where the stretch first needs them: the
        # proof looks at the periods after the first one (steady.Probe.first_copies)
        host = lay.layers[start] == lay.cpu or bool(per.get(start))
        skip = 1 if host else 0
        k = (skip * period) + step + (period + 1 if freed else 2)
        size = k + (n - k) % step if n >= k else n
        if sized and host and not _repeats(shape.classes_sized, start, n, step):
            size = n  # weights copied to a GPU whose sizes do not repeat (a quant mix): whole
        if size < n:
            long.append((len(keep), size))
        keep += range(start, start + size)
    if not long:
        return None
    return Cut(replace(lay, keep=tuple(keep)), tuple(long), period, every)


# ------------------------------------------------------------------------ the cache types


def _kv_type(t: str, cuda_fa: bool) -> object:
    """What a graph's allocations see of one cache type: a plain type (f32, f16, bf16) as it is
    (f32 caches are cast to f16, base.py attend; CUDA converts anything but f16 for flash
    attention), a quantized one only as quantized (it is rotated, base.py rot_inputs; its tensors
    are the caches and their views, outside the compute buffer), and under CUDA flash attention
    whether the kernels take it (fattn.cu:525-538: a type they do not take gets no kernel, one
    they do is converted to f16 whole, whichever it is: cuda_fattn.alloc_size)."""
    if TYPE_SIZES[t][0] == 1:
        return t
    return ("quantized", t in CUDA_FA_KV_TYPES) if cuda_fa else "quantized"


def _caches_stay(lay: Layout, backends: tuple[Backend, ...]) -> bool:
    """Whether every cache is read where it sits: each layer on a device, its KV there too (a
    layer on the CPU keeps its cache in host memory, and the scheduler may run its attention on a
    GPU, which then reads a copy of the cache's views: bytes of the exact type)."""
    return len(backends) == 1 or not (lay.kv_on_cpu or lay.cpu in lay.layers)


def kv_class(q: GraphParams, backends: tuple[Backend, ...], lay: Layout | None = None) -> tuple[object, ...]:
    """The cache types as far as every compute buffer goes: two reservations whose types fall in
    one class give the same buffers (q8_0/q8_0 and q4_0/q4_0 prompt graphs on a CUDA GPU, every
    quantized pair on the CPU and RPC servers), so the memo keeps one replay for them; the exact
    types when a cache may be copied to another backend (``lay``, :func:`_caches_stay`). Under CUDA
    flash attention the decode (vec) kernel's compiled pairs also count: a pair it lacks is
    converted to f16 (fattn.cu:495-513, cuda_fattn.f16_copies), but only in a graph whose
    attention has at most two query rows per stream: every kernel choice takes the vector kernel
    only then (fattn.cu:660-719, cuda_fattn.best_kernel), so a prompt graph of many rows converts
    K and V to f16 whatever the pair."""
    if lay is not None and not _caches_stay(lay, backends):
        return (q.type_k, q.type_v)
    cuda_fa = q.flash_attn and any(b.cuda_cc is not None for b in backends)
    may_vec = cuda_fa and q.n_tokens // max(1, q.n_stream) <= 2
    vec = (_f16(q.type_k), _f16(q.type_v)) in CUDA_FA_VEC_PAIRS if may_vec else None
    return (_kv_type(q.type_k, cuda_fa), _kv_type(q.type_v, cuda_fa), vec)


def _f16(t: str) -> str:
    return "f16" if t == "f32" else t


# ------------------------------------------------------------------------ the memo


_V = TypeVar("_V")
_MEMO: OrderedDict[tuple[object, ...], tuple[int, ...]] = OrderedDict()
#: replays remembered (a few hundred bytes each); the optimiser on one model needs hundreds
MEMO_SIZE = 8192
#: whether a cut's replay showed the steady state of every long stretch, by the cut's memo key
_STEADY: OrderedDict[tuple[object, ...], bool] = OrderedDict()


def forget() -> None:
    """Every replay remembered forgotten, as in a fresh process (benchmarks time cold runs)."""
    _MEMO.clear()
    _STEADY.clear()


def _key(spec: ModelSpec, q: GraphParams, setup: Setup, mtp: bool, sized: bool) -> tuple[object, ...]:
    shape = _shape(spec)
    lay = (setup.layout,) if mtp else _canonical(shape, setup.layout, sized)
    return (shape.key, lay, replace(q, type_k="", type_v=""), kv_class(q, setup.backends, setup.layout), setup.backends,
            setup.n_copies, setup.op_offload, mtp)


def _remember(memo: OrderedDict[tuple[object, ...], _V], key: tuple[object, ...], value: _V) -> None:
    memo[key] = value
    if len(memo) > MEMO_SIZE:
        memo.popitem(last=False)


def _memoized(spec: ModelSpec, q: GraphParams, setup: Setup, mtp: bool, sized: bool) -> tuple[int, ...]:
    key = _key(spec, q, setup, mtp, sized)
    hit = _MEMO.get(key)
    if hit is not None:
        _MEMO.move_to_end(key)
        return hit
    out = replay_graph(spec, q, setup, mtp)
    _remember(_MEMO, key, out)
    return out


def _layer_ends(nodes: list[Tensor], outs: list[Tensor]) -> list[int]:
    """The node index of each layer's output (built in order, so found in order)."""
    marks = set(map(id, outs))
    return [i for i, t in enumerate(nodes) if id(t) in marks]


def _steady_replay(spec: ModelSpec, q: GraphParams, setup: Setup, cut: Cut) -> tuple[tuple[int, ...], bool]:
    """Every backend's high-water mark for ``q`` on the cut, and whether the allocators' states
    show that every long stretch reached its steady state (:mod:`llamarig.plan.compute.steady`)."""
    with _no_gc():
        g = build_graph(spec, q, cut.layout, False)
        sch = schedule(g, setup.backends, n_copies=setup.n_copies, op_offload=setup.op_offload)
        nodes = sch.graph.nodes
        ends = _layer_ends(nodes, g.layer_out)
        watch = steady.Watches(nodes, [steady.Probe(ends[f - 1] + 1 if f else 0, tuple(ends[f:f + n]), cut.period)
                                       for f, n in cut.stretches], cut.every)
        r = allocate(sch.graph, node_buffer=sch.node_buffer, leaf_buffer=sch.leaf_buffer,
                     alignments=[b.alignment for b in setup.backends], alloc_size=_alloc_size(setup.backends),
                     checkpoints=watch.checkpoints(), on_checkpoint=watch.seen)
        proven = watch.steady()
        del sch, g, nodes, watch  # freed while the collector is paused (see replay_graph)
    return r.sizes, proven


def _proved(spec: ModelSpec, q: GraphParams, setup: Setup, cut: Cut, sized: bool) -> tuple[tuple[int, ...], bool]:
    """:func:`_steady_replay`, remembered like any replay."""
    key = _key(spec, q, replace(setup, layout=cut.layout), False, sized)
    hit, ok = _MEMO.get(key), _STEADY.get(key)
    if hit is not None and ok is not None:
        return hit, ok
    out, ok = _steady_replay(spec, q, setup, cut)
    _remember(_MEMO, key, out)
    _remember(_STEADY, key, ok)
    return out, ok


def _graph_buffers(spec: ModelSpec, q: GraphParams, setup: Setup, mtp: bool, sized: bool) -> tuple[int, ...]:
    if not mtp:
        for every in _periods_left_out(spec):
            cut = make_cut(spec, setup.layout, sized, every, setup.n_copies == 1)
            if cut is not None:
                one, ok = _proved(spec, q, setup, cut, sized)
                if ok:
                    return one
    return _memoized(spec, q, setup, mtp, sized)


def _periods_left_out(spec: ModelSpec) -> tuple[int, ...]:
    """The cuts to try, by the periods they leave out of each stretch: one, then two; two alone
    for a model with recurrent layers, whose residual stream changes place with each of them, so
    that the allocators' state repeats only every other period (a cut of single periods shows no
    proof: seen on every qwen35 layout of the optimiser's searches)."""
    return (2,) if spec.recurrent is not None else (1, 2)


def buffers(spec: ModelSpec, p: GraphParams, setup: Setup, mtp: bool = False, *,
            dry_run: bool = False) -> tuple[int, ...]:
    """Every backend's compute buffer (in ``setup.backends``' order) for the context reserving
    ``p``, as :func:`replay`, with each graph remembered by the model's shape and the layout's
    (layers of one class on one device are one key, whatever their number past the cut; the
    one-token graph does not depend on n_ubatch); a repeating trunk is replayed on a cut, whole
    only when the cut does not show the steady state (:func:`make_cut`). ``dry_run``: what
    --fit's dry runs measure, the prompt graph alone (a model loaded without allocating reserves
    only its sizes, llama-context.cpp:674-677; the one-token graph and the second prompt graph are
    split only, 702 and 727), with ``setup.layout.pinned`` off."""
    sized = _sized(setup)
    a = _graph_buffers(spec, p, setup, mtp, sized)
    if dry_run:
        return a
    b = _graph_buffers(spec, token_graph(p), setup, mtp, sized)
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))
