"""Retry-After from the reservations in flight: when will a refused request fit?

The answer replays admission forward in time. Each admitted request ends, at the latest, when it
has generated its max_tokens (its reservation's upper bound; its time limit, if sooner) at the
backend's measured decode rate (llamarig.gateway.progress): that frees its slot and its tokens.
At each end the queue ahead (requests of the same or a better priority, which are admitted
first) is admitted first fit, as :meth:`llamarig.gateway.admission.Admission.pump` does, and each
holds for its own max_tokens at that rate. The first moment the refused request fits (a free
slot, room in the pool, its tier's and cron's caps) is the estimate.

It is an upper bound in one way (requests often stop before max_tokens) and assumes the
per-stream rate stays as measured (fewer streams decode faster). Without a measured rate there is
no estimate (:attr:`Estimate.method` ``"unmeasured"``): the caller falls back to the floor.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llamarig.gateway.admission import AdmitRequest, Reservation, ReservationLedger, RetryAfter
from llamarig.gateway.pool import Cap, Share, cap_blocks
from llamarig.gateway.reasons import KEY_LIMIT, LEDGER_UNAVAILABLE, NO_BACKEND, SHUTTING_DOWN

if TYPE_CHECKING:
    from llamarig.gateway.backends import BackendState


@dataclass(frozen=True)
class Room:
    """One backend as admission sees it now."""

    name: str
    pool: int
    slots: int
    slot_ctx: int
    reserved: int
    in_flight: int
    rate: float | None  # decode, tokens/s per stream
    prefill_rate: float | None = None
    caps: Mapping[str, Cap] = field(default_factory=dict)  # group -> its cap here
    group_reserved: Mapping[str, int] = field(default_factory=dict)
    group_in_flight: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Running:
    """An admitted request: where, what it holds, and when it ends at the latest (None: unknown)."""

    backend: str
    tokens: int
    groups: tuple[str, ...]
    ends_in: float | None


@dataclass(frozen=True)
class Want:
    """A request that waits, or would."""

    tokens: int  # prompt + max_tokens
    max_tokens: int
    prompt_tokens: int = 0
    groups: tuple[str, ...] = ()
    backends: frozenset[str] | None = None  # where it may go; None: any
    timeout_s: float | None = None  # it ends by then at the latest


@dataclass(frozen=True)
class Estimate:
    seconds: float | None  # None: no estimate
    method: str  # "in_flight" (replayed), "now" (it fits now), "unmeasured" (no decode rate), "never"
    waits_for: int = 0  # admitted requests that end before it fits
    rate: float | None = None  # the decode rate used (tokens/s per stream), of the backend it fits on

    def to_json(self) -> dict[str, object]:
        """The 429 body's ``retry_after_estimate``: seconds rounded up to the millisecond, so that
        the header's whole seconds are always its ceiling (6.0004 s was written 6.0 beside a
        header of 7)."""
        return {"seconds": None if self.seconds is None else math.ceil(self.seconds * 1000) / 1000,
                "method": self.method, "waits_for": self.waits_for,
                "decode_tok_s": None if self.rate is None else round(self.rate, 2)}


class _Replay:
    """Admission's counters, moved forward event by event."""

    def __init__(self, rooms: Sequence[Room]) -> None:
        self.rooms = {r.name: r for r in rooms}
        self.used = {r.name: [r.reserved, r.in_flight] for r in rooms}
        self.groups = {(r.name, g): [r.group_reserved.get(g, 0), r.group_in_flight.get(g, 0)]
                       for r in rooms for g in r.caps}

    def fits(self, room: Room, w: Want) -> bool:
        tokens, n = self.used[room.name]
        if n >= room.slots or w.tokens > room.slot_ctx or tokens + w.tokens > room.pool:
            return False
        for g in w.groups:
            cap = room.caps.get(g)
            if cap is None:
                continue
            gt, gn = self.groups.get((room.name, g), [0, 0])
            if cap_blocks(cap, gt, gn, w.tokens):
                return False
        return True

    def move(self, backend: str, tokens: int, groups: tuple[str, ...], sign: int) -> None:
        u = self.used[backend]
        u[0] += sign * tokens
        u[1] += sign
        for g in groups:
            c = self.groups.setdefault((backend, g), [0, 0])
            c[0] += sign * tokens
            c[1] += sign

    def place(self, w: Want) -> Room | None:
        """The backend ``w`` fits on now (the least reserved fraction, as the picker chooses)."""
        best: tuple[float, str] | None = None
        for room in self.rooms.values():
            if (w.backends is None or room.name in w.backends) and self.fits(room, w):
                key = ((self.used[room.name][0] + w.tokens) / room.pool, room.name)
                best = key if best is None or key < best else best
        return self.rooms[best[1]] if best is not None else None


def holds_for(room: Room, w: Want) -> float | None:
    """How long ``w`` holds its reservation once admitted on ``room`` (None: no rate)."""
    if not room.rate:
        return None
    t = w.max_tokens / room.rate + (w.prompt_tokens / room.prefill_rate if room.prefill_rate else 0.0)
    return min(t, w.timeout_s) if w.timeout_s else t


def wait_for_room(me: Want, rooms: Sequence[Room], running: Sequence[Running],
                  ahead: Sequence[Want] = ()) -> Estimate:
    """When ``me`` fits, with ``ahead`` (in queue order) admitted before it (module docstring)."""
    sim = _Replay(rooms)
    seq = itertools.count()
    ends: list[tuple[float, int, str, int, tuple[str, ...]]] = []
    for r in running:
        if r.ends_in is not None and r.backend in sim.used:
            heapq.heappush(ends, (max(0.0, r.ends_in), next(seq), r.backend, r.tokens, r.groups))
    queue = [*ahead, me]
    t, freed = 0.0, 0
    while True:
        for w in list(queue):
            room = sim.place(w)
            if room is None:
                continue
            if w is me:
                return Estimate(t, "in_flight" if freed else "now", freed, room.rate)
            queue.remove(w)
            sim.move(room.name, w.tokens, w.groups, +1)
            hold = holds_for(room, w)
            if hold is not None:
                heapq.heappush(ends, (t + hold, next(seq), room.name, w.tokens, w.groups))
        if not ends:
            unmeasured = any(r.ends_in is None for r in running) or not any(room.rate for room in rooms)
            return Estimate(None, "unmeasured" if unmeasured else "never", freed)
        t, _n, backend, tokens, groups = heapq.heappop(ends)
        sim.move(backend, tokens, groups, -1)
        freed += 1


# ------------------------------------------------------------------------------ from the gateway's state


def want_of(req: AdmitRequest) -> Want:
    return Want(req.tokens, req.max_tokens or req.tokens, max(0, req.tokens - req.max_tokens), req.groups,
                req.backends, req.timeout_s)


def rooms_of(states: Iterable[BackendState], ledger: ReservationLedger, shares: Iterable[Share],
             now: float) -> list[Room]:
    """The healthy backends as the replay sees them, with the caps of the groups in ``shares``."""
    by_group = {s.group: s for s in shares if s.capped}
    out = []
    for st in states:
        if not st.healthy or st.removed or st.pool is None:
            continue
        p, name = st.pool, st.name
        out.append(Room(name, p.pool_tokens, p.slots, p.slot_ctx, ledger.reserved.get(name, 0),
                        ledger.in_flight.get(name, 0), st.progress.rate(now).value, st.progress.prefill.value,
                        {g: sh.cap(p) for g, sh in by_group.items()},
                        {g: ledger.group_reserved.get((name, g), 0) for g in by_group},
                        {g: ledger.group_in_flight.get((name, g), 0) for g in by_group}))
    return out


def running_of(states: Mapping[str, BackendState], ledger: ReservationLedger, now: float) -> list[Running]:
    """This replica's admitted requests and when each ends at the latest."""
    out = []
    for r in ledger.active.values():
        st = states.get(r.backend)
        ends = st.progress.ends_in(r, now) if st is not None else None
        if ends is not None and r.timeout_s:
            ends = min(ends, max(0.0, r.timeout_s - (now - r.admitted_at)))
        out.append(Running(r.backend, r.tokens, r.groups, ends))
    return out


def retry_after(states: Mapping[str, BackendState], ledger: ReservationLedger, req: AdmitRequest | None,
                reason: str, ahead: Sequence[AdmitRequest], *, floor_s: float, interval_s: float,
                default: AdmitRequest) -> RetryAfter:
    """Retry-After for ``req`` (None: ``default``, a new request of the default tier) refused for
    ``reason`` behind ``ahead``: when the replay says it fits, at least ``floor_s``; a request
    refused for no backend: the health check interval."""
    floor = max(1, math.ceil(floor_s))
    if reason in (NO_BACKEND, SHUTTING_DOWN, LEDGER_UNAVAILABLE):
        return RetryAfter(max(floor, math.ceil(interval_s)), {"seconds": interval_s, "method": "health_interval"})
    now = time.monotonic()
    me = req or default
    if reason == KEY_LIMIT and me.key is not None:
        ends = [e for r in ledger.active.values() if r.key == me.key
                for e in (_ends(states, r, now),) if e is not None]
        est = Estimate(min(ends), "key", 1) if ends else Estimate(None, "unmeasured")
    else:
        shares = [s for w in (me, *ahead) for s in w.shares]
        est = wait_for_room(want_of(me), rooms_of(states.values(), ledger, shares, now), running_of(states, ledger, now),
                            [want_of(w) for w in ahead])
    if est.seconds is None:
        return RetryAfter(floor, {**est.to_json(), "method": est.method, "fallback": "floor"})
    return RetryAfter(max(floor, math.ceil(est.seconds)), est.to_json())


def _ends(states: Mapping[str, BackendState], r: Reservation, now: float) -> float | None:
    st = states.get(r.backend)
    return st.progress.ends_in(r, now) if st is not None else None
