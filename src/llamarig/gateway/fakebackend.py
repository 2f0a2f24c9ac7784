"""A fake llama-server (aiohttp) for fault injection and the gateway benchmark.

It answers the endpoints the gateway uses (/health, /props, /v1/models, /metrics, /tokenize,
/v1/chat/completions/input_tokens, /v1/chat/completions, /v1/completions, /completion) with
llama-server-shaped JSON and SSE, and can misbehave on request: answer 503/500, stall before
the first byte, die mid-stream, pause until the test sets an event, crash (``kill``) and come
back (``start`` on its old port). It records what it received and how many streams were closed
by the client (the gateway must close upstream when its own client goes away).

Not a model: tokens are the word "tok". ``python -m llamarig.gateway.fakebackend --port 8081``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any

from llamarig.extras import needed

with needed("gateway"):
    from aiohttp import web


@dataclass
class FakeBehaviour:
    tokens: int = 8  # tokens per answer (capped by the request's max_tokens / n_predict)
    token_interval_s: float = 0.0  # delay between streamed tokens
    first_byte_delay_s: float = 0.0  # "prefill" time before headers
    status: int = 200  # answer this status (with a llama-server-style error body) instead
    die_after: int | None = None  # abort the connection after this many streamed tokens
    loading: bool = False  # /health answers 503 {"message":"Loading model"}
    n_ctx: int = 4096
    n_ctx_train: int = 262144  # /v1/models meta (a slot context equal to it is the training-context cap)
    total_slots: int = 4
    #: a paused backend: while this event is not set, streams hold after ``gate_after`` tokens
    #: and whole answers are not sent (tests drive the timing by events, not sleeps); None: never
    gate: asyncio.Event | None = None
    gate_after: int = 1


@dataclass
class FakeStats:
    received: list[dict[str, Any]] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    completed: int = 0
    client_closed: int = 0  # streams whose reader went away before the end
    keep_bodies: bool = True


_CHUNK_CHAT = (b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"tok"}}],'
               b'"created":0,"id":"chatcmpl-fake","model":"fake","object":"chat.completion.chunk"}\n\n')
_CHUNK_CMPL = (b'data: {"choices":[{"text":"tok","index":0,"logprobs":null,"finish_reason":null}],'
               b'"created":0,"id":"cmpl-fake","model":"fake","object":"text_completion"}\n\n')
_CHUNK_NATIVE = b'data: {"content":"tok","tokens":[],"stop":false}\n\n'


def _n(body: dict[str, Any], default: int) -> int:
    for f in ("n_predict", "max_tokens", "max_completion_tokens"):
        v = body.get(f)
        if isinstance(v, int) and v >= 0:
            return min(v, default)
    return default


class FakeBackend:
    def __init__(self, behaviour: FakeBehaviour | None = None) -> None:
        self.b = behaviour or FakeBehaviour()
        self.stats = FakeStats()
        self.app = self._make_app()
        self.runner: web.AppRunner | None = None
        self.port = 0
        self._served = False  # an aiohttp app serves one runner: a restart builds a new one

    def _make_app(self) -> web.Application:
        app = web.Application()
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/props", self.props)
        r.add_get("/v1/models", self.models)
        r.add_get("/metrics", self.metrics)
        r.add_post("/tokenize", self.tokenize)
        r.add_post("/v1/chat/completions/input_tokens", self.input_tokens)
        r.add_post("/v1/chat/completions", functools.partial(self.generate, kind="chat"))
        r.add_post("/v1/completions", functools.partial(self.generate, kind="cmpl"))
        r.add_post("/completion", functools.partial(self.generate, kind="native"))
        return app

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> FakeBackend:
        """Listen on ``port`` (0: any free one). After ``stop()``/``kill()`` it can start again,
        on its old port: ``start(fb.port)``."""
        if self._served:
            self.app = self._make_app()
        self._served = True
        self.runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True, shutdown_timeout=5.0)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self.runner:
            await self.runner.cleanup()
            self.runner = None

    async def kill(self) -> None:
        """Die like a crashed process: every open connection reset at once, then the port closed."""
        server = self.runner.server if self.runner else None
        if server is not None:
            for proto in list(server.connections):
                if proto.transport is not None:
                    proto.transport.abort()
        await self.stop()

    # -- info endpoints
    async def health(self, q: web.Request) -> web.Response:
        if self.b.loading:
            return web.json_response({"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}, status=503)
        return web.json_response({"status": "ok"})

    async def props(self, q: web.Request) -> web.Response:
        return web.json_response({"default_generation_settings": {"n_ctx": self.b.n_ctx, "params": {}},
                                  "total_slots": self.b.total_slots, "model_alias": "fake", "build_info": "fake",
                                  "is_sleeping": False})

    async def models(self, q: web.Request) -> web.Response:
        meta = {"n_ctx": self.b.n_ctx, "n_ctx_train": self.b.n_ctx_train}
        return web.json_response({"object": "list", "data": [{"id": "fake", "aliases": ["fake-alias"], "object": "model",
                                                              "meta": meta}]})

    async def metrics(self, q: web.Request) -> web.Response:
        text = ("# HELP llamacpp:requests_processing Number of requests processing.\n"
                "# TYPE llamacpp:requests_processing gauge\n"
                f"llamacpp:requests_processing {self.stats.active}\n"
                "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n"
                "# TYPE llamacpp:tokens_predicted_total counter\n"
                f"llamacpp:tokens_predicted_total {self.stats.completed * self.b.tokens}\n")
        return web.Response(text=text, content_type="text/plain")

    async def tokenize(self, q: web.Request) -> web.Response:
        body = await q.json()
        return web.json_response({"tokens": list(range(len(str(body.get("content", "")).encode())))})

    async def input_tokens(self, q: web.Request) -> web.Response:
        body = await q.json()
        n = sum(len(str(m.get("content", "")).encode()) + 4 for m in body.get("messages", []))
        return web.json_response({"input_tokens": n, "object": "response.input_tokens"})

    # -- generation
    async def generate(self, q: web.Request, kind: str) -> web.StreamResponse:
        body = await q.json()
        if self.stats.keep_bodies:
            self.stats.received.append(body)
        b = self.b
        if b.first_byte_delay_s:
            await asyncio.sleep(b.first_byte_delay_s)
        if b.status != 200:
            return web.json_response({"error": {"code": b.status, "message": f"fake error {b.status}",
                                                "type": "server_error"}}, status=b.status)
        n = _n(body, b.tokens)
        # the time it spends, as llama-server reports it (a paced fake: token_interval_s per token)
        timings = {"prompt_n": 5, "cache_n": 0, "predicted_n": n, "prompt_ms": 1.0,
                   "predicted_ms": max(1.0, n * b.token_interval_s * 1000.0)}
        if not body.get("stream"):
            return await self._whole(body, kind, n, timings)
        return await self._stream(q, kind, n, timings)

    async def _whole(self, body: dict[str, Any], kind: str, n: int, timings: dict[str, Any]) -> web.Response:
        if self.b.gate is not None:
            await self.b.gate.wait()
        self.stats.completed += 1
        text = "tok" * n
        usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
        out: dict[str, Any]
        if kind == "chat":
            out = {"choices": [{"finish_reason": "length", "index": 0, "message": {"role": "assistant", "content": text}}],
                   "created": int(time.time()), "id": "chatcmpl-fake", "model": "fake", "object": "chat.completion",
                   "usage": usage, "timings": timings}
        elif kind == "cmpl":
            out = {"choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "length"}],
                   "created": int(time.time()), "id": "cmpl-fake", "model": "fake", "object": "text_completion",
                   "usage": usage, "timings": timings}
        else:
            out = {"content": text, "stop": True, "generation_settings": {"n_predict": body.get("n_predict")},
                   "tokens_predicted": n, "timings": timings}
        return web.json_response(out)

    async def _stream(self, q: web.Request, kind: str, n: int, timings: dict[str, Any]) -> web.StreamResponse:
        b = self.b
        chunk = {"chat": _CHUNK_CHAT, "cmpl": _CHUNK_CMPL, "native": _CHUNK_NATIVE}[kind]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(q)
        self.stats.active += 1
        self.stats.max_active = max(self.stats.max_active, self.stats.active)
        done = False
        try:
            for i in range(n):
                if b.die_after is not None and i >= b.die_after:
                    assert q.transport is not None
                    q.transport.abort()  # the backend "dies": connection reset mid-stream
                    return resp
                if b.gate is not None and i == b.gate_after:
                    await b.gate.wait()
                await resp.write(chunk)
                if b.token_interval_s:
                    await asyncio.sleep(b.token_interval_s)
            await resp.write(_final(kind, n, timings))
            await resp.write_eof()
            done = True
            self.stats.completed += 1
            return resp
        finally:
            self.stats.active -= 1
            if not done and not (b.die_after is not None):
                self.stats.client_closed += 1


def _final(kind: str, n: int, timings: dict[str, Any]) -> bytes:
    """The last event of a stream: the native final chunk, or the OpenAI one and [DONE]."""
    if kind == "native":
        final = {"content": "", "stop": True, "timings": timings, "tokens_predicted": n}
        return b"data: " + json.dumps(final).encode() + b"\n\n"
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    final = {"choices": [{"finish_reason": "length", "index": 0, "delta": {}}], "object": obj,
             "id": "x", "model": "fake", "created": 0, "timings": timings}
    return b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--interval-ms", type=float, default=0.0)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--n-ctx", type=int, default=1_000_000)
    a = ap.parse_args()

    async def run() -> None:
        fb = FakeBackend(FakeBehaviour(tokens=a.tokens, token_interval_s=a.interval_ms / 1000,
                                       total_slots=a.slots, n_ctx=a.n_ctx))
        fb.stats.keep_bodies = False
        await fb.start(a.port)
        print(f"fake llama-server on {fb.url}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
