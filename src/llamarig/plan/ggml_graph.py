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

    def external(self, ne: tuple[int, ...] | list[int], type_: str = "f32", name: str = "") -> Tensor:
        n = _ne4(ne)
        return Tensor("NONE", n, type_, _contig_nb(n, type_) if type_ in TYPE_SIZE else (1, 1, 1, 1),
                      external=True, name=name)

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


@dataclass(frozen=True)
class AllocResult:
    size: int  # the buffer ggml_gallocr_reserve_n sizes: the allocator's high-water mark


def _same_layout(a: Tensor, b: Tensor) -> bool:
    return a.type == b.type and a.ne == b.ne and a.nb == b.nb


def allocate(graph: Graph, alignment: int = 32, trace: list[tuple[str, str, int, int, int]] | None = None) -> AllocResult:
    """ggml_gallocr_alloc_graph_impl (ggml-alloc.c:718-823) on one buffer: the size
    ggml_gallocr_reserve_n gives it (the dynamic allocator's high-water mark)."""
    alloc = _DynAllocator(alignment)
    hn: dict[int, _Hn] = {}

    def h(t: Tensor) -> _Hn:
        x = hn.get(id(t))
        if x is None:
            x = hn[id(t)] = _Hn()
        return x

    def is_allocated(t: Tensor) -> bool:
        return t.external or h(t).allocated

    def allocate_node(node: Tensor) -> None:
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
                    p.allocated = False
                    _free_extra(node, parent, p.offset)
                    return
        hnode.offset = alloc.alloc(node.nbytes)
        if trace is not None:
            trace.append(("A", node.name or node.op, hnode.offset, node.nbytes, alloc.max_size))

    def _free_extra(node: Tensor, parent: Tensor, off: int) -> None:
        ps = alloc._align(parent.nbytes)
        ns = alloc._align(node.nbytes)
        if ps > ns:
            alloc.free(off + ns, ps - ns)

    def free_node(node: Tensor) -> None:
        if node.flags & FLAG_OUTPUT:
            return
        x = h(node)
        alloc.free(x.offset, node.nbytes)
        if trace is not None:
            trace.append(("F", node.name or node.op, x.offset, node.nbytes, alloc.max_size))
        x.allocated = False

    for leaf in graph.leafs:
        allocate_node(leaf)
    for node in graph.nodes:
        if node.is_view() and node.op != "NONE":
            assert node.view_src is not None
            h(node.view_src).n_views += 1
        if node.flags & FLAG_INPUT:
            allocate_node(node)
        for s in node.src:
            h(s).n_children += 1
            if s.flags & FLAG_INPUT:
                allocate_node(s)
    for node in graph.nodes:
        for parent in node.src:
            allocate_node(parent)
        allocate_node(node)
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
    return AllocResult(alloc.max_size)
