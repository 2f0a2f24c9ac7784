"""The shared ledger (Valkey/Redis) against a real server on a loopback port: replicas never
overbook a pool between them, a crashed replica's reservations expire with its lease, and an
unreachable store is refused with 503 ``ledger_unavailable``."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from llamarig.gateway.admission import Admission, AdmitRequest, Pool, Rejected, Reservation
from llamarig.gateway.shared_ledger import RedisLedger

POOL = Pool(1000, 3, 1000, "t")


def _replica(url: str, name: str, lease_s: float = 5.0) -> tuple[Admission, RedisLedger]:
    led = RedisLedger(url, replica=name, lease_s=lease_s, timeout_s=1.0, prefix="t:")
    adm = Admission(led, lambda req, ex: None if "a" in ex or not led.fits("a", POOL, req.tokens) else "a",
                    queue_size=64, queue_timeout_s=2.0, retry_after_s=1.0, pool_of=lambda name: POOL)
    return adm, led


async def _start(*pairs: tuple[Admission, RedisLedger]) -> None:
    for adm, led in pairs:
        await led.start(on_change=adm.pump, waiting=lambda adm=adm: adm.queued > 0)


async def _store_state(led: RedisLedger) -> dict[str, Any]:
    await led.refresh()
    return led.describe()


def test_replicas_share_one_pool_without_overbooking(store: Any) -> None:
    async def main() -> None:
        reps = [_replica(store.url, f"r{i}") for i in range(3)]
        await _start(*reps)
        rnd = random.Random(5)
        held: list[int] = []

        async def one(adm: Admission) -> None:
            try:
                r = await adm.acquire(AdmitRequest(rnd.randint(50, 700), "B", key=rnd.choice(["k", None]), key_limit=2))
            except Rejected:
                return
            try:
                held.append(sum(x.tokens for _a, led in reps for x in led.active.values()))
                await asyncio.sleep(rnd.random() * 0.02)
            finally:
                adm.release(r)

        tasks = [asyncio.ensure_future(one(rnd.choice(reps)[0])) for _ in range(200)]
        for t in tasks[::7]:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for _adm, led in reps:
            while led._outbox:
                await asyncio.sleep(0.01)
        st = await _store_state(reps[0][1])
        assert max(held) <= POOL.pool_tokens and st["peak"]["a"] <= POOL.pool_tokens, (max(held), st["peak"])
        assert reps[0][1].reserved == {"a": 0} and reps[0][1].in_flight == {"a": 0}
        assert st["stats"]["made"] == st["stats"]["released"] > 20 and st["keys_in_flight"] == {}
        assert len(held) == st["stats"]["made"]
        for _adm, led in reps:
            await led.close()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_cron_cap_holds_over_replicas(store: Any) -> None:
    """cron.max_slots = 1 is checked in the store's claim script: a cron job on one replica keeps
    another replica's cron job out (not an interactive request); its release lets it in, and the
    group counts return to zero in the store."""
    from llamarig.gateway.pool import Share

    cron = (Share("tier:B"), Share("cron", None, 1))

    async def main() -> None:
        (a_adm, a), (b_adm, b) = _replica(store.url, "ra"), _replica(store.url, "rb")
        await _start((a_adm, a), (b_adm, b))
        first = await a_adm.acquire(AdmitRequest(100, "B", shares=cron, cron=True))
        assert await b_adm.try_acquire(AdmitRequest(100, "B", shares=cron, cron=True)) is None
        other = await b_adm.try_acquire(AdmitRequest(100, "B", shares=(Share("tier:B"),)))
        assert other is not None  # an interactive request is not held back by cron's cap
        assert b.group_in_flight[("a", "cron")] == 1 and b.group_reserved[("a", "tier:B")] == 200
        a_adm.release(first)
        loop = asyncio.get_running_loop()
        end = loop.time() + 10
        got: Reservation | None = None
        while got is None:  # the release reaches the store (an event, awaited with a bound)
            assert loop.time() < end, "the cron cap was never released"
            await asyncio.sleep(0.02)
            got = await b_adm.try_acquire(AdmitRequest(100, "B", shares=cron, cron=True))
        b_adm.release(got)
        b_adm.release(other)
        while b._outbox:
            await asyncio.sleep(0.01)
        await b.refresh()
        assert b.group_in_flight.get(("a", "cron"), 0) == 0 and b.group_reserved.get(("a", "tier:B"), 0) == 0
        for led in (a, b):
            await led.close()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_crashed_replicas_reservations_expire_with_its_lease(store: Any) -> None:
    async def main() -> None:
        a_adm, a = _replica(store.url, "crashy", lease_s=0.3)
        b_adm, b = _replica(store.url, "steady")
        await _start((a_adm, a), (b_adm, b))
        r = await a_adm.acquire(AdmitRequest(800, "B"))
        assert r.backend == "a"
        for t in a._tasks:  # the replica dies: no heartbeat, no release...
            t.cancel()
        again_adm, again = _replica(store.url, "crashy", lease_s=0.3)  # ...and comes back, same name
        await _start((again_adm, again))
        assert await b_adm.try_acquire(AdmitRequest(800, "B")) is None  # the pool is held...
        loop = asyncio.get_running_loop()
        end = loop.time() + 10
        got: Reservation | None = None
        while got is None:  # ...until the lease expires (an event, awaited with a bound)
            assert loop.time() < end, "the dead replica's reservation never expired"
            await asyncio.sleep(0.05)
            got = await b_adm.try_acquire(AdmitRequest(800, "B"))
        st = await _store_state(b)
        # the dead incarnation's reservation expired although its name lives on
        assert st["stats"]["expired"] == 1 and [h["replica"] for h in st["replicas"]] == ["crashy", "steady"]
        assert st["replicas"][0]["member"] == again.member != a.member
        b_adm.release(got)
        await b.close()
        await again.close()
        await a._r.aclose()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_store_unreachable_is_refused_with_503_and_releases_are_retried(store: Any) -> None:
    async def main() -> None:
        adm, led = _replica(store.url, "lonely")
        await _start((adm, led))
        r = await adm.acquire(AdmitRequest(100, "B"))
        store.stop()
        adm.release(r)  # cannot reach the store: kept to send later
        with pytest.raises(Rejected) as e:
            await adm.acquire(AdmitRequest(100, "B"))
        assert (e.value.status, e.value.code, e.value.reason) == (503, "ledger_unavailable", "ledger_unavailable")
        assert e.value.retry_after >= 1
        d = led.describe()
        assert d["reachable"] is False and d["last_error"] and d["pending_releases"] >= 1
        assert adm.queued == 0 and not led.active
        await led.close()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_status_gateway_status_and_top_show_who_holds_what(store: Any, lt: Any) -> None:
    """Two in-process replicas on one store, one stream held on each (the fake's gate): every
    replica's /gateway/status shows the shared totals and both holders; `gateway status` and
    `top` say it in words."""
    import aiohttp
    from rich.console import Console

    from llamarig.cli.gateway_cmd import status_footer
    from llamarig.cli.top_view import replicas_part
    from llamarig.top.derive import _gateway
    from llamarig.top.model import Memo

    gate = asyncio.Event()
    fb = lt.fake(tokens=4, total_slots=4, n_ctx=8192, gate=gate)
    cfg = {"admission": {"prompt_tokens": "estimate"}, "ledger": {"url": store.url, "lease_s": 5.0}}
    gws = [lt.gateway({**cfg, "ledger": {**cfg["ledger"], "replica": f"g{i}"}}, backends=[fb.url]) for i in range(2)]
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 100, "stream": True}

    async def main() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as s:
            async def one(gw: Any) -> bytes:
                async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                    return await r.read()

            tasks = [asyncio.ensure_future(one(gw)) for gw in gws]
            out: list[dict[str, Any]] = []
            loop = asyncio.get_running_loop()
            end = loop.time() + 20
            while True:
                out = []
                for gw in gws:
                    async with s.get(gw.url + "/gateway/status") as r:
                        out.append(await r.json())
                if all(st["in_flight"] == 2 and len(st["ledger"]["replicas"]) == 2 for st in out):
                    break
                assert loop.time() < end, out
                await asyncio.sleep(0.02)
            gate.set()
            await asyncio.gather(*tasks)
            return out

    sts = lt.run(main())
    for st, me in zip(sts, ("g0", "g1"), strict=True):
        led = st["ledger"]
        assert led["kind"] == "redis" and led["replica"] == me and led["reachable"]
        assert [(h["replica"], h["requests"]) for h in led["replicas"]] == [("g0", 1), ("g1", 1)]
        assert st["backends"][0]["in_flight"] == 2 and len(st["requests"]) == 1  # the shared total; its own
        assert st["backends"][0]["reserved_tokens"] == sum(h["reserved_tokens"] for h in led["replicas"])
    footer = "\n".join(status_footer(sts[0]))
    assert "replica g0: 1 requests" in footer and "replica g1: 1 requests" in footer and "0 queued" in footer, footer
    view, _w = _gateway(sts[0], 0.0, Memo())
    assert view.ledger == "redis" and [r.replica for r in view.replicas] == ["g0", "g1"]
    j = view.to_json()["ledger"]
    assert j["kind"] == "redis" and j["replica"] == "g0" and [r["requests"] for r in j["replicas"]] == [1, 1]
    con = Console(width=120, record=True)
    for part in replicas_part(view):
        con.print(part)
    text = con.export_text()
    assert "seen from replica g0: 2 replicas" in text and "g1" in text and "b0" in text, text


def test_a_release_on_one_replica_admits_a_request_queued_on_another(store: Any) -> None:
    async def main() -> None:
        a_adm, a = _replica(store.url, "ra")
        b_adm, b = _replica(store.url, "rb")
        b_adm.queue_timeout_s = 30.0
        await _start((a_adm, a), (b_adm, b))
        held = await a_adm.acquire(AdmitRequest(800, "B"))
        waiter = asyncio.ensure_future(b_adm.acquire(AdmitRequest(800, "B")))
        loop = asyncio.get_running_loop()
        end = loop.time() + 10
        while b_adm.queued != 1:
            assert loop.time() < end and not waiter.done()
            await asyncio.sleep(0.01)
        a_adm.release(held)  # on replica a: b learns it from the store (its poll while it has waiters)
        r = await asyncio.wait_for(waiter, 10)
        assert r.backend == "a" and b_adm.queued == 0 and list(b.active) == [r.id]
        b_adm.release(r)
        await a.close()
        await b.close()
        probe = RedisLedger(store.url, replica="probe", prefix="t:")
        st = await _store_state(probe)
        await probe.close()
        assert st["stats"]["made"] == st["stats"]["released"] == 2 and not st["replicas"]
    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_request_waiting_on_one_replica_keeps_newcomers_of_lower_priority_behind_it(store: Any) -> None:
    """As one gateway serves its queue first, a new request on another replica does not go
    ahead of one of the same or a better priority waiting anywhere: it queues, and is admitted
    first-fit from there; a better-priority newcomer is admitted at once."""
    async def main() -> None:
        a_adm, a = _replica(store.url, "qa")
        b_adm, b = _replica(store.url, "qb")
        await _start((a_adm, a), (b_adm, b))
        held = await a_adm.acquire(AdmitRequest(600, "B"))
        big = a_adm.enqueue(AdmitRequest(600, "B", priority=0))  # waits on a: does not fit beside 600
        loop = asyncio.get_running_loop()
        end = loop.time() + 10
        while (await _store_state(b)).get("queued") != 1:
            assert loop.time() < end
            await asyncio.sleep(0.01)
        assert await b_adm.try_acquire(AdmitRequest(300, "B", priority=10)) is None  # fits, but queues
        assert await b_adm.try_acquire(AdmitRequest(300, "B", priority=0)) is None  # same priority: too
        better = await b_adm.try_acquire(AdmitRequest(100, "B", priority=-1))
        assert better is not None
        late = await asyncio.wait_for(b_adm.acquire(AdmitRequest(300, "B", priority=10)), 10)  # first fit
        st = await _store_state(b)
        assert {h["replica"]: h["queued"] for h in st["replicas"]} == {"qa": 1, "qb": 0}
        for r in (better, late):
            b_adm.release(r)
        a_adm.release(held)
        assert await big.wait(10)
        a_adm.release(big.take())
        await a.close()
        await b.close()
        probe = RedisLedger(store.url, replica="probe", prefix="t:")
        st = await _store_state(probe)
        await probe.close()
        assert st["queued"] == 0 and st["stats"]["made"] == st["stats"]["released"] == 4
    asyncio.run(asyncio.wait_for(main(), 60))


def test_gateway_answers_503_while_the_store_is_down_and_recovers(store: Any, lt: Any) -> None:
    """Through HTTP: the store stopped, a request gets 503 ledger_unavailable with Retry-After
    and the reason; the store back on its port, requests are admitted again."""
    import json
    import urllib.error
    import urllib.request

    from llamarig.testing.store import start_store

    fb = lt.fake(tokens=2)
    gw = lt.gateway({"admission": {"prompt_tokens": "estimate"},
                     "ledger": {"url": store.url, "lease_s": 5.0, "timeout_s": 0.5}}, backends=[fb.url])
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}).encode()

    def post() -> tuple[int, dict[str, str], dict[str, Any]]:
        req = urllib.request.Request(gw.url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers), json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), json.loads(e.read())

    assert post()[0] == 200
    store.stop()
    status, headers, err = post()
    assert status == 503 and int(headers["Retry-After"]) >= 1, (status, err)
    with urllib.request.urlopen(gw.url + "/metrics", timeout=30) as r:
        assert "llamarig_gateway_ledger_up 0.0" in r.read().decode()
    assert err["error"]["code"] == "ledger_unavailable" and err["error"]["reason"] == "ledger_unavailable"
    assert "unreachable" in err["error"]["message"]
    back = start_store(port=store.port)  # the same port: the replica reconnects by itself
    try:
        assert post()[0] == 200
        st = lt.call(gw.status)
        assert st["ledger"]["reachable"] and st["rejected_by_reason"] == {"ledger_unavailable": 1}
    finally:
        back.stop()
