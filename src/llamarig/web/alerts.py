"""The page's thresholds and its verdict, from one ``llamarig top`` snapshot (llamarig.top.model).

Nothing here derives a figure again: the power, temperature, pool share and queue length compared
with the thresholds are the snapshot's own (``GpuView.gpus``, ``ServerView.pool_frac``,
``GatewayView.queue_length``); the verdict is read from the snapshot's alerts (llamarig.top.derive)
and these threshold alerts.
"""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.top.model import Snapshot

#: top's alerts (llamarig.top.derive) that say an overflow is coming
NEAR_OVERFLOW = frozenset({"pool_near_full", "pool_overflow_ahead", "slot_near_full", "reserved_near_full"})
#: threshold alerts that say the card runs too hot
TOO_HOT = frozenset({"temperature", "power"})
#: the verdicts, worst first
VERDICTS = ("down", "too_hot", "near_overflow", "restarted", "foreign_work", "busy_queue", "healthy")


@dataclass(frozen=True)
class Thresholds:
    """When the page (and ``/metrics``) raises an alert: a GPU drawing ``power_w`` watts or more
    (None: no power alert), at ``temp_c`` degrees or more, a KV pool ``pool_pct`` percent full or
    more, ``queue`` requests or more waiting in the gateway's queue."""

    power_w: float | None = None
    temp_c: float = 85.0
    pool_pct: float = 90.0
    queue: int = 8

    def to_json(self) -> dict[str, float | int | None]:
        return {"power_w": self.power_w, "temp_c": self.temp_c, "pool_pct": self.pool_pct, "queue": self.queue}


@dataclass(frozen=True)
class Crossed:
    """A threshold crossed: ``kind`` (power | temperature | pool | queue), what crossed it
    (``subject``: ``GPU0``, a server's name, ``gateway``), the figure and the threshold."""

    kind: str
    subject: str
    value: float
    limit: float

    def to_json(self) -> dict[str, str | float]:
        return {"kind": self.kind, "subject": self.subject, "value": round(self.value, 2), "limit": self.limit}


#: every threshold kind, for the gauges that are 0 when nothing crossed it
KINDS = ("power", "temperature", "pool", "queue")


def crossed(snap: Snapshot, th: Thresholds) -> tuple[Crossed, ...]:
    """The thresholds the snapshot's figures cross now."""
    out: list[Crossed] = []
    for g in snap.gpu.gpus if snap.gpu.available else ():
        if th.power_w is not None and g.power_w is not None and g.power_w >= th.power_w:
            out.append(Crossed("power", f"GPU{g.index}", g.power_w, th.power_w))
        if g.temp_c is not None and g.temp_c >= th.temp_c:
            out.append(Crossed("temperature", f"GPU{g.index}", g.temp_c, th.temp_c))
    for s in snap.servers:
        frac = s.pool_frac
        if frac is not None and 100 * frac >= th.pool_pct:
            out.append(Crossed("pool", str(s.name), 100 * frac, th.pool_pct))
    if snap.gateway is not None and snap.gateway.queue_length >= th.queue:
        out.append(Crossed("queue", "gateway", snap.gateway.queue_length, th.queue))
    return tuple(out)


def verdict(snap: Snapshot, over: tuple[Crossed, ...]) -> str:
    """One word for the page's first line, the worst that holds (:data:`VERDICTS`)."""
    kinds = {a.kind for a in snap.alerts}
    mine = {c.kind for c in over}
    if "down" in kinds or not snap.servers:
        return "down"
    if mine & TOO_HOT:
        return "too_hot"
    if kinds & NEAR_OVERFLOW or "pool" in mine:
        return "near_overflow"
    if "restart" in kinds:
        return "restarted"
    if "foreign_work" in kinds:
        return "foreign_work"
    if "queue" in mine:
        return "busy_queue"
    return "healthy"
