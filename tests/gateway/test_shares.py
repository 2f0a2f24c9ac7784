"""Tier and cron caps, routes, immediate rejection, the pool re-read after a restart, one request
id, and Retry-After from the reservations in flight: the gateway's real components in front of
the fake llama-server (what the real server does is in test_pool_real.py). Every path ends with
nothing reserved, in flight or queued (principle 4)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.gateway.test_reasons import MSG, english, hold, post, release, until  # noqa: F401

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
CRON = {"x-llamarig-source": "cron-nightly"}


def empty(lt: Any, gw: Any) -> None:
    """Nothing reserved, in flight, queued or held by a tier anywhere."""
    st = lt.call(gw.status)
    assert (st["reserved_tokens"], st["in_flight"], st["queue"]["length"], st["requests"]) == (0, 0, 0, [])
    assert all(g["in_flight"] == 0 and g["reserved_tokens"] == 0 for g in st["shares"].values())
    assert not lt.call(lambda: gw.ledger.active) and lt.call(lambda: gw.admission.per_key) == {}


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_cron_cap_keeps_slots_for_agents(lt: Any, tmp_path: Path) -> None:
    gate = asyncio.Event()
    fb = lt.fake(tokens=4, total_slots=4, gate=gate)
    reqlog = tmp_path / "req.jsonl"
    gw = lt.gateway({"cron": {"max_slots": 1}, "server": {"request_log": str(reqlog)},
                     "admission": {"keepalive_s": 0}}, backends=[fb.url])

    async def run() -> dict[str, Any]:
        s, held = await hold(gw, 1, {"messages": MSG}, CRON)  # one cron job holds its one slot
        more = [asyncio.ensure_future(s.post(gw.url + "/v1/chat/completions", headers=CRON,
                                             json={"messages": MSG, "stream": True})) for _ in range(2)]
        await until(lambda: gw.admission.queued == 2)  # two more cron jobs wait: the cap, not the slots
        agent = asyncio.ensure_future(s.post(gw.url + "/v1/chat/completions",
                                             json={"messages": MSG, "tools": TOOLS, "stream": True, "max_tokens": 100}))
        await until(lambda: gw.ledger.total_in_flight() == 2)  # the agent got a slot at once
        st = gw.status()
        gate.set()
        for r in await asyncio.gather(agent, *more):
            await r.read()
            r.release()
        await release(gate, s, held)
        return st

    st = lt.run(run())
    cron = st["shares"]["cron"]
    assert (cron["in_flight"], cron["max_slots"], cron["queued"]) == (1, 1, 2)
    assert st["shares"]["tier:C2"]["in_flight"] == 1 and st["queue"]["by_tier"] == {"B": 2}
    empty(lt, gw)
    recs = log_lines(reqlog)
    assert [r["queued"] for r in recs if r["tier"] == "C2"] == [False]
    assert sorted(r["queued"] for r in recs if r["cron"]) == [False, True, True]


def test_on_busy_reject_answers_429_at_once_and_holds_nothing(lt: Any, tmp_path: Path) -> None:
    gate = asyncio.Event()
    fb = lt.fake(tokens=4, total_slots=2, gate=gate, n_ctx=16384)
    reqlog = tmp_path / "req.jsonl"
    gw = lt.gateway({"cron": {"max_slots": 1, "on_busy": "reject"}, "tiers": {"A": {"on_busy": "reject"}},
                     "server": {"request_log": str(reqlog)}, "admission": {"queue_timeout_s": 30}},
                    backends=[fb.url])

    async def run() -> list[tuple[int, str | None, dict[str, Any]]]:
        s, held = await hold(gw, 1, {"messages": MSG}, CRON)
        out = []
        async with s.post(gw.url + "/v1/chat/completions", json={"messages": MSG}, headers=CRON) as r:
            out.append((r.status, r.headers.get("Retry-After"), json.loads(await r.read())))
        held2 = [asyncio.ensure_future(s.post(gw.url + "/v1/chat/completions",
                                              json={"messages": MSG, "stream": True, "max_tokens": 100}))]
        await until(lambda: gw.ledger.total_in_flight() == 2)  # the second slot, held by B
        async with s.post(gw.url + "/v1/chat/completions", json={"messages": MSG},
                          headers={"x-llamarig-tier": "A"}) as r:
            out.append((r.status, r.headers.get("Retry-After"), json.loads(await r.read())))
        gate.set()
        (r2,) = await asyncio.gather(*held2)
        await r2.read()
        r2.release()
        await release(gate, s, held)
        return out

    (st1, ra1, b1), (st2, ra2, b2) = lt.run(run())
    e1, e2 = b1["error"], b2["error"]
    assert (st1, e1["code"], e1["reason"]) == (429, "busy", "tier_cap") and ra1 is not None and int(ra1) >= 1
    assert e1["details"]["group"] == "cron" and e1["details"]["max_slots"] == 1
    assert "cron jobs hold 1 of their 1 slots" in e1["message"] and "on_busy = reject" in e1["message"]
    assert e1["retry_after_estimate"]["method"] in ("in_flight", "unmeasured")
    assert (st2, e2["code"], e2["reason"]) == (429, "busy", "slots_busy")
    empty(lt, gw)
    rej = [r for r in log_lines(reqlog) if r["outcome"].startswith("rejected")]
    assert [r["outcome"] for r in rej] == ["rejected:busy", "rejected:busy"] and all("retry_after" in r for r in rej)


def test_routes_send_a_tier_to_its_backends(lt: Any) -> None:
    a, b = lt.fake(), lt.fake()
    gw = lt.gateway({"backends": [{"url": a.url, "name": "a"}, {"url": b.url, "name": "b"}],
                     "tiers": {"A": {"backends": ["b"]}}, "health": {"interval_s": 3600}})
    for _ in range(4):
        st, h, _body = post(gw.url + "/v1/chat/completions", {"messages": MSG}, {"x-llamarig-tier": "A"})
        assert st == 200 and h["X-Llamarig-Backend"] == "b"
    lt.run(b.kill())
    lt.call(lambda: gw.backends.mark_failure("b", "killed", hard=True))
    st, _h, body = post(gw.url + "/v1/chat/completions", {"messages": MSG}, {"x-llamarig-tier": "A"})
    assert st == 503 and body["error"]["reason"] == "no_backend" and body["error"]["details"]["routed_to"] == ["b"]
    st, h, _body = post(gw.url + "/v1/chat/completions", {"messages": MSG})
    assert st == 200 and h["X-Llamarig-Backend"] == "a"  # B is not routed: any healthy backend
    empty(lt, gw)


def test_tier_share_clamps_max_tokens(lt: Any) -> None:
    fb = lt.fake(n_ctx=4096)
    gw = lt.gateway({"tiers": {"B": {"max_pool_share": 0.25}}}, backends=[fb.url])
    st, h, _body = post(gw.url + "/v1/chat/completions", {"messages": MSG, "max_tokens": 4000})
    assert st == 200 and int(h["X-Llamarig-Reserved"]) == 1024  # 9 prompt tokens + 1015
    assert lt.call(lambda: fb.stats.received[-1]["max_tokens"]) == 1015
    st, _h, body = post(gw.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 2000}]})
    assert st == 400 and body["error"]["code"] == "exceeds_tier_share"
    empty(lt, gw)


def test_one_request_id_in_status_header_and_log(lt: Any, tmp_path: Path) -> None:
    gate = asyncio.Event()
    gate.set()
    fb = lt.fake(tokens=4, gate=gate)
    reqlog = tmp_path / "req.jsonl"
    gw = lt.gateway({"server": {"request_log": str(reqlog)}}, backends=[fb.url])
    for _ in range(2):
        assert post(gw.url + "/v1/chat/completions", {"messages": MSG, "max_tokens": 2})[0] == 200
    gate.clear()

    async def run() -> tuple[dict[str, Any], str]:
        s = aiohttp.ClientSession()
        r = await s.post(gw.url + "/v1/chat/completions", json={"messages": MSG, "stream": True})
        await until(lambda: gw.ledger.total_in_flight() == 1)
        async with s.get(gw.url + "/gateway/status") as q:
            st = json.loads(await q.read())
        gate.set()
        await r.read()
        hdr = r.headers["X-Llamarig-Request-Id"]
        r.release()
        await s.close()
        return st, hdr

    st, hdr = lt.run(run())
    (req,) = st["requests"]
    assert req["id"] == int(hdr) == log_lines(reqlog)[-1]["id"] == 3
    assert (req["tier"], req["reserved_tokens"], req["max_tokens"], req["prompt_tokens"]) == ("B", 9 + 4087, 4087, 9)
    assert req["slot"] is None  # the fake has no /slots
    empty(lt, gw)


def test_pool_reread_after_restart_and_config_mismatch_said_once(lt: Any, caplog: pytest.LogCaptureFixture) -> None:
    fb = lt.fake(n_ctx=4096, n_ctx_train=16384)
    with caplog.at_level(logging.INFO, logger="llamarig.gateway"):
        gw = lt.gateway({"backends": [{"url": fb.url, "pool_tokens": 49152}], "health": {"interval_s": 0.02}})
        checks = lt.call(lambda: gw.backends.states["b0"].checks)
        lt.run(until(lambda: gw.backends.states["b0"].checks >= checks + 5))
        st = lt.call(gw.status)
        (b,) = st["backends"]
        assert b["pool_tokens"] == 4096 and b["pool"]["server_tokens"] == 4096 and b["pool"]["exact"]
        assert st["mismatches"] == [{"backend": "b0", "field": "pool_tokens", "configured": 49152, "server": 4096,
                                     "action": "clamped"}]
        metrics = urlget(gw.url + "/metrics")
        assert 'llamarig_gateway_pool_tokens{backend="b0"} 4096.0' in metrics
        assert 'llamarig_gateway_pool_mismatch{backend="b0",field="pool_tokens"} 1.0' in metrics
        # llama-server restarted with -c 8192: the next check reads the new pool
        fb.b.n_ctx = 8192
        lt.run(until(lambda: gw.backends.states["b0"].pool.pool_tokens == 8192))
        checks = lt.call(lambda: gw.backends.states["b0"].checks)
        lt.run(until(lambda: gw.backends.states["b0"].checks >= checks + 5))
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "backend b0: the config's pool_tokens = 49152 is larger than the server's pool 4096 (/props: one slot's "
        "context, the whole pool with -kvu): admission uses 4096 (clamped); if llama-server runs without -kvu set "
        "unified = false, if it runs --kv-unified-per-slot set the backend's log",
        "backend b0: the config's pool_tokens = 49152 is larger than the server's pool 8192 (/props: one slot's "
        "context, the whole pool with -kvu): admission uses 8192 (clamped); if llama-server runs without -kvu set "
        "unified = false, if it runs --kv-unified-per-slot set the backend's log"]
    changed = [r.getMessage() for r in caplog.records if "KV pool now" in r.getMessage()]
    assert changed == ["backend b0: KV pool now 8192 tokens (was 4096; from /props + config), 4 slots, 8192 tokens "
                       "per slot: llama-server restarted with other settings"]


def urlget(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=20) as r:
        return str(r.read().decode())


def test_retry_after_from_the_request_in_flight(lt: Any) -> None:
    """One slot, one request decoding at a measured rate: the next one's Retry-After is when that
    request ends (its remaining tokens at the rate), with the method in the 429 body."""
    fb = lt.fake(total_slots=1, tokens=400, token_interval_s=0.005)
    gw = lt.gateway({"tiers": {"B": {"on_busy": "reject"}}}, backends=[fb.url])
    st, _h, _b = post(gw.url + "/v1/chat/completions", {"messages": MSG, "max_tokens": 40})  # measures the rate
    assert st == 200 and lt.call(lambda: gw.backends.states["b0"].progress.decode.value) is not None

    async def run() -> tuple[int, dict[str, Any]]:
        s = aiohttp.ClientSession()
        r = await s.post(gw.url + "/v1/chat/completions", json={"messages": MSG, "max_tokens": 400, "stream": True})
        await r.content.readline()  # it has started
        async with s.post(gw.url + "/v1/chat/completions", json={"messages": MSG, "max_tokens": 10}) as q:
            out = q.status, json.loads(await q.read())
        await r.read()
        r.release()
        await s.close()
        return out

    status, body = lt.run(run())
    est = body["error"]["retry_after_estimate"]
    assert status == 429 and body["error"]["reason"] == "slots_busy"
    assert est["method"] == "in_flight" and est["waits_for"] == 1 and est["seconds"] > 0 and est["decode_tok_s"] > 0
    assert body["error"]["retry_after"] >= 1
    empty(lt, gw)


def test_a_busy_rejection_in_chinese(lt: Any) -> None:
    """``Gateway(lang="zh")`` (``llamarig --lang zh gateway``): the message of a 429 for a cap is
    Chinese; ``code``, ``reason`` and ``details`` stay as they are."""
    gate = asyncio.Event()
    fb = lt.fake(tokens=4, total_slots=4, gate=gate, n_ctx=16384)
    gw = lt.gateway({"cron": {"max_slots": 1, "on_busy": "reject"}}, backends=[fb.url], lang="zh")

    async def run() -> dict[str, Any]:
        s, held = await hold(gw, 1, {"messages": MSG, "max_tokens": 50}, CRON)
        async with s.post(gw.url + "/v1/chat/completions", json={"messages": MSG}, headers=CRON) as r:
            body = json.loads(await r.read())
        await release(gate, s, held)
        return dict(body["error"])

    err = lt.run(run())
    assert (err["code"], err["reason"], err["details"]["group"]) == ("busy", "tier_cap", "cron")
    assert err["message"] == "忙，不排队（on_busy = reject）：定时任务在 b0 上已占 1/1 个槽位（max_slots）"
    empty(lt, gw)
