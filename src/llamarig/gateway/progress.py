"""How far each admitted request has got, which slot it holds, and how fast a backend decodes.

Sources, best first:

- ``GET /slots`` of the backend (read while it has requests in flight,
  ``health.slots_interval_s``): each processing slot's ``id_task``, ``next_token.n_decoded``
  (tokens generated so far) and ``params.n_predict`` (the max_tokens the gateway sent)
  (server-context.cpp:724-751); the cells the slots hold (llamarig.serverpool.cells_in_use). A
  request is matched to the slot whose ``n_predict`` is its max_tokens, in the order both
  arrived (the server numbers tasks as it receives them); a match holds while that slot runs
  that task, and a request whose task is gone is not matched again. Each matched request's own
  rate (its tokens since it was first seen decoding, over at least :data:`MIN_SPAN_S`) gives its end;
  their mean is the backend's rate now.
- the ``timings`` llama-server puts in each answer (``predicted_n``/``predicted_ms``,
  ``prompt_n``/``prompt_ms``): the decode and prefill rates of finished requests.
- the time since the request's first byte (streams) or its admission, at the measured rate,
  when the slot is not (yet) known.

Rates are exponentially weighted means per backend (weight :data:`ALPHA` for the newest).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from llamarig.serverpool import CellsInUse

#: weight of the newest measurement in the per-backend rates
ALPHA = 0.3
#: a /slots rate is the one used while its last reading is this recent (seconds); older, the
#: finished requests' rate (their timings) is used, and the next /slots readings start afresh
LIVE_S = 5.0
#: the shortest span a request's own rate is measured over (seconds)
MIN_SPAN_S = 1.0


@dataclass(frozen=True)
class SlotReading:
    """One slot in one ``GET /slots`` answer."""

    id: int
    processing: bool
    id_task: int | None
    n_decoded: int
    n_predict: int | None


def read_slots(data: Any) -> tuple[SlotReading, ...] | None:
    """The slots of a ``GET /slots`` answer; None when it is not a list of slots."""
    if not isinstance(data, list):
        return None
    out = []
    for s in data:
        if not isinstance(s, Mapping) or not isinstance(s.get("id"), int):
            continue
        nt = s.get("next_token")
        first = nt[0] if isinstance(nt, list) and nt and isinstance(nt[0], Mapping) else {}
        raw = s.get("params")
        params: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        out.append(SlotReading(
            id=s["id"], processing=bool(s.get("is_processing")), id_task=_int(s.get("id_task")),
            n_decoded=_int(first.get("n_decoded")) or 0, n_predict=_int(params.get("n_predict"))))
    return tuple(out)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class Rate:
    """An exponentially weighted mean of measured rates (tokens per second), with where the last
    measurement came from."""

    value: float | None = None
    source: str = ""  # "slots" (two readings of /slots) or "timings" (a finished request's)
    samples: int = 0

    def add(self, v: float, source: str) -> None:
        if v <= 0:
            return
        self.value = v if self.value is None else (1 - ALPHA) * self.value + ALPHA * v
        self.source = source
        self.samples += 1


@dataclass
class Held:
    """What a request is known to hold on its backend, and how far it got."""

    slot: int
    id_task: int
    n_decoded: int
    t: float  # when it was read
    n0: int = 0  # n_decoded when it was first seen decoding
    t0: float = 0.0  # ... and when

    def rate(self) -> float | None:
        """Its own decode rate since it was first seen decoding (tokens/s), over at least
        :data:`MIN_SPAN_S`: CPU time comes in bursts, a fraction of a second says little."""
        span = self.t - self.t0
        return (self.n_decoded - self.n0) / span if span >= MIN_SPAN_S and self.n_decoded > self.n0 else None


class Tracked(Protocol):
    """An admitted request as progress tracking sees it (llamarig.gateway.admission.Reservation)."""

    @property
    def id(self) -> int: ...  # the reservation's id
    @property
    def max_tokens(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def admitted_at(self) -> float: ...
    @property
    def t_first(self) -> float | None: ...  # first upstream byte (streams)


@dataclass
class BackendProgress:
    """One backend: its last ``/slots`` reading, rates, and which slot each request holds."""

    decode: Rate = field(default_factory=Rate)  # per stream, tokens/s, of finished requests (timings)
    live: Rate = field(default_factory=Rate)  # per stream, tokens/s, from the last readings of /slots
    live_t: float = 0.0  # when ``live`` was last measured
    prefill: Rate = field(default_factory=Rate)
    slots: tuple[SlotReading, ...] | None = None
    in_use: CellsInUse | None = None  # the cells the slots hold at that reading (llamarig.serverpool)
    t: float = 0.0  # time of the last /slots reading
    held: dict[int, Held] = field(default_factory=dict)  # reservation id -> its slot
    done: set[int] = field(default_factory=set)  # matched once, their task gone: not matched again
    unsupported: bool = False  # /slots answered 501 (--no-slots) or not a list
    stale: bool = False  # a request ended since the last reading: its cells are not what the slots hold now

    @property
    def cells(self) -> int | None:
        """The cells the slots hold now (llamarig.serverpool.cells_in_use), None when unread."""
        return None if self.slots is None or self.in_use is None else self.in_use.total

    def observe(self, slots: tuple[SlotReading, ...], t: float, requests: Iterable[Tracked],
                in_use: CellsInUse | None = None) -> None:
        """A new ``/slots`` reading at ``t`` (``in_use``: its cells in use): the requests matched
        to slots, then the live rate (the mean of their own rates)."""
        self.slots, self.in_use, self.t, self.stale = slots, in_use, t, False
        self._match(slots, t, sorted(requests, key=lambda r: r.admitted_at))
        rates = [r for h in self.held.values() for r in (h.rate(),) if r is not None]
        if rates:
            self.live = Rate(sum(rates) / len(rates), "slots", len(rates))
            self.live_t = t

    def _match(self, slots: tuple[SlotReading, ...], t: float, requests: list[Tracked]) -> None:
        running = {s.id: s for s in slots if s.processing and s.id_task is not None}
        ids = {r.id for r in requests}
        for rid, h in list(self.held.items()):
            s = running.get(h.slot)
            if rid not in ids or s is None or s.id_task != h.id_task:
                del self.held[rid]
                self.done.add(rid)
            else:
                if h.n_decoded == 0:  # its rate counts from its first token, not from its prefill
                    h.n0, h.t0 = s.n_decoded, t
                h.n_decoded, h.t = s.n_decoded, t
        taken = {h.slot for h in self.held.values()}
        free = sorted((s for s in running.values() if s.id not in taken), key=lambda s: s.id_task or 0)
        self.done &= ids
        for r in requests:
            if r.id in self.held or r.id in self.done:
                continue
            s = next((s for s in free if s.n_predict == r.max_tokens), None)
            if s is not None and s.id_task is not None:
                free.remove(s)
                self.held[r.id] = Held(s.id, s.id_task, s.n_decoded, t, s.n_decoded, t)

    def finished(self, timings: Mapping[str, int | float]) -> None:
        """A request ended: its server-side rates (``timings`` of its answer)."""
        pn, pms = timings.get("predicted_n"), timings.get("predicted_ms")
        if pn and pms and pn > 1:
            self.decode.add((pn - 1) / (pms / 1000.0), "timings")  # llama-server's (n-1)/t
        qn, qms = timings.get("prompt_n"), timings.get("prompt_ms")
        if qn and qms and qn > 8:
            self.prefill.add(qn / (qms / 1000.0), "timings")

    def forget(self, rid: int) -> None:
        """Request ``rid`` ended: its slot is no longer its own, and the last reading is older than
        the cells its slot holds now (the next ``/gateway/status`` or ``/metrics`` reads again)."""
        self.held.pop(rid, None)
        self.done.discard(rid)
        self.stale = True

    def rate(self, now: float) -> Rate:
        """The decode rate per stream to use at ``now``: the live one (from ``/slots``, read in
        the last :data:`LIVE_S` seconds), else the finished requests' (their timings)."""
        if self.live.value is not None and (now - self.live_t < LIVE_S or self.decode.value is None):
            return self.live
        return self.decode

    def generated(self, r: Tracked, now: float) -> tuple[int, str]:
        """(tokens generated by now, how it is known): from its slot, else estimated from its
        first byte or its admission at the measured rates; "" when nothing is known."""
        h = self.held.get(r.id)
        rate = self._rate_of(h, now)
        if h is not None:
            return min(r.max_tokens, h.n_decoded + int((now - h.t) * (rate or 0.0))), "slots"
        if rate is None:
            return 0, ""
        if r.t_first is not None:
            return min(r.max_tokens, int((now - r.t_first) * rate)), "first_byte"
        prefill = r.prompt_tokens / self.prefill.value if self.prefill.value else 0.0
        return min(r.max_tokens, max(0, int((now - r.admitted_at - prefill) * rate))), "admitted"

    def _rate_of(self, h: Held | None, now: float) -> float | None:
        own = h.rate() if h is not None else None
        return own if own is not None else self.rate(now).value

    def ends_in(self, r: Tracked, now: float) -> float | None:
        """Seconds until ``r`` has generated its max_tokens at its measured rate (its own, else
        the backend's): its upper bound, it may stop earlier; None without a rate."""
        rate = self._rate_of(self.held.get(r.id), now)
        if not rate:
            return None
        done, how = self.generated(r, now)
        prefill = 0.0
        if how == "admitted" and done == 0 and self.prefill.value:
            prefill = max(0.0, r.prompt_tokens / self.prefill.value - (now - r.admitted_at))
        return prefill + (r.max_tokens - done) / rate

    def slot_of(self, rid: int) -> int | None:
        h = self.held.get(rid)
        return h.slot if h is not None else None
