"""KV-pool admission: pure reservation accounting plus a bounded priority queue with deadlines.

Why: with ``-np N --kv-unified`` all slots draw on one KV buffer of ``-c`` tokens; when it fills
during decode llama-server fails *every* active request ("Context size has been exceeded",
tools/server/server-context.cpp, the retry-with-smaller-batch path), and requests waiting for a
slot are deferred without bound (server-queue.cpp ``queue_tasks_deferred``). So a request is
admitted only when ``reserved + prompt_tokens + max_tokens <= pool`` and a slot is free.

Everything here runs on one asyncio event loop: no locks; state changes are synchronous.

Ownership: a reservation has exactly one owner at every moment, and is released exactly once.
``try_acquire`` returns it to its caller. A queued request holds a :class:`Ticket`: ``pump()``
hands the reservation to the ticket (synchronously, when it fits), and the ticket owns it until
``take()`` passes it to the caller, in the same synchronous step in which the caller learns it
was admitted. A caller that leaves (cancelled, client gone, any exception) calls ``abandon()``,
which leaves the queue or releases what the ticket was handed but not yet taken. No
``asyncio.wait_for`` sits between the queue and the request: Python 3.11's ``wait_for`` returns
the inner result and swallows a cancellation that arrives after its inner future is done, which
is how a request admitted and cancelled in the same loop turn used to end holding its
reservation. Deadlines are timer callbacks that reject a waiter only while it is still queued.
``Ledger.release`` and ``Admission.release`` are idempotent.

The ledger is behind one interface, :class:`ReservationLedger`: :class:`Ledger` (in this process,
the default) or ``llamarig.gateway.shared_ledger.RedisLedger`` (several gateway replicas sharing
one pool through Valkey/Redis). Admission asks it for a reservation with ``claim()``, which
returns a future decision: the in-process ledger decides at once (a future already done, so
nothing here suspends and the single-loop reasoning above holds unchanged); a shared ledger
decides in the store, atomically, and the decision arrives later. A decision that arrives after
its caller or waiter has left is released at once (:meth:`Admission._late`), so that gap leaks
nothing either.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llamarig.gateway import reasons
from llamarig.gateway.errors import Rejected as Rejected  # re-exported (it was defined here)
from llamarig.gateway.pool import Cap, Pool, Share, cap_blocks, group_limits
from llamarig.gateway.reasons import Blocked


@dataclass
class Reservation:
    id: int
    backend: str
    tokens: int
    key: str | None
    tier: str
    priority: int
    admitted_at: float
    released: bool = False
    key_limit: int = 0  # the key's limit of requests in flight (a shared ledger checks it over replicas)
    request_id: int = 0  # the request's id (the request log's, /gateway/status's)
    max_tokens: int = 0  # the max_tokens sent upstream (tokens = prompt + max_tokens)
    groups: tuple[str, ...] = ()  # tier:NAME, cron
    timeout_s: float | None = None  # the tier's time limit (it ends by then)
    t_first: float | None = None  # the first upstream byte (set by the pipeline)
    cron: bool = False
    client_gone: bool = False  # its client left; kept until the server has finished it (the pipeline)

    @property
    def prompt_tokens(self) -> int:
        return max(0, self.tokens - self.max_tokens)

    @property
    def max_or_all(self) -> int:
        """The tokens it may still generate at most (its max_tokens; all when not recorded)."""
        return self.max_tokens or self.tokens


class LedgerUnavailable(Exception):
    """The ledger cannot decide (a shared store is unreachable); admission answers 503."""


#: (group, its cap on the backend) for the capped groups of a request
Limits = tuple[tuple[str, Cap], ...]


class ReservationLedger(Protocol):
    """What admission needs from a ledger; :class:`Ledger` (in process) and
    ``shared_ledger.RedisLedger`` (Valkey/Redis, shared by replicas) implement it.

    ``reserved``/``in_flight`` are per backend, ``group_reserved``/``group_in_flight`` per
    (backend, group), over every replica sharing the ledger, as this replica last saw them (the
    picker's view; the claim itself is checked where the ledger lives); ``active`` holds this
    replica's own reservations."""

    reserved: dict[str, int]
    in_flight: dict[str, int]
    group_reserved: dict[tuple[str, str], int]
    group_in_flight: dict[tuple[str, str], int]
    active: dict[int, Reservation]

    def fits(self, backend: str, pool: Pool, tokens: int, limits: Limits = ()) -> bool: ...

    def claim(self, r: Reservation, pool: Pool | None, fresh: bool = False, limits: Limits = ()
              ) -> asyncio.Future[bool]:
        """Reserve ``r`` if it fits ``pool`` and its groups' ``limits``. ``fresh``: a request not
        queued here; a shared ledger also refuses it while a request of the same or a better
        priority waits on any replica (the queue rule of :meth:`Admission.try_acquire`)."""
        ...

    def queue_add(self, seq: int, priority: int) -> None:
        """A request of ``priority`` started waiting here (``seq``: its place in this queue)."""

    def queue_remove(self, seq: int) -> None:
        """It stopped waiting (admitted, timed out, gone)."""

    def release(self, r: Reservation) -> bool: ...

    def total_reserved(self) -> int: ...

    def total_in_flight(self) -> int: ...

    async def start(self, on_change: Callable[[], None], waiting: Callable[[], bool]) -> None: ...

    async def close(self) -> None: ...

    async def refresh(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...


def view_fits(led: ReservationLedger, backend: str, pool: Pool, tokens: int, limits: Limits) -> bool:
    """Does ``tokens`` fit ``backend`` as ``led`` counts it now (a slot, the slot context, the
    pool, the capped groups)?"""
    if led.in_flight.get(backend, 0) >= pool.slots or tokens > pool.slot_ctx:
        return False
    if led.reserved.get(backend, 0) + tokens > pool.pool_tokens:
        return False
    return not any(cap_blocks(cap, led.group_reserved.get((backend, g), 0), led.group_in_flight.get((backend, g), 0),
                              tokens) for g, cap in limits)


class Ledger:
    """Reserved tokens and in-flight requests per backend and per (backend, group), in this
    process (one gateway). ``release`` is idempotent."""

    def __init__(self) -> None:
        self.reserved: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}
        self.group_reserved: dict[tuple[str, str], int] = {}
        self.group_in_flight: dict[tuple[str, str], int] = {}
        self.active: dict[int, Reservation] = {}

    def claim(self, r: Reservation, pool: Pool | None, fresh: bool = False, limits: Limits = ()
              ) -> asyncio.Future[bool]:
        """Reserve ``r`` if it fits ``pool`` (None: the caller checked); decided at once. The
        queue is this process's own: ``fresh`` changes nothing here."""
        ok = pool is None or self.fits(r.backend, pool, r.tokens, limits)
        if ok:
            self.reserve(r)
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(ok)
        return fut

    def fits(self, backend: str, pool: Pool, tokens: int, limits: Limits = ()) -> bool:
        return view_fits(self, backend, pool, tokens, limits)

    def _count(self, r: Reservation, sign: int) -> None:
        self.reserved[r.backend] = self.reserved.get(r.backend, 0) + sign * r.tokens
        self.in_flight[r.backend] = self.in_flight.get(r.backend, 0) + sign
        for g in r.groups:
            k = (r.backend, g)
            self.group_reserved[k] = self.group_reserved.get(k, 0) + sign * r.tokens
            self.group_in_flight[k] = self.group_in_flight.get(k, 0) + sign

    def reserve(self, r: Reservation) -> Reservation:
        self._count(r, +1)
        self.active[r.id] = r
        return r

    def release(self, r: Reservation) -> bool:
        if r.released or r.id not in self.active:
            return False
        r.released = True
        del self.active[r.id]
        self._count(r, -1)
        return True

    def total_reserved(self) -> int:
        return sum(self.reserved.values())

    def total_in_flight(self) -> int:
        return sum(self.in_flight.values())

    def queue_add(self, seq: int, priority: int) -> None:
        return None

    def queue_remove(self, seq: int) -> None:
        return None

    async def start(self, on_change: Callable[[], None], waiting: Callable[[], bool]) -> None:
        return None

    async def close(self) -> None:
        return None

    async def refresh(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"kind": "local"}


@dataclass
class AdmitRequest:
    tokens: int
    tier: str
    priority: int = 0
    key: str | None = None
    key_limit: int = 0  # max in flight + queued for this key; 0 = none
    affinity: str | None = None
    exclude: frozenset[str] = frozenset()
    request_id: int = 0
    max_tokens: int = 0  # of ``tokens``: the rest is the prompt
    shares: tuple[Share, ...] = ()  # its groups (tier:NAME, cron) and their caps
    backends: frozenset[str] | None = None  # where its tier may go; None: any backend
    on_busy: str = "queue"  # "reject": 429 at once instead of queueing
    timeout_s: float | None = None
    cron: bool = False
    yields: bool = False  # admitted only while no better priority is in flight on the backend or queued
    queue_timeout_s: float | None = None  # its tier's (None: the admission's); the caller's deadline applies it
    yield_after_s: float = 0.0  # a yielding request waits until better priorities were idle this long

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(s.group for s in self.shares)


@dataclass(frozen=True)
class RetryAfter:
    """Retry-After of a rejection: whole seconds for the header, and how they were found."""

    seconds: int
    detail: dict[str, Any] = field(default_factory=dict)  # the 429 body's ``retry_after_estimate``


#: picks a backend for a request (not one of ``exclude``), or None when none fits now
Picker = Callable[["AdmitRequest", "frozenset[str]"], "str | None"]
#: why a request fits no backend now (llamarig.gateway.reasons.blocked), None if one fits
Diagnose = Callable[["AdmitRequest"], "Blocked | None"]
#: Retry-After for a request refused for ``reason``, behind the waiters ``ahead`` (queue order)
Estimator = Callable[["AdmitRequest | None", str, "list[AdmitRequest]"], RetryAfter]


def floor_estimator(floor_s: float) -> Estimator:
    """Retry-After without a view of the backends: the floor (unit tests, shutdown)."""
    def est(req: AdmitRequest | None, reason: str, ahead: list[AdmitRequest]) -> RetryAfter:
        return RetryAfter(max(1, math.ceil(floor_s)), {"seconds": None, "method": "floor"})
    return est


@dataclass(order=True)
class _Waiter:
    priority: int
    seq: int
    req: AdmitRequest = field(compare=False)
    fut: asyncio.Future[Reservation] = field(compare=False)
    enqueued: float = field(compare=False, default=0.0)
    gone: bool = field(compare=False, default=False)  # left the queue (admitted, dropped, rejected)
    taken: bool = field(compare=False, default=False)  # the reservation passed to the caller or released
    timer: asyncio.TimerHandle | None = field(compare=False, default=None)
    asking: bool = field(compare=False, default=False)  # a claim for it is being decided


class Ticket:
    """A queued request's place in the queue, and the owner of the reservation ``pump()`` hands it
    until :meth:`take` passes it on. Every ticket ends with ``take()`` or ``abandon()``."""

    __slots__ = ("_adm", "_w")

    def __init__(self, adm: Admission, w: _Waiter) -> None:
        self._adm = adm
        self._w = w

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until admitted or rejected (True) or ``timeout`` seconds (False). Cancelling the
        caller leaves the ticket as it is: the caller must ``abandon()`` it."""
        fut = self._w.fut
        if not fut.done():
            await asyncio.wait((fut,), timeout=timeout)
        return fut.done()

    def take(self) -> Reservation:
        """The reservation, now the caller's to release; Rejected when not admitted. Call after
        ``wait()`` said True; synchronous, so nothing can come between the hand-over and the caller."""
        fut = self._w.fut
        if not fut.done():
            raise AssertionError("Ticket.take() before the ticket is done")
        r = fut.result()  # raises Rejected (or CancelledError after an abandon)
        self._w.taken = True
        return r

    def abandon(self) -> None:
        """The caller is gone: leave the queue, or release the reservation handed to the ticket
        and not taken. Idempotent; a no-op after ``take()``."""
        w = self._w
        if w.taken:
            return
        fut = w.fut
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            w.taken = True
            self._adm.release(fut.result())  # admitted, but the caller is gone
        else:
            self._adm._drop(w)


class Admission:
    """Admit now, or queue (bounded, by priority then arrival) until admitted or the deadline."""

    def __init__(self, ledger: ReservationLedger, picker: Picker, *, queue_size: int, queue_timeout_s: float,
                 retry_after_s: float = 1.0,
                 any_backend: Callable[[frozenset[str] | None], bool] = lambda allowed: True,
                 diagnose: Diagnose | None = None, pool_of: Callable[[str], Pool | None] = lambda name: None,
                 tries: int = 3, estimator: Estimator | None = None) -> None:
        self.ledger = ledger
        self.picker = picker
        self.pool_of = pool_of  # the pool a claim is checked against (None: the picker's word)
        self.tries = tries  # backends tried when a shared ledger refuses the one picked
        self._pumping = False
        self._pump_again = False
        self.queue_size = queue_size
        self.queue_timeout_s = queue_timeout_s
        self.estimator = estimator or floor_estimator(retry_after_s)
        self.any_backend = any_backend
        self.diagnose = diagnose
        self._heap: list[_Waiter] = []
        self._queued = 0
        self._ids = itertools.count(1)
        self._seq = itertools.count()
        self.per_key: dict[str, int] = {}
        self.rejected: dict[str, int] = {}  # by code (what happened)
        self.rejected_reasons: dict[str, int] = {}  # by reason (the real cause)
        self.rejected_status: dict[int, int] = {}  # by HTTP status (429, 503)
        #: held groups (``tier:NAME``, ``cron``) -> until when (time.monotonic()); POST /gateway/hold
        self.holds: dict[str, float] = {}
        #: backend -> priority -> when a request of that priority last ended there (yield_after_s)
        self.ended: dict[str, dict[int, float]] = {}

    # -- views
    @property
    def queued(self) -> int:
        return self._queued

    def waiting(self) -> list[AdmitRequest]:
        """The queued requests in the order they are admitted (priority, then arrival)."""
        return [w.req for w in sorted(self._heap) if not w.gone]

    def queued_by_tier(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in self._heap:
            if not w.gone:
                out[w.req.tier] = out.get(w.req.tier, 0) + 1
        return out

    def queued_by_priority(self) -> dict[int, int]:
        """Waiting requests per priority (lower is served first)."""
        out: dict[int, int] = {}
        for w in self._heap:
            if not w.gone:
                out[w.priority] = out.get(w.priority, 0) + 1
        return dict(sorted(out.items()))

    def retry_after(self, req: AdmitRequest | None = None, reason: str = reasons.QUEUE_TIMEOUT) -> RetryAfter:
        """Retry-After for ``req`` (None: a new request of the default size) refused now."""
        ahead = [w for w in self.waiting() if req is None or (w is not req and w.priority <= req.priority)]
        return self.estimator(req, reason, ahead)

    def _reject(self, status: int, code: str, message: str, reason: str | None = None,
                details: dict[str, Any] | None = None, req: AdmitRequest | None = None) -> Rejected:
        ra = self.retry_after(req, reason or code)
        e = Rejected(status, code, message, ra.seconds, reason=reason, details=details, estimate=ra.detail)
        self.rejected[code] = self.rejected.get(code, 0) + 1
        self.rejected_status[status] = self.rejected_status.get(status, 0) + 1
        self.rejected_reasons[e.reason] = self.rejected_reasons.get(e.reason, 0) + 1
        return e

    def blocked(self, req: AdmitRequest) -> Blocked | None:
        """Why ``req`` fits no backend now (None: it fits, or no ``diagnose`` was given)."""
        group = self.held(req)
        if group is not None:
            return Blocked(reasons.HELD, {"group": group,
                                          "held_for_s": round(max(0.0, self.holds[group] - time.monotonic()), 1)})
        if req.yields and (self._better_waiting(req) or self._better_on()):
            better = self._better_on(req.priority)
            return Blocked(reasons.YIELDING, {"priority": req.priority, "busy_backends": sorted(better),
                                              "better_queued": self._better_waiting(req)})
        return self.diagnose(req) if self.diagnose is not None else None

    # -- holds and yielding (docs/gateway.md, "Cron that yields")
    def hold(self, groups: tuple[str, ...], seconds: float) -> None:
        """Admit nothing of ``groups`` for ``seconds`` (requests in flight run on; waiters wait)."""
        until = time.monotonic() + seconds
        for g in groups:
            self.holds[g] = until
        asyncio.get_running_loop().call_later(seconds, self.pump)

    def release_holds(self, groups: tuple[str, ...] = ()) -> None:
        """End the holds of ``groups`` (all: empty) and admit what now fits."""
        for g in groups or tuple(self.holds):
            self.holds.pop(g, None)
        self.pump()

    def active_holds(self) -> dict[str, float]:
        """Held group -> seconds left."""
        now = time.monotonic()
        for g in [g for g, t in self.holds.items() if t <= now]:
            del self.holds[g]
        return {g: t - now for g, t in self.holds.items()}

    def held(self, req: AdmitRequest) -> str | None:
        """The first of ``req``'s groups that is held now (None: none)."""
        if not self.holds:
            return None
        left = self.active_holds()
        return next((g for g in req.groups if g in left), None)

    def _better_waiting(self, req: AdmitRequest) -> bool:
        return any(not w.gone and w.priority < req.priority for w in self._heap)

    def _better_on(self, priority: int | None = None, idle_s: float = 0.0) -> frozenset[str]:
        """The backends where a request of a better priority than ``priority`` is in flight, or
        ended less than ``idle_s`` ago (a pump is due when that time has passed)."""
        act = self.ledger.active.values()
        out = {r.backend for r in act if not r.released and (priority is None or r.priority < priority)}
        if idle_s > 0 and priority is not None:
            now = time.monotonic()
            for name, by in self.ended.items():
                last = max((t for p, t in by.items() if p < priority), default=None)
                if last is not None and now - last < idle_s:
                    out.add(name)
                    self._pump_at(last + idle_s)
        return frozenset(out)

    def _pump_at(self, when: float) -> None:
        loop = asyncio.get_running_loop()
        loop.call_at(loop.time() + max(0.0, when - time.monotonic()) + 0.001, self.pump)

    def _gate(self, req: AdmitRequest) -> frozenset[str] | None:
        """Backends ``req`` must not go to now (held: None, it goes nowhere)."""
        if self.held(req) is not None:
            return None
        if not req.yields:
            return frozenset()
        if self._better_waiting(req):
            return None
        return self._better_on(req.priority, req.yield_after_s)

    # -- admission
    def _try(self, req: AdmitRequest, exclude: frozenset[str] = frozenset(), fresh: bool = False
             ) -> tuple[Reservation, asyncio.Future[bool]] | None:
        """Pick a backend and claim ``req`` on it: (reservation, decision), or None when the
        picker finds no backend that fits now."""
        gate = self._gate(req)
        if gate is None:
            return None
        name = self.picker(req, req.exclude | exclude | gate)
        if name is None:
            return None
        r = Reservation(next(self._ids), name, req.tokens, req.key, req.tier, req.priority, time.monotonic(),
                        key_limit=req.key_limit, request_id=req.request_id, max_tokens=req.max_tokens,
                        groups=req.groups, timeout_s=req.timeout_s, cron=req.cron)
        pool = self.pool_of(name)
        limits = group_limits(req.shares, pool) if pool is not None else ()
        return r, self.ledger.claim(r, pool, fresh, limits)

    def _unavailable(self, e: BaseException, req: AdmitRequest) -> Rejected:
        return self._reject(503, "ledger_unavailable", reasons.ledger_unavailable_message(str(e)),
                            reasons.LEDGER_UNAVAILABLE, {"error": str(e)}, req)

    def _late(self, r: Reservation, d: asyncio.Future[bool]) -> None:
        """A decision that arrived after its caller left: give back what it granted."""
        if not d.cancelled() and d.exception() is None and d.result():
            self.ledger.release(r)

    async def _decided(self, r: Reservation, d: asyncio.Future[bool], req: AdmitRequest) -> bool:
        """The claim's decision; the caller's cancellation while it is decided releases it later."""
        if not d.done():
            try:
                await asyncio.shield(d)
            except asyncio.CancelledError:
                if not d.done() or d.cancelled():
                    d.add_done_callback(functools.partial(self._late, r))
                    raise
                self._late(r, d)
                raise
            except Exception:  # noqa: BLE001 - the decision's own error, read from d below
                pass
        e = d.exception()
        if e is not None:
            if isinstance(e, LedgerUnavailable):
                raise self._unavailable(e, req)
            raise e
        return d.result()

    def _refuse_early(self, req: AdmitRequest) -> None:
        """Rejected when no backend (on the request's route) is up, or the key is at its limit."""
        if not self.any_backend(req.backends):
            b = self.blocked(req)
            details = dict(b.details) if b is not None and b.reason == reasons.NO_BACKEND else {}
            raise self._reject(503, "no_backend", reasons.cause(Blocked(reasons.NO_BACKEND, details)),
                               reasons.NO_BACKEND, details, req)
        if req.key is not None and req.key_limit and self.per_key.get(req.key, 0) >= req.key_limit:
            n = self.per_key.get(req.key, 0)
            raise self._reject(429, "key_limit", reasons.key_limit_message(req.key, n, req.key_limit),
                               reasons.KEY_LIMIT, {"key": req.key, "in_flight_or_queued": n, "limit": req.key_limit},
                               req)

    async def try_acquire(self, req: AdmitRequest) -> Reservation | None:
        """Admit now without queueing, or None. Rejected for no backend / key limit / a shared
        ledger out of reach. With the in-process ledger this never suspends."""
        self._refuse_early(req)
        # serve the queue first: only skip it when nobody of equal or higher priority waits
        if self._heap and any(not w.gone and w.priority <= req.priority for w in self._heap):
            return None
        refused: frozenset[str] = frozenset()
        for _i in range(self.tries):
            got = self._try(req, refused, fresh=True)
            if got is None:
                return None
            r, d = got
            if await self._decided(r, d, req):
                self._key_inc(req.key)
                return r
            refused |= {r.backend}  # another replica filled it since this one last looked
        return None

    def preempted(self, req: AdmitRequest) -> Rejected:
        """503 for a yielding request that a better priority took the place of (it may retry)."""
        return self._reject(503, "preempted", reasons.preempted_message(), reasons.YIELDING, {"priority": req.priority},
                            req)

    def busy(self, req: AdmitRequest) -> Rejected:
        """429 at once for a request whose tier (or cron) rejects instead of queueing: what
        blocks it now (slots, pool, its tier's cap, ...), or the queue ahead of it."""
        b = self.blocked(req)
        details: dict[str, Any] = {**(b.details if b is not None else {}), "need_tokens": req.tokens,
                                   "queued": self._queued}
        return self._reject(429, "busy", reasons.busy_message(b, self._queued),
                            b.reason if b is not None else reasons.QUEUE_AHEAD, details, req)

    def enqueue(self, req: AdmitRequest, deadline: float | None = None) -> Ticket:
        """Queue ``req`` (after ``try_acquire`` said no): a Ticket, or Rejected(queue_full). The
        ticket is rejected with queue_timeout at ``deadline`` (default: ``queue_timeout_s``
        from now) unless admitted first."""
        ahead = bool(self._heap)
        if self._queued >= self.queue_size:
            b = self.blocked(req)
            details: dict[str, Any] = {"queued": self._queued, "queue_size": self.queue_size}
            if b is not None:
                details.update(b.details, blocked_by=b.reason)
            raise self._reject(429, "queue_full", reasons.queue_full_message(self._queued, self.queue_size, b),
                               reasons.QUEUE_FULL, details, req)
        loop = asyncio.get_running_loop()
        timeout = self.queue_timeout_s if deadline is None else max(0.0, deadline - time.monotonic())
        w = _Waiter(req.priority, next(self._seq), req, loop.create_future(), time.monotonic())
        heapq.heappush(self._heap, w)
        self._queued += 1
        self._key_inc(req.key)
        self.ledger.queue_add(w.seq, w.priority)
        w.timer = loop.call_later(timeout, self._expire, w)
        if ahead:
            self.pump()  # first fit: it may fit beside the waiters ahead of it
        return Ticket(self, w)

    async def acquire(self, req: AdmitRequest, deadline: float | None = None) -> Reservation:
        """A reservation, or Rejected. Cancelling the caller never leaks a reservation, even when
        the cancellation arrives in the loop turn in which the request was admitted."""
        r = await self.try_acquire(req)
        if r is not None:
            return r
        if req.on_busy == "reject":
            raise self.busy(req)
        t = self.enqueue(req, deadline)
        try:
            await t.wait()
            return t.take()
        except BaseException:
            t.abandon()
            raise

    def _expire(self, w: _Waiter) -> None:
        """The deadline of a waiter passed (a timer callback): reject it unless admitted, naming
        what blocks it now (slots, pool, ...; llamarig.gateway.reasons)."""
        if w.fut.done() or not self._leave(w):
            return
        waited = time.monotonic() - w.enqueued
        b = self.blocked(w.req)
        details = {**(b.details if b is not None else {}), "need_tokens": w.req.tokens,
                   "waited_s": round(waited, 3),
                   "queue_timeout_s": w.req.queue_timeout_s if w.req.queue_timeout_s is not None else self.queue_timeout_s}
        w.fut.set_exception(self._reject(429, "queue_timeout", reasons.queue_timeout_message(waited, b),
                                         b.reason if b is not None else reasons.QUEUE_TIMEOUT, details, w.req))

    def _leave(self, w: _Waiter) -> bool:
        """Take a waiter out of the queue without admitting it (its key count goes back). False
        when it had left already; its future is the caller's to settle."""
        if w.gone:
            return False
        w.gone = True
        self._queued -= 1
        self._key_dec(w.req.key)
        if w.timer is not None:
            w.timer.cancel()
        self.ledger.queue_remove(w.seq)
        return True

    def _drop(self, w: _Waiter) -> None:
        """Take a waiter out of the queue without admitting it; its future, if pending, is
        cancelled. Idempotent."""
        if self._leave(w) and not w.fut.done():
            w.fut.cancel()

    def _key_inc(self, key: str | None) -> None:
        if key is not None:
            self.per_key[key] = self.per_key.get(key, 0) + 1

    def _key_dec(self, key: str | None) -> None:
        if key is not None:
            n = self.per_key.get(key, 0) - 1
            if n <= 0:
                self.per_key.pop(key, None)
            else:
                self.per_key[key] = n

    def release(self, r: Reservation) -> None:
        """Give the tokens back (idempotent) and admit waiters that now fit."""
        if self.ledger.release(r):
            self.ended.setdefault(r.backend, {})[r.priority] = time.monotonic()
            self._key_dec(r.key)
            self.pump()

    def pump(self) -> None:
        """Admit queued requests that fit now, in priority order (first fit). Each admitted
        waiter's ticket owns its reservation from here until ``take()`` or ``abandon()``.

        Synchronous while the ledger decides at once; when a decision is pending, the pass goes
        on from the decision's callback (waiters stay in order) and a pump asked for meanwhile
        runs after it."""
        if self._pumping:
            self._pump_again = True
            return
        if not self._heap:
            return
        self._pumping = True
        self._pump_from(iter(sorted(self._heap)))

    def _pump_from(self, it: Any) -> None:
        try:
            for w in it:
                if w.gone or w.asking:
                    continue
                if w.fut.done():  # cancelled from outside: no longer waiting
                    self._drop(w)
                    continue
                got = self._try(w.req)
                if got is None:
                    continue
                r, d = got
                if not d.done():
                    w.asking = True
                    d.add_done_callback(functools.partial(self._pump_resume, w, r, it))
                    return
                self._settle(w, r, d)
        except BaseException:
            self._pump_end()
            raise
        self._pump_end()

    def _pump_resume(self, w: _Waiter, r: Reservation, it: Any, d: asyncio.Future[bool]) -> None:
        w.asking = False
        self._settle(w, r, d)
        if not d.cancelled() and d.exception() is not None:
            self._pump_end()  # the ledger cannot decide now: the rest of this pass could not either
            return
        self._pump_from(it)

    def _pump_end(self) -> None:
        self._heap = [w for w in self._heap if not w.gone]
        heapq.heapify(self._heap)
        self._pumping = False
        if self._pump_again:
            self._pump_again = False
            self.pump()

    def _settle(self, w: _Waiter, r: Reservation, d: asyncio.Future[bool]) -> None:
        """A queued waiter's claim was decided: hand the reservation to its ticket, or give it
        back when the waiter left meanwhile (its key count went back when it left)."""
        if d.cancelled() or d.exception() is not None or not d.result():
            return  # not now (or the store out of reach): it stays queued until its deadline
        if w.gone or w.fut.done():
            self.ledger.release(r)
            return
        w.gone = True
        self._queued -= 1
        if w.timer is not None:
            w.timer.cancel()
        self.ledger.queue_remove(w.seq)
        w.fut.set_result(r)

    def reject_all(self, code: str, message: str) -> None:
        """Fail every waiter (shutdown)."""
        for w in self._heap:
            if self._leave(w) and not w.fut.done():
                w.fut.set_exception(self._reject(503, code, message, req=w.req))
        self._heap = []
        self._queued = 0
