"""What the gateway shows of its state: ``GET /gateway/status`` (what ``llamarig gateway
status`` prints and ``llamarig top`` reads) and the gauges of ``/metrics``, from the same numbers.

The fields are documented in docs/gateway.md (Observability) and kept stable: new ones are added,
none is renamed or removed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from llamarig.gateway.admission import Admission, Reservation, ReservationLedger
from llamarig.gateway.backends import Backends, BackendState
from llamarig.gateway.config import GatewayConfig, dataclass_dict
from llamarig.gateway.metrics import GatewayMetrics
from llamarig.gateway.pool import Share
from llamarig.serverpool import FRAC_PLACES, used_frac


def groups(cfg: GatewayConfig) -> list[Share]:
    """Every tier, and cron, with what it may hold on each backend."""
    out = [Share(f"tier:{t.name}", t.max_pool_share, t.max_slots) for t in cfg.tiers.values()]
    return [*out, Share("cron", cfg.cron.max_pool_share, cfg.cron.max_slots)]


def pool_json(st: BackendState) -> dict[str, Any] | None:
    """The backend's pool: what admission uses, the server's, how each is known, the cells in use."""
    p = st.pool
    if p is None:
        return None
    sp = p.server
    prog = st.progress
    return {
        "tokens": p.pool_tokens, "exact": p.exact, "source": p.source, "slots": p.slots, "slot_ctx": p.slot_ctx,
        "server_tokens": sp.tokens if sp else None, "server_bound": sp.bound if sp else None,
        "server_source": sp.source if sp else None, "unified": sp.unified if sp else None,
        "server_slot_ctx": sp.slot_ctx if sp else None, "n_ctx_train": st.n_ctx_train, "log": st.log_path,
        "cells_in_use": prog.cells, "used_frac": _round(used_frac(prog.cells, sp.tokens if sp else None), FRAC_PLACES), "cells_age_s": round(time.monotonic() - prog.t, 3) if prog.slots is not None else None,
        "mismatches": [m.to_json() for m in p.mismatches],
    }


def backend_json(st: BackendState, ledger: ReservationLedger) -> dict[str, Any]:
    p = st.pool
    prog = st.progress
    rate = prog.rate(time.monotonic())
    return {
        "name": st.name, "url": st.cfg.url, "healthy": st.healthy, "removed": st.removed,
        "pool_tokens": p.pool_tokens if p else None, "slots": p.slots if p else None,
        "slot_ctx": p.slot_ctx if p else None, "pool_source": p.source if p else None,
        "pool": pool_json(st),
        # what the config sets (None: from the server), shown while the backend was never reached
        "configured": {"pool_tokens": st.cfg.pool_tokens, "slots": st.cfg.slots, "slot_ctx": st.cfg.slot_ctx,
                       "unified": st.cfg.unified, "log": st.cfg.log},
        "reserved_tokens": ledger.reserved.get(st.name, 0), "in_flight": ledger.in_flight.get(st.name, 0),
        "decode_tok_s": _round(rate.value), "decode_source": rate.source or None,
        "prefill_tok_s": _round(prog.prefill.value),
        "models": st.models, "last_error": st.last_error or None, "consecutive_failures": st.fails,
        "problem": st.problem or None, "problem_detail": st.problem_detail or None,
    }


def _round(v: float | None, places: int = 2) -> float | None:
    return None if v is None else round(v, places)


def request_json(r: Reservation, st: BackendState | None, now: float) -> dict[str, Any]:
    """One admitted request: its id (the request log's), reservation, progress, the slot it holds."""
    done, how = st.progress.generated(r, now) if st is not None else (0, "")
    slot = st.progress.slot_of(r.id) if st is not None else None
    ends = st.progress.ends_in(r, now) if st is not None else None
    return {
        "id": r.request_id or r.id, "reservation_id": r.id, "backend": r.backend, "tier": r.tier, "cron": r.cron,
        "client_gone": r.client_gone,
        "priority": r.priority, "key": r.key, "reserved_tokens": r.tokens, "prompt_tokens": r.prompt_tokens,
        "max_tokens": r.max_or_all, "generated_tokens": done if how else None, "generated_source": how or None,
        "progress": round(done / r.max_or_all, 3) if how and r.max_or_all else None,
        "slot": slot, "slot_source": "slots" if slot is not None else None,
        "age_s": round(now - r.admitted_at, 3), "ends_in_s": None if ends is None else round(ends, 2),
    }


def requests_json(states: Mapping[str, BackendState], ledger: ReservationLedger, now: float) -> list[dict[str, Any]]:
    """Each admitted request of this replica, oldest first. The key's name only, never its secret."""
    return [request_json(r, states.get(r.backend), now) for r in sorted(ledger.active.values(), key=lambda r: r.id)]


def shares_json(cfg: GatewayConfig, states: Iterable[BackendState], ledger: ReservationLedger,
                queued: Mapping[str, int]) -> dict[str, Any]:
    """Per tier and cron: its caps, and what it holds on each backend (the cap there in tokens)."""
    out: dict[str, Any] = {}
    live = [s for s in states if not s.removed]
    for g in groups(cfg):
        by: dict[str, Any] = {}
        for s in live:
            k = (s.name, g.group)
            by[s.name] = {"reserved_tokens": ledger.group_reserved.get(k, 0), "in_flight": ledger.group_in_flight.get(k, 0),
                          "max_tokens": g.cap(s.pool).tokens if s.pool is not None else None, "max_slots": g.slots}
        out[g.group] = {"max_pool_share": g.pool_share, "max_slots": g.slots,
                        "reserved_tokens": sum(v["reserved_tokens"] for v in by.values()),
                        "in_flight": sum(v["in_flight"] for v in by.values()),
                        "queued": queued.get(g.group, 0), "by_backend": by}
    return out


def queued_by_group(adm: Admission) -> dict[str, int]:
    out: dict[str, int] = {}
    for w in adm.waiting():
        for g in w.groups or (f"tier:{w.tier}",):
            out[g] = out.get(g, 0) + 1
    return out


def cache_json(cache: Mapping[str, list[int]]) -> dict[str, Any]:
    """Per tier: the requests the server gave cache counts for, how many were hits (90 % of the
    prompt from the slot's cache), and the prompt tokens it took from the cache and evaluated."""
    out: dict[str, Any] = {}
    for tier, (n, hits, cached, evaluated) in sorted(cache.items()):
        total = cached + evaluated
        out[tier] = {"requests": n, "hits": hits, "cached_tokens": cached, "evaluated_tokens": evaluated,
                     "cached_frac": round(cached / total, 3) if total else None}
    return out


def status(cfg: GatewayConfig, backends: Backends, ledger: ReservationLedger, adm: Admission, *,
           started: float, served: int, pins: Mapping[str, Any] | None = None,
           cache: Mapping[str, list[int]] | None = None) -> dict[str, Any]:
    """The document of ``GET /gateway/status``."""
    states = [s for s in backends.states.values()]
    live = [s for s in states if s.healthy and s.pool is not None]
    cells = [s.progress.cells for s in live]
    ra = adm.retry_after()
    return {
        "uptime_s": round(time.time() - started, 1), "config": cfg.source, "served": served,
        "backends": [backend_json(s, ledger) for s in states],
        "pool": {"tokens": sum(s.pool.pool_tokens for s in live if s.pool) if live else None,
                 "exact": all(s.pool.exact for s in live if s.pool),
                 "cells_in_use": sum(c for c in cells if c is not None) if cells and None not in cells else None},
        "mismatches": [{"backend": s.name, **m.to_json()} for s in states if s.pool for m in s.pool.mismatches],
        "queue": {"length": adm.queued, "by_tier": adm.queued_by_tier(),
                  "by_priority": {str(p): n for p, n in adm.queued_by_priority().items()},
                  "size": adm.queue_size, "timeout_s": adm.queue_timeout_s},
        "reserved_tokens": ledger.total_reserved(), "in_flight": ledger.total_in_flight(),
        "requests": requests_json(backends.states, ledger, time.monotonic()),
        "shares": shares_json(cfg, states, ledger, queued_by_group(adm)),
        "rejected": dict(adm.rejected), "rejected_by_reason": dict(adm.rejected_reasons),
        "rejected_by_status": {str(k): v for k, v in sorted(adm.rejected_status.items())},
        "retry_after_s": ra.seconds, "retry_after_estimate": ra.detail, "safety": cfg.admission.safety,
        "health": {"interval_s": cfg.health.interval_s, "timeout_s": cfg.health.timeout_s},
        "tiers": {n: dataclass_dict(t) for n, t in cfg.tiers.items()},
        "keys": [k.name for k in cfg.keys], "affinity_entries": len(backends.affinity),
        "ledger": ledger.describe(),
        "holds": {g: round(t, 1) for g, t in adm.active_holds().items()},
        "pins": dict(pins or {}), "cache": cache_json(cache or {}),
    }


def update_gauges(m: GatewayMetrics, cfg: GatewayConfig, backends: Backends, ledger: ReservationLedger,
                  adm: Admission) -> None:
    """The gauges of ``/metrics``, from the numbers :func:`status` shows."""
    queued = adm.queued_by_tier()
    for t in cfg.tiers:
        m.queue_length.labels(t).set(queued.get(t, 0))
    led = ledger.describe()
    m.ledger_up.set(0 if led.get("reachable") is False else 1)
    m.ledger_pending.set(int(led.get("pending_releases") or 0))
    for s in backends.states.values():
        _backend_gauges(m, s, ledger)
    for g in groups(cfg):
        for s in backends.states.values():
            k = (s.name, g.group)
            m.group_reserved.labels(g.group, s.name).set(ledger.group_reserved.get(k, 0))
            m.group_in_flight.labels(g.group, s.name).set(ledger.group_in_flight.get(k, 0))


def _backend_gauges(m: GatewayMetrics, s: BackendState, ledger: ReservationLedger) -> None:
    m.up.labels(s.name).set(1 if s.healthy else 0)
    m.reserved.labels(s.name).set(ledger.reserved.get(s.name, 0))
    m.in_flight.labels(s.name).set(ledger.in_flight.get(s.name, 0))
    if s.pool is None:
        return
    m.pool.labels(s.name).set(s.pool.pool_tokens)
    m.slots.labels(s.name).set(s.pool.slots)
    m.pool_exact.labels(s.name).set(1 if s.pool.exact else 0)
    sp = s.pool.server
    if sp is not None:
        m.server_pool.labels(s.name).set(sp.tokens)
        m.slot_ctx.labels(s.name).set(sp.slot_ctx)
        m.server_exact.labels(s.name).set(1 if sp.exact else 0)
    for f in ("pool_tokens", "slots", "slot_ctx"):
        mm = next((x for x in s.pool.mismatches if x.field == f), None)
        m.mismatch.labels(s.name, f).set(0 if mm is None else (1 if mm.larger else -1))
    cells = s.progress.cells
    if cells is not None:
        m.cells.labels(s.name).set(cells)
    frac = used_frac(cells, sp.tokens if sp is not None else None)
    if frac is not None:
        m.pool_used.labels(s.name).set(round(frac, FRAC_PLACES))
    rate = s.progress.rate(time.monotonic()).value
    if rate is not None:
        m.decode_rate.labels(s.name).set(rate)
