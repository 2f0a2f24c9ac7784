"""The gateway in front of the real llama-server (synthetic llama model, ChatML template),
driven by the official openai client."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from typing import Any

import aiohttp
import openai
import pytest

pytestmark = pytest.mark.server

MSG = [{"role": "user", "content": "hello there"}]


def last_slot_params(srv: Any) -> dict[str, Any]:
    slots = srv.get("/slots")
    return max((s for s in slots if "params" in s), key=lambda s: s["id_task"])["params"]


def predicted_n(chunks: list[Any]) -> int:
    """The server's own token count, from the `timings` it adds to the last streamed chunk."""
    timings = [(ch.model_extra or {}).get("timings") for ch in chunks]
    return int([t for t in timings if t][-1]["predicted_n"])


def test_openai_client_chat_completion_stream_and_tiers(lt: Any, synth_model: Any, llama_server: Any) -> None:
    srv = llama_server(synth_model("llama"), "-c", "1024", "-np", "2", "-kvu")
    gw = lt.gateway({"tiers": {"B": {"max_tokens": 12, "sampling": {"temperature": 0.25, "top_k": 7}}},
                     "routing": {"model_aliases": {"quick": "A"}}}, backends=[srv.url])
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0)
    model = c.models.list().data[0].id
    assert model.endswith(".gguf")

    # chat, not streamed: tier B clamps 100000 -> 12 and forces its sampling upstream
    r = c.chat.completions.create(model=model, messages=MSG, max_tokens=100000, temperature=1.5,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 12
    p = last_slot_params(srv)
    assert (p["n_predict"], round(p["temperature"], 2), p["top_k"]) == (12, 0.25, 7)

    # chat, streamed, chunk by chunk
    chunks = list(c.chat.completions.create(model=model, messages=MSG, stream=True, max_tokens=5,
                                            extra_body={"ignore_eos": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    # (random weights: a token may be half a UTF-8 character, which the server holds back and sends
    # with the next one, so the chunk count varies; the server's own count of tokens does not)
    assert len(chunks) >= 2 and isinstance(text, str) and chunks[-1].choices[0].finish_reason == "length"
    assert predicted_n(chunks) == 5

    # completions, both ways, through a model alias (tier A: 2048, clamped to the slot context)
    r2 = c.completions.create(model="quick", prompt="once upon a time", max_tokens=4, extra_body={"ignore_eos": True})
    assert r2.usage.completion_tokens == 4
    s2 = list(c.completions.create(model=model, prompt="once upon a time", max_tokens=3, stream=True,
                                   extra_body={"ignore_eos": True}))
    assert len(s2) >= 1 and any(ch.choices and ch.choices[0].finish_reason == "length" for ch in s2)
    assert predicted_n(s2) == 3

    # C2 by tools; widened by an explicit large max_tokens, then clamped to the slot context
    raw = c.chat.completions.with_raw_response.create(
        model=model, messages=MSG, max_tokens=32768, tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}],
        extra_body={"n_probs": 0})
    assert raw.headers["x-llamarig-tier"] == "C2" and int(raw.headers["x-llamarig-reserved"]) == 1024
    p = last_slot_params(srv)
    assert p["n_predict"] < 1024 and p["n_predict"] > 900

    # cron lock: 1K for a non-thinking tier (then clamped by the slot context: 1024 - prompt)
    raw = c.chat.completions.with_raw_response.create(model=model, messages=MSG, max_tokens=4,
                                                      extra_headers={"x-llamarig-source": "cron-report"})
    assert raw.headers["x-llamarig-tier"] == "B"

    # native /completion: generation_settings shows what the server applied
    req = urllib.request.Request(gw.url + "/completion", data=json.dumps({"prompt": "hi", "n_predict": 9999}).encode(),
                                 headers={"Content-Type": "application/json", "x-llamarig-tier": "B"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        out = json.loads(resp.read())
    assert out["generation_settings"]["n_predict"] == 12
    # /tokenize passes through
    req = urllib.request.Request(gw.url + "/tokenize", data=json.dumps({"content": "hello"}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert json.loads(resp.read())["tokens"]
    assert lt.call(lambda: gw.ledger.total_reserved()) == 0


def test_small_pool_429_retry_after_nothing_lost(lt: Any, synth_model: Any, llama_server: Any) -> None:
    """-c 2048 -np 2 -kvu: two 1800-token generations would overflow the shared pool and
    llama-server would fail both; the gateway admits one at a time, 429s the rest with
    Retry-After, and every request is eventually served."""
    srv = llama_server(synth_model("llama"), "-c", "2048", "-np", "2", "-kvu")
    gw = lt.gateway({"tiers": {"B": {"max_tokens": 1800}},
                     "admission": {"queue_timeout_s": 0.05, "keepalive_s": 0, "retry_after_s": 1}},
                    backends=[srv.url])
    n = 4
    seen: dict[str, Any] = {"429": 0, "retry_after": [], "bodies": [], "ok": 0, "tokens": []}

    async def client(s: aiohttp.ClientSession, i: int) -> None:
        body = {"messages": [{"role": "user", "content": f"story {i}"}], "max_tokens": 1800, "ignore_eos": True,
                "stream": i % 2 == 0}
        for _ in range(200):
            async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                data = await r.read()
                if r.status == 429:
                    seen["429"] += 1
                    seen["retry_after"].append(int(r.headers["Retry-After"]))
                    seen["bodies"].append(json.loads(data))
                    await asyncio.sleep(0.1)
                    continue
                assert r.status == 200, data
                if body["stream"]:
                    assert data.rstrip().endswith(b"data: [DONE]")
                    final = [json.loads(x[6:]) for x in data.split(b"\n\n") if x.startswith(b"data: {")][-1]
                    seen["tokens"].append(final["timings"]["predicted_n"])
                else:
                    seen["tokens"].append(json.loads(data)["usage"]["completion_tokens"])
                seen["ok"] += 1
                return
        raise AssertionError("request never admitted")

    async def run() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
            await asyncio.gather(*(client(s, i) for i in range(n)))

    t0 = time.monotonic()
    lt.run(run(), timeout=150)
    assert seen["ok"] == n and seen["429"] > 0
    assert all(ra >= 1 for ra in seen["retry_after"])
    assert all(b["error"]["code"] == "queue_timeout" for b in seen["bodies"])
    # prompt + 1800 of 2048: each generation ran to its (slot-clamped) budget, none was cut short
    assert all(t >= 1700 for t in seen["tokens"]), seen["tokens"]
    assert "context size has been exceeded" not in srv.log.lower()
    assert lt.call(lambda: gw.ledger.total_reserved() + gw.admission.queued) == 0
    assert time.monotonic() - t0 < 120


def test_client_disconnect_frees_the_slot(lt: Any, synth_model: Any, llama_server: Any) -> None:
    srv = llama_server(synth_model("llama"), "-c", "4096", "-np", "2", "-kvu")
    gw = lt.gateway({"tiers": {"B": {"max_tokens": 4000}}}, backends=[srv.url])
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0)
    model = c.models.list().data[0].id
    stream = c.chat.completions.create(model=model, messages=MSG, max_tokens=4000, stream=True,
                                       extra_body={"ignore_eos": True})
    for i, _ in enumerate(stream):
        if i == 3:
            break
    assert any(s["is_processing"] for s in srv.get("/slots"))
    stream.close()
    end = time.monotonic() + 5
    while time.monotonic() < end and any(s["is_processing"] for s in srv.get("/slots")):
        time.sleep(0.05)
    assert not any(s["is_processing"] for s in srv.get("/slots"))  # upstream closed -> slot freed
    assert lt.call(lambda: gw.ledger.total_reserved()) == 0
    n_decoded = max((s for s in srv.get("/slots") if "id_task" in s), key=lambda s: s["id_task"])["next_token"][0]["n_decoded"]
    assert n_decoded < 4000
