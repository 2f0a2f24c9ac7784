"""Reservation accounting, the bounded priority queue, backend choice. Pure / in-loop tests."""

from __future__ import annotations

import asyncio
import random

import pytest

from llamarig.gateway.admission import (
    Admission,
    AdmitRequest,
    Ledger,
    Pool,
    Rejected,
)
from llamarig.gateway.backends import Affinity, BackendState, choose_backend
from llamarig.gateway.config import BackendConfig
from llamarig.gateway.errors import BackendError


def test_ledger_fits_and_idempotent_release() -> None:
    from llamarig.gateway.admission import Reservation

    led, pool = Ledger(), Pool(1000, 2, 800, "t")
    assert led.fits("a", pool, 800) and not led.fits("a", pool, 801)  # per-slot limit
    r1 = led.reserve(Reservation(1, "a", 600, None, "B", 0, 0.0))
    assert not led.fits("a", pool, 401) and led.fits("a", pool, 400)
    led.reserve(Reservation(2, "a", 100, None, "B", 0, 0.0))
    assert not led.fits("a", pool, 1)  # no free slot
    assert led.release(r1) and not led.release(r1)
    assert led.reserved["a"] == 100 and led.in_flight["a"] == 1


def _state(name: str, pool: int, slots: int = 4, healthy: bool = True) -> BackendState:
    s = BackendState(BackendConfig(url=f"http://{name}:1", name=name))
    s.pool = Pool(pool, slots, pool, "t")
    s.healthy = healthy
    return s


def test_choose_backend_least_reserved_affinity_and_health() -> None:
    from llamarig.gateway.admission import Reservation

    led = Ledger()
    a, b, c = _state("a", 1000), _state("b", 2000), _state("c", 5000, healthy=False)
    assert choose_backend([a, b, c], led, 100) == "b"  # smaller fraction; c is ejected
    led.reserve(Reservation(1, "b", 1500, None, "B", 0, 0.0))
    assert choose_backend([a, b, c], led, 100) == "a"
    assert choose_backend([a, b, c], led, 100, affinity="b") == "b"  # affinity wins when it fits
    assert choose_backend([a, b, c], led, 600, affinity="b") == "a"  # ...not when it doesn't
    assert choose_backend([a, b, c], led, 100, exclude=frozenset({"a"})) == "b"
    assert choose_backend([a, b, c], led, 1200) is None
    aff = Affinity(size=2)
    aff.set("x", "a"); aff.set("y", "b"); aff.set("z", "b")  # noqa: E702
    assert aff.get("x") is None and aff.get("z") == "b" and len(aff) == 2


def _admission(pool: int = 1000, slots: int = 2, **kw: object) -> tuple[Admission, Ledger, BackendState]:
    led = Ledger()
    st = _state("a", pool, slots)
    opts = {"queue_size": 8, "queue_timeout_s": 5.0, "retry_after_s": 1.0}
    opts.update(kw)
    adm = Admission(led, lambda req, ex: choose_backend([st], led, req.tokens, None, ex, shares=req.shares),
                    **opts)  # type: ignore[arg-type]
    return adm, led, st


def test_queue_priority_deadline_and_limits() -> None:
    async def run() -> None:
        adm, led, _ = _admission(queue_size=2, queue_timeout_s=0.2)
        r1 = await adm.acquire(AdmitRequest(600, "B"))
        r2 = await adm.acquire(AdmitRequest(300, "B"))
        assert led.reserved["a"] == 900
        # full: one cron (low priority) and one interactive wait; interactive is served first
        cron = asyncio.ensure_future(adm.acquire(AdmitRequest(500, "B", priority=10)))
        inter = asyncio.ensure_future(adm.acquire(AdmitRequest(500, "B", priority=0)))
        await asyncio.sleep(0.01)
        assert adm.queued == 2
        with pytest.raises(Rejected) as e:
            await adm.acquire(AdmitRequest(10, "B"))
        assert e.value.status == 429 and e.value.code == "queue_full" and e.value.retry_after >= 1
        adm.release(r1)
        await asyncio.sleep(0.01)
        assert inter.done() and not cron.done()
        with pytest.raises(Rejected) as e2:
            await cron
        assert e2.value.code == "queue_timeout"
        adm.release(inter.result())
        adm.release(r2)
        assert led.reserved["a"] == 0 and adm.queued == 0
        # per-key limit counts in flight + queued
        k = AdmitRequest(10, "B", key="alice", key_limit=1)
        rk = await adm.acquire(k)
        with pytest.raises(Rejected) as e3:
            await adm.acquire(AdmitRequest(10, "B", key="alice", key_limit=1))
        assert e3.value.code == "key_limit"
        adm.release(rk)
        assert adm.per_key == {}
        # no backend at all -> 503
        adm.any_backend = lambda allowed: False
        with pytest.raises(Rejected) as e4:
            await adm.acquire(AdmitRequest(10, "B"))
        assert e4.value.status == 503
    asyncio.run(run())


def test_randomized_cancellations_leave_nothing_reserved() -> None:
    """Thousands of requests cancelled at random points (queued, just admitted, in flight) and
    random releases: at the end nothing is reserved, queued or counted per key."""

    async def run() -> None:
        rnd = random.Random(7)
        adm, led, _ = _admission(pool=5000, slots=8, queue_size=64, queue_timeout_s=0.05)

        async def one(i: int) -> None:
            req = AdmitRequest(rnd.randint(1, 3000), "B", priority=rnd.choice([0, 10]), key=rnd.choice(["a", "b", None]))
            try:
                r = await adm.acquire(req)
            except Rejected:
                return
            try:
                await asyncio.sleep(rnd.random() * 0.003)
            finally:
                adm.release(r)

        n = 3000
        tasks = []
        for i in range(n):
            tasks.append(asyncio.ensure_future(one(i)))
            if rnd.random() < 0.5:
                await asyncio.sleep(0)
            if rnd.random() < 0.4:  # cancel a random earlier task wherever it is
                rnd.choice(tasks).cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert led.total_reserved() == 0 and led.total_in_flight() == 0
        assert adm.queued == 0 and adm.per_key == {} and not led.active
    asyncio.run(asyncio.wait_for(run(), 60))


def test_gateway_errors_are_in_the_project_error_tree() -> None:
    from llamarig.errors import LlamarigError, ServerError
    from llamarig.gateway import admission, tiers
    from llamarig.gateway.errors import GatewayError, RequestError
    from llamarig.gateway.upstream import UpstreamConnectError, UpstreamError, UpstreamPayloadError

    assert admission.Rejected is Rejected and tiers.RequestError is RequestError  # old import paths
    for cls in (Rejected, RequestError):
        assert issubclass(cls, GatewayError) and issubclass(cls, LlamarigError)
    for cls in (BackendError, UpstreamError, UpstreamConnectError, UpstreamPayloadError):
        assert issubclass(cls, ServerError)
    e = Rejected(429, "queue_full", "busy", 3)
    assert str(e) == "busy" and e.body()["error"]["retry_after"] == 3
    assert RequestError(400, "bad", param="x").body() == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "x", "code": None}}


def test_reject_when_busy_names_the_queue_ahead_and_holds_nothing() -> None:
    """``on_busy = "reject"``: 429 ``busy`` at once, with what blocks it: the slots, or (when it
    would fit) the requests of the same or a better priority queued ahead of it."""

    async def run() -> None:
        from llamarig.gateway import reasons

        adm, led, st = _admission(pool=1000, slots=1, queue_timeout_s=5.0)
        adm.diagnose = lambda req: reasons.blocked([st], led, req.tokens, req.exclude, shares=req.shares)
        r1 = await adm.acquire(AdmitRequest(100, "B"))
        with pytest.raises(Rejected) as e:
            await adm.acquire(AdmitRequest(100, "A", on_busy="reject"))
        assert (e.value.code, e.value.reason) == ("busy", "slots_busy") and e.value.retry_after >= 1
        waiter = asyncio.ensure_future(adm.acquire(AdmitRequest(100, "B")))
        await asyncio.sleep(0.01)
        adm.release(r1)  # the waiter is admitted...
        r2 = await waiter
        waiter2 = asyncio.ensure_future(adm.acquire(AdmitRequest(100, "B")))  # ...and another queues
        await asyncio.sleep(0.01)
        led.release(r2)  # freed in the ledger, the queue not yet pumped: it would fit, but a waiter is ahead
        with pytest.raises(Rejected) as e2:
            await adm.acquire(AdmitRequest(100, "A", on_busy="reject"))
        assert (e2.value.code, e2.value.reason, e2.value.details["queued"]) == ("busy", "queue_ahead", 1)
        assert "1 requests of the same or a better priority wait ahead of it" in e2.value.message
        adm.pump()
        adm.release(await waiter2)
        assert (led.total_reserved(), led.total_in_flight(), adm.queued, adm.per_key) == (0, 0, 0, {})
    asyncio.run(run())
