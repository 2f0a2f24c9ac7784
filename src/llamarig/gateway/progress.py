"""How far each admitted request has got, which slot it holds, and how fast a backend decodes.

Sources, best first:

- ``GET /slots`` of the backend (read while it has requests in flight,
  ``health.slots_interval_s``): each processing slot's ``id_task``, ``next_token.n_decoded``
  (tokens generated so far), ``n_prompt_tokens`` (the cells its sequence holds) and
  ``params.n_predict`` (the max_tokens the gateway sent) (server-context.cpp:724-751). A
  request is matched to the slot whose ``n_predict`` is its max_tokens, in the order both
  arrived (the server numbers tasks as it receives them); a match holds while that slot runs
  that task, and a request whose task is gone is not matched again. Two readings of one slot give its decode rate.
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

#: weight of the newest measurement in the per-backend rates
ALPHA = 0.3


@dataclass(frozen=True)
class SlotReading:
    """One slot in one ``GET /slots`` answer."""

    id: int
    processing: bool
    id_task: int | None
    n_decoded: int
    n_tokens: int  # n_prompt_tokens: the cells the slot's sequence holds
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
            n_decoded=_int(first.get("n_decoded")) or 0, n_tokens=_int(s.get("n_prompt_tokens")) or 0,
            n_predict=_int(params.get("n_predict"))))
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
    """What a request is known to hold on its backend."""

    slot: int
    id_task: int
    n_decoded: int
    t: float  # when it was read


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

    decode: Rate = field(default_factory=Rate)  # per stream, tokens/s
    prefill: Rate = field(default_factory=Rate)
    slots: tuple[SlotReading, ...] | None = None
    t: float = 0.0  # time of the last /slots reading
    held: dict[int, Held] = field(default_factory=dict)  # reservation id -> its slot
    done: set[int] = field(default_factory=set)  # matched once, their task gone: not matched again
    unsupported: bool = False  # /slots answered 501 (--no-slots) or not a list

    @property
    def cells(self) -> int | None:
        """The cells the slots hold now (the sum of their ``n_prompt_tokens``), None when unread."""
        return None if self.slots is None else sum(s.n_tokens for s in self.slots)

    def observe(self, slots: tuple[SlotReading, ...], t: float, requests: Iterable[Tracked]) -> None:
        """A new ``/slots`` reading at ``t``: rates from the slots that decoded since the last
        one, then the requests matched to slots."""
        prev = {s.id: s for s in self.slots or ()}
        dt = t - self.t
        rates = [(s.n_decoded - p.n_decoded) / dt for s in slots if s.processing
                 for p in (prev.get(s.id),) if p is not None and p.processing and p.id_task == s.id_task
                 and s.n_decoded > p.n_decoded and dt > 0]
        if rates:
            self.decode.add(sum(rates) / len(rates), "slots")
        self.slots, self.t = slots, t
        self._match(slots, t, sorted(requests, key=lambda r: r.admitted_at))

    def _match(self, slots: tuple[SlotReading, ...], t: float, requests: list[Tracked]) -> None:
        running = {s.id: s for s in slots if s.processing and s.id_task is not None}
        ids = {r.id for r in requests}
        for rid, h in list(self.held.items()):
            s = running.get(h.slot)
            if rid not in ids or s is None or s.id_task != h.id_task:
                del self.held[rid]
                self.done.add(rid)
            else:
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
                self.held[r.id] = Held(s.id, s.id_task, s.n_decoded, t)

    def finished(self, timings: Mapping[str, int | float]) -> None:
        """A request ended: its server-side rates (``timings`` of its answer)."""
        pn, pms = timings.get("predicted_n"), timings.get("predicted_ms")
        if pn and pms and pn > 1:
            self.decode.add((pn - 1) / (pms / 1000.0), "timings")  # llama-server's (n-1)/t
        qn, qms = timings.get("prompt_n"), timings.get("prompt_ms")
        if qn and qms and qn > 8:
            self.prefill.add(qn / (qms / 1000.0), "timings")

    def forget(self, rid: int) -> None:
        self.held.pop(rid, None)
        self.done.discard(rid)

    def generated(self, r: Tracked, now: float) -> tuple[int, str]:
        """(tokens generated by now, how it is known): from its slot, else estimated from its
        first byte or its admission at the measured rates; "" when nothing is known."""
        rate = self.decode.value
        h = self.held.get(r.id)
        if h is not None:
            ahead = (now - h.t) * rate if rate else 0.0
            return min(r.max_tokens, h.n_decoded + int(ahead)), "slots"
        if rate is None:
            return 0, ""
        if r.t_first is not None:
            return min(r.max_tokens, int((now - r.t_first) * rate)), "first_byte"
        prefill = r.prompt_tokens / self.prefill.value if self.prefill.value else 0.0
        return min(r.max_tokens, max(0, int((now - r.admitted_at - prefill) * rate))), "admitted"

    def ends_in(self, r: Tracked, now: float) -> float | None:
        """Seconds until ``r`` has generated its max_tokens at the measured rate (its upper
        bound: it may stop earlier); None without a rate."""
        rate = self.decode.value
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
