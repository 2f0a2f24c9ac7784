"""The gateway in front of the real llama-server (synthetic llama model, ChatML template),
driven by the official openai client."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
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
        # retried until admitted: each request waits for the others' 1800 tokens, which take as
        # long as the machine's load makes them (bounded by the test's own timeout, not a count)
        deadline = time.monotonic() + 140
        while time.monotonic() < deadline:
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
    # the real cause, with the numbers: a slot was free (1 of 2 busy), the shared pool was not
    for b in seen["bodies"]:
        err = b["error"]
        assert err["reason"] == "pool_full", err
        assert (err["details"]["pool_tokens"], err["details"]["slots"], err["details"]["busy_slots"]) == (2048, 2, 1)
        assert err["details"]["reserved_tokens"] + err["details"]["need_tokens"] > 2048
        assert "KV pool full" in err["message"] and "1 of 2 slots in use" in err["message"]
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
    # the reservation goes once the gateway's own reading of /slots shows the slot stopped
    end = time.monotonic() + 10
    while time.monotonic() < end and lt.call(lambda: gw.ledger.total_reserved()):
        time.sleep(0.05)
    assert lt.call(lambda: gw.ledger.total_reserved()) == 0
    n_decoded = max((s for s in srv.get("/slots") if "id_task" in s), key=lambda s: s["id_task"])["next_token"][0]["n_decoded"]
    assert n_decoded < 4000


#: A minimal Qwen3.5-style template (models/templates/Qwen3.5-4B.jinja in the vendored tree, cut
#: to what a chat needs): with thinking the generation prompt opens a ``<think>`` block, without it
#: the block comes closed; an assistant message's ``reasoning_content`` is rendered in such a block
#: (without that branch llama-server does not find the tags). llama-server (``--jinja``) finds the
#: thinking tags in it, so it parses reasoning and applies
#: ``reasoning_budget_tokens`` and the ``enable_thinking`` template kwarg.
THINKING_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.reasoning_content is string %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' + message.content"
    " + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_thinking_and_reasoning_budget_reach_the_server(lt: Any, synth_model: Any, llama_server: Any,
                                                        tmp_path: Any) -> None:
    """``chat_template_kwargs.enable_thinking`` and ``reasoning_budget_tokens`` as llama-server
    applied them. Build 11434's ``/slots`` params do not list either field (task_params::to_json),
    so the test reads their effects: ``enable_thinking`` from ``generation_prompt`` in ``/slots``
    params (the template's rendering for that request: an open or a closed ``<think>`` block), and
    the budget from where the server's reasoning-budget sampler forced ``</think>`` into the
    generated tokens and from the answer's split into ``reasoning_content`` and ``content``
    (without a budget all 40 tokens stay reasoning). Budget 0 is not used: with this template and random weights the
    server's forced end sequence came out garbled in reasoning_content (seen on build 11434)."""
    tpl = tmp_path / "thinking.jinja"
    tpl.write_text(THINKING_TEMPLATE)
    srv = llama_server(synth_model("llama"), "-c", "1024", "-np", "1", "--jinja", "--chat-template-file", str(tpl))
    gw = lt.gateway({"tiers": {"B": {"max_tokens": 40},  # thinking off (built in)
                               "C1": {"max_tokens": 40, "reasoning_budget": 16},
                               "C2": {"max_tokens": 40, "reasoning_budget": 6},
                               "D": {"max_tokens": 40, "reasoning_budget": -1}}},  # -1: the server's default (none)
                    backends=[srv.url])
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0)
    model = c.models.list().data[0].id

    def chat(tier: str, client_thinking: bool) -> Any:
        return c.chat.completions.create(
            model=model, messages=MSG, max_tokens=40, logprobs=True, extra_headers={"x-llamarig-tier": tier},
            extra_body={"ignore_eos": True, "seed": 7,  # random weights: a fixed seed makes the text repeatable
                        "chat_template_kwargs": {"enable_thinking": client_thinking}})

    def reasoning(r: Any) -> str:
        return (r.choices[0].message.model_extra or {}).get("reasoning_content") or ""

    def think_end(r: Any) -> int:
        """Byte offset of ``</think>`` in the generated bytes (the logprobs carry every token's
        bytes, reasoning included), -1 if the model never closed the block."""
        return b"".join(bytes(t.bytes or b"") for t in r.choices[0].logprobs.content).find(b"</think>")

    # the tier's thinking switch overrides the client's
    chat("B", client_thinking=True)
    assert last_slot_params(srv)["generation_prompt"].endswith("<think>\n\n</think>\n\n")
    r = chat("D", client_thinking=False)
    assert last_slot_params(srv)["generation_prompt"].endswith("<think>\n")
    # D: thinking, no budget -> all 40 generated tokens are reasoning, no answer
    assert r.usage.completion_tokens == 40 and reasoning(r) and not r.choices[0].message.content
    assert think_end(r) == -1
    # C1, C2: budgets 16 and 6 -> after about that many reasoning tokens the server forces
    # ``</think>`` and the rest is the answer. Every token of the synthetic vocabulary is 1 to 4
    # bytes (byte-level BPE, longest merge " the"), and the budget sampler may wait up to 3 more
    # tokens for a UTF-8 character to complete, so the forced tag starts at a byte offset in
    # [budget / 2, 4 x (budget + 3)] (seen: 7 for budget 6, 15 for 16)
    for tier, budget in (("C1", 16), ("C2", 6)):
        r = chat(tier, client_thinking=True)
        assert r.usage.completion_tokens == 40 and r.choices[0].message.content and reasoning(r), tier
        assert budget // 2 <= think_end(r) <= 4 * (budget + 3), (tier, think_end(r))
    assert lt.call(lambda: gw.ledger.total_reserved()) == 0


def test_tier_timeout_reaches_the_server_as_t_max_predict_ms(lt: Any, synth_model: Any, llama_server: Any) -> None:
    """A tier's ``timeout_s`` goes upstream as ``t_max_predict_ms``. Build 11434's ``/slots``
    params and ``generation_settings`` do not list it (task_params::to_json), so the test shows
    its effect: llama-server ends the generation at the first newline after that much generation
    time (server-context.cpp, "stopped by time limit"), with ``stop_type: "limit"`` although fewer
    than ``n_predict`` tokens were generated. A grammar makes every other token a newline; the
    limit is 1 ms, far below what 400 tokens take, and the same request in a tier without a
    timeout generates all 400."""
    srv = llama_server(synth_model("llama"), "-c", "1024", "-np", "1")
    gw = lt.gateway({"tiers": {"A": {"max_tokens": 400, "timeout_s": 0.001}, "V": {"max_tokens": 400}}},
                    backends=[srv.url])
    body = {"prompt": "hi", "n_predict": 400, "ignore_eos": True, "grammar": 'root ::= ("a\\n")*'}
    st, _, free = _post(gw.url + "/completion", body, {"x-llamarig-tier": "V"})
    assert st == 200 and free["stop_type"] == "limit" and free["tokens_predicted"] == 400
    st, h, cut = _post(gw.url + "/completion", body, {"x-llamarig-tier": "A"})
    assert st == 200 and h["X-Llamarig-Tier"] == "A"
    assert cut["generation_settings"]["n_predict"] == 400  # not the cause of the stop
    assert cut["stop_type"] == "limit" and 1 <= cut["tokens_predicted"] < 400
    assert cut["content"].endswith("\n") and cut["timings"]["predicted_ms"] > 1
    assert lt.call(lambda: gw.ledger.total_reserved()) == 0


def test_props_and_slots_pass_through_and_bench_sees_a_llama_server(lt: Any, synth_model: Any,
                                                                     llama_server: Any) -> None:
    """GET /props and /slots (with its query string) reach the backend behind the gateway's keys,
    so ``llamarig bench`` pointed at the gateway recognises llama-server."""
    from llamarig.bench.runner import BenchConfig, run_bench

    # LLAMA_SERVER_SLOTS_DEBUG makes /slots show each slot's prompt and generated text
    # (tools/server/server-context.cpp:1459-1460, 2739)
    srv = llama_server(synth_model("llama"), "-c", "1024", "-np", "1", env={"LLAMA_SERVER_SLOTS_DEBUG": "1"})
    gw = lt.gateway({"keys": [{"key": "sk-bench-123456", "name": "bench"}]}, backends=[srv.url])
    auth = {"Authorization": "Bearer sk-bench-123456"}
    for path in ("/props", "/slots", "/slots?fail_on_no_slot=1"):
        st, _, err = _get(gw.url + path)
        assert st == 401 and err["error"]["code"] == "invalid_api_key"
    st, h, props = _get(gw.url + "/props", auth)
    direct = srv.get("/props")
    assert st == 200 and h["X-Llamarig-Backend"] == "b0"
    assert (props["total_slots"], props["default_generation_settings"]["n_ctx"], props["build_info"]) == \
        (direct["total_slots"], direct["default_generation_settings"]["n_ctx"], direct["build_info"])
    st, _, slots = _get(gw.url + "/slots", auth)
    assert st == 200 and [s["id"] for s in slots] == [0] and not slots[0]["is_processing"]
    assert _get(gw.url + "/slots?fail_on_no_slot=1", auth)[0] == 200  # idle slot

    # the only slot busy: the server's own 503 for ?fail_on_no_slot comes through
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-bench-123456", max_retries=0)
    stream = c.chat.completions.create(model=c.models.list().data[0].id, messages=MSG, max_tokens=900, stream=True,
                                       extra_body={"ignore_eos": True})
    for i, _ in enumerate(stream):
        if i == 2:
            break
    st, _, slots = _get(gw.url + "/slots", auth)
    assert st == 200 and slots[0]["is_processing"]
    # one tenant does not read another's text: the server shows it, the gateway removes it
    assert "prompt" in srv.get("/slots")[0]
    assert "prompt" not in slots[0] and "generated" not in slots[0] and slots[0]["next_token"]
    st, _, err = _get(gw.url + "/slots?fail_on_no_slot=1", auth)
    assert st == 503 and "slot" in err["error"]["message"].lower()
    stream.close()

    doc = run_bench(BenchConfig(url=gw.url, api_key="sk-bench-123456", scenarios=("decode",), k=2, n_predict=8,
                                warmup=0)).to_json()
    inter = doc["interference"]
    assert not any("not a llama-server" in m for m in inter["missing"]), inter["missing"]
    assert inter["slots_endpoint"] is True and inter["n_polls"] >= 1
    decoded = [r for r in doc["requests"] if r["scenario"] == "decode"]
    assert len(decoded) == 2 and all(r["status"] == 200 for r in decoded)
    assert lt.call(lambda: gw.ledger.total_reserved()) == 0


def test_two_replicas_share_the_real_servers_pool(store: Any, lt: Any, synth_model: Any, llama_server: Any) -> None:
    """Two gateways on one Valkey/Redis ledger in front of one real llama-server (-c 1024 -np 2
    -kvu): both read the pool from its /props; 1000 tokens held on replica g1 keep a request on
    replica g0 waiting (g0 alone holds nothing: only the shared pool is full) until g1 releases;
    then it is answered by the server. The ledger returns to zero."""
    from llamarig.gateway.admission import AdmitRequest

    srv = llama_server(synth_model("llama"), "-c", "1024", "-np", "2", "-kvu")
    cfg = {"tiers": {"B": {"max_tokens": 8}}, "admission": {"queue_timeout_s": 60},
           "ledger": {"url": store.url, "lease_s": 5.0}}
    g0, g1 = (lt.gateway({**cfg, "ledger": {**cfg["ledger"], "replica": f"g{i}"}}, backends=[srv.url]) for i in range(2))
    assert lt.call(lambda: (g0.backends.pool_of("b0"), g1.backends.pool_of("b0")))[0].pool_tokens == 1024
    held = lt.run(g1.admission.acquire(AdmitRequest(1000, "B")))

    async def main() -> tuple[int, dict[str, Any], dict[str, Any]]:
        async with aiohttp.ClientSession() as s:
            async def one() -> int:
                body = {"messages": MSG, "max_tokens": 8, "ignore_eos": True}
                async with s.post(g0.url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    assert r.status == 200
                    return int(r.headers["X-Llamarig-Reserved"])

            t = asyncio.ensure_future(one())
            loop = asyncio.get_running_loop()
            end = loop.time() + 60
            while True:  # g0 queues it: the shared pool is full (awaited as an event, bounded)
                async with s.get(g0.url + "/gateway/status") as r:
                    waiting = await r.json()
                if waiting["queue"]["length"] == 1:
                    break
                assert loop.time() < end and not t.done(), waiting
                await asyncio.sleep(0.01)
            g1.admission.release(held)  # in this loop: the gateways run in it
            reserved = await asyncio.wait_for(t, 60)
            async with s.get(g1.url + "/gateway/status") as r:
                final = await r.json()
            return reserved, waiting, final

    reserved, waiting, final = lt.run(main(), timeout=120)
    assert waiting["reserved_tokens"] == 1000 and waiting["requests"] == []  # all of it g1's
    assert [h["replica"] for h in waiting["ledger"]["replicas"] if h["requests"]] == ["g1"]
    assert reserved > 1024 - 1000  # it did not fit beside the 1000 held on g1
    led = final["ledger"]
    assert final["reserved_tokens"] == 0 and led["stats"]["made"] == led["stats"]["released"] == 2
