"""Whether one replay of a cut trunk gives the whole trunk's buffers: ggml-alloc's steady state,
seen in the allocators' state.

A trunk whose layers repeat with a period P is replayed on a cut
(:func:`llamarig.plan.compute.replay.make_cut`): each long stretch of layers on one device keeps its
first P + 2 (or 2 P + 2) layers or a few more, what it leaves out being a multiple of P (2 P).
ggml-alloc is deterministic: what it does next depends only on its free blocks, on the tensors it
holds and on the nodes still to come (ggml-alloc.c:202-350 ggml_dyn_tallocr_alloc/free, 779-808
the frees when a source's last child is done). So if, in a stretch, the state after layer x
equals the state after layer x + d (every buffer's free blocks, and the tensors alive, matched by
their distance back from that point, their place, size and the children and views they still
wait for), the d layers after x + d of the whole trunk, built like the d layers before, do
exactly what those did, and so on: the whole trunk reaches no higher mark than the cut, and when
what the cut leaves out is a multiple of d, its last layers start from the state the cut's start
from. Layers x + 1 .. x + d must be ordinary ones: not the stretch's first (it reads the copies
from the previous device) nor its last (it feeds the next one; the model's last layer is built
differently, llama-graph's out_ids). d is P (gemma3, dense models) or 2 P: a residual stream
that changes place with each recurrent layer (qwen35: three of every four) makes the state
repeat only every other period, and a cut that leaves out an odd number of periods would end in
the other phase (a higher mark than the whole trunk's, seen on a two-GPU qwen35 layout with four
sequences); such a model's cuts leave out multiples of 2 P.

Before this, a trunk was replayed on two cuts, one period apart, and taken as steady when they
gave the same buffers: cheaper per replay, but two replays, and no proof (a -nkvo layout over RPC
servers gave two equal cuts and a different whole trunk). tests/plan/test_steady.py holds the
one replay against whole-trunk replays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llamarig.plan.compute.ggml_graph import FLAG_OUTPUT, DynAllocator, Tensor

__all__ = ["Probe", "State", "Watch", "Watches", "same", "snapshot"]


@dataclass(frozen=True)
class Probe:
    """One long stretch of a cut, its layers' outputs being graph nodes ``ends``: the allocators'
    state is taken after its layers 0, P, 2P, ... (the last layer left out), each scanning the
    nodes since the farthest checkpoint it is compared with (or the stretch's first node,
    ``start``)."""

    start: int
    ends: tuple[int, ...]
    period: int

    def first_copies(self, nodes: Sequence[Tensor]) -> tuple[int, ...]:
        """Where the scheduler copies onto another backend a tensor made before the stretch (a
        graph input: the masks, the positions): its copy is made once, where the stretch first
        needs it there (ggml-backend.cpp:1436-1545), and serves every later layer of that kind.
        A stretch cut short may free it at once where the whole one keeps it, so a stretch of
        layers holding such a copy does not stand for the layers after it."""
        seg = nodes[self.start:self.ends[-1] + 1]
        made = set(map(id, seg))
        return tuple(self.start + i for i, t in enumerate(seg)
                     if t.op == "NONE" and t.src and _from_before(t.src[0], made))

    def checkpoints(self, every: int) -> dict[int, int]:
        """Node index of each checkpoint -> the first node its scan reads (back to the checkpoint
        ``every`` periods before, the farthest one compared with)."""
        p, back = self.period, every * self.period
        return {self.ends[k]: (self.ends[k - back] + 1 if k >= back else self.start)
                for k in range(0, len(self.ends) - 1, p)}


def _from_before(s: Tensor, made: set[int]) -> bool:
    """Made before the stretch, and not a weight or a cache (whose copies serve one layer)."""
    base = s.view_src if s.view_src is not None else s
    return not base.external and id(s) not in made and id(base) not in made


#: a tensor alive at a checkpoint: its distance back from it (node indices) and what decides
#: its future (buffer, offset, bytes, children and views still to come, an output)
_Live = tuple[int, int, int, int, int, int, int]


def _alive(t: Tensor) -> bool:
    """Holding memory, or a view still waiting for children (its source stays alive for it)."""
    return bool(t.allocated) or (t.view_src is not None and t.n_children > 0 and t.view_src.allocated is not None)


@dataclass(frozen=True)
class State:
    """Every buffer's free blocks and the tensors alive at one checkpoint that were made since
    the scan's first node."""

    at: int
    blocks: tuple[tuple[tuple[int, int], ...], ...]
    live: tuple[tuple[_Live, Tensor], ...]


def snapshot(nodes: Sequence[Tensor], first: int, at: int, allocs: Sequence[DynAllocator]) -> State:
    """The state after node ``at``, scanning the nodes from ``first``."""
    blocks = tuple(tuple((b[0], b[1]) for b in a.blocks) for a in allocs)
    live: list[tuple[_Live, Tensor]] = []
    for j in range(first, at + 1):
        t = nodes[j]
        if t.allocated:
            live.append(((at - j, t.buffer, t.offset, t.asize, t.n_children, t.n_views, t.flags & FLAG_OUTPUT), t))
        elif t.view_src is not None and t.n_children and t.view_src.allocated is not None:
            live.append(((at - j, -1, 0, 0, t.n_children, 0, 0), t))
    return State(at, blocks, tuple(live))


def same(before: State, now: State) -> bool:
    """Whether an earlier state is the one just taken (``now``): the same free blocks, and the
    tensors alive in the same roles, places and sizes, waiting for the same children and views.
    A tensor of the earlier state still alive now is the same tensor at both points (a tensor
    never moves), wherever the scans began. A scan that reaches back at least as far as the
    checkpoint compared with sees every tensor made since: one made before and freed in between
    leaves other blocks free, or its place to a tensor with no counterpart."""
    if before.blocks != now.blocks:
        return False
    both = {id(t) for _x, t in before.live if _alive(t)}
    return (sorted(x for x, t in before.live if id(t) not in both)
            == sorted(x for x, t in now.live if id(t) not in both))


class Watch:
    """The states of one stretch after its layers 0, P, 2P, ..., each compared when taken with
    the one (and, ``every`` = 2, two) periods before: a steady state over a number of periods
    that divides what the cut leaves out, in layers that make none of the ``first_copies``."""

    def __init__(self, every: int = 2, first_copies: Sequence[int] = ()) -> None:
        self.states: list[State] = []
        self.every = every
        self.first_copies = first_copies
        self.steady = False

    def add(self, state: State) -> None:
        self.states.append(state)
        self.steady = any(self._stands(self.states[-1 - d], state) for d in range(1, self.every + 1)
                          if len(self.states) > d and self.every % d == 0)

    def _stands(self, before: State, now: State) -> bool:
        if any(before.at < c <= now.at for c in self.first_copies):
            return False
        return same(before, now)


class Watches:
    """The watches of a cut's long stretches over one allocation: which checkpoints to stop at
    and what to do there (:func:`llamarig.plan.compute.ggml_graph.allocate`'s ``on_checkpoint``)."""

    def __init__(self, nodes: Sequence[Tensor], probes: Sequence[Probe], every: int) -> None:
        self.nodes = nodes
        self.watches = [Watch(every, p.first_copies(nodes)) for p in probes]
        self.at: dict[int, tuple[Watch, int]] = {}
        for w, p in zip(self.watches, probes, strict=True):
            for at, first in p.checkpoints(every).items():
                self.at[at] = (w, first)

    def checkpoints(self) -> list[int]:
        return sorted(self.at)

    def seen(self, at: int, allocs: list[DynAllocator]) -> None:
        w, first = self.at[at]
        if not w.steady:  # one proof per stretch is enough
            w.add(snapshot(self.nodes, first, at, allocs))

    def steady(self) -> bool:
        return all(w.steady for w in self.watches)
