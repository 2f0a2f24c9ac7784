"""Chaos: a few hundred randomized requests (chat, completions and native /completion, streamed or
not, every tier, cron and per-key limits) at concurrency 16 against two fake backends, while one
backend is killed and restarted and the other paused; about a third of the clients hang up: at
random points, and all at once when a client process "crashes".

Asserted at the end (fixed seed; no timing windows: each request has a generous bounded
timeout, and the final accounting is awaited as an event with a bounded deadline):
- every request reached a terminal outcome (an answer, an error, or its client's hang-up);
- every reservation made was released exactly once (the ledger is instrumented);
- pool, slot and queue accounting is back to zero in /gateway/status and /metrics;
- every 429 (and every 503) carried Retry-After; every finished stream ended properly
  ([DONE], the native final chunk, or an error event).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from typing import Any

import aiohttp
from tests.gateway.chaos import PATHS, body, finish, headers

SEED = 20240611
N_REQUESTS = 320
CONCURRENCY = 16
TIERS = (None, "B", "C1", "C2", "D", "A")
# chaos events, fired when the request with this index is about to start
KILL_A, RESTART_A, PAUSE_B, RESUME_B = 70, 130, 190, 250
#: a client process dies: every request it has open hangs up in the same loop turn (streams in
#: flight and queued ones together: the release of one admits the next as the next one's client
#: is gone, the race of the keep-alive admission leak)
CLIENT_CRASH = (150, 235, 300)


def _stream_ended(data: bytes) -> bool:
    return b"data: [DONE]" in data or b'"stop": true' in data or b'"stop":true' in data or b'{"error"' in data


def _gauges(text: str, name: str) -> dict[str, float]:
    out = {}
    for m in re.finditer(rf'^llamarig_gateway_{name}\{{(\w+)="([^"]*)"\}} (\S+)$', text, re.M):
        out[m.group(2)] = float(m.group(3))
    return out


def test_chaos_no_reservation_leaks(lt: Any) -> None:
    rnd = random.Random(SEED)
    # pool 16384 tokens and 4 slots each: 2-4 requests of the tiers' sizes (2048-6144 + prompt)
    fa = lt.fake(tokens=30, token_interval_s=0.004, total_slots=4, n_ctx=16384)
    fb = lt.fake(tokens=30, token_interval_s=0.004, total_slots=4, n_ctx=16384)
    gw = lt.gateway({
        "admission": {"queue_size": 24, "queue_timeout_s": 0.4, "keepalive_s": 0.05, "retry_after_s": 1,
                      "prompt_tokens": "estimate"},
        "health": {"interval_s": 0.1, "timeout_s": 1.0, "eject_after": 1, "recover_after": 1},
        "keys": [{"key": "sk-chaos-alice", "name": "alice"},
                 {"key": "sk-chaos-bob-1", "name": "bob", "max_concurrent": 2}],
    }, backends=[fa.url, fb.url])
    auth = {"Authorization": "Bearer sk-chaos-alice"}

    # every reservation the ledger makes must be released exactly once
    made: Counter[int] = Counter()
    freed: Counter[int] = Counter()
    reserve, release = gw.ledger.reserve, gw.ledger.release

    def counted_reserve(r: Any, *a: Any) -> Any:
        made[r.id] += 1
        return reserve(r, *a)

    def counted_release(r: Any) -> bool:
        ok = release(r)
        if ok:
            freed[r.id] += 1
        return ok

    gw.ledger.reserve, gw.ledger.release = counted_reserve, counted_release  # type: ignore[method-assign]

    plans = []
    for i in range(N_REQUESTS):
        path = rnd.choice(PATHS)
        stream = rnd.random() < 0.6
        cut = None
        if rnd.random() < 0.22:  # the client hangs up: soon, after the headers, or mid-stream
            cut = rnd.choice(["soon", "headers", "mid"]) if stream else rnd.choice(["soon", "headers"])
        plans.append({"i": i, "path": path, "stream": stream, "body": body(rnd, path, stream),
                      "headers": headers(rnd, TIERS), "cut": cut, "cut_after_s": rnd.random() * 0.03,
                      "cut_chunks": rnd.randint(1, 4)})

    outcomes: dict[int, str] = {}
    missing_retry_after: list[tuple[int, int]] = []
    bad_streams: list[int] = []
    statuses: Counter[int] = Counter()

    async def one(s: aiohttp.ClientSession, p: dict[str, Any]) -> None:
        async with s.post(gw.url + p["path"], json=p["body"], headers=p["headers"]) as r:
            statuses[r.status] += 1
            if r.status in (429, 503) and "Retry-After" not in r.headers:
                missing_retry_after.append((p["i"], r.status))
            if p["cut"] == "headers":
                r.close()
                outcomes[p["i"]] = "cut"
                return
            if p["cut"] == "mid" and r.status == 200:
                for _ in range(p["cut_chunks"]):
                    if not await r.content.readany():
                        break
                r.close()
                outcomes[p["i"]] = "cut"
                return
            data = await r.read()
            if p["stream"] and r.status == 200 and not _stream_ended(data):
                bad_streams.append(p["i"])
            outcomes[p["i"]] = f"http_{r.status}"

    running: dict[int, asyncio.Task[None]] = {}

    async def client(s: aiohttp.ClientSession, p: dict[str, Any], sem: asyncio.Semaphore) -> None:
        try:
            task = running[p["i"]] = asyncio.ensure_future(one(s, p))
            await finish(task, p, outcomes)
        finally:
            running.pop(p["i"], None)
            sem.release()

    def crash() -> None:
        for i, t in list(running.items()):
            if not t.done():
                outcomes[i] = "cut"
                t.cancel()

    async def run() -> None:
        pause_b = asyncio.Event()
        port_a = fa.port
        sem = asyncio.Semaphore(CONCURRENCY)
        tasks = []
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as s:
            try:
                for p in plans:
                    await sem.acquire()
                    if p["i"] == KILL_A:
                        await fa.kill()  # in-flight streams break, new connections are refused
                    elif p["i"] == RESTART_A:
                        await fa.start(port_a)  # back on its port: the health check readmits it
                    elif p["i"] == PAUSE_B:
                        fb.b.gate_after = 2
                        fb.b.gate = pause_b  # b1 stops answering: held streams, queued requests
                    elif p["i"] == RESUME_B:
                        pause_b.set()
                    if p["i"] in CLIENT_CRASH:
                        crash()
                    tasks.append(asyncio.ensure_future(client(s, p, sem)))
                await asyncio.gather(*tasks)
            finally:
                pause_b.set()

            # once every client is done, the accounting must drain to zero: wait for it as an
            # event, with a generous bounded deadline
            st: dict[str, Any] = {}

            async def drained() -> bool:
                nonlocal st
                async with s.get(gw.url + "/gateway/status", headers=auth) as r:
                    st = await r.json()
                async with s.get(gw.url + "/metrics") as r:
                    text = await r.text()
                per_backend = [(b["reserved_tokens"], b["in_flight"]) for b in st["backends"]]
                gauges = [_gauges(text, n) for n in ("reserved_tokens", "in_flight", "queue_length")]
                return (st["reserved_tokens"] == 0 and st["in_flight"] == 0 and st["queue"]["length"] == 0
                        and all(v == (0, 0) for v in per_backend) and all(b["healthy"] for b in st["backends"])
                        and all(g and all(v == 0 for v in g.values()) for g in gauges))

            loop = asyncio.get_running_loop()
            end = loop.time() + 20
            while not await drained():
                assert loop.time() < end, f"accounting did not return to zero: {st['backends']}, queue {st['queue']}"
                await asyncio.sleep(0.05)

    lt.run(run(), timeout=120)

    # every request reached a terminal outcome, none hung
    assert len(outcomes) == N_REQUESTS, sorted(set(range(N_REQUESTS)) - set(outcomes))
    kinds = Counter(v.split(":")[0] for v in outcomes.values())
    assert kinds["hang"] == 0, kinds
    assert not missing_retry_after, missing_retry_after
    assert not bad_streams, bad_streams
    # the mix really happened
    assert kinds["cut"] >= 50 and statuses[200] >= 100, (kinds, statuses)
    assert set(statuses) <= {200, 429, 502, 503}, statuses
    # each reservation released exactly once; nothing held, queued or counted per key
    assert made and set(made) == set(freed), set(made) ^ set(freed)
    assert max(made.values()) == 1 and max(freed.values()) == 1
    assert lt.call(lambda: (gw.ledger.active, gw.admission.queued, gw.admission.per_key)) == ({}, 0, {})
    # the killed backend is back; upstream streams were closed when their clients left
    s = lt.call(gw.status)
    assert all(b["healthy"] for b in s["backends"]), s["backends"]
    assert fb.stats.client_closed + fa.stats.client_closed > 0
    print(f"chaos: {dict(kinds)} statuses {dict(statuses)} reservations {len(made)} rejected {s['rejected']}")
