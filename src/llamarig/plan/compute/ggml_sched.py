"""A replay of ggml-backend's scheduler (ggml_backend_sched) for llama.cpp's compute graphs.

``sched_reserve`` (src/llama-context.cpp:616-746) hands the worst-case graph to
``ggml_backend_sched_reserve``, which decides which backend runs every node
(ggml_backend_sched_split_graph, ggml/src/ggml-backend.cpp:1215-1745), cuts the graph into splits
of one backend each, gives every split a copy of each tensor it reads from another backend, and
sizes one compute buffer per backend with ggml-alloc over the resulting graph. The backends are
the model's devices in order (RPC servers first, then local GPUs: src/llama.cpp:275) and the CPU
last; with pipeline parallelism (several devices, everything offloaded, src/llama-context.cpp:
431-457) every copy and every graph input exists ``n_copies`` = GGML_SCHED_MAX_COPIES (4,
ggml-backend.cpp:911-912, 2028) times and is never freed.

:func:`schedule` gives that graph (``graph_copy``) and each node's and leaf's backend;
:func:`llamarig.plan.compute.ggml_graph.allocate` then sizes the buffers. What a backend does is its
:class:`Backend`: every backend here runs every op of these graphs (the CPU and the RPC backend
support all ops, ggml-rpc.cpp:2218-2223; CUDA every op the replayed graphs use), reads only its own
buffer type (ggml-rpc.cpp:2225-2232, ggml-cuda.cu:5733-5737; the CPU backend reads host buffers,
ggml-cpu.cpp:489-492), and may take over an op whose weight sits in host memory (CUDA's
offload_op: a batch of at least 32 rows, ggml-cuda.cu:5739-5758; the RPC backend has none,
ggml-rpc.cpp:2264).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llamarig.plan.compute.ggml_graph import FLAG_INPUT, FLAG_OUTPUT, VIEW_OPS, Graph, Tensor

#: GGML_SCHED_MAX_COPIES (ggml/CMakeLists.txt:188; ggml-backend.cpp:911-912)
GGML_SCHED_MAX_COPIES = 4


@dataclass(frozen=True)
class Backend:
    """What the scheduler and the allocator need of one backend and its compute buffer type."""

    name: str
    #: buffer alignment: the CPU, CUDA_Host and an RPC server's CPU buffer 32 B (TENSOR_ALIGNMENT,
    #: ggml-impl.h; ggml-rpc.cpp:820-831 asks the server), CUDA 128 B (ggml-cuda.cu:896-900)
    alignment: int = 32
    #: ggml_backend_offload_op: the smallest batch for which the backend takes over an op whose
    #: weight is in host memory (CUDA: op_offload_min_batch_size 32); None: never (CPU, RPC)
    offload_min_batch: int | None = None
    #: CUDA's compute capability (x 100): its buffer type sizes FLASH_ATTN_EXT nodes
    #: (:mod:`llamarig.plan.compute.cuda_fattn`); None elsewhere
    cuda_cc: int | None = None


CPU_BACKEND = Backend("CPU")
#: ggml_backend_cuda_buffer_type_get_alignment (ggml-cuda.cu:896-900)
CUDA_ALIGNMENT = 128
#: op_offload_min_batch_size: the smallest batch CUDA takes an op with a host weight for
#: (ggml-cuda.cu:5754-5758)
CUDA_OFFLOAD_MIN_BATCH = 32


def cuda_backend(name: str, cc: int) -> Backend:
    """A CUDA GPU of compute capability ``cc`` (x 100)."""
    return Backend(name, CUDA_ALIGNMENT, CUDA_OFFLOAD_MIN_BATCH, cc)


@dataclass
class Scheduled:
    """The graph ggml_backend_sched allocates (its ``graph_copy``) and every tensor's buffer."""

    graph: Graph
    #: the backend of graph.nodes[i] / graph.leafs[i] (sched->node_backend_ids, leaf_backend_ids)
    node_buffer: list[int]
    leaf_buffer: list[int]
    #: what the scheduler copied from one backend to another (the split inputs' copies)
    copies: list[Tensor]
    #: (backend, number of inputs) per split
    splits: list[tuple[int, int]]


def _op_batch(node: Tensor) -> int:
    """get_op_batch_size (ggml-cuda.cu:5739-5752)."""
    if node.op == "GET_ROWS":
        return 0
    if node.op == "MUL_MAT":
        return node.ne[1]
    if node.op in ("MUL_MAT_ID", "ROPE"):
        return node.ne[2]
    return node.ne[1] * node.ne[2] * node.ne[3]


class _Sched:
    def __init__(self, graph: Graph, backends: Sequence[Backend], n_copies: int, op_offload: bool) -> None:
        self.g = graph
        self.backends = backends
        self.cpu = len(backends) - 1
        self.n_copies = n_copies
        self.op_offload = op_offload
        self.order = [n for n in graph.nodes if n.op not in VIEW_OPS]
        for t in graph.leafs:
            t.be = t.pin
        for t in graph.nodes:
            t.be = t.pin

    # ------------------------------------------------------------------ pass 1
    def from_cur(self, t: Tensor) -> int:
        """ggml_backend_sched_backend_id_from_cur (ggml-backend.cpp:1061-1120)."""
        vs = t.view_src
        if vs is not None:
            if vs.external:
                return vs.backend
        elif t.external:
            return t.backend
        if t.flags & FLAG_INPUT:
            return self.cpu
        if t.op in ("ROPE", "FLASH_ATTN_EXT"):
            return -1
        for s in t.src:
            if s.weight:
                return self._weight_backend(t, s)
        return -1

    def _weight_backend(self, t: Tensor, w: Tensor) -> int:
        if self.op_offload and w.backend == self.cpu:
            for b, be in enumerate(self.backends[:self.cpu]):
                if be.offload_min_batch is not None and _op_batch(t) >= be.offload_min_batch:
                    return b
        return w.backend

    def assign_from_buffers(self) -> None:
        for t in self.g.leafs:
            if t.be == -1:
                t.be = self.from_cur(t)
        for t in self.g.nodes:
            if t.be == -1:
                t.be = self.from_cur(t)

    # ------------------------------------------------------------------ pass 2
    def expand(self) -> None:
        """Expand the GPU backends down and up (the CPU skipped), then every backend down and up
        (ggml-backend.cpp:1262-1340)."""
        order = self.order
        rev = order[::-1]
        cpu = self.cpu
        for seq, skip_cpu in ((order, True), (rev, True), (order, False), (rev, False)):
            cur = -1
            for node in seq:
                b = node.be
                if b != -1:
                    cur = -1 if (skip_cpu and b == cpu) else b
                elif cur != -1:
                    node.be = cur

    # ------------------------------------------------------------------ pass 3, 4
    def _supported_src(self, s: Tensor, b: int) -> bool:
        """ggml_backend_sched_buffer_supported (ggml-backend.cpp:1177-1196): every backend reads
        only its own buffer type."""
        base = s.view_src if s.view_src is not None else s
        if base.external:
            return base.backend == b
        sb = s.be if s.be != -1 else (s.view_src.be if s.view_src is not None else -1)
        return sb == b

    def assign_rest(self) -> None:
        """Pass 3: a node still unassigned goes to the backend that holds most of its sources
        (the upgrade to a higher-priority backend of the same buffer type never applies: no two
        backends here share one); pass 4: views and sources (ggml-backend.cpp:1343-1434)."""
        for node in self.order:
            if node.be == -1:
                best, best_n = -1, -1
                for b in range(len(self.backends)):
                    n = sum(1 for s in node.src if self._supported_src(s, b))
                    if n > best_n:
                        best, best_n = b, n
                node.be = best
        for node in self.g.nodes:
            if node.view_src is not None and node.be == -1:
                node.be = node.view_src.be
            for s in node.src:
                if s.be == -1:
                    s.be = s.view_src.be if s.view_src is not None else node.be
            if node.be == -1:
                node.be = 0

    # ------------------------------------------------------------------ pass 5
    def split(self) -> tuple[list[tuple[int, list[Tensor], list[Tensor]]], dict[tuple[int, int], list[Tensor]]]:
        """Splits and their inputs (ggml-backend.cpp:1436-1545): a new split where the backend
        changes, or where a node reads a weight its backend cannot (an offloaded op); every
        source on another backend gets ``n_copies`` copies on the split's backend, made once per
        (source, backend) for the whole graph."""
        splits: list[tuple[int, list[Tensor], list[Tensor]]] = []
        copies: dict[tuple[int, int], list[Tensor]] = {}
        nodes = self.g.nodes
        first = next((i for i, n in enumerate(nodes) if n.op not in VIEW_OPS), len(nodes))
        cur = nodes[first].be if first < len(nodes) else 0
        inputs: list[Tensor] = []
        members = list(nodes[:first])
        splits.append((cur, inputs, members))
        for node in nodes[first:]:
            if node.op not in VIEW_OPS:
                if node.be != cur or (inputs and self._weight_elsewhere(node, cur)):
                    cur = node.be
                    inputs, members = [], []
                    splits.append((cur, inputs, members))
                for s in node.src:
                    if s.be != cur:
                        node.src = tuple(self._input(x, cur, inputs, copies) for x in node.src)
                        break
            members.append(node)
        return splits, copies

    @staticmethod
    def _weight_elsewhere(node: Tensor, cur: int) -> bool:
        return any(s.weight and s.backend != cur for s in node.src)

    def _input(self, s: Tensor, cur: int, inputs: list[Tensor], copies: dict[tuple[int, int], list[Tensor]]) -> Tensor:
        if s.be == cur or self._supported_src(s, cur):
            return s
        key = (id(s), cur)
        made = copies.get(key)
        if made is None:
            flags = FLAG_INPUT | FLAG_OUTPUT if self.n_copies > 1 else 0
            size = s.size if s.external else -1
            made = [Tensor("NONE", s.ne, s.type, s.nb, flags=flags, name=f"{self.backends[cur].name}#{s.name or s.op}#{c}",
                           size=size) for c in range(self.n_copies)]
            for t in made:
                t.be = cur
            copies[key] = made
            inputs.append(s)
        return made[0]

    # ------------------------------------------------------------------ pass 6 and graph_copy
    def graph_copy(self, splits: list[tuple[int, list[Tensor], list[Tensor]]],
                   copies: dict[tuple[int, int], list[Tensor]]) -> Scheduled:
        """The graph ggml-alloc sees (ggml-backend.cpp:1547-1745): per split, for every input a
        dependency node on the source (an op-less view: its source stays alive until the split
        starts) and the copy; then the split's nodes. With ``n_copies`` > 1 the copies of every
        graph input and of every split input come first, as leafs."""
        out = Graph()
        nb: list[int] = []
        for b, inputs, nodes in splits:
            for s in inputs:
                base = s.view_src if s.view_src is not None else s
                dep = Tensor("NONE", s.ne, s.type, s.nb, (s,), view_src=base, view_offs=s.view_offs,
                             external=base.external, name=f"{s.name} (view)")
                out.nodes += (dep, copies[(id(s), b)][0])
                nb += (s.be, b)
            out.nodes += nodes
            nb += [n.be for n in nodes]
        lb: list[int] = []
        if self.n_copies > 1:
            for leaf in self.g.leafs:
                if leaf.flags & FLAG_INPUT:
                    leaf.flags |= FLAG_OUTPUT
                    dups = [leaf] + [Tensor("NONE", leaf.ne, leaf.type, leaf.nb, flags=FLAG_INPUT | FLAG_OUTPUT,
                                            name=f"{leaf.name}#{c}") for c in range(1, self.n_copies)]
                    out.leafs += dups
                    lb += [leaf.be] * len(dups)
            for b, inputs, _nodes in splits:
                for s in inputs:
                    out.leafs += copies[(id(s), b)]
                    lb += [b] * self.n_copies
        out.leafs += self.g.leafs
        lb += [t.be for t in self.g.leafs]
        made = [t for group in copies.values() for t in group]
        return Scheduled(out, nb, lb, made, [(b, len(inputs)) for b, inputs, _n in splits])


def schedule(graph: Graph, backends: Sequence[Backend] = (Backend("GPU", CUDA_ALIGNMENT, CUDA_OFFLOAD_MIN_BATCH), CPU_BACKEND), *,
             n_copies: int = 1, op_offload: bool = True) -> Scheduled:
    """ggml_backend_sched_split_graph (ggml-backend.cpp:1215-1745) over ``backends`` (the CPU
    last): which backend runs every node, where the graph splits, and the copies of what a split
    reads from another backend. An external tensor's buffer is ``Tensor.backend``, an index into
    ``backends``; ``Tensor.pin`` is an assignment made while the graph was built (llama.cpp pins
    every layer's norms to the layer's device, src/llama-context.cpp:2646-2661). The sources of
    ``graph``'s nodes are rewritten to the copies, as the real scheduler does."""
    s = _Sched(graph, backends, n_copies, op_offload)
    s.assign_from_buffers()
    s.expand()
    s.assign_rest()
    splits, copies = s.split()
    return s.graph_copy(splits, copies)
