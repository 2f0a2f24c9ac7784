"""Why a request was not admitted: a machine-readable reason code, the numbers behind it, and the
sentence a person reads (a catalogue Message: English, written in the gateway's language when
an error body is sent, llamarig.gateway.server.Gateway.lang).

A rejection (llamarig.gateway.errors.Rejected) carries ``code`` (what happened to the request:
``queue_timeout``, ``queue_full``, ``key_limit``, ``no_backend``, ``shutting_down``) and
``reason`` (why: the real cause, one of :data:`REASONS`) with ``details`` (the numbers). A
queued request that times out, or finds the queue full, was blocked by something: all slots
busy, the KV pool full, a request larger than any free slot's context, or no backend; that is
its reason. ``queue_timeout`` as a reason means the gateway could not tell (nothing blocks it
now, it was simply not admitted in time behind the requests ahead of it).

JSON keys and reason codes stay English; only the messages are translated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llamarig.gateway.pool import Share, cap_blocks
from llamarig.i18n import N_, _, join

if TYPE_CHECKING:
    from llamarig.gateway.admission import ReservationLedger as Ledger
    from llamarig.gateway.backends import BackendState

SLOTS_BUSY = "slots_busy"
POOL_FULL = "pool_full"
EXCEEDS_SLOT_CTX = "exceeds_slot_ctx"
QUEUE_FULL = "queue_full"
QUEUE_TIMEOUT = "queue_timeout"
KEY_LIMIT = "key_limit"
NO_BACKEND = "no_backend"
SHUTTING_DOWN = "shutting_down"
LEDGER_UNAVAILABLE = "ledger_unavailable"
TIER_CAP = "tier_cap"
QUEUE_AHEAD = "queue_ahead"
HELD = "held"
YIELDING = "yielding"

#: reason code -> a short label (``llamarig gateway status``: "429s by reason: slots busy 3")
REASONS: dict[str, str] = {
    SLOTS_BUSY: N_("slots busy"),
    POOL_FULL: N_("KV pool full"),
    EXCEEDS_SLOT_CTX: N_("larger than a slot"),
    QUEUE_FULL: N_("queue full"),
    QUEUE_TIMEOUT: N_("queue timeout"),
    KEY_LIMIT: N_("key concurrency limit"),
    NO_BACKEND: N_("no backend"),
    SHUTTING_DOWN: N_("shutting down"),
    LEDGER_UNAVAILABLE: N_("shared ledger unreachable"),
    TIER_CAP: N_("tier or cron cap"),
    QUEUE_AHEAD: N_("requests queued ahead"),
    HELD: N_("tier held"),
    YIELDING: N_("yielding to higher tiers"),
}


def label(reason: str) -> str:
    """The short label of a reason code, translated (an unknown code as it is)."""
    text = REASONS.get(reason)
    return _(text) if text is not None else reason


@dataclass(frozen=True)
class Blocked:
    """What keeps a request of ``need_tokens`` from being admitted now."""

    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)


def blocked(states: Iterable[BackendState], ledger: Ledger, tokens: int,
            exclude: frozenset[str] = frozenset(), *, shares: tuple[Share, ...] = (),
            allowed: frozenset[str] | None = None) -> Blocked | None:
    """Why a request of ``tokens`` (prompt + max_tokens) fits no backend now; None if one fits.

    The candidates are the backends :func:`llamarig.gateway.backends.choose_backend` considers
    (healthy, not removed, pool known, not excluded by a failover, among ``allowed``: its tier's
    route). None: ``no_backend``. A cap of its tier or of cron (``shares``) reached on every one:
    ``tier_cap``. All their slots in use: ``slots_busy`` (slot counts summed; the pool numbers show
    it was not the pool). Otherwise, among the backends with a free slot: the request larger than
    each one's slot context: ``exceeds_slot_ctx``; else ``pool_full``, with the numbers of the
    backend that has the most room left.
    """
    every = list(states)
    cands = [s for s in every if s.healthy and not s.removed and s.pool is not None and s.name not in exclude
             and (allowed is None or s.name in allowed)]
    if not cands:
        healthy = sum(1 for s in every if s.healthy and not s.removed)
        details: dict[str, Any] = {"healthy_backends": healthy, "backends": sum(1 for s in every if not s.removed),
                                   "tried_backends": len(exclude)}
        if allowed is not None:
            details["routed_to"] = sorted(allowed)
        return Blocked(NO_BACKEND, details)
    capped = _capped(cands, ledger, tokens, shares)
    if capped is not None and len(capped[1]) == len(cands):
        return capped[0]
    open_ = [s for s in cands if capped is None or s.name not in capped[1]]
    return _room(open_, ledger, tokens)


def _capped(cands: list[BackendState], ledger: Ledger, tokens: int, shares: tuple[Share, ...]
            ) -> tuple[Blocked, set[str]] | None:
    """The first cap that blocks, and the backends where some cap blocks; None: none does."""
    first: Blocked | None = None
    names: set[str] = set()
    for s in cands:
        assert s.pool is not None
        for sh in shares:
            if not sh.capped:
                continue
            cap = sh.cap(s.pool)
            held, n = ledger.group_reserved.get((s.name, sh.group), 0), ledger.group_in_flight.get((s.name, sh.group), 0)
            if cap_blocks(cap, held, n, tokens):
                names.add(s.name)
                first = first or Blocked(TIER_CAP, {
                    "group": sh.group, "backend": s.name, "group_in_flight": n, "max_slots": cap.slots,
                    "group_reserved_tokens": held, "max_tokens": cap.tokens, "max_pool_share": sh.pool_share,
                    "need_tokens": tokens})
                break
    return (first, names) if first is not None else None


def _room(cands: list[BackendState], ledger: Ledger, tokens: int) -> Blocked | None:
    busy = slots = reserved = pool = 0
    free: list[BackendState] = []
    for s in cands:
        assert s.pool is not None
        n = ledger.in_flight.get(s.name, 0)
        busy += min(n, s.pool.slots)
        slots += s.pool.slots
        reserved += ledger.reserved.get(s.name, 0)
        pool += s.pool.pool_tokens
        if n < s.pool.slots:
            free.append(s)
    if not free:
        return Blocked(SLOTS_BUSY, {"busy_slots": busy, "slots": slots, "reserved_tokens": reserved,
                                    "pool_tokens": pool, "need_tokens": tokens})
    fit = [s for s in free if s.pool is not None and tokens <= s.pool.slot_ctx]
    if not fit:
        return Blocked(EXCEEDS_SLOT_CTX, {"need_tokens": tokens,
                                          "slot_ctx": max(s.pool.slot_ctx for s in free if s.pool is not None)})

    def room(s: BackendState) -> int:
        assert s.pool is not None
        return s.pool.pool_tokens - ledger.reserved.get(s.name, 0)

    best = max(fit, key=room)
    if room(best) >= tokens:
        return None
    assert best.pool is not None
    return Blocked(POOL_FULL, {"reserved_tokens": ledger.reserved.get(best.name, 0), "pool_tokens": best.pool.pool_tokens,
                               "need_tokens": tokens, "busy_slots": busy, "slots": slots, "backend": best.name})


def group_label(group: str) -> str:
    """``tier:C2`` -> "tier C2", ``cron`` -> "cron" (translated)."""
    if group.startswith("tier:"):
        return _("tier {tier}").format(tier=group[5:])
    return _("cron jobs") if group == "cron" else group


def cause(b: Blocked | None) -> str:
    """The sentence for what blocks a request (translated; numbers as they are)."""
    d = b.details if b is not None else {}
    r = b.reason if b is not None else QUEUE_TIMEOUT
    if r == SLOTS_BUSY:
        return _("all slots busy: {busy} of {slots} in use (KV pool: {reserved} of {pool} tokens reserved, "
                 "this request needs {need})").format(busy=d["busy_slots"], slots=d["slots"],
                                                      reserved=d["reserved_tokens"], pool=d["pool_tokens"],
                                                      need=d["need_tokens"])
    if r == POOL_FULL:
        return _("KV pool full: {reserved} of {pool} tokens reserved, this request needs {need} "
                 "(prompt + max_tokens; {busy} of {slots} slots in use)").format(
                     reserved=d["reserved_tokens"], pool=d["pool_tokens"], need=d["need_tokens"],
                     busy=d["busy_slots"], slots=d["slots"])
    if r == EXCEEDS_SLOT_CTX:
        return _("this request needs {need} tokens (prompt + max_tokens), more than the {slot_ctx}-token "
                 "context of any free slot").format(need=d["need_tokens"], slot_ctx=d["slot_ctx"])
    if r == TIER_CAP:
        return _tier_cap(d)
    if r == HELD:
        return _("{group} held for {seconds} s more (POST /gateway/hold)").format(
            group=group_label(d["group"]), seconds=d["held_for_s"])
    if r == YIELDING:
        return _("it yields to higher tiers: a request of a better priority is in flight on {backends} or "
                 "waits").format(backends=", ".join(d["busy_backends"]) or "-")
    if r == QUEUE_AHEAD:
        return _("{queued} requests of the same or a better priority wait ahead of it").format(queued=d.get("queued", 0))
    if r == NO_BACKEND:
        if d.get("tried_backends") and d.get("healthy_backends"):
            return _("no backend left to try: {tried} failed for this request ({healthy} of {backends} "
                     "healthy)").format(tried=d["tried_backends"], healthy=d["healthy_backends"],
                                        backends=d["backends"])
        if "backends" not in d:
            return _("no healthy backend")
        return _("no healthy backend ({healthy} of {backends} healthy)").format(
            healthy=d.get("healthy_backends", 0), backends=d.get("backends", 0))
    return _("nothing blocks it now; it was not admitted in time behind the requests ahead of it")


def preempted_message() -> str:
    return _("preempted: a request of a better priority was admitted on its backend, and this tier yields "
             "(retry after Retry-After)")


def _tier_cap(d: Mapping[str, Any]) -> str:
    if d.get("max_slots") == 0:
        return _("{group} is held: max_slots = 0").format(group=group_label(d["group"]))
    if d.get("max_slots") is not None and d.get("group_in_flight", 0) >= d["max_slots"]:
        return _("{group} hold {n} of their {cap} slots on {backend} (max_slots)").format(
            group=group_label(d["group"]), n=d["group_in_flight"], cap=d["max_slots"], backend=d["backend"])
    return _("{group} hold {held} of their {cap} tokens on {backend} (max_pool_share {share}), this request "
             "needs {need}").format(group=group_label(d["group"]), held=d["group_reserved_tokens"], cap=d["max_tokens"],
                                    backend=d["backend"], share=d["max_pool_share"], need=d["need_tokens"])


def busy_message(b: Blocked | None, queued: int) -> str:
    """A request whose tier rejects when busy (``on_busy = "reject"``), refused at once."""
    if b is None:
        b = Blocked(QUEUE_AHEAD, {"queued": queued})
    return _("busy, not queued (on_busy = reject): {cause}").format(cause=cause(b))


def queue_timeout_message(waited: float, b: Blocked | None) -> str:
    return _("queue timeout after {waited} s: {cause}").format(waited=f"{waited:.1f}", cause=cause(b))


def queue_full_message(queued: int, limit: int, b: Blocked | None) -> str:
    return _("queue full: {queued} waiting, limit {limit}; {cause}").format(queued=queued, limit=limit, cause=cause(b))


def key_limit_message(key: str, count: int, limit: int) -> str:
    return _("API key '{key}' is at its concurrency limit: {count} of {limit} requests in flight or "
             "queued").format(key=key, count=count, limit=limit)


def ledger_unavailable_message(error: str) -> str:
    return _("the shared admission ledger is unreachable ({error}); refusing rather than overbooking "
             "the KV pool of backends other gateway replicas share").format(error=error)


def shutting_down_message() -> str:
    return _("the gateway is shutting down")


# ------------------------------------------------------------------------------ backends

#: why a backend's health check failed (llamarig.gateway.backends.classify)
REFUSED = "refused"
TIMEOUT = "timeout"
DNS = "dns"
CONNECT = "connect"
NOT_READY = "not_ready"
NOT_LLAMA_SERVER = "not_llama_server"
ERROR = "error"
PROBLEMS = (REFUSED, TIMEOUT, DNS, CONNECT, NOT_READY, NOT_LLAMA_SERVER, ERROR)


def problem_text(kind: str, detail: str, timeout_s: float) -> str:
    """What is wrong with a backend, as a person reads it (translated)."""
    if kind == REFUSED:
        return _("connection refused (nothing listens there)")
    if kind == TIMEOUT:
        return _("no answer within {timeout} s (timeout)").format(timeout=f"{timeout_s:g}")
    if kind == DNS:
        return _("cannot resolve the host name ({detail})").format(detail=detail)
    if kind == CONNECT:
        return _("cannot connect ({detail})").format(detail=detail)
    if kind == NOT_READY:
        return _("a llama-server, but not ready yet: {detail}").format(detail=detail)
    if kind == NOT_LLAMA_SERVER:
        return _("it answers, but not as a llama-server: {detail}").format(detail=detail)
    return detail


def source_label(source: str | None) -> str:
    """Where a pool came from: "/props", "the log", "config" (translated) or several."""
    if not source:
        return "?"
    names = {"props": "/props", "config": _("config"), "log": _("the server's log")}
    return join(" + ", [names.get(p, p) for p in source.split("+")])  # a composite: each part localized


def backend_ok_line(name: str, url: str, slots: int, pool: int, source: str, slot_ctx: int,
                    exact: bool = True) -> str:
    if not exact:
        return _("backend {name} ({url}): reachable, {slots} slots, KV pool at least {pool} tokens (from {source}: "
                 "the slot context is capped, the pool may be larger), {slot_ctx} tokens per slot").format(
                     name=name, url=url, slots=slots, pool=pool, source=source_label(source), slot_ctx=slot_ctx)
    return _("backend {name} ({url}): reachable, {slots} slots, KV pool {pool} tokens (from {source}), "
             "{slot_ctx} tokens per slot").format(name=name, url=url, slots=slots, pool=pool,
                                                  source=source_label(source), slot_ctx=slot_ctx)


def pool_changed_line(name: str, old: int, new: int, source: str, slots: int, slot_ctx: int) -> str:
    """The pool of a backend changed (llama-server restarted with other settings)."""
    return _("backend {name}: KV pool now {new} tokens (was {old}; from {source}), {slots} slots, {slot_ctx} "
             "tokens per slot: llama-server restarted with other settings").format(
                 name=name, new=new, old=old, source=source_label(source), slots=slots, slot_ctx=slot_ctx)


def backend_problem_line(name: str, url: str, kind: str, detail: str, timeout_s: float,
                         retry_s: float | None) -> str:
    """``retry_s``: at startup, say that the gateway starts without it and checks again."""
    problem = problem_text(kind, detail, timeout_s)
    if retry_s is None:
        return _("backend {name} ({url}): not usable: {problem}").format(name=name, url=url, problem=problem)
    return _("backend {name} ({url}): not usable: {problem}; the gateway starts without it and checks "
             "again every {interval} s").format(name=name, url=url, problem=problem, interval=f"{retry_s:g}")
