"""A replay of ggml's graph construction and of ggml-alloc's compute-buffer sizing.

The compute buffer llama.cpp logs (``sched_reserve: CPU compute buffer size``) is the high-water
mark of ggml-alloc's dynamic allocator over the worst-case graph. It is not the largest set of
live tensors: the allocator places tensors in free blocks best-fit (ggml/src/ggml-alloc.c:202-310
ggml_dyn_tallocr_alloc), grows the buffer only at its end, merges freed neighbours (312-350) and
lets some ops write into their input (623-689 ggml_gallocr_allocate_node, the ops of
ggml_op_can_inplace at 22-50), so where a tensor lands depends on everything allocated before it.
To get the figure exactly, this module builds the same graph (tensor shapes, views, node order of
``ggml_build_forward_expand``: a depth-first walk of the sources, ggml/src/ggml.c:7245-7311) and
runs the same allocator over it (ggml_gallocr_alloc_graph_impl, ggml-alloc.c:718-823).

Only what the allocator sees is modelled: shapes, types, strides (for the in-place layout test),
views, inputs, outputs and external tensors (weights, KV and recurrent caches). Values are never
computed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

#: element sizes (bytes) of the types a compute graph allocates; quantized types only appear as
#: external tensors (weights, KV cache), whose size the allocator never needs
TYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8}

#: ggml_op_can_inplace (ggml-alloc.c:22-50)
INPLACE_OPS = frozenset({
    "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL", "DIV",
    "SQR", "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM", "RMS_NORM_BACK",
    "CLAMP", "SOFT_MAX", "SOFT_MAX_BACK",
})

FLAG_INPUT = 1
FLAG_OUTPUT = 2

#: the two backends of a scheduled graph (:func:`schedule`), in ggml-backend's priority order:
#: the GPU first, the CPU last (llama.cpp adds the CPU backend last, src/llama-context.cpp)
GPU = 0
CPU = 1
#: ggml_is_view_op (ggml/src/ggml-backend.cpp): the scheduler passes skip them
VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})


@dataclass(eq=False)
class Tensor:
    op: str
    ne: tuple[int, int, int, int]
    type: str
    nb: tuple[int, int, int, int]
    src: tuple[Tensor, ...] = ()
    view_src: Tensor | None = None
    view_offs: int = 0
    #: weights, KV / recurrent caches: their memory is not the compute buffer's
    external: bool = False
    flags: int = 0
    name: str = ""
    #: an external tensor's buffer: the backend it sits in (:data:`GPU` or :data:`CPU`), and
    #: whether that buffer holds weights (ggml's GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
    backend: int = -1
    weight: bool = False

    @property
    def nbytes(self) -> int:
        # ggml_nbytes for the (always contiguous) tensors the allocator sizes
        return prod(self.ne) * TYPE_SIZE[self.type]

    def is_view(self) -> bool:
        return self.view_src is not None


def _contig_nb(ne: tuple[int, ...], type_: str) -> tuple[int, int, int, int]:
    es = TYPE_SIZE.get(type_, 1)
    nb0 = es
    nb1 = nb0 * ne[0]
    nb2 = nb1 * ne[1]
    nb3 = nb2 * ne[2]
    return (nb0, nb1, nb2, nb3)


def _ne4(ne: tuple[int, ...] | list[int]) -> tuple[int, int, int, int]:
    t = tuple(int(x) for x in ne) + (1, 1, 1, 1)
    return (t[0], t[1], t[2], t[3])


class Graph:
    """A ggml context plus one cgraph: ops create tensors, ``expand`` appends them in
    ggml_build_forward_expand's order."""

    def __init__(self) -> None:
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self._seen: set[int] = set()

    # -------------------------------------------------------------------- tensor creation
    def new(self, op: str, ne: tuple[int, ...] | list[int], type_: str = "f32",
            src: tuple[Tensor, ...] = (), name: str = "") -> Tensor:
        n = _ne4(ne)
        return Tensor(op, n, type_, _contig_nb(n, type_), tuple(src), name=name)

    def input(self, ne: tuple[int, ...] | list[int], type_: str, name: str = "") -> Tensor:
        t = self.new("NONE", ne, type_, name=name)
        t.flags |= FLAG_INPUT
        return t

    def external(self, ne: tuple[int, ...] | list[int], type_: str = "f32", name: str = "",
                 backend: int = GPU, weight: bool = False) -> Tensor:
        n = _ne4(ne)
        return Tensor("NONE", n, type_, _contig_nb(n, type_) if type_ in TYPE_SIZE else (1, 1, 1, 1),
                      external=True, name=name, backend=backend, weight=weight)

    def view(self, a: Tensor, ne: tuple[int, ...], nb: tuple[int, ...] | None = None, offs: int = 0,
             op: str = "VIEW") -> Tensor:
        n = _ne4(ne)
        base = a.view_src if a.view_src is not None else a
        if nb is None:
            nbv = _contig_nb(n, a.type)
        else:
            es = TYPE_SIZE.get(a.type, 1)
            full = (es,) + tuple(nb) + tuple([0] * 3)
            nb1 = full[1]
            nb2 = full[2] if len(nb) > 1 else nb1 * n[1]
            nb3 = full[3] if len(nb) > 2 else nb2 * n[2]
            nbv = (es, nb1, nb2, nb3)
        return Tensor(op, n, a.type, nbv, (a,), view_src=base, view_offs=a.view_offs + offs,
                      external=base.external)

    def reshape(self, a: Tensor, *ne: int) -> Tensor:
        return self.view(a, tuple(ne), op="RESHAPE")

    def permute(self, a: Tensor, *axes: int) -> Tensor:
        ne = [0, 0, 0, 0]
        nb = [0, 0, 0, 0]
        for i, ax in enumerate(axes):
            ne[ax] = a.ne[i]
            nb[ax] = a.nb[i]
        base = a.view_src if a.view_src is not None else a
        return Tensor("PERMUTE", _ne4(ne), a.type, (nb[0], nb[1], nb[2], nb[3]), (a,), view_src=base,
                      view_offs=a.view_offs, external=base.external)

    def transpose(self, a: Tensor) -> Tensor:
        return self.permute(a, 1, 0, 2, 3)

    def view_tensor(self, a: Tensor, op: str, src: tuple[Tensor, ...]) -> Tensor:
        """ggml_view_tensor of ``a`` as the result of an op that writes into ``a`` (cpy, set_rows,
        an *_inplace op)."""
        base = a.view_src if a.view_src is not None else a
        return Tensor(op, a.ne, a.type, a.nb, src, view_src=base, view_offs=a.view_offs, external=base.external)

    # -------------------------------------------------------------------- ops
    def unary(self, a: Tensor, op: str = "UNARY") -> Tensor:
        return self.new(op, a.ne, a.type, (a,))

    def binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        return self.new(op, a.ne, a.type, (a, b))

    def mul_mat(self, a: Tensor, b: Tensor) -> Tensor:
        return self.new("MUL_MAT", (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), "f32", (a, b))

    def get_rows(self, a: Tensor, b: Tensor) -> Tensor:
        return self.new("GET_ROWS", (a.ne[0], b.ne[0], b.ne[1], b.ne[2]), "i32" if a.type == "i32" else "f32", (a, b))

    def cont(self, a: Tensor, *ne: int) -> Tensor:
        return self.new("CONT", ne if ne else a.ne, a.type, (a,))

    def cpy(self, a: Tensor, b: Tensor) -> Tensor:
        return self.view_tensor(b, "CPY", (a, b))

    def cast(self, a: Tensor, type_: str) -> Tensor:
        return self.new("CPY", a.ne, type_, (a,))

    def set_rows(self, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
        # sources b, c, a: ggml/src/ggml.c:4027-4032 ("order is weird due to legacy reasons")
        return self.view_tensor(a, "SET_ROWS", (b, c, a))

    def concat(self, a: Tensor, b: Tensor, dim: int) -> Tensor:
        ne = list(a.ne)
        ne[dim] = a.ne[dim] + b.ne[dim]
        return self.new("CONCAT", ne, a.type, (a, b))

    # -------------------------------------------------------------------- graph
    def expand(self, t: Tensor) -> None:
        """ggml_build_forward_expand: sources first, left to right, each tensor once."""
        stack: list[tuple[Tensor, int]] = [(t, 0)]
        while stack:
            node, i = stack.pop()
            if i == 0:
                if id(node) in self._seen:
                    continue
                self._seen.add(id(node))
            if i < len(node.src):
                stack.append((node, i + 1))
                s = node.src[i]
                if id(s) not in self._seen:
                    stack.append((s, 0))
                continue
            if node.op == "NONE":
                self.leafs.append(node)
            else:
                self.nodes.append(node)


# ======================================================================== ggml-alloc


class _DynAllocator:
    """ggml_dyn_tallocr with one chunk (the CPU and GPU buffer types have no size limit that a
    compute buffer reaches): free blocks sorted by offset, the last one is the open end."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.blocks: list[list[int]] = [[0, 1 << 62]]
        self.max_size = 0

    def _align(self, n: int) -> int:
        a = self.alignment
        return (n + a - 1) // a * a

    def alloc(self, size: int) -> int:
        size = self._align(size)
        best = -1
        best_size = None
        for i in range(len(self.blocks) - 1):  # best fit among all but the last block
            bs = self.blocks[i][1]
            if bs >= size and (best_size is None or bs <= best_size):
                best, best_size = i, bs
        if best == -1:
            best = len(self.blocks) - 1
        blk = self.blocks[best]
        off = blk[0]
        blk[0] += size
        blk[1] -= size
        if blk[1] == 0:
            del self.blocks[best]
        self.max_size = max(self.max_size, off + size)
        return off

    def free(self, off: int, size: int) -> None:
        size = self._align(size)
        bl = self.blocks
        for i, blk in enumerate(bl):
            if blk[0] + blk[1] == off:
                blk[1] += size
                if i < len(bl) - 1 and blk[0] + blk[1] == bl[i + 1][0]:
                    blk[1] += bl[i + 1][1]
                    del bl[i + 1]
                return
            if off + size == blk[0]:
                blk[0] = off
                blk[1] += size
                if i > 0 and bl[i - 1][0] + bl[i - 1][1] == blk[0]:
                    bl[i - 1][1] += blk[1]
                    del bl[i]
                return
        j = 0
        while j < len(bl) and bl[j][0] < off:
            j += 1
        bl.insert(j, [off, size])


@dataclass
class _Hn:
    n_children: int = 0
    n_views: int = 0
    allocated: bool = False
    offset: int = -1
    buffer: int = 0


@dataclass(frozen=True)
class AllocResult:
    size: int  # the buffer ggml_gallocr_reserve_n sizes: the allocator's high-water mark (buffer 0)
    #: every buffer's high-water mark (a scheduled graph: :data:`GPU`, :data:`CPU`)
    sizes: tuple[int, ...] = ()


def _same_layout(a: Tensor, b: Tensor) -> bool:
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


#: a buffer type's get_alloc_size: (buffer id, tensor) -> bytes
AllocSize = Callable[[int, Tensor], int]


def allocate(graph: Graph, alignment: int = 32, trace: list[tuple[str, str, int, int, int]] | None = None, *,
             node_buffer: dict[int, int] | None = None, alignments: tuple[int, ...] | None = None,
             alloc_size: AllocSize | None = None) -> AllocResult:
    """ggml_gallocr_alloc_graph_impl (ggml-alloc.c:718-823): the size ggml_gallocr_reserve_n
    gives each buffer (the dynamic allocators' high-water marks).

    One buffer by default. A scheduled graph (:func:`schedule`) passes ``node_buffer`` (id of a
    tensor -> its buffer, the scheduler's node and leaf backend ids), one alignment per buffer
    and the buffer types' ``alloc_size`` (ggml_backend_buft_get_alloc_size: the CUDA buffer type
    makes a FLASH_ATTN_EXT node larger, :func:`llamarig.plan.cuda_fattn.alloc_size`)."""
    aligns = alignments or (alignment,)
    allocs = [_DynAllocator(a) for a in aligns]
    hn: dict[int, _Hn] = {}
    bufmap = node_buffer or {}

    def h(t: Tensor) -> _Hn:
        x = hn.get(id(t))
        if x is None:
            x = hn[id(t)] = _Hn()
        return x

    def size_of(buf: int, t: Tensor) -> int:
        return alloc_size(buf, t) if alloc_size is not None else t.nbytes

    def is_allocated(t: Tensor) -> bool:
        return t.external or h(t).allocated

    def allocate_node(node: Tensor, buf: int) -> None:
        if is_allocated(node) or node.is_view():
            return
        hnode = h(node)
        hnode.allocated = True
        if node.op in INPLACE_OPS:
            for parent in node.src:
                p = h(parent)
                # ggml_gallocr_is_own: only a tensor this allocator placed (never a view, a
                # weight or a cache; ggml-alloc.c:589-591, 640-643)
                if not p.allocated:
                    continue
                if parent.flags & FLAG_OUTPUT:
                    continue
                if not _same_layout(node, parent):
                    continue
                if p.n_children == 1 and p.n_views == 0:
                    hnode.offset = p.offset
                    hnode.buffer = p.buffer
                    p.allocated = False
                    _free_extra(node, parent, p)
                    return
        hnode.buffer = buf
        hnode.offset = allocs[buf].alloc(size_of(buf, node))
        if trace is not None:
            trace.append(("A", node.name or node.op, hnode.offset, size_of(buf, node), allocs[buf].max_size))

    def _free_extra(node: Tensor, parent: Tensor, p: _Hn) -> None:
        al = allocs[p.buffer]
        ps = al._align(size_of(p.buffer, parent))
        ns = al._align(size_of(p.buffer, node))
        if ps > ns:
            al.free(p.offset + ns, ps - ns)

    def free_node(node: Tensor) -> None:
        if node.flags & FLAG_OUTPUT:
            return
        x = h(node)
        allocs[x.buffer].free(x.offset, size_of(x.buffer, node))
        if trace is not None:
            trace.append(("F", node.name or node.op, x.offset, size_of(x.buffer, node), allocs[x.buffer].max_size))
        x.allocated = False

    def buf_of(t: Tensor) -> int:
        return bufmap.get(id(t), 0)

    for leaf in graph.leafs:
        allocate_node(leaf, buf_of(leaf))
    for node in graph.nodes:
        if node.is_view() and node.op != "NONE":
            assert node.view_src is not None
            h(node.view_src).n_views += 1
        if node.flags & FLAG_INPUT:
            allocate_node(node, buf_of(node))
        for s in node.src:
            h(s).n_children += 1
            if s.flags & FLAG_INPUT:
                allocate_node(s, buf_of(node))
    for node in graph.nodes:
        for parent in node.src:
            allocate_node(parent, buf_of(node))
        allocate_node(node, buf_of(node))
        for parent in node.src:
            p = h(parent)
            p.n_children -= 1
            if p.n_children == 0 and p.n_views == 0:
                if parent.is_view():
                    vs = parent.view_src
                    assert vs is not None
                    vh = h(vs)
                    vh.n_views -= 1
                    if vh.n_views == 0 and vh.n_children == 0 and vh.allocated:
                        free_node(vs)
                elif p.allocated:
                    free_node(parent)
    sizes = tuple(a.max_size for a in allocs)
    return AllocResult(sizes[0], sizes)


# ======================================================================== ggml-backend's scheduler


@dataclass
class Scheduled:
    """The graph ggml_backend_sched allocates (its ``graph_copy``) and every tensor's buffer."""

    graph: Graph
    node_buffer: dict[int, int]
    #: what the scheduler copied from one backend to the other (the split inputs)
    copies: list[Tensor]


def _offload(node: Tensor) -> bool:
    """ggml_backend_cuda_device_offload_op (ggml-cuda.cu:5739-5758): a batch of at least
    op_offload_min_batch_size (32) rows; GET_ROWS never."""
    if node.op == "GET_ROWS":
        return False
    if node.op == "MUL_MAT":
        n = node.ne[1]
    elif node.op in ("MUL_MAT_ID", "ROPE"):
        n = node.ne[2]
    else:
        n = node.ne[1] * node.ne[2] * node.ne[3]
    return n >= 32


def schedule(graph: Graph) -> Scheduled:
    """ggml_backend_sched_split_graph (ggml/src/ggml-backend.cpp:1215-1745) for one GPU backend
    and the CPU, with one copy of the inputs (no pipeline parallelism): which backend runs every
    node, where the graph splits, and the copy of each tensor a split reads from the other
    backend. The GPU is assumed to run every op of the graph (the qwen35 graphs' ops all have
    CUDA kernels); an external tensor's buffer is ``Tensor.backend``.

    The result is the graph ggml-alloc sees: per split, for every input a dependency view of the
    source (so the source is never freed, ggml-backend.cpp:1660-1666) and the copy, allocated at
    the split's start; then the split's nodes, their sources replaced by the copies."""
    be: dict[int, int] = {}

    def bid(t: Tensor) -> int:
        return be.get(id(t), -1)

    # pass 1 (ggml_backend_sched_backend_id_from_cur, ggml-backend.cpp:1059-1120)
    def from_cur(t: Tensor) -> int:
        if t.external:
            return t.backend
        if t.view_src is not None and t.view_src.external:
            return t.view_src.backend
        if t.flags & FLAG_INPUT:
            return CPU
        if t.op not in ("ROPE", "FLASH_ATTN_EXT"):
            for s in t.src:
                if s.external and s.weight:
                    if s.backend == CPU and _offload(t):
                        return GPU
                    return s.backend
        return -1

    for leaf in graph.leafs:
        be[id(leaf)] = from_cur(leaf)
    for node in graph.nodes:
        b = from_cur(node)
        if b != -1:
            be[id(node)] = b
    # pass 2: expand the GPU down and up (skipping the CPU), then the rest down and up
    order = [n for n in graph.nodes if n.op not in VIEW_OPS]
    for seq, skip_cpu in ((order, True), (order[::-1], True), (order, False), (order[::-1], False)):
        cur = -1
        for node in seq:
            b = bid(node)
            if b != -1:
                cur = -1 if (skip_cpu and b == CPU) else b
            elif cur != -1:
                be[id(node)] = cur
    # pass 3: a node still unassigned goes where most of its sources are (first backend on a tie)
    for node in order:
        if bid(node) == -1:
            best, best_n = -1, -1
            for b in (GPU, CPU):
                n = sum(1 for s in node.src if (bid(s) if bid(s) != -1 else
                                                 (bid(s.view_src) if s.view_src is not None else -1)) == b)
                if n > best_n:
                    best, best_n = b, n
            be[id(node)] = best
    # pass 4: views and unassigned sources
    for node in graph.nodes:
        if node.view_src is not None and bid(node) == -1:
            be[id(node)] = bid(node.view_src)
        for s in node.src:
            if bid(s) == -1:
                be[id(s)] = bid(s.view_src) if s.view_src is not None else bid(node)
        if bid(node) == -1:
            be[id(node)] = GPU
    # pass 5: splits and their inputs (ggml-backend.cpp:1440-1540)
    splits: list[tuple[int, list[Tensor], list[Tensor]]] = []  # backend, inputs, nodes
    copies: dict[tuple[int, int], Tensor] = {}
    made: list[Tensor] = []
    cur = -1
    for node in graph.nodes:
        if node.op in VIEW_OPS:
            if not splits:
                splits.append((-1, [], []))
            splits[-1][2].append(node)
            continue
        b = bid(node)
        if not splits or (splits[-1][0] != b and splits[-1][0] != -1):
            splits.append((b, [], []))
        elif splits[-1][0] == -1:
            splits[-1] = (b, splits[-1][1], splits[-1][2])
        cur = b
        new_src = []
        for s in node.src:
            sb = bid(s)
            if sb != cur:
                key = (id(s), cur)
                cp = copies.get(key)
                if cp is None:
                    cp = Tensor("NONE", s.ne, s.type, s.nb, name=f"{s.name or s.op}#copy")
                    copies[key] = cp
                    be[id(cp)] = cur
                    splits[-1][1].append(s)
                    made.append(cp)
                new_src.append(cp)
            else:
                new_src.append(s)
        node.src = tuple(new_src)
        splits[-1][2].append(node)
    out = Graph()
    out.leafs = list(graph.leafs)
    for b, inputs, nodes in splits:
        for s in inputs:
            base = s.view_src if s.view_src is not None else s
            dep = Tensor("VIEW", s.ne, s.type, s.nb, (s,), view_src=base, view_offs=s.view_offs,
                         external=base.external)
            be[id(dep)] = bid(s)
            out.nodes.append(dep)
            out.nodes.append(copies[(id(s), b)])
        out.nodes.extend(nodes)
    return Scheduled(out, be, made)
