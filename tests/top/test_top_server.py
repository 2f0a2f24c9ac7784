"""``llamarig top`` against the real llama-server (build 11434, synthetic llama): one request
decoding on a 2-slot server, the same through the gateway, the server going away and coming
back. Every wait is for an event (a slot decoding, a reservation in flight), none for a time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from tests.top.helpers import (
    SERVER_ARGS,
    decoding_slot,
    decoding_tasks,
    get_json,
    stop_pid,
    wait_for,
)

from llamarig.testing.server import free_port
from llamarig.top.collect import Collector

pytestmark = pytest.mark.server


def test_once_json_one_slot_decoding_one_idle(np2: Any, long_request: Any, cli: Any) -> None:
    long_request(np2.url)
    wait_for("a slot decoding", lambda: decoding_slot(np2.url) is not None)
    code, out, err = cli("top", "--url", np2.url, "--once", "--json")  # two readings 1 s apart
    assert code == 0, err
    doc = json.loads(out)
    slots = doc["slots"]
    assert len(slots) == 2 and doc["mode"] == "server"
    busy = [s for s in slots if s["state"] == "busy"]
    idle = [s for s in slots if s["state"] == "idle"]
    assert len(busy) == 1 and len(idle) == 1, slots
    b = busy[0]
    assert b["phase"] == "decode" and b["decode_tok_s"] > 0 and b["tokens_generated"] > 0
    assert b["n_ctx"] == 65536 and 0 < b["ctx_used"] <= b["n_ctx"]
    assert idle[0]["decode_tok_s"] is None and idle[0]["phase"] == "idle"
    srv = doc["servers"][0]
    assert srv["state"] == "up" and srv["total_slots"] == 2 and srv["slots_busy"] == 1
    assert srv["build"].startswith("b11434") and srv["model"].endswith(".gguf")
    assert srv["decode_tok_s"] == pytest.approx(b["decode_tok_s"], rel=1e-6)
    assert srv["requests_processing"] == 1 and srv["uptime_s"] >= 0 and srv["restarts"] == 0
    assert doc["decode_tok_s"] > 0 and 0.9 <= doc["interval_s"] <= 10
    assert "n_decoded" in doc["methods"]["decode_tok_s"]
    # GPU: figures, or one reason why not (no NVML on a CPU-only machine)
    assert doc["gpu"]["available"] or doc["gpu"]["reason"]
    assert not [a for a in doc["alerts"] if a["kind"] in ("restart", "down", "foreign_work")]
    # the human view of the same moment: the headline first
    code, text, _ = cli("top", "--url", np2.url, "--once", "--interval", "0.5")
    assert code == 0
    first = text.splitlines()[0]
    assert first.startswith("llama-server up") and "1/2 slots busy" in first and "tok/s" in first


def test_gateway_shows_reservations_and_foreign_work(np2: Any, long_request: Any, gateway: Any, cli: Any) -> None:
    gw = gateway(np2.url)
    client = long_request(gw, 50000)

    def reserved() -> Any:
        st = get_json(gw + "/gateway/status")
        return st["requests"] and decoding_slot(np2.url) is not None and st

    wait_for("a reservation in flight and its slot decoding", reserved)
    code, out, err = cli("top", "--url", gw, "--once", "--json", "--interval", "0.5")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mode"] == "gateway"
    g = doc["gateway"]
    assert g["in_flight"] == 1 and len(g["requests"]) == 1
    r = g["requests"][0]
    assert r["backend"] == doc["servers"][0]["name"] and r["tier"] == "B"
    assert r["reserved_tokens"] >= 50000 and r["age_s"] >= 0
    assert g["queue"]["length"] == 0 and g["rejected_429_total"] == 0
    assert len(doc["slots"]) == 2 and sum(s["state"] == "busy" for s in doc["slots"]) == 1
    assert any(s["decode_tok_s"] and s["decode_tok_s"] > 0 for s in doc["slots"])
    assert doc["servers"][0]["reserved_tokens"] == r["reserved_tokens"]
    assert not [a for a in doc["alerts"] if a["kind"] == "foreign_work"]
    # the slot the request holds, under the request log's id; the pool as the gateway has it
    st = get_json(gw + "/gateway/status")
    assert r["id"] == str(st["requests"][0]["id"])
    assert r["slot"] == decoding_slot(np2.url) == st["requests"][0]["slot"]
    held = [s for s in doc["slots"] if s["state"] == "busy"]
    assert held[0]["request"] == r["id"]
    pool = doc["servers"][0]["pool"]
    assert pool["source"] == "gateway" and pool["tokens"] == st["backends"][0]["pool"]["server_tokens"]
    code, text, _ = cli("top", "--url", gw, "--once", "--interval", "0.5")
    assert text.startswith("gateway: 1/1 up") and "reserved" in text

    # work nobody here started: the gateway's request ends, another client uses the backend directly
    (gw_task,) = decoding_tasks(np2.url).values()
    stop_pid(client)
    wait_for("the gateway's request released", lambda: get_json(gw + "/gateway/status")["in_flight"] == 0)
    wait_for("its slot free", lambda: gw_task not in decoding_tasks(np2.url).values())
    long_request(np2.url)
    wait_for("the direct request decoding", lambda: decoding_tasks(np2.url))

    # --once takes as many readings as the slowest rule needs (top.derive.READINGS): the alert is there
    code, out, err = cli("top", "--url", gw, "--once", "--json", "--interval", "0.3")
    assert code == 0, err
    doc = json.loads(out)
    assert "foreign_work" in [a["kind"] for a in doc["alerts"]], doc["alerts"]
    assert any(e["kind"] == "foreign_work" for e in doc["events"])


def test_server_gone_and_back(llama_server: Any, synth_model: Any) -> None:
    port = free_port()
    model = synth_model("llama", n_ctx_train=131072)
    srv = llama_server(model, *SERVER_ARGS, port=port)

    async def run() -> list[Any]:
        out = []
        async with Collector(srv.url, timeout_s=2) as c:
            out.append(await c.snapshot())
            srv.stop()
            out.append(await c.snapshot())
            out.append(await c.snapshot())
            llama_server(model, *SERVER_ARGS, port=port)
            out.append(await c.snapshot())
        return out

    up, down, still, back = asyncio.run(run())
    assert up.servers[0].state == "up" and up.servers[0].restarts == 0
    assert down.servers[0].state == "down" and "refused" in down.servers[0].error
    assert [a.kind for a in down.alerts] == ["down"]
    assert [e.kind for e in still.events] == ["down"]  # said once, not at every refresh
    b = back.servers[0]
    assert b.state == "up" and b.restarts == 1
    kinds = [e.kind for e in back.events]
    assert kinds == ["down", "back", "restart"]
    assert "Process-Start-Time-Unix" in back.events[-1].detail
    assert "restart" in [a.kind for a in back.alerts]
    assert b.build and b.model  # /props read again after the return


def test_gateway_with_keys_needs_the_key(np2: Any, gateway: Any, cli: Any) -> None:
    gw = gateway(np2.url, key="sk-top-test-key")
    code, out, _ = cli("top", "--url", gw, "--once", "--json", "--interval", "0.2")
    doc = json.loads(out)
    assert code == 3 and doc["mode"] == "gateway" and doc["gateway"] is None
    assert doc["alerts"][0]["kind"] == "down" and "--api-key" in doc["alerts"][0]["error"]
    code, out, _ = cli("top", "--url", gw, "--once", "--json", "--interval", "0.2", "--api-key", "sk-top-test-key")
    doc = json.loads(out)
    assert code == 0 and doc["gateway"]["requests"] == [] and len(doc["slots"]) == 2
    assert all(s["state"] == "idle" for s in doc["slots"])


def test_json_lines_without_once(np2: Any) -> None:
    """Without --once, --json prints one object per refresh (rates from the second on)."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "llamarig", "top", "--url", np2.url, "--json", "--interval", "0.2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        first, second = json.loads(p.stdout.readline()), json.loads(p.stdout.readline())
    finally:
        stop_pid(p)
    assert first["interval_s"] is None and second["interval_s"] > 0
    assert len(second["slots"]) == 2 and second["servers"][0]["decode_tok_s"] == 0.0
    # stdout not a terminal, no --json: one text screen per refresh, headline first
    p = subprocess.Popen([sys.executable, "-m", "llamarig", "top", "--url", np2.url, "--interval", "0.2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        heads: list[str] = []
        while len(heads) < 2:
            line = p.stdout.readline()
            assert line, p.stderr.read() if p.stderr else "no output"
            if line.startswith("llama-server"):
                heads.append(line)
    finally:
        stop_pid(p)
    assert heads[0].startswith("llama-server up") and "0/2 slots busy" in heads[0] and "decode 0.0 tok/s" in heads[1]


def test_docs_once_examples_run(np2: Any, cli: Any) -> None:
    """Every `$ llamarig top --url http://127.0.0.1:8080 … --once …` example of docs/top.md runs."""
    import shlex
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "top.md"
    cmds = [ln[2:].split("#")[0] for ln in docs.read_text().splitlines()
            if ln.startswith("$ llamarig top --url http://127.0.0.1:8080") and "--once" in ln]
    assert len(cmds) >= 2
    for cmd in cmds:
        argv = shlex.split(cmd.replace("http://127.0.0.1:8080", np2.url))[1:]
        code, out, err = cli(*argv)
        assert code == 0 and out.strip(), (cmd, err)


def test_without_slots_and_metrics_endpoints(llama_server: Any, synth_model: Any, cli: Any) -> None:
    """A server started with --no-slots and without --metrics: top says what it cannot see and why."""
    srv = llama_server(synth_model("llama"), "-c", "1024", "-np", "1", "--no-slots")
    code, out, err = cli("top", "--url", srv.url, "--once", "--json", "--interval", "0.2")
    assert code == 0, err
    doc = json.loads(out)
    s = doc["servers"][0]
    assert doc["slots"] == [] and s["state"] == "up" and s["total_slots"] == 1
    assert "HTTP 501" in s["slots_error"] and "--no-slots" in s["slots_error"]
    assert "HTTP 501" in s["metrics_error"] and "--metrics" in s["metrics_error"]
    code, text, _ = cli("top", "--url", srv.url, "--once", "--interval", "0.2")
    assert text.splitlines()[0].startswith("llama-server up · slots unknown (no /slots)")
    assert "--no-slots" in text and "--metrics" in text
