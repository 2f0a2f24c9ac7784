"""The books follow the real llama-server (issue 40 item 1): a non-streamed request whose client
hung up keeps its reservation until the server has finished it, and a backend killed during a
non-streamed request gives a 502/503 naming the cause (never a 500), with the status in the
request log."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tests.gateway.conftest import LoopThread

pytestmark = pytest.mark.server

N = 1500  # tokens the hung-up request generates: many /slots readings while it runs


def _busy(srv: Any) -> bool:
    return any(s["is_processing"] for s in srv.get("/slots"))


def _wait(pred: Any, timeout: float = 60) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())


def _raw_request(port: int, body: dict[str, Any]) -> socket.socket:
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return s


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.parametrize("stream_upstream", [True, False])
def test_non_streamed_hang_up_keeps_the_reservation_until_the_server_stopped(
        stream_upstream: bool, lt: Any, synth_model: Any, llama_server: Any, tmp_path: Path) -> None:
    """Sent upstream as a stream (the default), the hang-up stops the server's task; sent whole,
    the server runs it to its end. Either way the reservation lives exactly as long as the
    server's work: released means the server's slot is idle."""
    srv = llama_server(synth_model("llama"), "-c", "8192", "-np", "2", "-kvu")
    reqlog = tmp_path / "req.jsonl"
    gw = lt.gateway({"tiers": {"B": {"max_tokens": N}}, "server": {"request_log": str(reqlog),
                                                                    "stream_upstream": stream_upstream}},
                    backends=[srv.url])
    sock = _raw_request(gw.port, {"messages": [{"role": "user", "content": "go"}], "max_tokens": N,
                                  "ignore_eos": True})
    assert _wait(lambda: _busy(srv))
    sock.close()  # the client hangs up (curl -m 20 in the report) while the server generates
    if not stream_upstream:
        assert _wait(lambda: any(r["client_gone"] for r in lt.call(gw.status)["requests"]))
    kept_while_busy = 0
    while True:
        st = lt.call(gw.status)  # the gateway first, then the server: released means idle
        busy = _busy(srv)
        if st["reserved_tokens"] == 0:
            assert not busy, "reservation released while the server still runs the request"
            break
        kept_while_busy += busy
        time.sleep(0.05)
    assert _wait(lambda: lt.call(lambda: len(gw.pipeline.detached)) == 0)
    rec = _log(reqlog)[-1]
    assert (rec["status"], rec["outcome"]) == (499, "client_disconnected")
    decoded = max((s for s in srv.get("/slots") if "id_task" in s), key=lambda s: s["id_task"])["next_token"][0]["n_decoded"]
    if stream_upstream:  # closing the stream stopped the server's task
        assert rec["upstream_stream"] is True and rec["released_when"] == "server_stopped"
        assert decoded < N
    else:  # the server ran it to its end, the books with it
        assert kept_while_busy > 0 and rec["kept_until_server_done"] is True and rec["upstream_status"] == 200
        assert rec["completion_tokens"] == N
        assert rec["ttft_method"] == "server_prompt_ms" and rec["ttft_ms"] < rec["upstream_ms"]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("phase", ["generating", "idle_connection"])
def test_backend_killed_during_a_non_streamed_request_gives_502_or_503_with_the_cause(
        loop: str, phase: str, synth_model: Any, llama_server: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed while it generates (the answer's head not yet sent), or between requests (the
    gateway's kept-alive connection to it is dead: uvloop raised RuntimeError on the write)."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv("LLAMARIG_TEST_LOOP", loop)
    lt = LoopThread()
    try:
        srv = llama_server(synth_model("llama"), "-c", "8192", "-np", "2", "-kvu")
        reqlog = tmp_path / "req.jsonl"
        gw = lt.gateway({"tiers": {"B": {"max_tokens": N}}, "server": {"request_log": str(reqlog)},
                         "health": {"interval_s": 60}}, backends=[srv.url])
        def post(n: int) -> tuple[int, dict[str, Any]]:
            body = json.dumps({"messages": [{"role": "user", "content": "go"}], "max_tokens": n,
                               "ignore_eos": True}).encode()
            req = urllib.request.Request(gw.url + "/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        out: list[tuple[int, dict[str, Any]]] = []
        if phase == "generating":
            t = threading.Thread(target=lambda: out.append(post(N)), daemon=True)
            t.start()
            assert _wait(lambda: _busy(srv))
            os.kill(srv.pid, signal.SIGKILL)
            t.join(60)
        else:
            assert post(4)[0] == 200  # leaves a kept-alive connection in the gateway's pool
            os.kill(srv.pid, signal.SIGKILL)
            srv.stop()
            out.append(post(4))
        status, body = out[0]
        assert status in (502, 503), body
        err = body["error"]
        assert err["code"] in ("upstream_unreachable", "upstream_error", "no_backend"), err
        assert "internal" not in err["message"] and err["message"]
        rec = _log(reqlog)[-1]
        assert rec["status"] == status and rec["outcome"] != "ok"
        assert lt.call(lambda: gw.ledger.total_reserved()) == 0
    finally:
        lt.close()


def test_a_streamed_upstream_answer_comes_back_as_the_server_answers_it_whole(
        lt: Any, synth_model: Any, llama_server: Any) -> None:
    """Greedy sampling: the same text, finish reason, usage and the same fields in the same
    order as llama-server's own non-streamed answer (its ids and times aside)."""
    srv = llama_server(synth_model("llama"), "-c", "2048", "-np", "1")
    agg = lt.gateway({"server": {"stream_upstream": True}}, backends=[srv.url])
    whole = lt.gateway({"server": {"stream_upstream": False}}, backends=[srv.url])
    cases = [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}]}),
             ("/v1/completions", {"prompt": "once upon"})]
    for path, body in cases:
        b = {**body, "max_tokens": 12, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
        got = []
        for gw in (agg, whole):
            req = urllib.request.Request(gw.url + path, data=json.dumps(b).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                got.append(json.loads(r.read()))
        a, w = got
        assert list(a) == list(w), (a, w)
        assert a["choices"] == w["choices"] and a["object"] == w["object"] and a["model"] == w["model"]
        assert {k: v for k, v in a["usage"].items() if k != "prompt_tokens_details"} == \
            {k: v for k, v in w["usage"].items() if k != "prompt_tokens_details"}
        assert a["timings"]["predicted_n"] == w["timings"]["predicted_n"] == 12
