"""``llamarig top`` on a shared (unified) KV pool against the real llama-server (build 11434,
``-np 4 -kvu``): the pool's size from the server's own log, cells in use equal to what the
requests put there, the near-full alert before llama-server ends the requests, and the overflow
and cancel events after. Every wait is for an event (slots busy, responses back), none for a time."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.top.helpers import get_json, wait_for

from llamarig.serverpool import log_starts, server_facts
from llamarig.top.collect import Collector
from llamarig.top.local import listening_pid
from llamarig.top.model import Snapshot
from llamarig.top.pool import command_layout, hint_of

#: build 11434's start-up lines (verbatim from the server the tests start)
LOG_UNIFIED = "0.00.134.283 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'\n"
LOG_CAPPED = (
    "0.00.581.759 W srv    load_model: the slot context (8192) exceeds the training context of the model (4096) - capping\n"
    "0.01.068.144 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'\n")
LOG_SPLIT = "0.00.120.001 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 65536, kv_unified = 'false'\n"


def props(slots: int, n_ctx: int) -> dict[str, Any]:
    return {"total_slots": slots, "default_generation_settings": {"n_ctx": n_ctx}}


def models(n_ctx_train: int) -> dict[str, Any]:
    return {"data": [{"id": "m.gguf", "meta": {"n_ctx_train": n_ctx_train}}]}


def test_pool_from_the_log_and_the_command_line() -> None:
    """top's reading of a server it watches directly: the log's start (llamarig.serverpool, as the
    gateway reads it), else the command line's layout, else /props with n_ctx_train, where a
    capped slot makes the pool a lower bound."""
    def hint(log: str | None, argv: list[str] | None, slots: int, n_ctx: int, train: int) -> Any:
        lg = log_starts(log)[-1] if log else None
        cmd = command_layout(argv) if argv is not None else None
        return hint_of(server_facts(props(slots, n_ctx), models(train), lg, cmd), "pid 1")

    u, c, s = hint(LOG_UNIFIED, None, 4, 4096, 8192), hint(LOG_CAPPED, None, 4, 4096, 4096), \
        hint(LOG_SPLIT, None, 2, 65536, 65536)
    assert (u.tokens, u.unified, u.source, u.bound) == (4096, True, "log", "exact")
    assert (c.tokens, c.unified, c.bound) == (8192, True, "exact")  # one slot capped at n_ctx_train, the pool not
    assert (s.tokens, s.unified) == (131072, False)
    # the 307K-context MTP field report's command line: 4 slots on a 307200-token pool, each slot
    # capped at the model's 262144 (what /props says)
    report = ["--ctx-size", "307200", "--parallel", "4", "--kv-unified", "--fit", "on"]
    h = hint(None, report, 4, 262144, 262144)
    assert (h.tokens, h.unified, h.source, h.bound, h.detail) == (307200, True, "command", "exact", "pid 1")
    assert command_layout(["-c", "16384", "-np", "4"]).unified is False
    assert hint(None, ["-c", "16384"], 4, 16384, 32768).tokens == 16384  # no -np: 4 slots on a unified pool
    # -c set in the environment (LLAMA_ARG_CTX_SIZE), a slot capped at n_ctx_train: a lower bound
    h = hint(None, ["-np", "4", "-kvu"], 4, 16384, 16384)
    assert (h.tokens, h.source, h.bound) == (16384, "command", "at_least")
    # nothing but /props (a server on another machine): the server does not say whether the slots
    # share the cells; a lower bound when the slot is capped at n_ctx_train
    h = hint(None, None, 4, 16384, 16384)
    assert (h.tokens, h.unified, h.source, h.bound, h.detail) == (16384, None, "props", "at_least", "n_ctx_train 16384")
    assert hint(None, None, 4, 4096, 16384).bound == "exact"


def test_the_process_listening_on_a_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert listening_pid(s.getsockname()[1]) == os.getpid()


def _completion(url: str, prompt: str, n_predict: int, out: dict[str, Any], key: str) -> None:
    body = json.dumps({"prompt": prompt, "n_predict": n_predict, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/completion", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            out[key] = json.loads(r.read())
    except urllib.error.HTTPError as e:
        out[key] = {"status": e.code, "error": json.loads(e.read() or b"{}").get("error")}


def _send(url: str, jobs: list[tuple[str, int]]) -> tuple[list[threading.Thread], dict[str, Any]]:
    out: dict[str, Any] = {}
    threads = [threading.Thread(target=_completion, args=(url, p, n, out, str(i))) for i, (p, n) in enumerate(jobs)]
    for t in threads:
        t.start()
    return threads, out


def _busy(url: str) -> int:
    return sum(1 for s in get_json(url + "/slots") if s.get("is_processing"))


@pytest.fixture
def kvu(llama_server: Any, synth_model: Any) -> Any:
    """-c 4096 -np 4 -kvu on a model trained for 8192 tokens: each slot reports n_ctx 4096, the
    four share 4096 cells."""
    return llama_server(synth_model("llama", n_ctx_train=8192), "-c", "4096", "-np", "4", "-kvu", "--metrics")


@pytest.mark.server
def test_pool_cells_are_the_requests_tokens(kvu: Any, cli: Any) -> None:
    """Three requests on a unified pool: when they are done, their slots hold prompt + generated
    − 1 tokens each (the last sampled token is never decoded); top's cells in use are that sum,
    over the 4096 cells the server's log gives, not 12 % of 4 × 4096."""
    prompts = [f"request {i}: " + "tell me more about the pool " * (20 + 10 * i) for i in range(3)]
    n_prompt = [len(get_json_post(kvu.url + "/tokenize", {"content": p, "add_special": True})["tokens"]) for p in prompts]
    threads, out = _send(kvu.url, [(p, 600) for p in prompts])
    wait_for("three slots busy at once", lambda: _busy(kvu.url) == 3)  # none finished before the last began
    for t in threads:
        t.join(timeout=600)
    assert all(out[k].get("tokens_predicted") == 600 for k in out), out
    truth = sum(n + 600 - 1 for n in n_prompt)
    code, text, err = cli("top", "--url", kvu.url, "--once", "--json", "--interval", "0.2")
    assert code == 0, err
    srv = json.loads(text)["servers"][0]
    pool = srv["pool"]
    assert (pool["tokens"], pool["unified"], pool["source"]) == (4096, True, "log"), pool
    assert pool["detail"] and Path(pool["detail"]).name == kvu.log_path.name
    assert pool["cells_used"] == truth and srv["pool_used_frac"] == pytest.approx(truth / 4096, abs=1e-4)
    code, text, _ = cli("top", "--url", kvu.url, "--once", "--interval", "0.2")
    assert f"pool {round(100 * truth / 4096)} %" in text.splitlines()[0]


def get_json_post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@pytest.mark.server
def test_near_full_alert_before_the_overflow_then_the_event(kvu: Any) -> None:
    """Three long requests on 4096 shared cells: top warns while all three still decode (they need
    more cells than the pool has), then llama-server ends all three with 'Context size has been
    exceeded' and top says so in its events, with the slots, instead of going quietly to 0 %."""
    threads, out = _send(kvu.url, [(f"job {i} " * 8, 3000) for i in range(3)])

    async def watch() -> list[Snapshot]:
        snaps: list[Snapshot] = []
        async with Collector(kvu.url, timeout_s=5) as c:
            while not any(e.kind == "context_exceeded" for e in (snaps[-1].events if snaps else ())):
                snaps.append(await c.snapshot())
                assert len(snaps) < 2000, "no overflow event"
                if not any(t.is_alive() for t in threads) and len(snaps) > 3 and snaps[-1].servers[0].busy == 0:
                    snaps.append(await c.snapshot())
                    break
                await asyncio.sleep(0.1)
        return snaps

    snaps = asyncio.run(watch())
    for t in threads:
        t.join(timeout=600)
    # the server's own answer: all three ended with the error
    assert all(v.get("status") == 500 and "Context size has been exceeded" in v["error"]["message"]
               for v in out.values()), out
    ended = next(i for i, s in enumerate(snaps) if any(e.kind == "context_exceeded" for e in s.events))
    warned = [s for s in snaps[:ended] if s.servers[0].busy == 3
              and {"pool_overflow_ahead", "pool_near_full"} & {a.kind for a in s.alerts}]
    assert warned, [[a.kind for a in s.alerts] for s in snaps[:ended]]
    ev = next(e for e in snaps[ended].events if e.kind == "context_exceeded")
    assert sorted(ev.values["slots"]) == sorted(v.id for v in snaps[ended - 1].slots if v.busy)
    assert snaps[ended].servers[0].endings.get("context_exceeded") == 3
    p = snaps[ended - 1].servers[0].pool
    assert p is not None and p.tokens == 4096 and p.cells_busy > 0.5 * 4096


@pytest.mark.server
def test_a_cancelled_request_is_an_event(kvu: Any) -> None:
    """A streaming client that goes away: llama-server cancels its task (server-queue.cpp:610) and
    keeps the slot's cache; top tells the cancel from a finished answer (has_next_token)."""
    sock = socket.create_connection(("127.0.0.1", kvu.port))
    body = json.dumps({"prompt": "cancel me " * 10, "n_predict": 50000, "ignore_eos": True, "stream": True}).encode()
    sock.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def watch() -> Snapshot:
        async with Collector(kvu.url, timeout_s=5) as c:
            snap = await c.snapshot()
            for _ in range(2000):
                if any(v.busy and (v.n_decoded or 0) > 0 for v in snap.slots):
                    break
                await asyncio.sleep(0.05)
                snap = await c.snapshot()
            sock.close()
            while not any(e.kind == "cancelled" for e in snap.events):
                assert any(v.busy for v in snap.slots) or snap.servers[0].endings, "ended without an event"
                await asyncio.sleep(0.1)
                snap = await c.snapshot()
            return snap

    snap = asyncio.run(watch())
    assert snap.servers[0].endings == {"cancelled": 1}
    assert "cancelled after" in next(e.detail for e in snap.events if e.kind == "cancelled")


@pytest.mark.server
def test_a_request_cancelled_through_the_gateway_is_an_event_with_its_id(np2: Any, gateway: Any,
                                                                          long_request: Any) -> None:
    """Through the gateway: a client that goes away ends its request; top names the request by the
    gateway's id (the request log's) and the slot it held."""
    from tests.top.helpers import stop_pid

    gw = gateway(np2.url)
    client = long_request(gw, 50000)

    async def watch() -> tuple[str, Snapshot]:
        async with Collector(gw, timeout_s=5) as c:
            snap = await c.snapshot()
            for _ in range(2000):
                held = [r for r in (snap.gateway.requests if snap.gateway else ()) if r.slot is not None]
                if held and any(v.busy and (v.n_decoded or 0) > 0 for v in snap.slots):
                    break
                await asyncio.sleep(0.05)
                snap = await c.snapshot()
            rid = held[0].id
            stop_pid(client)
            for _ in range(2000):
                if any(e.kind in ("cancelled", "ended_early") for e in snap.events):
                    return rid, snap
                await asyncio.sleep(0.05)
                snap = await c.snapshot()
            raise AssertionError("no ending event")

    rid, snap = asyncio.run(watch())
    ev = next(e for e in snap.events if e.kind in ("cancelled", "ended_early"))
    assert ev.values["request"] == rid, (ev.to_json(), rid)
    assert ev.kind == "cancelled" and "cancelled after" in ev.detail, ev.to_json()


def test_a_local_server_without_a_log_file_gives_its_command_line(tmp_path: Path) -> None:
    """A server whose stderr goes to the journal (the 32 GB field report's systemd unit): no log
    file to read, so its command line says the pool (-c 307200 shared by 4 slots capped at
    262144 each); a proc tree built like Linux's /proc."""
    from llamarig.top.local import pool_hint

    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    port, inode = 8002, 4242
    (proc / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        f"   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n")
    (proc / "net" / "tcp6").write_text("  sl  local_address\n")
    pid = proc / "4321"
    (pid / "fd").mkdir(parents=True)
    (pid / "fd" / "3").symlink_to(f"socket:[{inode}]")
    (pid / "fd" / "2").symlink_to("socket:[77]")  # the journal
    argv = ["/usr/bin/llama-server", "--model", "m.gguf", "--ctx-size", "307200", "--parallel", "4", "--kv-unified"]
    (pid / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    h = pool_hint(f"http://127.0.0.1:{port}", props(4, 262144), models(262144), proc=proc)
    assert (h.tokens, h.unified, h.source, h.detail) == (307200, True, "command", "pid 4321")
    # and with a log file the log wins, when it shows the start /props shows
    log = tmp_path / "server.log"
    log.write_text(LOG_CAPPED)
    (pid / "fd" / "2").unlink()
    (pid / "fd" / "2").symlink_to(log)
    h = pool_hint(f"http://127.0.0.1:{port}", props(4, 4096), models(4096), proc=proc)
    assert (h.tokens, h.unified, h.source, h.detail) == (8192, True, "log", str(log))
    h = pool_hint(f"http://127.0.0.1:{port}", props(4, 262144), models(262144), proc=proc)
    assert (h.tokens, h.source) == (307200, "command")  # a log of another start: the command line
