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
computed. Which backend runs each node, and the copies between backends, are
:mod:`llamarig.plan.compute.ggml_sched`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import count

from llamarig.gguf.ggml_types import TYPE_SIZES

#: ggml_op_can_inplace (ggml-alloc.c:22-50)
INPLACE_OPS = frozenset({
    "FILL", "SCALE", "DIAG_MASK_ZERO", "DIAG_MASK_INF", "ADD", "ADD_ID", "ADD1", "SUB", "MUL", "DIV",
    "SQR", "SQRT", "LOG", "UNARY", "ROPE", "ROPE_BACK", "SILU_BACK", "RMS_NORM", "RMS_NORM_BACK",
    "CLAMP", "SOFT_MAX", "SOFT_MAX_BACK",
})

FLAG_INPUT = 1
FLAG_OUTPUT = 2

#: the two backends of a graph scheduled for one GPU (:func:`llamarig.plan.compute.ggml_sched.schedule`
#: with one GPU backend), in ggml-backend's priority order: the GPU first, the CPU last
#: (llama.cpp adds the CPU backend last, src/llama-context.cpp)
GPU = 0
CPU = 1
#: ggml_is_view_op (ggml/src/ggml-backend.cpp): the scheduler passes skip them
VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})

Ne = tuple[int, int, int, int]

_stamps = count(1)


def element_size(type_: str) -> int:
    """Bytes per element of a type whose block is one element (f32, f16, i32, ...); 1 for a
    quantized type (only its row size is meaningful: gguf/ggml_types.py row_size)."""
    block, size = TYPE_SIZES[type_]
    return size if block == 1 else 1


def tensor_bytes(type_: str, ne: Ne, nb: Ne | None = None) -> int:
    """ggml_nbytes (ggml/src/ggml.c:1298-1320): the bytes from the first to the last element of
    the strides ``nb`` (a contiguous tensor's by default; the scheduler's copy of a view keeps the
    view's strides, ggml_dup_tensor_layout)."""
    block, size = TYPE_SIZES[type_]
    if nb is None:
        return size * ne[0] // block * ne[1] * ne[2] * ne[3]
    n0, n1, n2, n3 = ne
    if n0 <= 0 or n1 <= 0 or n2 <= 0 or n3 <= 0:
        return 0
    first = size + (n0 - 1) * nb[0] if block == 1 else n0 * nb[0] // block
    return first + (n1 - 1) * nb[1] + (n2 - 1) * nb[2] + (n3 - 1) * nb[3]


class Tensor:
    """A ggml_tensor as the scheduler and the allocator see it. The slots after ``pin`` are the
    scratch state of one :func:`llamarig.plan.compute.ggml_sched.schedule` and one :func:`allocate`
    (ggml-backend's per-tensor backend id, ggml-alloc's hash_node)."""

    __slots__ = ("op", "ne", "type", "nb", "src", "view_src", "view_offs", "external", "flags", "name",
                 "backend", "weight", "size", "pin",
                 "be", "n_children", "n_views", "allocated", "offset", "buffer", "asize", "stamp")

    # scratch: set by schedule and allocate (_reset) before they are read, not in __init__ (a graph
    # makes thousands of tensors); asize is the bytes ggml-alloc gave it (get_alloc_size)
    be: int
    n_children: int
    n_views: int
    allocated: bool | None
    offset: int
    buffer: int
    asize: int

    def __init__(self, op: str, ne: Ne, type_: str, nb: Ne, src: tuple[Tensor, ...] = (),
                 view_src: Tensor | None = None, view_offs: int = 0, external: bool = False, flags: int = 0,
                 name: str = "", backend: int = -1, weight: bool = False, size: int = -1) -> None:
        self.op = op
        self.ne = ne
        self.type = type_
        self.nb = nb
        self.src = src
        self.view_src = view_src
        self.view_offs = view_offs
        #: weights, KV / recurrent caches: their memory is not the compute buffer's
        self.external = external
        self.flags = flags
        self.name = name
        #: an external tensor's buffer: the backend it sits in (:data:`GPU` or :data:`CPU` for one
        #: GPU, an index into the scheduler's backends in general), and whether that buffer holds
        #: weights (ggml's GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
        self.backend = backend
        self.weight = weight
        #: bytes of an external tensor when known (a weight's size in the file), else computed
        self.size = size
        #: a backend set before scheduling (ggml_backend_sched_set_tensor_backend), -1 for none
        self.pin = -1
        self.stamp = 0

    @property
    def nbytes(self) -> int:
        """ggml_nbytes for the (contiguous) tensors the allocator sizes."""
        if self.size < 0:
            self.size = tensor_bytes(self.type, self.ne, self.nb)
        return self.size

    def is_view(self) -> bool:
        return self.view_src is not None

    def __repr__(self) -> str:
        return f"Tensor({self.op} {self.name!r} {self.ne} {self.type})"


#: element sizes of the types a block of one element (f32, f16, i32, ...); 1 for the others
_ES = {name: (size if block == 1 else 1) for name, (block, size) in TYPE_SIZES.items()}


_NB: dict[tuple[Ne, str], Ne] = {}


def contiguous_nb(ne: Ne, type_: str) -> Ne:
    """The strides ggml_new_tensor gives a tensor of shape ``ne`` and type ``type_``
    (ggml/src/ggml.c:1842-1846: nb[0] the element size, each next one the previous times ne; a
    quantized type counts 1 per element here, whose strides the graphs never compare); remembered:
    graphs repeat a few shapes many times."""
    key = (ne, type_)
    nb = _NB.get(key)
    if nb is None:
        es = _ES.get(type_, 1)
        nb1 = es * ne[0]
        nb2 = nb1 * ne[1]
        nb = _NB[key] = (es, nb1, nb2, nb2 * ne[2])
        if len(_NB) > 1 << 16:
            _NB.clear()
    return nb


def _ne4(ne: Sequence[int]) -> Ne:
    n = len(ne)
    if n == 4:
        return ne if type(ne) is tuple else (ne[0], ne[1], ne[2], ne[3])
    return (ne[0], ne[1] if n > 1 else 1, ne[2] if n > 2 else 1, 1)


class Graph:
    """A ggml context plus one cgraph: ops create tensors, ``expand`` appends them in
    ggml_build_forward_expand's order."""

    def __init__(self) -> None:
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        #: each main layer's output (the residual stream it hands on), in the order built
        self.layer_out: list[Tensor] = []
        self._stamp = next(_stamps)

    # -------------------------------------------------------------------- tensor creation
    def new(self, op: str, ne: Sequence[int], type_: str = "f32", src: tuple[Tensor, ...] = (),
            name: str = "") -> Tensor:
        n = _ne4(ne)
        t = Tensor(op, n, type_, contiguous_nb(n, type_), src)
        if name:
            t.name = name
        return t

    def input(self, ne: Sequence[int], type_: str, name: str = "") -> Tensor:
        return Tensor("NONE", _ne4(ne), type_, contiguous_nb(_ne4(ne), type_), flags=FLAG_INPUT, name=name)

    def external(self, ne: Sequence[int], type_: str = "f32", name: str = "", backend: int = GPU,
                 weight: bool = False, size: int = -1) -> Tensor:
        n = _ne4(ne)
        return Tensor("NONE", n, type_, contiguous_nb(n, type_), (), None, 0, True, 0, name, backend, weight, size)

    def view(self, a: Tensor, ne: Sequence[int], nb: Sequence[int] | None = None, offs: int = 0,
             op: str = "VIEW") -> Tensor:
        n = ne if len(ne) == 4 and type(ne) is tuple else _ne4(ne)
        base = a.view_src
        if base is None:
            base = a
        type_ = a.type
        if nb is None:
            nbv = contiguous_nb(n, type_)
        else:
            k = len(nb)
            nb1 = nb[0]
            nb2 = nb[1] if k > 1 else nb1 * n[1]
            nbv = (_ES.get(type_, 1), nb1, nb2, nb[2] if k > 2 else nb2 * n[2])
        return Tensor(op, n, type_, nbv, (a,), base, a.view_offs + offs, base.external)

    def reshape(self, a: Tensor, *ne: int) -> Tensor:
        return self.view(a, ne, op="RESHAPE")

    def permute(self, a: Tensor, *axes: int) -> Tensor:
        ne = [0, 0, 0, 0]
        nb = [0, 0, 0, 0]
        for i, ax in enumerate(axes):
            ne[ax] = a.ne[i]
            nb[ax] = a.nb[i]
        base = a.view_src if a.view_src is not None else a
        return Tensor("PERMUTE", (ne[0], ne[1], ne[2], ne[3]), a.type, (nb[0], nb[1], nb[2], nb[3]), (a,), base,
                      a.view_offs, base.external)

    def transpose(self, a: Tensor) -> Tensor:
        return self.permute(a, 1, 0, 2, 3)

    def view_tensor(self, a: Tensor, op: str, src: tuple[Tensor, ...]) -> Tensor:
        """ggml_view_tensor of ``a`` as the result of an op that writes into ``a`` (cpy, set_rows,
        an *_inplace op)."""
        base = a.view_src if a.view_src is not None else a
        return Tensor(op, a.ne, a.type, a.nb, src, base, a.view_offs, base.external)

    # -------------------------------------------------------------------- ops
    def unary(self, a: Tensor, op: str = "UNARY") -> Tensor:
        return Tensor(op, a.ne, a.type, contiguous_nb(a.ne, a.type), (a,))

    def binary(self, op: str, a: Tensor, b: Tensor) -> Tensor:
        return Tensor(op, a.ne, a.type, contiguous_nb(a.ne, a.type), (a, b))

    def mul_mat(self, a: Tensor, b: Tensor) -> Tensor:
        ne = (a.ne[1], b.ne[1], b.ne[2], b.ne[3])
        return Tensor("MUL_MAT", ne, "f32", contiguous_nb(ne, "f32"), (a, b))

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
        """ggml_build_forward_expand: sources first, left to right, each tensor once
        (ggml_visit_parents, ggml/src/ggml.c:7245-7311)."""
        stamp = self._stamp
        if t.stamp == stamp:
            return
        t.stamp = stamp
        _visit(t, stamp, self.nodes, self.leafs)


def _visit(node: Tensor, stamp: int, nodes: list[Tensor], leafs: list[Tensor]) -> None:
    """ggml_visit_parents: ``node``'s unvisited sources, then ``node`` (a function of the module,
    not a closure: a closure that calls itself is a reference cycle, and it would keep the whole
    graph alive until the cycle collector ran)."""
    for s in node.src:
        if s.stamp != stamp:
            s.stamp = stamp
            _visit(s, stamp, nodes, leafs)
    if node.op == "NONE":
        leafs.append(node)
    else:
        nodes.append(node)


# ======================================================================== ggml-alloc


class DynAllocator:
    """ggml_dyn_tallocr with one chunk (the CPU, GPU and RPC buffer types have no size limit that
    a compute buffer reaches): free blocks sorted by offset, the last one is the open end."""

    def __init__(self, alignment: int) -> None:
        self.alignment = alignment
        self.blocks: list[list[int]] = [[0, 1 << 62]]
        self.max_size = 0

    def _align(self, n: int) -> int:
        a = self.alignment
        return (n + a - 1) // a * a

    def alloc(self, size: int) -> int:
        a = self.alignment
        size = (size + a - 1) // a * a
        bl = self.blocks
        best = -1
        best_size = 1 << 63
        for i in range(len(bl) - 1):  # best fit among all but the last block
            bs = bl[i][1]
            if size <= bs <= best_size:
                best, best_size = i, bs
        blk = bl[best]  # -1: the open end
        off = blk[0]
        blk[0] += size
        blk[1] -= size
        if blk[1] == 0:
            del bl[best]
        if off + size > self.max_size:
            self.max_size = off + size
        return off

    def free(self, off: int, size: int) -> None:
        a = self.alignment
        size = (size + a - 1) // a * a
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


@dataclass(frozen=True)
class AllocResult:
    size: int  # the buffer ggml_gallocr_reserve_n sizes: the allocator's high-water mark (buffer 0)
    #: every buffer's high-water mark (a scheduled graph: one per backend, in the scheduler's order)
    sizes: tuple[int, ...] = ()


def _same_layout(a: Tensor, b: Tensor) -> bool:
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


#: a buffer type's get_alloc_size: (buffer id, tensor) -> bytes
AllocSize = Callable[[int, Tensor], int]


class _GAlloc:
    """ggml_gallocr: one dynamic allocator per buffer (ggml-alloc.c:589-823). A tensor's
    ``allocated`` is None when this allocator never places it (a view, a weight, a cache), else
    whether it holds memory now."""

    def __init__(self, alignments: Sequence[int], alloc_size: AllocSize | None) -> None:
        self.allocs = [DynAllocator(a) for a in alignments]
        self.alloc_size = alloc_size

    def size_of(self, buf: int, t: Tensor) -> int:
        """get_alloc_size of ``t`` in buffer ``buf``; remembered (a tensor lives in one buffer)."""
        a = t.asize
        if a < 0:
            f = self.alloc_size
            if f is not None:
                a = t.asize = f(buf, t)
            else:
                a = t.size
                if a < 0:
                    a = t.size = tensor_bytes(t.type, t.ne, t.nb)
                t.asize = a
        return a

    def allocate_node(self, node: Tensor, buf: int) -> None:
        """ggml_gallocr_allocate_node (ggml-alloc.c:623-689) for a tensor it owns and has not
        placed (``node.allocated is False``)."""
        node.allocated = True
        if node.op in INPLACE_OPS and self._reuse_parent(node):
            return
        node.buffer = buf
        node.offset = self.allocs[buf].alloc(self.size_of(buf, node))

    def _reuse_parent(self, node: Tensor) -> bool:
        for parent in node.src:
            # ggml_gallocr_is_own: only a tensor this allocator placed (never a view, a weight or a
            # cache; ggml-alloc.c:589-591, 640-643); outputs are never overwritten
            if not parent.allocated or parent.flags & FLAG_OUTPUT or not _same_layout(node, parent):
                continue
            if parent.n_children == 1 and parent.n_views == 0:
                node.offset = parent.offset
                node.buffer = parent.buffer
                parent.allocated = False
                self._free_extra(node, parent)
                return True
        return False

    def _free_extra(self, node: Tensor, parent: Tensor) -> None:
        al = self.allocs[parent.buffer]
        a = al.alignment
        ps = (self.size_of(parent.buffer, parent) + a - 1) // a * a
        ns = (self.size_of(parent.buffer, node) + a - 1) // a * a
        if ps > ns:
            al.free(parent.offset + ns, ps - ns)

    def free_node(self, node: Tensor) -> None:
        """A placed tensor's memory back to its buffer (its size was set when it was placed)."""
        if node.flags & FLAG_OUTPUT:
            return
        self.allocs[node.buffer].free(node.offset, node.asize)
        node.allocated = False

    def release_parents(self, src: tuple[Tensor, ...]) -> None:
        """A node's sources lose a child: a source (or the tensor it views) with no child and no
        view left is freed (ggml-alloc.c:779-808)."""
        for parent in src:
            n = parent.n_children = parent.n_children - 1
            if n or parent.n_views:
                continue
            vs = parent.view_src
            if vs is not None:
                n = vs.n_views = vs.n_views - 1
                if n == 0 and vs.n_children == 0 and vs.allocated:
                    self.free_node(vs)
            elif parent.allocated:
                self.free_node(parent)


def _reset(graph: Graph) -> None:
    """ggml-alloc's hash set cleared: every tensor of the graph (its sources and view sources are
    among its leafs and nodes: ggml_build_forward_expand visits them all); ``allocated`` None
    for what the allocator never places."""
    for group in (graph.leafs, graph.nodes):
        for t in group:
            t.n_children = t.n_views = 0
            t.allocated = None if t.external or t.view_src is not None else False
            t.asize = -1


def allocate(graph: Graph, alignment: int = 32, *, node_buffer: Sequence[int] | None = None,
             leaf_buffer: Sequence[int] | None = None, alignments: Sequence[int] | None = None,
             alloc_size: AllocSize | None = None, checkpoints: Sequence[int] = (),
             on_checkpoint: Callable[[int, list[DynAllocator]], None] | None = None) -> AllocResult:
    """ggml_gallocr_alloc_graph_impl (ggml-alloc.c:718-823): the size ggml_gallocr_reserve_n
    gives each buffer (the dynamic allocators' high-water marks).

    One buffer by default. A scheduled graph (:func:`llamarig.plan.compute.ggml_sched.schedule`) passes
    the buffer of every node and leaf (the scheduler's node and leaf backend ids), one alignment
    per buffer and the buffer types' ``alloc_size`` (ggml_backend_buft_get_alloc_size: the CUDA
    buffer type makes a FLASH_ATTN_EXT node larger, :func:`llamarig.plan.compute.cuda_fattn.alloc_size`).
    ``on_checkpoint(i, allocators)`` is called once node ``i`` of ``checkpoints`` (ascending node
    indices) is done: the state of every buffer there (:mod:`llamarig.plan.compute.steady`)."""
    _reset(graph)
    ga = _GAlloc(alignments or (alignment,), alloc_size)
    nodes = graph.nodes
    nbuf = node_buffer if node_buffer is not None else [0] * len(nodes)
    lbuf = leaf_buffer if leaf_buffer is not None else [0] * len(graph.leafs)
    allocate_node, release = ga.allocate_node, ga.release_parents
    for leaf, b in zip(graph.leafs, lbuf, strict=True):
        if leaf.allocated is False:
            allocate_node(leaf, b)
    # count children and views; allocate the graph inputs first (ggml-alloc.c:733-757)
    for node, b in zip(nodes, nbuf, strict=True):
        vs = node.view_src
        if vs is not None and node.op != "NONE":
            vs.n_views += 1
        if node.flags & FLAG_INPUT and node.allocated is False:
            allocate_node(node, b)
        for s in node.src:
            s.n_children += 1
            if s.flags & FLAG_INPUT and s.allocated is False:
                allocate_node(s, b)
    lo = 0
    for hi in (*checkpoints, len(nodes) - 1):
        for node, b in zip(nodes[lo:hi + 1], nbuf[lo:hi + 1], strict=True):
            src = node.src
            for parent in src:
                if parent.allocated is False:
                    allocate_node(parent, b)
            if node.allocated is False:
                allocate_node(node, b)
            if src:
                release(src)
        if on_checkpoint is not None and hi < len(nodes) - 1:
            on_checkpoint(hi, ga.allocs)
        lo = hi + 1
    sizes = tuple(a.max_size for a in ga.allocs)
    return AllocResult(sizes[0], sizes)
