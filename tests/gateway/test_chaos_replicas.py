"""Chaos across replicas: three `llamarig gateway` processes sharing one admission ledger in a
real Valkey/Redis server (loopback port), in front of two fake backends (fault injection, as in
test_chaos.py). A fixed, seeded list of requests (chat, completions, native; streamed or not;
tiers, cron, a per-key limit) goes to random replicas at concurrency 12; about a fifth of the
clients hang up; backend b0 is killed and restarted; replica r2 is SIGKILLed while it holds
reservations (its clients see their connections reset).

Asserted (no timing windows: each wait is an event with a bounded deadline):
- the reservations on a backend never exceed its pool: the store's own high-water mark, kept by
  the claim script in the same atomic step as the claim, and the test's samples of the
  reservation records themselves;
- every reservation ended exactly once: made = released + expired (a record is removed only if
  it is there, by a release or by the lease reaper), and r2's ended by its lease (expired >= 1);
- the ledger returns to zero (no record, every backend's reserved tokens and in-flight count 0),
  and a live replica's /gateway/status shows the replicas and what they hold.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from tests.gateway.chaos import KEYS, PATHS, body, finish, headers

from llamarig.gateway.shared_ledger import PREFIX
from llamarig.launch.server import free_port

SEED = 20261204
N_REQUESTS = 240
CONCURRENCY = 12
LEASE_S = 1.0
KILL_B0, RESTART_B0, KILL_R2 = 60, 110, 150
TIERS = (None, "B", "C1", "D", "A")


def _replica_cmd(cfg: Path, port: int, name: str, backends: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "llamarig", "gateway", "--config", str(cfg), "--port", str(port),
           "--replica", name, "--log-level", "warning"]
    for b in backends:
        cmd += ["--backend", b]
    return cmd


def test_chaos_three_replicas_share_one_ledger(store: Any, lt: Any, tmp_path: Path) -> None:
    rnd = random.Random(SEED)
    fa = lt.fake(tokens=30, token_interval_s=0.004, total_slots=4, n_ctx=16384)
    fb = lt.fake(tokens=30, token_interval_s=0.004, total_slots=4, n_ctx=16384)
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps({  # JSON is YAML
        "admission": {"queue_size": 24, "queue_timeout_s": 0.5, "keepalive_s": 0.05, "retry_after_s": 1,
                      "prompt_tokens": "estimate"},
        "health": {"interval_s": 0.1, "timeout_s": 1.0, "eject_after": 1, "recover_after": 1},
        "keys": [{"key": KEYS[0], "name": "alice"}, {"key": KEYS[1], "name": "bob", "max_concurrent": 2}],
        "ledger": {"url": store.url, "lease_s": LEASE_S, "timeout_s": 1.0},
    }))
    ports = [free_port() for _ in range(3)]
    procs: list[subprocess.Popen[bytes]] = []
    logs = [open(tmp_path / f"r{i}.log", "wb") for i in range(3)]  # noqa: SIM115 - closed below
    try:
        for i, port in enumerate(ports):
            procs.append(subprocess.Popen(_replica_cmd(cfg, port, f"r{i}", [fa.url, fb.url]),
                                          stdout=logs[i], stderr=subprocess.STDOUT))
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        plans = []
        for i in range(N_REQUESTS):
            path = rnd.choice(PATHS)
            stream = rnd.random() < 0.6
            cut = rnd.choice(["soon", "headers"]) if rnd.random() < 0.2 else None
            plans.append({"i": i, "path": path, "stream": stream, "body": body(rnd, path, stream),
                          "headers": headers(rnd, TIERS), "cut": cut, "cut_after_s": rnd.random() * 0.03,
                          "replica": rnd.randrange(3)})
        outcomes: dict[int, str] = {}
        statuses: Counter[int] = Counter()
        samples: list[dict[str, int]] = []
        pools: dict[str, int] = {}
        status_seen: dict[str, Any] = {}
        final: dict[str, Any] = {}

        async def run() -> None:
            r = aioredis.from_url(store.url)
            auth = {"Authorization": f"Bearer {KEYS[0]}"}
            stop_sampling = asyncio.Event()

            async def records() -> dict[str, int]:
                per: dict[str, int] = {}
                for rec in (await r.hgetall(PREFIX + "res")).values():
                    backend, tokens = json.loads(rec)[:2]
                    per[backend] = per.get(backend, 0) + int(tokens)
                return per

            async def sampler() -> None:
                while not stop_sampling.is_set():
                    samples.append(await records())
                    await asyncio.sleep(0.002)

            conn = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as s:
                loop = asyncio.get_running_loop()
                end = loop.time() + 60
                for u in urls:  # every replica up, with both pools read from /props
                    while True:
                        assert loop.time() < end, "a replica did not start: " + (tmp_path / "r0.log").read_text()[-2000:]
                        try:
                            async with s.get(u + "/gateway/status", headers=auth) as resp:
                                if resp.status == 200:
                                    st = await resp.json()
                                    if all(b["pool_tokens"] for b in st["backends"]):
                                        pools.update({b["name"]: b["pool_tokens"] for b in st["backends"]})
                                        break
                        except (aiohttp.ClientError, OSError):
                            pass
                        await asyncio.sleep(0.1)

                sampling = asyncio.ensure_future(sampler())
                alive = [0, 1, 2]
                sem = asyncio.Semaphore(CONCURRENCY)

                async def one(p: dict[str, Any], url: str) -> None:
                    async with s.post(url + p["path"], json=p["body"], headers=p["headers"]) as resp:
                        statuses[resp.status] += 1
                        if p["cut"] == "headers":
                            resp.close()
                            outcomes[p["i"]] = "cut"
                            return
                        await resp.read()
                        outcomes[p["i"]] = f"http_{resp.status}"

                async def client(p: dict[str, Any], url: str) -> None:
                    try:
                        await finish(asyncio.ensure_future(one(p, url)), p, outcomes)
                    finally:
                        sem.release()

                tasks = []
                for p in plans:
                    await sem.acquire()
                    if p["i"] == KILL_B0:
                        await fa.kill()
                    elif p["i"] == RESTART_B0:
                        await fa.start(fa.port)
                    elif p["i"] == KILL_R2:
                        # r2 dies while it holds reservations (awaited as an event, bounded)
                        end = loop.time() + 20
                        while not [k async for k in r.scan_iter(match=PREFIX + "held:r2/*")]:
                            assert loop.time() < end, "r2 never held a reservation"
                            await asyncio.sleep(0.001)
                        procs[2].send_signal(signal.SIGKILL)
                        alive = [0, 1]
                    target = p["replica"] if p["replica"] in alive else alive[p["i"] % len(alive)]
                    tasks.append(asyncio.ensure_future(client(p, urls[target])))
                await asyncio.gather(*tasks)

                # the ledger drains to zero: r2's reservations expire with its lease, the others
                # are released; awaited as an event with a bounded deadline
                end = loop.time() + 30
                while True:
                    counts = {k.decode(): int(v) for k, v in (await r.hgetall(PREFIX + "counts")).items()}
                    live = {k: v for k, v in counts.items() if k[:2] in ("r:", "n:", "k:")}
                    if not await r.hlen(PREFIX + "res") and not any(live.values()):
                        break
                    assert loop.time() < end, f"the ledger did not return to zero: {counts}"
                    await asyncio.sleep(0.05)
                stop_sampling.set()
                await sampling
                final["counts"] = counts
                final["stats"] = {k.decode(): int(v) for k, v in (await r.hgetall(PREFIX + "stats")).items()}
                async with s.get(urls[0] + "/gateway/status", headers=auth) as resp:
                    status_seen.update(await resp.json())
            await r.aclose()

        lt.run(run(), timeout=240)
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.send_signal(signal.SIGTERM)
        for pr in procs:
            try:
                pr.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(pr.pid, signal.SIGKILL)
                pr.wait(5)
        for f in logs:
            f.close()

    kinds = Counter(v.split(":")[0] for v in outcomes.values())
    assert len(outcomes) == N_REQUESTS and kinds["hang"] == 0, kinds
    assert statuses[200] >= 60 and kinds["cut"] >= 20, (kinds, statuses)
    # never overbooked: the store's atomic high-water mark, and every sample of the records
    peaks = {k[3:]: v for k, v in final["counts"].items() if k.startswith("pr:")}
    assert set(peaks) <= set(pools) and all(peaks[b] <= pools[b] for b in peaks), (peaks, pools)
    assert all(t <= pools[b] for smp in samples for b, t in smp.items()), "a sample exceeded a pool"
    slots_peak = {k[3:]: v for k, v in final["counts"].items() if k.startswith("pn:")}
    assert all(v <= 4 for v in slots_peak.values()), slots_peak
    # every reservation ended exactly once, r2's through its lease
    st = final["stats"]
    assert st["made"] == st.get("released", 0) + st.get("expired", 0) and st["made"] >= 60, st
    assert st.get("expired", 0) >= 1, st
    # the status of a live replica: the shared view, who holds what (nothing, now), r2 gone
    led = status_seen["ledger"]
    assert led["kind"] == "redis" and led["reachable"] and led["stats"] == st
    assert {h["replica"] for h in led["replicas"]} <= {"r0", "r1"}
    assert status_seen["reserved_tokens"] == 0 and status_seen["in_flight"] == 0
    print(f"chaos replicas: {dict(kinds)} statuses {dict(statuses)} ledger {st} peaks {peaks} pools {pools} "
          f"samples {len(samples)}")
