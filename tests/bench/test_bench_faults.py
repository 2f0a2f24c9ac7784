"""Bad input and faults, injected with a small fake HTTP backend (aiohttp) in a thread:
unreachable URL, a server still loading (503), missing /slots and /metrics, a server that
errors mid-run, a stream cut off mid-request."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from llamarig.bench.runner import BenchConfig, run_bench
from llamarig.cli.main import main
from llamarig.errors import ServerError


@dataclass
class Fake:
    """Behaviour knobs of the fake server."""

    loading_until: float = 0.0  # /health answers 503 until this monotonic time
    fail_requests: set[int] = field(default_factory=set)  # 1-based request numbers answering 500
    cut_requests: set[int] = field(default_factory=set)  # request numbers whose stream stops early
    n_requests: int = 0
    url: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _app(fake: Fake) -> web.Application:
    async def health(_: web.Request) -> web.Response:
        if time.monotonic() < fake.loading_until:
            return web.json_response({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}, status=503)
        return web.json_response({"status": "ok"})

    async def chat(request: web.Request) -> web.StreamResponse:
        fake.n_requests += 1
        n = fake.n_requests
        body = await request.json()
        if n in fake.fail_requests:
            return web.json_response({"error": {"code": 500, "message": "injected failure", "type": "server_error"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        k = int(body.get("max_tokens", 8))
        for _ in range(k):
            await resp.write(b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n')
            await asyncio.sleep(0.001)
            if n in fake.cut_requests:
                return resp  # connection ends without the final chunk
        final = {"choices": [], "usage": {"completion_tokens": k, "prompt_tokens": 10},
                 "timings": {"cache_n": 0, "prompt_n": 10, "prompt_ms": 1.0, "predicted_n": k, "predicted_ms": (k - 1) * 1.0}}
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", chat)
    return app  # no /props, /slots, /metrics: an "OpenAI-compatible" server


@pytest.fixture
def fake_server() -> Iterator[Fake]:
    fake = Fake()
    port = _free_port()
    fake.url = f"http://127.0.0.1:{port}"
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(fake))
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ready.wait(10)
    yield fake
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    t.join(10)


def test_unreachable_url_exits_3(capsys) -> None:
    port = _free_port()
    with pytest.raises(SystemExit) as e:
        main(["bench", "--url", f"http://127.0.0.1:{port}", "-q"])
    assert e.value.code == 3
    err = capsys.readouterr().err
    assert f"cannot reach http://127.0.0.1:{port}" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_options_exit_2(capsys) -> None:
    for argv in (["bench", "--url", "http://127.0.0.1:1", "-s", "decod"],
                 ["bench", "--url", "ftp://x"],
                 ["bench", "--url", "http://127.0.0.1:1", "--lengths", "abc"],
                 ["bench", "--url", "http://127.0.0.1:1", "-s", "workload"],
                 ["bench"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2, argv
    assert "did you mean: decode" in capsys.readouterr().err


def test_loading_server_is_waited_for_with_a_bound(fake_server: Fake) -> None:
    fake_server.loading_until = time.monotonic() + 0.8
    doc = run_bench(BenchConfig(url=fake_server.url, scenarios=("decode",), k=2, n_predict=8, slot=None)).to_json()
    assert doc["target"]["health"]["waited_for_loading"] is True
    assert [f for f in doc["figures"] if f["name"] == "decode_tok_s_median"][0]["n"] == 2
    fake_server.loading_until = time.monotonic() + 60
    with pytest.raises(ServerError, match=r"still loading after 1 s \(HTTP 503"):
        run_bench(BenchConfig(url=fake_server.url, wait_ready_s=1.0))


def test_missing_endpoints_degrade(fake_server: Fake) -> None:
    doc = run_bench(BenchConfig(url=fake_server.url, scenarios=("decode", "prefill"), k=2, n_predict=8)).to_json()
    t, inter = doc["target"], doc["interference"]
    assert "skipped: 'prefill' needs llama-server" in doc["scenarios"][1]["notes"][0]
    assert t["is_llama_server"] is False
    missing = " ".join(inter["missing"])
    assert "/props" in missing and "/slots" in missing and "/metrics" in missing
    assert inter["reconciliation"] == {"available": False}
    assert all(r["contaminated"] is None for r in doc["requests"])
    # llama-only fields were not sent, the run still produced figures from timings/usage
    dec = [f for f in doc["figures"] if f["name"] == "decode_tok_s_median"][0]
    assert dec["value"] == pytest.approx(1000.0) and "interference unknown" in dec["note"]


def test_server_erroring_mid_run_is_recorded(fake_server: Fake, tmp_path, capsys) -> None:
    fake_server.fail_requests = {3}
    fake_server.cut_requests = {4}
    out = tmp_path / "run.json"
    with pytest.raises(SystemExit) as e:
        main(["bench", "--url", fake_server.url, "--k", "5", "-n", "8", "--slot", "none", "-q", "--json", str(out)])
    assert e.value.code == 1
    doc = json.loads(out.read_text())
    errs = doc["errors"]
    assert any("HTTP 500: injected failure" in x for x in errs)
    assert any("stream ended without timings" in x for x in errs)
    dec = [f for f in doc["figures"] if f["name"] == "decode_tok_s_median"][0]
    assert dec["n"] == 3  # 5 measured, 2 failed: the rest are kept


def test_gpu_telemetry_with_a_fake_nvidia_smi(fake_server: Fake, tmp_path, monkeypatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA GeForce RTX 3090, 250.0, 47, 1800, 9751, 20000, 24576, 97'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    fake_server.loading_until = 0
    doc = run_bench(BenchConfig(url=fake_server.url, scenarios=("decode",), k=3, n_predict=200, gpu_interval_s=0.05)).to_json()
    gpu = doc["gpu"]
    assert gpu["available"] and gpu["samples"][0]["power_w"] == 250.0 and gpu["samples"][0]["temp_c"] == 47
    f = [x for x in doc["figures"] if x["name"] == "energy_tokens_per_joule"][0]
    assert f["value"] > 0 and "nvidia-smi" in f["method"] and "power" in f["method"]
    assert gpu["source"] == "nvidia-smi --query-gpu (client machine)"
