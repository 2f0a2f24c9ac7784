"""Every rejection names its real cause with the numbers (slots busy, pool full, queue full, key
limit, no backend, queue timeout), in the JSON body (``reason``, ``details``) and the log line;
startup says what it found at each backend; ``llamarig gateway status`` shows the configured pool
and readable counters. Against the fake llama-server and the gateway's real components."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from llamarig import i18n
from llamarig.cli.gateway_cmd import gateway_cmd, pool_cell
from llamarig.gateway import reasons
from llamarig.gateway.admission import Ledger, Pool, Reservation
from llamarig.gateway.backends import BackendState
from llamarig.gateway.config import BackendConfig
from llamarig.testing.server import free_port

MSG = [{"role": "user", "content": "hello"}]  # the fake counts 5 bytes + 4 = 9 prompt tokens


@pytest.fixture(autouse=True)
def english() -> Iterator[None]:
    i18n.set_language("en")
    yield
    i18n.set_language(None)


async def until(pred: Any, timeout: float = 10.0) -> None:
    end = asyncio.get_running_loop().time() + timeout
    while not pred():
        if asyncio.get_running_loop().time() > end:
            raise AssertionError(f"condition not reached in {timeout} s")
        await asyncio.sleep(0.005)


def post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


async def hold(gw: Any, n: int, body: dict[str, Any], headers: dict[str, str] | None = None
               ) -> tuple[aiohttp.ClientSession, list[asyncio.Task[Any]]]:
    """``n`` streams admitted and held by the fake's gate (in flight until the gate opens)."""
    s = aiohttp.ClientSession()

    async def one() -> bytes:
        async with s.post(gw.url + "/v1/chat/completions", json={**body, "stream": True}, headers=headers) as r:
            return await r.read()

    tasks = [asyncio.ensure_future(one()) for _ in range(n)]
    await until(lambda: gw.ledger.total_in_flight() == n)
    return s, tasks


async def release(gate: asyncio.Event, s: aiohttp.ClientSession, tasks: list[asyncio.Task[Any]]) -> None:
    gate.set()
    await asyncio.gather(*tasks)
    await s.close()


def test_all_slots_busy_with_room_in_the_pool_says_slots_busy(lt: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The report: 4 x 109 of 307200 tokens reserved, all 4 slots busy; the 429 said "KV pool
    full: waited 2.0 s for 109 tokens". Now it names the slots, with the numbers."""
    gate = asyncio.Event()
    fb = lt.fake(tokens=4, total_slots=4, n_ctx=262144, gate=gate)
    gw = lt.gateway({"backends": [{"url": fb.url, "pool_tokens": 307200}],
                     "admission": {"queue_timeout_s": 0.3, "keepalive_s": 0}})
    body = {"messages": MSG, "max_tokens": 100}

    async def run() -> tuple[int, str | None, dict[str, Any]]:
        s, tasks = await hold(gw, 4, body)
        async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
            out = r.status, r.headers.get("Retry-After"), json.loads(await r.read())
        await release(gate, s, tasks)
        return out

    with caplog.at_level(logging.INFO, logger="llamarig.gateway"):
        st, retry_after, data = lt.run(run())
    err = data["error"]
    assert st == 429 and retry_after is not None and int(retry_after) >= 1
    assert err["type"] == "rate_limit_error" and err["code"] == "queue_timeout" and err["retry_after"] >= 1
    assert err["reason"] == "slots_busy"
    d = err["details"]
    assert (d["busy_slots"], d["slots"], d["reserved_tokens"], d["pool_tokens"], d["need_tokens"]) == (4, 4, 436, 307200, 109)
    assert d["queue_timeout_s"] == 0.3 and 0.2 <= d["waited_s"] < 1
    assert err["message"].startswith(f"queue timeout after {d['waited_s']:.1f} s: all slots busy: 4 of 4 in use")
    assert "436 of 307200 tokens reserved, this request needs 109" in err["message"]
    assert "KV pool full" not in err["message"]
    logged = [r.getMessage() for r in caplog.records if "slots_busy" in r.getMessage()]
    assert logged and "429 queue_timeout (slots_busy)" in logged[0] and "4 of 4 in use" in logged[0]
    m = urllib.request.urlopen(gw.url + "/metrics").read().decode()
    assert 'llamarig_gateway_rejected_total{code="queue_timeout",reason="slots_busy",tier="B"} 1.0' in m
    assert lt.call(lambda: gw.ledger.total_reserved()) == 0


def test_free_slot_but_no_room_says_pool_full(lt: Any) -> None:
    gate = asyncio.Event()
    fb = lt.fake(tokens=4, total_slots=4, n_ctx=1000, gate=gate)
    gw = lt.gateway({"admission": {"queue_timeout_s": 0.2, "keepalive_s": 0}}, backends=[fb.url])

    async def run() -> dict[str, Any]:
        s, tasks = await hold(gw, 1, {"messages": MSG, "max_tokens": 600})
        async with s.post(gw.url + "/v1/chat/completions", json={"messages": MSG, "max_tokens": 600}) as r:
            assert r.status == 429 and r.headers.get("Retry-After")
            out: dict[str, Any] = json.loads(await r.read())["error"]
        await release(gate, s, tasks)
        return out

    err = lt.run(run())
    assert err["code"] == "queue_timeout" and err["reason"] == "pool_full"
    d = err["details"]
    assert (d["reserved_tokens"], d["pool_tokens"], d["need_tokens"], d["busy_slots"], d["slots"]) == (609, 1000, 609, 1, 4)
    assert "KV pool full: 609 of 1000 tokens reserved, this request needs 609" in err["message"]
    assert "1 of 4 slots in use" in err["message"]


def test_queue_full_and_key_limit_name_their_numbers(lt: Any) -> None:
    gate = asyncio.Event()
    fb = lt.fake(tokens=4, total_slots=1, n_ctx=8000, gate=gate)
    gw = lt.gateway({"admission": {"queue_size": 1, "queue_timeout_s": 10, "keepalive_s": 0},
                     "keys": [{"key": "sk-alice-12345", "name": "alice", "max_concurrent": 1},
                              {"key": "sk-bob-1234567", "name": "bob"}]}, backends=[fb.url])
    alice = {"Authorization": "Bearer sk-alice-12345"}
    bob = {"Authorization": "Bearer sk-bob-1234567"}
    body = {"messages": MSG, "max_tokens": 50}

    status: dict[str, Any] = {}

    async def run() -> tuple[tuple[int, str | None, dict[str, Any]], ...]:
        s, tasks = await hold(gw, 1, body, alice)  # alice holds the only slot
        waiting = asyncio.ensure_future(s.post(gw.url + "/v1/chat/completions", json=body, headers=bob))
        await until(lambda: gw.admission.queued == 1)
        out = []
        for h in (bob, alice):
            async with s.post(gw.url + "/v1/chat/completions", json=body, headers=h) as r:
                out.append((r.status, r.headers.get("Retry-After"), json.loads(await r.read())["error"]))
        status.update(gw.status())  # alice in flight, bob queued, two 429s
        gate.set()
        (await waiting).release()
        await release(gate, s, tasks)
        return tuple(out)

    (st1, ra1, full), (st2, ra2, key) = lt.run(run())
    # what `llamarig top` reads: each reservation in flight, the queue by priority, 429s counted
    (req,) = status["requests"]
    assert req["key"] == "alice" and req["reserved_tokens"] == 59 and req["tier"] == "B" and req["age_s"] >= 0
    assert status["queue"]["by_priority"] == {str(req["priority"]): 1} and status["rejected_by_status"] == {"429": 2}
    assert st1 == st2 == 429 and ra1 and ra2
    assert full["code"] == full["reason"] == "queue_full"
    assert full["details"] == {"queued": 1, "queue_size": 1, "blocked_by": "slots_busy", "busy_slots": 1, "slots": 1,
                               "reserved_tokens": 59, "pool_tokens": 8000, "need_tokens": 59}
    assert full["message"].startswith("queue full: 1 waiting, limit 1; all slots busy: 1 of 1 in use")
    assert key["code"] == key["reason"] == "key_limit"
    assert key["details"] == {"key": "alice", "in_flight_or_queued": 1, "limit": 1}
    assert key["message"] == "API key 'alice' is at its concurrency limit: 1 of 1 requests in flight or queued"


def test_no_backend_503_counts_backends_and_status_shows_configured_pool(lt: Any) -> None:
    """A backend that was never reached: 503 no_backend with the counts and Retry-After; status
    shows the configured pool (307200, from the config), not "0 / ?", and readable counters."""
    port = free_port()
    gw = lt.gateway({"backends": [{"url": f"http://127.0.0.1:{port}", "name": "gpu0", "pool_tokens": 307200,
                                   "slots": 4}],
                     "health": {"interval_s": 3600, "timeout_s": 0.5}})
    st, h, data = post(gw.url + "/v1/chat/completions", {"messages": MSG})
    err = data["error"]
    assert st == 503 and int(h["Retry-After"]) >= 1
    assert err["code"] == err["reason"] == "no_backend" and err["type"] == "server_error"
    assert err["details"] == {"healthy_backends": 0, "backends": 1, "tried_backends": 0}
    assert err["message"] == "no healthy backend (0 of 1 healthy)"
    status = json.loads(urllib.request.urlopen(gw.url + "/gateway/status").read())
    b = status["backends"][0]
    assert b["pool_tokens"] is None and b["configured"]["pool_tokens"] == 307200 and b["problem"] == "refused"
    assert status["rejected_by_reason"] == {"no_backend": 1}
    out = CliRunner(env={"COLUMNS": "250"}).invoke(gateway_cmd, ["status", "--url", gw.url])
    assert out.exit_code == 0, out.output
    assert "0 / 307200 (config; the backend has not answered /props yet)" in out.output
    assert "0 / 4 (config)" in out.output and "connection refused" in out.output
    assert "0 / ?" not in out.output
    assert "rejected (429/503) by reason: no backend 1" in out.output and "{'" not in out.output


def test_status_names_where_the_pool_came_from(lt: Any) -> None:
    fb = lt.fake(total_slots=4, n_ctx=262144)
    gw = lt.gateway({"backends": [{"url": fb.url, "name": "cfg", "pool_tokens": 307200}, {"url": fb.url, "name": "props"}],
                     "admission": {"safety": 0.9}})
    out = CliRunner(env={"COLUMNS": "250"}).invoke(gateway_cmd, ["status", "--url", gw.url])
    assert out.exit_code == 0, out.output
    assert "0 / 276480 (/props + config)" in out.output  # 307200 x 0.9
    # 262144 x 0.9; the slot context is the model's n_ctx_train: the pool may be larger
    assert "0 / at least 235929 (/props)" in out.output
    assert "usable pool = pool × admission.safety (0.9)" in out.output
    assert "rejected (429/503) by reason: none" in out.output
    # a backend never reached, seen through the status JSON of an older or newer gateway
    assert pool_cell({"reserved_tokens": 0, "pool_tokens": None, "configured": {"pool_tokens": 307200}}, 1.0) \
        == "0 / 307200 (config; the backend has not answered /props yet)"
    assert pool_cell({"reserved_tokens": 3, "pool_tokens": None}, 1.0) == "3 / ? (from /props, once the backend answers)"


def test_queued_stream_rejection_event_carries_the_reason(lt: Any) -> None:
    gate = asyncio.Event()
    fb = lt.fake(tokens=4, total_slots=1, n_ctx=8000, gate=gate)
    gw = lt.gateway({"admission": {"keepalive_s": 0.05, "queue_timeout_s": 0.3}}, backends=[fb.url])

    async def run() -> bytes:
        s, tasks = await hold(gw, 1, {"messages": MSG})
        async with s.post(gw.url + "/v1/chat/completions", json={"messages": MSG, "stream": True}) as r:
            data = await r.read()
        await release(gate, s, tasks)
        return data

    data = lt.run(run())
    assert data.startswith(b": llamarig gateway: queued")
    err = json.loads(data.strip().split(b"\n\n")[-1][6:])["error"]
    assert err["code"] == "queue_timeout" and err["reason"] == "slots_busy" and err["details"]["slots"] == 1


# ------------------------------------------------------------------------------ pure


def _state(name: str, pool: int, slots: int, slot_ctx: int | None = None, healthy: bool = True) -> BackendState:
    s = BackendState(BackendConfig(url=f"http://{name}:1", name=name))
    s.pool = Pool(pool, slots, slot_ctx or pool, "props")
    s.healthy = healthy
    return s


def test_blocked_picks_the_real_cause() -> None:
    led = Ledger()
    a, b = _state("a", 1000, 1), _state("b", 4000, 2, slot_ctx=2000)
    assert reasons.blocked([a, b], led, 900) is None  # fits: nothing blocks it
    led.reserve(Reservation(1, "a", 100, None, "B", 0, 0.0))
    led.reserve(Reservation(2, "b", 3000, None, "B", 0, 0.0))
    # a: no slot; b: a slot, but 3000 of 4000 reserved: the pool, with b's numbers
    blk = reasons.blocked([a, b], led, 1500)
    assert blk is not None and blk.reason == "pool_full"
    assert dict(blk.details) == {"reserved_tokens": 3000, "pool_tokens": 4000, "need_tokens": 1500, "busy_slots": 2,
                                 "slots": 3, "backend": "b"}
    blk = reasons.blocked([a, b], led, 2500)  # larger than b's slot (2000): not the pool's fault
    assert blk is not None and blk.reason == "exceeds_slot_ctx" and blk.details["slot_ctx"] == 2000
    led.reserve(Reservation(3, "b", 10, None, "B", 0, 0.0))
    blk = reasons.blocked([a, b], led, 10)
    assert blk is not None and blk.reason == "slots_busy" and (blk.details["busy_slots"], blk.details["slots"]) == (3, 3)
    blk = reasons.blocked([a, b], led, 10, exclude=frozenset({"a", "b"}))  # failover tried both
    assert blk is not None and blk.reason == "no_backend"
    assert reasons.cause(blk) == "no backend left to try: 2 failed for this request (2 of 2 healthy)"
    assert reasons.cause(reasons.blocked([_state("c", 10, 1, healthy=False)], led, 1)) == "no healthy backend (0 of 1 healthy)"


def test_messages_are_translated_reason_codes_are_not() -> None:
    blk = reasons.Blocked("slots_busy", {"busy_slots": 4, "slots": 4, "reserved_tokens": 436, "pool_tokens": 307200,
                                         "need_tokens": 109})
    en = reasons.queue_timeout_message(2.0, blk)  # a Message: English, Chinese through localize
    zh = i18n.localize(en, "zh")
    assert zh != en and all(n in zh for n in ("2.0", "4", "436", "307200", "109"))
    assert i18n.localize(reasons.label("slots_busy"), "zh") != "slots busy"
    assert reasons.label("no_such_reason") == "no_such_reason"
    assert reasons.label("slots_busy") == "slots busy"


# ------------------------------------------------------------------------------ startup


class _Silent:
    """A TCP port that accepts connections and never answers (a hung process)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]


def test_startup_names_each_backend_and_why(lt: Any) -> None:
    from aiohttp import web

    good = lt.fake(total_slots=4, n_ctx=262144)
    refused = free_port()
    silent = _Silent()

    async def other_server() -> tuple[web.AppRunner, int]:  # some HTTP service, not llama-server
        app = web.Application()
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    runner, other = lt.run(other_server())
    t0 = time.monotonic()
    gw = lt.gateway({"backends": [{"url": good.url, "name": "good", "pool_tokens": 307200},
                                  {"url": f"http://127.0.0.1:{refused}", "name": "down"},
                                  {"url": f"http://127.0.0.1:{silent.port}", "name": "hung"},
                                  {"url": f"http://127.0.0.1:{other}", "name": "web"}],
                     "health": {"interval_s": 0.2, "timeout_s": 0.5}})
    assert time.monotonic() - t0 < 5  # bounded: the hung backend is not waited for
    lines = lt.call(gw.backends.startup_lines)
    assert lines[0] == (f"backend good ({good.url}): reachable, 4 slots, KV pool 307200 tokens (from /props + config), "
                        "262144 tokens per slot")
    assert lines[1] == (f"backend down (http://127.0.0.1:{refused}): not usable: connection refused (nothing listens "
                        "there); the gateway starts without it and checks again every 0.2 s")
    assert lines[2].startswith(f"backend hung (http://127.0.0.1:{silent.port}): not usable: no answer within 0.5 s")
    assert lines[3].startswith(f"backend web (http://127.0.0.1:{other}): not usable: it answers, but not as a "
                               "llama-server: GET /health: HTTP 404")
    # it started and keeps checking: the refused backend comes up and is used
    from llamarig.gateway.fakebackend import FakeBackend, FakeBehaviour

    late = lt.run(FakeBackend(FakeBehaviour()).start(refused))
    lt._cleanups.append(late.stop)
    end = time.monotonic() + 10
    while not lt.call(lambda: gw.backends.states["down"].healthy) and time.monotonic() < end:
        time.sleep(0.05)
    assert lt.call(lambda: gw.backends.line(gw.backends.states["down"])).startswith("backend down (")
    assert "reachable" in lt.call(lambda: gw.backends.line(gw.backends.states["down"]))
    lt.run(runner.cleanup())
    silent.sock.close()


def test_not_ready_backend_says_loading(lt: Any) -> None:
    fb = lt.fake(loading=True)
    gw = lt.gateway({"health": {"interval_s": 3600}}, backends=[fb.url])
    (line,) = lt.call(gw.backends.startup_lines)
    assert "not usable: a llama-server, but not ready yet: GET /health: HTTP 503 (Loading model)" in line


def test_cli_prints_a_line_per_backend_before_listening() -> None:
    dead, gport = free_port(), free_port()
    p = subprocess.Popen([sys.executable, "-m", "llamarig.cli.main", "--lang", "en", "gateway", "--backend",
                          f"http://127.0.0.1:{dead}", "--port", str(gport)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        lines = []
        end = time.monotonic() + 30
        while time.monotonic() < end:
            line = p.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if "listening" in line:
                break
    finally:
        p.send_signal(2)
        p.communicate(timeout=15)
    assert f"backend b0 (http://127.0.0.1:{dead}): not usable: connection refused (nothing listens there)" in "\n".join(lines)
    assert lines[-1].startswith(f"llamarig gateway listening on http://127.0.0.1:{gport}")
