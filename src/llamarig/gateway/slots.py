"""Which llama-server slot a request goes to, so an agent's prompt cache stays warm.

llama-server gives a new prompt the idle slot whose cached prompt is most similar to it, else
the least recently used idle one (tools/server/server-context.cpp ``get_available_slot``, 1680
ff.), so a web or cron request can overwrite the 30K-token prefix an agent left in its slot, and
the agent's next turn reads it all again. A request's ``id_slot`` names the slot it must use
(the same function, 1686-1689: a busy slot makes it wait, the task is deferred).

A tier with ``pin_ttl_s`` pins a slot to each of its sessions (the conversation's affinity key:
the same backend and slot hold its prefix): while the pin lasts, other requests are sent to
other slots (``id_slot``); the session's next request gets its slot back. A pin ends after
``pin_ttl_s`` without a request of its session, or early when a request finds every other slot
busy (the pool needs it); each end is an event (:class:`PinEvent`) the gateway logs. A request
that names a slot the table knows is busy or pinned by another session is sent to a free one,
so it does not wait behind that slot (``llamarig bench`` pins its serial scenarios to slot 0).

One table per backend, in the gateway's process (one replica's own traffic: the slots another
replica or a direct client uses are not seen). Pure: the caller passes the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: sessions whose last slot is remembered per backend (oldest forgotten first)
LAST_SESSIONS = 4096


@dataclass
class Pin:
    session: str
    slot: int
    until: float  # time.monotonic()
    tier: str
    ttl_s: float


@dataclass(frozen=True)
class PinEvent:
    """A pin made, kept, or ended (``why``: "pinned", "expired", "pool_needed")."""

    why: str
    session: str
    slot: int
    tier: str


@dataclass(frozen=True)
class Choice:
    """The slot for one request: ``slot`` to send as ``id_slot`` (None: leave it to the server),
    and what happened to pins on the way."""

    slot: int | None
    pinned: bool = False  # the slot is this session's pin
    events: tuple[PinEvent, ...] = ()


@dataclass
class SlotTable:
    """One backend's slots as this gateway uses them: busy (by reservation id), pinned (by session)."""

    busy: dict[int, int] = field(default_factory=dict)  # slot -> reservation id
    pins: dict[str, Pin] = field(default_factory=dict)  # session -> its pin
    used: dict[int, float] = field(default_factory=dict)  # slot -> when it was last given out
    last: dict[str, int] = field(default_factory=dict)  # session -> the slot it last used (its prefix is there)
    _server_busy: frozenset[int] = frozenset()

    def expire(self, now: float) -> list[PinEvent]:
        gone = [p for p in self.pins.values() if p.until <= now]
        for p in gone:
            del self.pins[p.session]
        return [PinEvent("expired", p.session, p.slot, p.tier) for p in gone]

    def choose(self, n_slots: int, rid: int, now: float, *, session: str | None = None, tier: str = "",
               pin_ttl_s: float | None = None, asked: int | None = None, manage: bool = True,
               server_busy: frozenset[int] = frozenset()) -> Choice:
        """The slot for reservation ``rid`` (marked busy until :meth:`release`). ``manage``
        False (no tier pins): only a named slot that is busy is moved. ``server_busy``: the
        slots the server's last ``/slots`` showed processing (work this table did not place)."""
        events = self.expire(now)
        self._server_busy = server_busy
        own = self.pins.get(session) if session is not None else None
        if not manage and (asked is None or self._open(asked, None, n_slots)):
            return Choice(asked, events=tuple(events))  # the server's own choice
        if own is not None and own.slot not in self.busy:
            own.until = now + own.ttl_s
            return self._take(own.slot, rid, now, True, events, session)
        if asked is not None and self._open(asked, session, n_slots):
            return self._take(asked, rid, now, False, events, session)
        last = self.last.get(session) if session is not None else None
        if last is not None and self._open(last, session, n_slots):  # where its prefix was left
            return self._pinning(last, rid, now, session, tier, pin_ttl_s, own, events)
        free = [s for s in range(n_slots) if s not in self.busy and s not in server_busy]
        pinned = {p.slot for p in self.pins.values()}
        open_ = [s for s in free if s not in pinned]
        if open_:
            slot = min(open_, key=lambda s: self.used.get(s, 0.0))  # least recently used, as the server would
        elif free:  # only pinned slots are free: the pool needs one, the pin that ends soonest goes
            victim = min((p for p in self.pins.values() if p.slot in free), key=lambda p: p.until)
            del self.pins[victim.session]
            events.append(PinEvent("pool_needed", victim.session, victim.slot, victim.tier))
            slot = victim.slot
        else:
            return Choice(None, events=tuple(events))  # the table knows no free slot: the server decides
        return self._pinning(slot, rid, now, session, tier, pin_ttl_s, own, events)

    def _pinning(self, slot: int, rid: int, now: float, session: str | None, tier: str, pin_ttl_s: float | None,
                 own: Pin | None, events: list[PinEvent]) -> Choice:
        mine = False
        if pin_ttl_s is not None and session is not None and own is None:
            self.pins[session] = Pin(session, slot, now + pin_ttl_s, tier, pin_ttl_s)
            events.append(PinEvent("pinned", session, slot, tier))
            mine = True
        return self._take(slot, rid, now, mine, events, session)

    def _open(self, slot: int, session: str | None, n_slots: int) -> bool:
        if not 0 <= slot < n_slots or slot in self.busy or slot in self._server_busy:
            return False
        return all(p.slot != slot or p.session == session for p in self.pins.values())

    def _take(self, slot: int, rid: int, now: float, pinned: bool, events: list[PinEvent],
              session: str | None) -> Choice:
        self.busy[slot] = rid
        self.used[slot] = now
        if session is not None:
            self.last[session] = slot
            while len(self.last) > LAST_SESSIONS:
                del self.last[next(iter(self.last))]
        return Choice(slot, pinned, tuple(events))

    def release(self, rid: int) -> None:
        for s, r in list(self.busy.items()):
            if r == rid:
                del self.busy[s]

    def view(self, now: float) -> list[dict[str, object]]:
        """The pins, for /gateway/status (the session is a hash, never text)."""
        return [{"slot": p.slot, "tier": p.tier, "session": p.session[:12], "ttl_left_s": round(p.until - now, 1)}
                for p in sorted(self.pins.values(), key=lambda p: p.slot)]
