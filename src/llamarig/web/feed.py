"""The page's data: ``llamarig top``'s snapshots (llamarig.top.collect), pushed to every open page
as server-sent events, with an hour of chart samples.

One :class:`Feed` per server (``top --web``) or per gateway (``/ui``): one collector polls
at its interval whatever the number of pages open (each page costs a queue, not a poll). Memory
is bounded: the chart samples are a ring of ``keep_s / interval_s`` points, the events are the
snapshot's own (llamarig.top.derive keeps ``EVENTS_KEPT``), and a page that reads too slowly
loses its oldest pending update, never grows a queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections import deque
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from llamarig.i18n import LANGUAGES, localize
from llamarig.top.model import Snapshot
from llamarig.top.text import alert_text, event_kind
from llamarig.web import alerts
from llamarig.web.strings import crossed_text, gpu_reason, verdict_text

log = logging.getLogger("llamarig.web")

#: a page's pending updates; past it the oldest is dropped (a slow page skips, memory stays flat)
QUEUE = 4
#: seconds of chart samples kept (one hour)
KEEP_S = 3600.0


class SnapshotSource(Protocol):
    async def snapshot(self) -> Snapshot: ...


@dataclass(frozen=True)
class Sample:
    """One point of the charts, each the snapshot's own figure: decode tok/s (``Snapshot.decode_tok_s``),
    the fullest server's pool % (``ServerView.pool_frac``), the GPUs' power summed and their
    hottest temperature (NVML, ``GpuView.gpus``); None where the snapshot has none."""

    t: float
    decode_tok_s: float | None
    pool_pct: float | None
    power_w: float | None
    temp_c: float | None

    def to_json(self) -> list[float | None]:
        return [round(self.t, 3), _r(self.decode_tok_s), _r(self.pool_pct), _r(self.power_w), _r(self.temp_c)]


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def sample(snap: Snapshot) -> Sample:
    fracs = [s.pool_frac for s in snap.servers if s.pool_frac is not None]
    gpus = snap.gpu.gpus if snap.gpu.available else ()
    powers = [g.power_w for g in gpus if g.power_w is not None]
    temps = [g.temp_c for g in gpus if g.temp_c is not None]
    return Sample(snap.wall, snap.decode_tok_s, 100 * max(fracs) if fracs else None,
                  sum(powers) if powers else None, max(temps) if temps else None)


def document(snap: Snapshot, th: alerts.Thresholds, lang: str) -> dict[str, Any]:
    """What one update tells a page in ``lang``: the verdict, the alerts and events in words, the
    thresholds crossed, and the snapshot as ``llamarig top --json`` has it (figures and methods)."""
    over = alerts.crossed(snap, th)
    kind = alerts.verdict(snap, over)
    return {
        "verdict": {"kind": kind, "text": localize(verdict_text(kind), lang)},
        "alerts": [{"kind": a.kind, "server": localize(a.server, lang), "text": localize(alert_text(a), lang)}
                   for a in snap.alerts],
        "crossed": [{**c.to_json(), "text": localize(crossed_text(c), lang)} for c in over],
        "events": [{"t_unix": round(e.wall, 3), "kind": e.kind, "kind_text": localize(event_kind(e.kind), lang),
                    "server": localize(e.server, lang), "text": localize(e.detail, lang)} for e in snap.events],
        "gpu_reason": None if snap.gpu.available else localize(gpu_reason(snap.gpu), lang),
        "thresholds": th.to_json(),
        "sample": sample(snap).to_json(),
        "snapshot": snap.to_json(),
    }


def sse(event: str, data: Any) -> bytes:
    """One server-sent event (https://html.spec.whatwg.org/multipage/server-sent-events.html)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


class Feed:
    """Polls ``source`` every ``interval_s`` seconds while it runs and hands each update to the
    pages subscribed (:meth:`events`); ``last`` is the latest snapshot (the ``/metrics`` gauges)."""

    def __init__(self, source: Callable[[], AbstractAsyncContextManager[SnapshotSource]], interval_s: float,
                 thresholds: alerts.Thresholds, keep_s: float = KEEP_S) -> None:
        self.source = source
        self.interval_s = interval_s
        self.thresholds = thresholds
        self.samples: deque[Sample] = deque(maxlen=max(2, math.ceil(keep_s / interval_s)))
        self.last: Snapshot | None = None
        self.pages: set[tuple[str, asyncio.Queue[bytes]]] = set()
        self.task: asyncio.Task[None] | None = None
        self.ticks = 0

    def start(self) -> None:
        """Start polling (once; later calls do nothing)."""
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def _run(self) -> None:
        while True:
            try:
                async with self.source() as src:
                    while True:
                        self.publish(await src.snapshot())
                        await asyncio.sleep(self.interval_s)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop the page for good: say it, start again
                log.exception("the live page's collector failed; starting it again")
                await asyncio.sleep(self.interval_s)

    def publish(self, snap: Snapshot) -> None:
        self.last = snap
        self.ticks += 1
        self.samples.append(sample(snap))
        by_lang: dict[str, bytes] = {}
        for lang, q in list(self.pages):
            if lang not in by_lang:
                by_lang[lang] = sse("update", document(snap, self.thresholds, lang))
            if q.full():
                q.get_nowait()  # the page reads too slowly: it skips the oldest update
            q.put_nowait(by_lang[lang])

    def crossed(self) -> tuple[alerts.Crossed, ...]:
        return alerts.crossed(self.last, self.thresholds) if self.last is not None else ()

    def history(self) -> bytes:
        return sse("history", [s.to_json() for s in self.samples])

    async def events(self, lang: str) -> AsyncGenerator[bytes, None]:
        """One page's stream: the chart history, the latest update, then each new one, with a
        comment line every 15 s so that proxies keep the connection open."""
        lang = lang if lang in LANGUAGES else "en"
        q: asyncio.Queue[bytes] = asyncio.Queue(maxsize=QUEUE)
        page = (lang, q)
        self.pages.add(page)
        self.start()
        try:
            yield b"retry: 3000\n\n" + self.history()
            if self.last is not None:
                yield sse("update", document(self.last, self.thresholds, lang))
            while True:
                try:
                    yield await asyncio.wait_for(q.get(), timeout=15.0)
                except asyncio.TimeoutError:
                    yield b": keep-alive\n\n"
        finally:
            self.pages.discard(page)


def snapshot_body(feed: Feed, lang: str) -> bytes:
    doc: dict[str, Any] | None = document(feed.last, feed.thresholds, lang) if feed.last is not None else None
    return json.dumps(doc, ensure_ascii=False).encode()
