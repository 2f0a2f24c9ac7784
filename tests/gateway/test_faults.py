"""Fault injection with a fake llama-server: dying and slow backends, 503/500, failover,
clients leaving at random points, bad input, auth, reload. Reserved tokens always return to 0."""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from click.testing import CliRunner

from llamarig.cli.gateway_cmd import gateway_cmd

MSG = [{"role": "user", "content": "hello"}]


def post(url: str, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None,
         timeout: float = 20) -> tuple[int, dict[str, str], bytes]:
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_until(pred: Any, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def reserved(lt: Any, gw: Any) -> int:
    return lt.call(lambda: gw.ledger.total_reserved() + gw.ledger.total_in_flight())


def test_backend_killed_mid_stream_gives_error_event(lt: Any) -> None:
    fb = lt.fake(tokens=20, die_after=3)
    gw = lt.gateway(backends=[fb.url])
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
    got: list[str] = []
    with pytest.raises(openai.APIError, match="failed mid-stream"):
        for ch in c.chat.completions.create(model="fake", messages=MSG, stream=True):
            got.append(ch.choices[0].delta.content)
    assert got == ["tok"] * 3
    assert wait_until(lambda: reserved(lt, gw) == 0)
    fb.b.die_after = None
    lt.run(gw.backends.check_all())  # recovered by the health check
    r = c.chat.completions.create(model="fake", messages=MSG)
    assert r.choices[0].message.content == "tok" * 20


def test_non_stream_client_gone_stops_the_upstream_stream(lt: Any) -> None:
    """A non-streamed chat request goes upstream as a stream: its client leaving closes the
    upstream (llama-server stops a stream at its next write) and releases the reservation."""
    gate = lt.call(asyncio.Event)
    fb = lt.fake(gate=gate)
    gw = lt.gateway(backends=[fb.url])
    with pytest.raises((TimeoutError, urllib.error.URLError, OSError)):
        post(gw.url + "/v1/chat/completions", {"messages": MSG}, timeout=0.5)
    assert wait_until(lambda: reserved(lt, gw) == 0) and fb.stats.received[0]["stream"] is True
    lt.call(gate.set)
    assert wait_until(lambda: fb.stats.client_closed == 1) and fb.stats.completed == 0
    st, _h, body = post(gw.url + "/v1/chat/completions", {"messages": MSG})  # and whole when it stays
    assert st == 200 and json.loads(body)["choices"][0]["message"]["content"] == "tok" * 8


def test_slow_backend_client_gives_up(lt: Any) -> None:
    """Sent whole (``stream_upstream = false``, or native /completion), a non-streamed request
    whose client left keeps its reservation until the backend has answered (llama-server runs a
    non-streamed request to its end while other tasks produce results), then releases it."""
    gate = lt.call(asyncio.Event)
    fb = lt.fake(gate=gate)
    gw = lt.gateway({"server": {"stream_upstream": False}}, backends=[fb.url])
    with pytest.raises((TimeoutError, urllib.error.URLError, OSError)):
        post(gw.url + "/v1/chat/completions", {"messages": MSG}, timeout=0.5)
    assert reserved(lt, gw) > 0 and fb.stats.completed == 0  # the backend still runs it: kept
    assert lt.call(lambda: len(gw.pipeline.detached)) == 1
    lt.call(gate.set)
    assert wait_until(lambda: reserved(lt, gw) == 0)
    assert fb.stats.completed == 1 and lt.call(lambda: len(gw.pipeline.detached)) == 0


def test_queued_non_stream_client_gone_leaves_the_queue(lt: Any) -> None:
    """A non-streamed request whose client leaves while it waits in the queue is never sent."""
    gate = lt.call(asyncio.Event)
    fb = lt.fake(gate=gate, total_slots=1)
    gw = lt.gateway({"server": {"stream_upstream": False}}, backends=[fb.url])
    with pytest.raises((TimeoutError, urllib.error.URLError, OSError)):
        post(gw.url + "/v1/chat/completions", {"messages": MSG}, timeout=0.3)  # holds the one slot
    with pytest.raises((TimeoutError, urllib.error.URLError, OSError)):
        post(gw.url + "/v1/chat/completions", {"messages": MSG}, timeout=0.3)  # queued, then gone
    assert wait_until(lambda: lt.call(lambda: gw.admission.queued) == 0)
    lt.call(gate.set)
    assert wait_until(lambda: reserved(lt, gw) == 0)
    assert len(fb.stats.received) == 1 and fb.stats.completed == 1


def test_503_fails_over_500_passes_through(lt: Any) -> None:
    bad = lt.fake(status=503)
    good = lt.fake(tokens=2)
    gw = lt.gateway({"backends": [{"url": bad.url, "name": "bad"}, {"url": good.url, "name": "good", "weight": 0.001}]})
    st, h, body = post(gw.url + "/v1/chat/completions", {"messages": MSG})
    assert st == 200 and h["X-Llamarig-Backend"] == "good"
    assert len(bad.stats.received) == 1  # tried first (least reserved), then failed over
    bad.b.status = 500
    good.b.status = 500
    st, _, body = post(gw.url + "/v1/chat/completions", {"messages": MSG})
    assert st == 500 and json.loads(body)["error"]["message"] == "fake error 500"
    assert reserved(lt, gw) == 0


def test_unreachable_backend_ejected_and_failover(lt: Any) -> None:
    good = lt.fake(tokens=2)
    dead = lt.fake(tokens=2)
    gw = lt.gateway({"backends": [{"url": dead.url, "name": "dead", "weight": 100}, {"url": good.url, "name": "good"}]})
    lt.run(dead.stop())
    st, h, _ = post(gw.url + "/v1/completions", {"prompt": "hi"})
    assert st == 200 and h["X-Llamarig-Backend"] == "good"
    s = lt.call(gw.status)
    assert [b["healthy"] for b in s["backends"]] == [False, True]
    runner = CliRunner()
    out = runner.invoke(gateway_cmd, ["status", "--url", gw.url])
    assert out.exit_code == 0, out.output
    assert "EJECTED" in out.output and "good" in out.output
    lt.run(good.stop())
    st, _, body = post(gw.url + "/v1/completions", {"prompt": "hi"})
    assert st in (502, 503) and "error" in json.loads(body)
    assert reserved(lt, gw) == 0


def test_random_client_disconnects_release_everything(lt: Any) -> None:
    fb = lt.fake(tokens=40, token_interval_s=0.002, total_slots=8, n_ctx=20000)
    gw = lt.gateway({"admission": {"queue_timeout_s": 2.0, "prompt_tokens": "estimate", "keepalive_s": 0.05}},
                    backends=[fb.url])
    rnd = random.Random(3)

    async def clients() -> dict[str, int]:
        out = {"ok": 0, "cut": 0, "429": 0}
        async with aiohttp.ClientSession() as s:
            async def one() -> None:
                body = {"messages": MSG, "stream": rnd.random() < 0.8, "max_tokens": rnd.randint(1, 5000)}
                async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                    if r.status == 429:
                        out["429"] += 1
                        return
                    await r.read()
                    out["ok"] += 1

            tasks = [asyncio.ensure_future(one()) for _ in range(150)]
            for t in tasks:
                await asyncio.sleep(rnd.random() * 0.004)
                if rnd.random() < 0.5:
                    t.cancel()
            for t in tasks:
                try:
                    await t
                except asyncio.CancelledError:
                    out["cut"] += 1
        return out

    out = lt.run(clients(), timeout=60)
    assert out["cut"] > 20 and out["ok"] > 10
    assert wait_until(lambda: reserved(lt, gw) == 0 and lt.call(lambda: gw.admission.queued) == 0)
    assert wait_until(lambda: fb.stats.active == 0)  # every upstream stream was closed
    assert fb.stats.client_closed > 0  # ...including those whose client left mid-stream


def test_queued_stream_gets_keepalive_then_data(lt: Any) -> None:
    fb = lt.fake(tokens=30, token_interval_s=0.02, total_slots=1, n_ctx=8000)
    gw = lt.gateway({"admission": {"keepalive_s": 0.1, "prompt_tokens": "estimate"}}, backends=[fb.url])

    async def run() -> tuple[bytes, bytes]:
        async with aiohttp.ClientSession() as s:
            async def get(body: dict[str, Any]) -> bytes:
                async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                    return await r.read()
            first = asyncio.ensure_future(get({"messages": MSG, "stream": True}))
            await asyncio.sleep(0.05)
            second = await get({"messages": MSG, "stream": True})
            return await first, second

    a, b = lt.run(run())
    assert b.startswith(b": llamarig gateway: queued") and b.rstrip().endswith(b"data: [DONE]")
    assert a.count(b'"content":"tok"') == 30


def test_pool_full_gives_429_with_retry_after(lt: Any) -> None:
    fb = lt.fake(tokens=50, token_interval_s=0.01, total_slots=4, n_ctx=1000)
    gw = lt.gateway({"admission": {"queue_timeout_s": 0.2, "prompt_tokens": "estimate", "keepalive_s": 0}},
                    backends=[fb.url])

    async def run() -> list[tuple[int, str | None, Any]]:
        async with aiohttp.ClientSession() as s:
            async def one() -> tuple[int, str | None, Any]:
                body = {"messages": MSG, "stream": True, "max_tokens": 600}
                async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                    data = await r.read()
                    return r.status, r.headers.get("Retry-After"), data
            return await asyncio.gather(*(one() for _ in range(4)))

    res = lt.run(run())
    codes = sorted(r[0] for r in res)
    assert codes == [200, 429, 429, 429]  # 600 + prompt fits once in a 1000-token pool
    for st, ra, data in res:
        if st == 429:
            assert ra is not None and int(ra) >= 1
            err = json.loads(data)["error"]
            assert err["code"] == "queue_timeout" and "KV pool full" in err["message"]
    assert reserved(lt, gw) == 0


def test_error_messages_are_in_the_gateways_language_codes_are_not(lt: Any) -> None:
    """`llamarig --lang zh gateway`: the bodies' ``message`` in Chinese (docs/gateway.md#language),
    ``code`` as always; the same gateway in English says it in English."""
    import re

    fb = lt.fake(tokens=2)
    cjk = re.compile(r"[\u4e00-\u9fff]")
    for lang in ("zh", "en"):
        gw = lt.gateway({"server": {"max_body_bytes": 2000}, "keys": [{"key": "sk-alice-12345", "name": "alice"}]},
                        backends=[fb.url], lang=lang)
        u = gw.url + "/v1/chat/completions"
        auth = {"Authorization": "Bearer sk-alice-12345"}
        for (_st, _, body), code in ((post(u, {"messages": MSG}), "invalid_api_key"),
                                    (post(u, {"messages": [{"role": "user", "content": "x" * 5000}]}, auth),
                                     "body_too_large"),
                                    (post(u, {"messages": MSG, "model": "gpt-9"}, auth), "model_not_found")):
            err = json.loads(body)["error"]
            assert err["code"] == code and bool(cjk.search(err["message"])) == (lang == "zh"), (lang, err)


def test_bad_input_gets_openai_errors_and_gateway_keeps_serving(lt: Any) -> None:
    fb = lt.fake(tokens=2)
    gw = lt.gateway({"server": {"max_body_bytes": 2000},
                     "keys": [{"key": "sk-alice-12345", "name": "alice"},
                              {"key": "sk-cron-123456", "name": "cronjob", "tier": "A"}]}, backends=[fb.url])
    u = gw.url + "/v1/chat/completions"
    auth = {"Authorization": "Bearer sk-alice-12345"}
    cases = [
        (post(u, {"messages": MSG}), 401, "invalid_api_key"),
        (post(u, {"messages": MSG}, {"Authorization": "Bearer sk-alice-12346"}), 401, "invalid_api_key"),
        (post(u, None, auth, raw=b"{not json"), 400, "invalid_json"),
        (post(u, None, auth, raw=b"\xff\xfe"), 400, "invalid_json"),
        (post(u, {"messages": "hi"}, auth), 400, None),
        (post(u, {"messages": MSG, "max_tokens": "10"}, auth), 400, None),
        (post(u, {"messages": [{"role": "user", "content": "x" * 5000}]}, auth), 413, "body_too_large"),
        (post(u, {"messages": MSG, "model": "gpt-9"}, auth), 404, "model_not_found"),
        (post(u, {"messages": MSG}, {**auth, "x-llamarig-tier": "ZZ"}), 400, "unknown_tier"),
        (post(gw.url + "/v1/nothing", {}, auth), 404, "not_found"),
    ]
    for (st, _, body), want, code in cases:
        assert st == want, body
        err = json.loads(body)["error"]
        assert isinstance(err["message"], str) and err["message"]
        if code:
            assert err["code"] == code
    st, h, _ = post(u, {"messages": MSG, "model": "fake-alias"}, {"x-api-key": "sk-cron-123456"})
    assert st == 200 and h["X-Llamarig-Tier"] == "A"  # key's tier
    st, h, _ = post(u, {"messages": MSG}, auth)
    assert st == 200 and h["X-Llamarig-Tier"] == "B"
    assert reserved(lt, gw) == 0


def test_invalid_messages_and_token_limits_are_not_forwarded(lt: Any) -> None:
    """A message without content and a token limit below 1 get a 400 naming the field; nothing
    reaches the backend and nothing is reserved."""
    fb = lt.fake(tokens=2)
    gw = lt.gateway({"tiers": {"B": {"max_tokens": 100}}}, backends=[fb.url])
    cases = [
        ("/v1/chat/completions", {"messages": [{"role": "user"}]}, "messages[0].content"),
        ("/v1/chat/completions", {"messages": [{"role": "system"}] + MSG}, "messages[0].content"),
        ("/v1/chat/completions", {"messages": MSG + [{"role": "assistant", "content": None}]}, "messages[1].content"),
        ("/v1/chat/completions", {"messages": MSG, "max_tokens": 0}, "max_tokens"),
        ("/v1/chat/completions", {"messages": MSG, "max_completion_tokens": -5}, "max_completion_tokens"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ("/completion", {"prompt": "hi", "n_predict": -7}, "n_predict"),
    ]
    for path, body, param in cases:
        st, _, data = post(gw.url + path, body)
        err = json.loads(data)["error"]
        assert (st, err["type"], err["param"]) == (400, "invalid_request_error", param), (path, body, data)
        assert param in err["message"]
    assert fb.stats.received == []
    # the accepted neighbours: -1 on /completion is "unlimited", i.e. the tier's limit
    st, _, _ = post(gw.url + "/completion", {"prompt": "hi", "n_predict": -1})
    assert st == 200 and fb.stats.received[-1]["n_predict"] == 100
    # 0 on /completion: llama-server evaluates the prompt only (a cache warm-up)
    st, _, _ = post(gw.url + "/completion", {"prompt": "hi", "n_predict": 0})
    assert st == 200 and fb.stats.received[-1]["n_predict"] == 0
    tool_call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    st, _, _ = post(gw.url + "/v1/chat/completions",
                    {"messages": MSG + [{"role": "assistant", "content": None, "tool_calls": [tool_call]},
                                        {"role": "tool", "tool_call_id": "c1", "content": "4"}], "max_tokens": 1})
    assert st == 200 and fb.stats.received[-1]["max_tokens"] == 1
    assert reserved(lt, gw) == 0


def test_props_and_slots_pick_the_default_route_backend(lt: Any) -> None:
    """With several backends GET /props and /slots go to the backend a new request would get,
    else the first healthy one; the backend's own status comes back (the fake has no /slots)."""
    f0, f1 = lt.fake(tokens=2), lt.fake(tokens=2)
    gw = lt.gateway({"health": {"interval_s": 3600}}, backends=[f0.url, f1.url])  # no recovery mid-test

    def get(path: str) -> tuple[int, dict[str, str], bytes]:
        try:
            with urllib.request.urlopen(gw.url + path, timeout=20) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    st, h, body = get("/props")
    assert st == 200 and h["X-Llamarig-Backend"] == "b0" and "total_slots" in json.loads(body)
    assert get("/slots?fail_on_no_slot=1")[0] == 404  # passed through as the backend answered
    lt.call(lambda: gw.backends.mark_failure("b0", "test", hard=True))
    assert get("/props")[1]["X-Llamarig-Backend"] == "b1"
    lt.call(lambda: gw.backends.mark_failure("b1", "test", hard=True))
    st, _, body = get("/props")
    assert st == 503 and json.loads(body)["error"]["code"] == "no_backend"


def test_reload_applies_good_config_and_keeps_old_on_error(lt: Any, tmp_path: Path) -> None:
    fb = lt.fake(tokens=2)
    cfgp = tmp_path / "gw.toml"
    logp = tmp_path / "req.jsonl"
    cfgp.write_text(f'[server]\nrequest_log = "{logp}"\n[[backends]]\nurl = "{fb.url}"\n[tiers.B]\nmax_tokens = 111\n')
    gw = lt.gateway(config_path=str(cfgp))
    post(gw.url + "/v1/chat/completions", {"messages": MSG})
    assert fb.stats.received[-1]["max_tokens"] == 111
    cfgp.write_text(f'[server]\nrequest_log = "{logp}"\n[[backends]]\nurl = "{fb.url}"\n[tiers.B]\nmax_tokens = 222\n')
    assert lt.run(gw.reload())
    post(gw.url + "/v1/chat/completions", {"messages": MSG})
    assert fb.stats.received[-1]["max_tokens"] == 222
    cfgp.write_text("[tiers.B]\nmax_tokens = 'lots'\n")
    assert not lt.run(gw.reload())  # broken: the old config keeps running
    st, _, _ = post(gw.url + "/v1/chat/completions", {"messages": MSG})
    assert st == 200 and fb.stats.received[-1]["max_tokens"] == 222
    # the file watcher picks up a change by itself
    cfgp.write_text(f'[server]\nrequest_log = "{logp}"\n[[backends]]\nurl = "{fb.url}"\n[tiers.B]\nmax_tokens = 333\n')
    assert wait_until(lambda: lt.call(lambda: gw.cfg.tiers["B"].max_tokens) == 333, 6)
    metrics = urllib.request.urlopen(gw.url + "/metrics").read().decode()
    assert 'llamarig_gateway_config_reloads_total{result="error"} 1.0' in metrics
    assert 'llamarig_gateway_requests_total{backend="b0",outcome="ok",tier="B"} 3.0' in metrics
    assert 'llamacpp:requests_processing{backend="b0"}' in metrics  # backend metrics re-exported
    recs = [json.loads(x) for x in logp.read_text().splitlines()]
    assert len(recs) == 3 and recs[0]["tier"] == "B" and recs[0]["outcome"] == "ok"
    assert (recs[0]["completion_tokens"], recs[0]["upstream_prompt_tokens"], recs[0]["cached_tokens"]) == (2, 5, 0)
    assert 'llamarig_gateway_tokens_total{backend="b0",kind="completion",tier="B"} 6.0' in metrics
    assert "messages" not in recs[0] and "hello" not in logp.read_text()


def test_queued_stream_rejected_after_keepalive_gets_error_event(lt: Any) -> None:
    fb = lt.fake(tokens=40, token_interval_s=0.02, total_slots=1, n_ctx=8000)
    gw = lt.gateway({"admission": {"keepalive_s": 0.05, "queue_timeout_s": 0.3, "prompt_tokens": "estimate"}},
                    backends=[fb.url])

    async def run() -> tuple[int, bytes, bytes]:
        async with aiohttp.ClientSession() as s:
            async def get(body: dict[str, Any]) -> tuple[int, bytes]:
                async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                    return r.status, await r.read()
            first = asyncio.ensure_future(get({"messages": MSG, "stream": True}))
            await asyncio.sleep(0.05)
            st, second = await get({"messages": MSG, "stream": True})
            return st, (await first)[1], second

    st, a, b = lt.run(run())
    assert a.rstrip().endswith(b"data: [DONE]")
    assert st == 200 and b.startswith(b": llamarig gateway: queued")
    err = json.loads(b.strip().split(b"\n\n")[-1][6:])["error"]
    assert err["code"] == "queue_timeout" and err["type"] == "rate_limit_error"
    assert wait_until(lambda: reserved(lt, gw) == 0)


def test_conversation_affinity_across_backends(lt: Any) -> None:
    a = lt.fake(tokens=40, token_interval_s=0.02, n_ctx=20000)
    b = lt.fake(tokens=40, token_interval_s=0.02, n_ctx=20000)
    # whole answers upstream: the fake sends those at once, so x1 ends while y and z still stream
    gw = lt.gateway({"backends": [{"url": a.url, "name": "a"}, {"url": b.url, "name": "b"}],
                     "admission": {"prompt_tokens": "estimate"}, "server": {"stream_upstream": False}})
    conv = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "first question"}]

    async def run() -> list[str]:
        async with aiohttp.ClientSession() as s:
            async def send(msgs: list[dict[str, str]], stream: bool = False) -> str:
                async with s.post(gw.url + "/v1/chat/completions", json={"messages": msgs, "stream": stream}) as r:
                    await r.read()
                    return r.headers["X-Llamarig-Backend"]
            y = asyncio.ensure_future(send([{"role": "user", "content": "conversation y"}], stream=True))
            await asyncio.sleep(0.1)
            x1 = await send(conv)  # least reserved: the backend without y
            z = asyncio.ensure_future(send([{"role": "user", "content": "conversation z"}], stream=True))
            await asyncio.sleep(0.1)  # now both backends hold one stream: a tie
            x2 = await send(conv + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "second"}])
            return [await y, x1, await z, x2]

    y, x1, z, x2 = lt.run(run())
    assert y != x1 and z == x1  # least reserved
    assert x2 == x1  # on a tie (which would go to "a" by name) the conversation returns to its backend
    assert x1 == "b"
    assert reserved(lt, gw) == 0
