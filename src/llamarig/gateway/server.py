"""The gateway: routes, request handling and lifecycle, over its own lean HTTP layer.

Both HTTP sides of the hot path are asyncio protocols with llhttp parsing (``httptools``):
llamarig.gateway.http serves clients (a disconnecting client cancels its handler at once, which
closes the upstream request, so llama-server frees the slot, and releases the reservation);
llamarig.gateway.upstream sends inference requests to the backends over keep-alive connections.
aiohttp's server and client, used before, cost more CPU per request than everything else the
gateway does (benchmarks/RESULTS.md). Health checks, token counting, /metrics scraping and the
pass-through endpoints use aiohttp's client. SSE is passed through chunk by chunk, unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiohttp

from llamarig.errors import LlamarigError
from llamarig.gateway.admission import Admission, AdmitRequest, Ledger, Rejected, Reservation
from llamarig.gateway.backends import Backends
from llamarig.gateway.config import (
    GatewayConfig,
    KeyConfig,
    dataclass_dict,
    load_config,
    with_overrides,
)
from llamarig.gateway.http import HttpServer, Request, Response, StreamResponse
from llamarig.gateway.metrics import GatewayMetrics, RequestLog
from llamarig.gateway.tiers import (
    CHAT,
    NATIVE,
    OAI_COMPLETION,
    RequestError,
    affinity_key,
    decide,
    estimate_prompt_tokens,
    rewrite,
    validate_body,
)
from llamarig.gateway.upstream import (
    AiohttpUpstream,
    UpstreamConnectError,
    UpstreamPayloadError,
    UpstreamPool,
)

log = logging.getLogger("llamarig.gateway")

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_RE_COUNTS = re.compile(rb'"(prompt_n|predicted_n|cache_n|prompt_tokens|completion_tokens)"\s*:\s*(\d+)')
_CLIENT_GONE = (ConnectionResetError, ConnectionError, aiohttp.ClientConnectionResetError)
#: a non-streamed upstream answer larger than this is an error (memory stays bounded)
MAX_UPSTREAM_BODY = 256 << 20


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status=status, body=json.dumps(body).encode(), content_type="application/json",
                    headers=headers)


def error_event(message: str, code: str, type_: str = "server_error") -> bytes:
    """An SSE event the openai client turns into an APIError."""
    err = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return b"data: " + json.dumps(err).encode() + b"\n\n"


def counts(tail: bytes) -> dict[str, int]:
    """The last value of each token count in the final bytes of a response (llama-server puts
    ``usage`` and ``timings`` at the end of a JSON answer and in the last SSE chunk)."""
    return {m.group(1).decode(): int(m.group(2)) for m in _RE_COUNTS.finditer(tail[-4096:])}


class Gateway:
    """One gateway: config, ledger, admission queue, backends, metrics, the HTTP server."""

    def __init__(self, cfg: GatewayConfig, *, config_path: str | None = None,
                 overrides: dict[str, Any] | None = None) -> None:
        self.cfg = cfg
        self.config_path = config_path
        self.overrides = overrides or {}
        self.ledger = Ledger()
        self.metrics = GatewayMetrics()
        self.reqlog = RequestLog(cfg.server.request_log, cfg.server.log_content)
        self.session: aiohttp.ClientSession | None = None
        self.upstream: UpstreamPool | None = None
        self.upstream_tls: AiohttpUpstream | None = None
        self.backends: Backends | None = None
        self.admission: Admission | None = None
        self.started = time.time()
        self.served = 0
        self._ids = itertools.count(1)
        self._tasks: list[asyncio.Task[Any]] = []
        self._config_mtime: float | None = None
        self.http = self._make_server()
        self.runner: Runner | None = None

    # ------------------------------------------------------------------ lifecycle
    def _make_server(self) -> HttpServer:
        srv = HttpServer(fallback=self._not_found, max_body=lambda: self.cfg.server.max_body_bytes,
                         too_large=self._too_large)
        srv.add("POST", "/v1/chat/completions", self._wrap(lambda q: self._inference(q, CHAT, "/v1/chat/completions")))
        srv.add("POST", "/chat/completions", self._wrap(lambda q: self._inference(q, CHAT, "/v1/chat/completions")))
        srv.add("POST", "/v1/completions", self._wrap(lambda q: self._inference(q, OAI_COMPLETION, "/v1/completions")))
        srv.add("POST", "/completion", self._wrap(lambda q: self._inference(q, NATIVE, "/completion")))
        srv.add("POST", "/completions", self._wrap(lambda q: self._inference(q, NATIVE, "/completion")))
        for p in ("/tokenize", "/detokenize", "/apply-template"):
            srv.add("POST", p, self._wrap(lambda q, p=p: self._passthrough(q, p)))
        for p in ("/props", "/slots"):
            srv.add("GET", p, self._wrap(lambda q, p=p: self._passthrough_get(q, p)))
        srv.add("GET", "/v1/models", self._wrap(self._models))
        srv.add("GET", "/models", self._wrap(self._models))
        srv.add("GET", "/health", self._health)
        srv.add("GET", "/metrics", self._wrap(self._metrics))
        srv.add("GET", "/gateway/status", self._wrap(self._status))
        return srv

    def _too_large(self, content_length: int | None, limit: int) -> Response:
        self.metrics.bad_requests.labels("413").inc()
        msg = (f"request body of {content_length} bytes exceeds the limit of {limit} bytes"
               if content_length is not None else f"request body exceeds the limit of {limit} bytes")
        return json_response(413, RequestError(413, msg, code="body_too_large").body())

    async def _on_startup(self) -> None:
        conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, enable_cleanup_closed=True)
        self.session = aiohttp.ClientSession(connector=conn, auto_decompress=False,
                                             timeout=aiohttp.ClientTimeout(total=None))
        self.upstream = UpstreamPool()
        self.upstream_tls = AiohttpUpstream(self.session)
        self.backends = Backends(self.cfg, self.ledger, self.session)
        a = self.cfg.admission
        self.admission = Admission(self.ledger, self.backends.pick, queue_size=a.queue_size,
                                   queue_timeout_s=a.queue_timeout_s, retry_after_s=a.retry_after_s,
                                   total_slots=self.backends.total_slots, any_backend=self.backends.any_healthy)
        self.backends.on_change.append(self.admission.pump)
        await self.backends.check_all()
        self.backends.start()
        loop = asyncio.get_running_loop()
        if self.config_path:
            with contextlib.suppress(OSError):
                self._config_mtime = os.stat(self.config_path).st_mtime
            self._tasks.append(loop.create_task(self._watch_config()))
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError, AttributeError):
                loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(self.reload()))

    async def _on_cleanup(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self.admission:
            self.admission.reject_all("shutting_down", "gateway is shutting down")
        if self.backends:
            await self.backends.stop()
        if self.upstream is not None:
            self.upstream.close()
        if self.session:
            await self.session.close()
        self.reqlog.close()

    # ------------------------------------------------------------------ reload
    async def _watch_config(self) -> None:
        while True:
            await asyncio.sleep(2.0)
            try:
                m = os.stat(self.config_path).st_mtime  # type: ignore[arg-type]
            except OSError:
                continue
            if m != self._config_mtime:
                self._config_mtime = m
                await self.reload()

    async def reload(self) -> bool:
        """Re-read the config file. On any error keep the running config and log why."""
        if not self.config_path:
            return False
        with contextlib.suppress(OSError):
            self._config_mtime = os.stat(self.config_path).st_mtime  # the watcher need not reload it again
        try:
            new = with_overrides(load_config(self.config_path), **self.overrides)
        except LlamarigError as e:
            log.error("config reload failed, keeping the running config: %s", e)
            self.metrics.reloads.labels("error").inc()
            return False
        old = self.cfg
        if (new.server.host, new.server.port) != (old.server.host, old.server.port):
            log.warning("config reload: host/port changes need a restart; keeping %s:%s", old.server.host, old.server.port)
            new = replace(new, server=replace(new.server, host=old.server.host, port=old.server.port))
        self.cfg = new
        assert self.backends is not None and self.admission is not None
        self.backends.apply_config(new)
        a = new.admission
        self.admission.queue_size = a.queue_size
        self.admission.queue_timeout_s = a.queue_timeout_s
        self.admission.retry_after_s = a.retry_after_s
        if (new.server.request_log, new.server.log_content) != (old.server.request_log, old.server.log_content):
            self.reqlog.close()
            self.reqlog = RequestLog(new.server.request_log, new.server.log_content)
        await self.backends.check_all()
        self.admission.pump()
        self.metrics.reloads.labels("ok").inc()
        log.info("config reloaded from %s", self.config_path)
        return True

    # ------------------------------------------------------------------ helpers
    def _wrap(self, fn: Callable[[Request], Awaitable[Response | StreamResponse]]
              ) -> Callable[[Request], Awaitable[Response | StreamResponse]]:
        async def handler(request: Request) -> Response | StreamResponse:
            try:
                return await fn(request)
            except RequestError as e:
                self.metrics.bad_requests.labels(str(e.status)).inc()
                return json_response(e.status, e.body())
            except Rejected as e:
                return json_response(e.status, e.body(), {"Retry-After": str(e.retry_after)})
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug must not take the gateway down or leak a traceback
                log.exception("internal error on %s %s", request.method, request.path)
                return json_response(500, {"error": {"message": f"internal gateway error: {type(e).__name__}",
                                                     "type": "server_error", "param": None, "code": "internal_error"}})
        return handler

    def _auth(self, request: Request, cfg: GatewayConfig) -> KeyConfig | None:
        if not cfg.keys:
            return None
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        found: KeyConfig | None = None
        tb = token.encode()
        for k in cfg.keys:  # compare against every key: timing does not depend on which matched
            if hmac.compare_digest(tb, k.key.encode()) and found is None:
                found = k
        if found is None:
            raise RequestError(401, "missing or invalid API key (Authorization: Bearer KEY)",
                               code="invalid_api_key")
        return found

    async def _read_body(self, request: Request, limit: int) -> bytes:
        # the HTTP layer already stopped reading past the limit in force when the body arrived;
        # a reload may have lowered it since
        if len(request.body) > limit:
            raise RequestError(413, f"request body of {len(request.body)} bytes exceeds the limit of {limit} bytes",
                               code="body_too_large")
        return request.body

    def _check_model(self, body: dict[str, Any], cfg: GatewayConfig) -> None:
        model = body.get("model")
        if not model or cfg.server.accept_any_model or model in cfg.routing.model_aliases:
            return
        assert self.backends is not None
        known = self.backends.models()
        if known and model not in known:
            raise RequestError(404, f"model '{model}' not found; available: {', '.join(known + list(cfg.routing.model_aliases))}",
                               code="model_not_found", param="model")

    async def _count_prompt(self, up: dict[str, Any], kind: str, affinity: str | None,
                            cfg: GatewayConfig) -> tuple[int, str]:
        """(prompt tokens, method). Exact from a backend when configured; estimate on failure."""
        a = cfg.admission
        assert self.backends is not None and self.session is not None
        if a.prompt_tokens == "backend":
            name = self.backends.affinity.get(affinity)
            healthy = self.backends.healthy()
            st = next((s for s in healthy if s.name == name), healthy[0] if healthy else None)
            if st is not None:
                try:
                    if kind == CHAT:
                        body = {k: v for k, v in up.items() if k != "stream"}
                        status, data = await self._post_json(st.cfg.url + "/v1/chat/completions/input_tokens", body,
                                                             st.headers(), cfg.health.timeout_s)
                        if status == 200:
                            return int(data["input_tokens"]), "backend"
                    elif isinstance(up.get("prompt"), str):
                        status, data = await self._post_json(st.cfg.url + "/tokenize",
                                                             {"content": up["prompt"], "add_special": True},
                                                             st.headers(), cfg.health.timeout_s)
                        if status == 200:
                            return len(data["tokens"]), "backend"
                except (UpstreamConnectError, UpstreamPayloadError, asyncio.TimeoutError, OSError, ValueError,
                        KeyError, TypeError):
                    pass
        return estimate_prompt_tokens(up, a.estimate_bytes_per_token), "estimate"

    async def _post_json(self, url: str, body: Any, headers: dict[str, str], timeout: float) -> tuple[int, Any]:
        """POST a small JSON request to a backend and parse the JSON answer (1 MiB at most)."""
        client: Any = self.upstream if url.startswith("http://") else self.upstream_tls
        r = await client.post(url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers},
                              connect_timeout=timeout, read_timeout=timeout)
        try:
            data = await r.read(1 << 20)
        except BaseException:
            r.close()
            raise
        r.release()
        return r.status, json.loads(data) if r.status == 200 else None

    # ------------------------------------------------------------------ inference
    async def _inference(self, request: Request, kind: str, path: str) -> StreamResponse:
        t_arrive = time.monotonic()
        cfg = self.cfg  # one config for the whole request, even across a reload
        key = self._auth(request, cfg)
        raw = await self._read_body(request, cfg.server.max_body_bytes)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(400, f"request body is not valid JSON: {e}", code="invalid_json") from None
        validate_body(body, kind)
        self._check_model(body, cfg)
        headers = request.headers  # case-insensitive already
        d = decide(body, headers, cfg, key)
        up = rewrite(body, d, cfg, kind)
        field = "n_predict" if kind == NATIVE else "max_tokens"
        aff = affinity_key(body, cfg.routing.affinity_messages)
        prompt_tokens, method = await self._count_prompt(up, kind, aff, cfg)
        assert self.backends is not None and self.admission is not None and self.session is not None
        max_tokens = d.max_tokens
        max_ctx = self.backends.max_slot_ctx()
        if max_ctx is not None:
            if prompt_tokens >= max_ctx:
                raise RequestError(400, f"the prompt ({prompt_tokens} tokens, {method} count) does not fit the "
                                   f"context of any backend slot ({max_ctx} tokens)", code="exceed_context_size_error")
            if prompt_tokens + max_tokens > max_ctx:
                max_tokens = max_ctx - prompt_tokens  # the server would stop at the context end anyway
                up[field] = max_tokens
                budget = up.get("reasoning_budget_tokens")
                if isinstance(budget, int) and budget >= max_tokens:
                    up["reasoning_budget_tokens"] = max_tokens // 2
        if max_tokens < (d.requested_max_tokens or 0):
            self.metrics.clamped.labels(d.tier).inc()
        stream = bool(body.get("stream"))
        rid = next(self._ids)
        rec: dict[str, Any] = {
            "id": rid, "path": request.path, "tier": d.tier, "tier_reason": d.reason, "cron": d.cron,
            "key": key.name if key else None, "stream": stream, "prompt_tokens": prompt_tokens,
            "prompt_count": method, "max_tokens": max_tokens, "requested_max_tokens": d.requested_max_tokens,
            "widened": d.widened,
        }
        areq = AdmitRequest(tokens=prompt_tokens + max_tokens, tier=d.tier, priority=d.priority,
                            key=key.name if key else None, key_limit=key.max_concurrent if key else 0,
                            affinity=aff)
        deadline = t_arrive + cfg.admission.queue_timeout_s
        payload = json.dumps(up, ensure_ascii=False, separators=(",", ":")).encode()
        read_timeout = max(cfg.server.read_timeout_s, (d.timeout_s or 0) + 60)
        resp: StreamResponse | None = None
        res: Reservation | None = None
        upstream: Any = None  # an UpstreamResponse (or its aiohttp twin for https://)
        outcome = "error"
        tried: set[str] = set()
        holder: list[StreamResponse | None] = [None]  # the response, once started
        try:
            # ---- admission (+ failover of requests that have not started upstream)
            while True:
                areq.exclude = frozenset(tried)
                try:
                    res = await self._admit(request, areq, deadline, stream, cfg, holder)
                    resp = holder[0]
                except Rejected as e:
                    resp = holder[0]
                    self.metrics.rejected.labels(d.tier, e.code).inc()
                    rec.update(status=e.status, outcome=f"rejected:{e.code}")
                    outcome = f"rejected:{e.code}"
                    if resp is not None:  # keep-alive comments already sent: say it in the stream
                        with contextlib.suppress(*_CLIENT_GONE):
                            await resp.write(error_event(e.message, e.code, "rate_limit_error"))
                        return resp
                    raise
                if res is None:
                    raise AssertionError("admission returned nothing")
                t_admit = time.monotonic()
                self.metrics.child(self.metrics.queue_wait, d.tier).observe(t_admit - t_arrive)
                be = self.backends.states.get(res.backend)
                url = (be.cfg.url if be else "") + path
                client: Any = self.upstream if url.startswith("http://") else self.upstream_tls
                try:
                    upstream = await client.post(
                        url, payload, {"Content-Type": "application/json", **(be.headers() if be else {})},
                        connect_timeout=cfg.server.connect_timeout_s, read_timeout=read_timeout)
                except (UpstreamConnectError, UpstreamPayloadError, asyncio.TimeoutError, OSError) as e:
                    self.metrics.errors.labels(res.backend, "connect").inc()
                    self.backends.mark_failure(res.backend, f"{type(e).__name__}: {e}", hard=True)
                    self.admission.release(res)
                    tried.add(res.backend)
                    res = None
                    if self.backends.any_healthy() and time.monotonic() < deadline:
                        continue
                    raise RequestError(502, f"backend unreachable: {type(e).__name__}: {e}", type_="server_error",
                                       code="upstream_unreachable") from None
                if upstream.status == 503 and resp is None:
                    # loading / sleeping / overloaded before anything was sent: try another backend
                    self.metrics.errors.labels(res.backend, "503").inc()
                    self.backends.mark_failure(res.backend, "answered 503")
                    others = [s for s in self.backends.healthy() if s.name not in tried | {res.backend}]
                    if others and time.monotonic() < deadline:
                        upstream.close()
                        upstream = None
                        self.admission.release(res)
                        tried.add(res.backend)
                        res = None
                        continue
                break
            self.backends.affinity.set(aff, res.backend)
            rec["backend"] = res.backend
            rec["queue_ms"] = round((t_admit - t_arrive) * 1000, 2)
            ct = upstream.headers.get("Content-Type", "application/json")
            extra = {"X-Llamarig-Tier": d.tier, "X-Llamarig-Backend": res.backend,
                     "X-Llamarig-Reserved": str(res.tokens)}
            if not ct.startswith("text/event-stream"):
                try:
                    data = await upstream.read(MAX_UPSTREAM_BODY)
                except (UpstreamPayloadError, asyncio.TimeoutError) as e:
                    self.metrics.errors.labels(res.backend, "mid_stream").inc()
                    self.backends.mark_failure(res.backend, f"{type(e).__name__}: {e}")
                    raise RequestError(502, f"backend {res.backend} failed: {type(e).__name__}: {e}",
                                       type_="server_error", code="upstream_error") from None
                t_end = time.monotonic()
                self.metrics.child(self.metrics.ttft, d.tier, res.backend).observe(t_end - t_admit)
                self._account(rec, d.tier, res.backend, data, t_admit, t_end, t_end)
                outcome = "ok" if upstream.status < 400 else f"http_{upstream.status}"
                if resp is not None:  # we already started an SSE response while queued
                    await resp.write(data if upstream.status < 400 else
                                     error_event(data.decode("utf-8", "replace")[:2000], f"upstream_{upstream.status}"))
                    return resp
                out = Response(status=upstream.status, body=data, headers={"Content-Type": ct, **extra})
                return out
            # ---- SSE pass-through, chunk by chunk, bytes unchanged
            if resp is None:
                resp = StreamResponse(status=upstream.status, headers={**SSE_HEADERS, "Content-Type": ct, **extra})
                holder[0] = resp
                await resp.prepare(request)
            t_first: float | None = None
            prev = last = b""
            client_gone = False
            upstream_failed: str | None = None
            try:
                async for chunk in upstream.iter_any():
                    if t_first is None:
                        t_first = time.monotonic()
                        self.metrics.child(self.metrics.ttft, d.tier, res.backend).observe(t_first - t_admit)
                    try:
                        await resp.write(chunk)
                    except _CLIENT_GONE:
                        client_gone = True
                        break
                    prev, last = last, chunk
            except (UpstreamPayloadError, UpstreamConnectError, asyncio.TimeoutError) as e:
                upstream_failed = f"{type(e).__name__}: {e}"
            tail = prev + last
            if not client_gone and upstream_failed is None and path.startswith("/v1/") and upstream.status == 200 \
                    and b"[DONE]" not in tail:
                upstream_failed = "stream ended without [DONE]"
            t_end = time.monotonic()
            self._account(rec, d.tier, res.backend, tail, t_admit, t_first or t_end, t_end)
            if client_gone:
                outcome = "client_disconnected"
            elif upstream_failed is not None:
                outcome = "upstream_error"
                self.metrics.errors.labels(res.backend, "mid_stream").inc()
                self.backends.mark_failure(res.backend, upstream_failed)
                with contextlib.suppress(*_CLIENT_GONE):
                    await resp.write(error_event(f"backend {res.backend} failed mid-stream: {upstream_failed}",
                                                 "upstream_error"))
            else:
                outcome = "ok" if upstream.status < 400 else f"http_{upstream.status}"
            return resp
        except _CLIENT_GONE:
            outcome = "client_disconnected"
            return holder[0] or Response(status=499)
        except asyncio.CancelledError:
            outcome = "client_disconnected"
            raise
        finally:
            if upstream is not None:
                if outcome == "ok":
                    upstream.release()
                else:
                    upstream.close()  # drop the connection: llama-server sees it and frees the slot
            if res is not None:
                self.admission.release(res)
                self.metrics.child(self.metrics.requests, d.tier, res.backend, outcome).inc()
                self.metrics.child(self.metrics.duration, d.tier, res.backend).observe(time.monotonic() - res.admitted_at)
            rec["outcome"] = outcome
            rec.setdefault("status", upstream.status if upstream is not None else None)
            rec["total_ms"] = round((time.monotonic() - t_arrive) * 1000, 2)
            self.served += 1
            self.reqlog.write(rec, body)

    async def _admit(self, request: Request, areq: AdmitRequest, deadline: float, stream: bool,
                     cfg: GatewayConfig, holder: list[StreamResponse | None]) -> Reservation:
        """Acquire a reservation; while a streaming request waits, send SSE comments every
        ``keepalive_s`` (this commits to status 200, so a later rejection becomes an error event).
        The started response, if any, is left in ``holder[0]``."""
        assert self.admission is not None
        r = self.admission.try_acquire(areq)  # the common case: no task, no waiting
        if r is not None:
            return r
        ka = cfg.admission.keepalive_s
        if not stream or ka <= 0:
            return await self.admission.acquire(areq, deadline)
        task = asyncio.ensure_future(self.admission.acquire(areq, deadline))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=ka)
                if done:
                    return task.result()
                if holder[0] is None:
                    resp = StreamResponse(status=200, headers=SSE_HEADERS)
                    await resp.prepare(request)
                    holder[0] = resp
                await holder[0].write(b": llamarig gateway: queued for the KV pool\n\n")
        except BaseException:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            elif not task.cancelled() and task.exception() is None:
                self.admission.release(task.result())
            raise

    def _account(self, rec: dict[str, Any], tier: str, backend: str, tail: bytes, t_admit: float,
                 t_first: float, t_end: float) -> None:
        c = counts(tail)
        prompt = c.get("prompt_n", c.get("prompt_tokens"))
        pred = c.get("predicted_n", c.get("completion_tokens"))
        cache = c.get("cache_n")
        if prompt is not None:
            self.metrics.child(self.metrics.tokens, tier, backend, "prompt").inc(prompt)
        if pred is not None:
            self.metrics.child(self.metrics.tokens, tier, backend, "completion").inc(pred)
        if cache is not None:
            self.metrics.child(self.metrics.tokens, tier, backend, "cached").inc(cache)
        rec.update(upstream_prompt_tokens=prompt, completion_tokens=pred, cached_tokens=cache,
                   ttft_ms=round((t_first - t_admit) * 1000, 2), upstream_ms=round((t_end - t_admit) * 1000, 2))

    # ------------------------------------------------------------------ other routes
    async def _passthrough(self, request: Request, path: str) -> StreamResponse:
        cfg = self.cfg
        self._auth(request, cfg)
        raw = await self._read_body(request, cfg.server.max_body_bytes)
        try:
            json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(400, f"request body is not valid JSON: {e}", code="invalid_json") from None
        assert self.backends is not None
        healthy = self.backends.healthy()
        if not healthy:
            raise Rejected(503, "no_backend", "no healthy backend", int(cfg.health.interval_s) or 1)
        return await self._forward("POST", healthy[0].name, path, raw, cfg)

    async def _passthrough_get(self, request: Request, path: str) -> StreamResponse:
        """GET /props and /slots (query string kept: ``/slots?fail_on_no_slot=1``), so tools that
        probe llama-server (``llamarig bench``) work through the gateway. Behind the API keys;
        answered by the backend the default route would choose (``Backends.default_backend``)."""
        cfg = self.cfg
        self._auth(request, cfg)
        assert self.backends is not None
        name = self.backends.default_backend()
        if name is None:
            raise Rejected(503, "no_backend", "no healthy backend", int(cfg.health.interval_s) or 1)
        resp = await self._forward("GET", name, path + ("?" + request.query if request.query else ""), None, cfg)
        if path == "/slots" and resp.status == 200:
            resp = _redact_slots(resp)
        return resp

    async def _forward(self, method: str, name: str, path: str, raw: bytes | None, cfg: GatewayConfig) -> Response:
        """One non-admitted request to backend ``name``; its status, body and content type come back
        unchanged, with ``X-Llamarig-Backend`` naming the backend that answered."""
        assert self.backends is not None and self.session is not None
        st = self.backends.states[name]
        headers = {**({"Content-Type": "application/json"} if raw is not None else {}), **st.headers()}
        try:
            async with self.session.request(method, st.cfg.url + path, data=raw, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=cfg.server.read_timeout_s)) as r:
                data = await r.read()
                return Response(status=r.status, body=data,
                                headers={"Content-Type": r.headers.get("Content-Type", "application/json"),
                                         "X-Llamarig-Backend": st.name})
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            self.backends.mark_failure(st.name, f"{type(e).__name__}: {e}")
            raise RequestError(502, f"backend {st.name}: {type(e).__name__}: {e}", type_="server_error",
                               code="upstream_unreachable") from None

    async def _models(self, request: Request) -> StreamResponse:
        cfg = self.cfg
        self._auth(request, cfg)
        assert self.backends is not None
        data = [{"id": m, "object": "model", "owned_by": "llamacpp", "created": int(self.started)}
                for m in self.backends.models()]
        data += [{"id": a, "object": "model", "owned_by": "llamarig", "created": int(self.started),
                  "llamarig_tier": t} for a, t in cfg.routing.model_aliases.items()]
        return json_response(200, {"object": "list", "data": data})

    async def _health(self, request: Request) -> StreamResponse:
        assert self.backends is not None
        n = len(self.backends.healthy())
        if n:
            return json_response(200, {"status": "ok", "healthy_backends": n})
        return json_response(503, {"status": "no healthy backend", "healthy_backends": 0})

    async def _metrics(self, request: Request) -> StreamResponse:
        cfg = self.cfg
        if not cfg.server.public_metrics:
            self._auth(request, cfg)
        assert self.backends is not None
        self.update_gauges()
        texts = await self.backends.backend_metrics()
        return Response(body=self.metrics.render(texts), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    def update_gauges(self) -> None:
        assert self.backends is not None and self.admission is not None
        m = self.metrics
        queued = self.admission.queued_by_tier()
        for t in self.cfg.tiers:
            m.queue_length.labels(t).set(queued.get(t, 0))
        for s in self.backends.states.values():
            m.up.labels(s.name).set(1 if s.healthy else 0)
            m.reserved.labels(s.name).set(self.ledger.reserved.get(s.name, 0))
            m.in_flight.labels(s.name).set(self.ledger.in_flight.get(s.name, 0))
            if s.pool:
                m.pool.labels(s.name).set(s.pool.pool_tokens)
                m.slots.labels(s.name).set(s.pool.slots)

    def status(self) -> dict[str, Any]:
        assert self.backends is not None and self.admission is not None
        cfg = self.cfg
        bes = []
        for s in self.backends.states.values():
            bes.append({
                "name": s.name, "url": s.cfg.url, "healthy": s.healthy, "removed": s.removed,
                "pool_tokens": s.pool.pool_tokens if s.pool else None, "slots": s.pool.slots if s.pool else None,
                "slot_ctx": s.pool.slot_ctx if s.pool else None, "pool_source": s.pool.source if s.pool else None,
                "reserved_tokens": self.ledger.reserved.get(s.name, 0), "in_flight": self.ledger.in_flight.get(s.name, 0),
                "models": s.models, "last_error": s.last_error or None, "consecutive_failures": s.fails,
            })
        return {
            "uptime_s": round(time.time() - self.started, 1), "config": cfg.source, "served": self.served,
            "backends": bes, "queue": {"length": self.admission.queued, "by_tier": self.admission.queued_by_tier(),
                                       "size": self.admission.queue_size, "timeout_s": self.admission.queue_timeout_s},
            "reserved_tokens": self.ledger.total_reserved(), "in_flight": self.ledger.total_in_flight(),
            "rejected": dict(self.admission.rejected), "retry_after_s": self.admission.retry_after(),
            "tiers": {n: dataclass_dict(t) for n, t in cfg.tiers.items()},
            "keys": [k.name for k in cfg.keys], "affinity_entries": len(self.backends.affinity),
        }

    async def _status(self, request: Request) -> StreamResponse:
        self._auth(request, self.cfg)
        return json_response(200, self.status())

    async def _not_found(self, request: Request) -> StreamResponse:
        return json_response(404, {"error": {"message": f"unknown endpoint {request.method} {request.path}",
                                             "type": "invalid_request_error", "param": None, "code": "not_found"}})

    # ------------------------------------------------------------------ running
    async def start(self, host: str | None = None, port: int | None = None) -> Runner:
        """Start serving on the running loop; returns the runner (``await runner.cleanup()``)."""
        await self._on_startup()
        try:
            await self.http.start(host or self.cfg.server.host, self.cfg.server.port if port is None else port)
        except BaseException:
            await self._on_cleanup()  # closes the upstream sessions and the health loop
            raise
        self.runner = Runner(self)
        return self.runner

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        return self.http.port


class Runner:
    """Handle of a started gateway: ``await runner.cleanup()`` stops it."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.done = False

    async def cleanup(self) -> None:
        if self.done:
            return
        self.done = True
        await self.gw.http.close()
        await self.gw._on_cleanup()


def serve(cfg: GatewayConfig, *, config_path: str | None = None, overrides: dict[str, Any] | None = None,
          ready: Callable[[Gateway], None] | None = None) -> None:
    """Run a gateway until SIGINT/SIGTERM (the CLI entry)."""

    async def main() -> None:
        gw = Gateway(cfg, config_path=config_path, overrides=overrides)
        runner = await gw.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        if ready:
            ready(gw)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    loop_kind = os.environ.get("LLAMARIG_GATEWAY_LOOP", "auto")
    if loop_kind != "asyncio":
        try:
            import uvloop  # optional: about half the CPU per streamed token (benchmarks/RESULTS.md)
        except ImportError:
            if loop_kind == "uvloop":
                raise LlamarigError("LLAMARIG_GATEWAY_LOOP=uvloop but uvloop is not installed") from None
        else:
            uvloop.run(main())
            return
    asyncio.run(main())


#: /slots fields that carry request text: with LLAMA_SERVER_SLOTS_DEBUG set, llama-server shows
#: every slot's prompt and the text generated so far (tools/server/server-context.cpp:751-754,
#: 2739); through the gateway one tenant must not read another's, so they are removed
_SLOT_TEXT_FIELDS = ("prompt", "generated")


def _redact_slots(resp: Response) -> Response:
    try:
        slots = json.loads(resp.body)
    except (ValueError, UnicodeDecodeError):
        return resp
    if not isinstance(slots, list):
        return resp
    for slot in slots:
        if isinstance(slot, dict):
            for k in _SLOT_TEXT_FIELDS:
                slot.pop(k, None)
    resp.body = json.dumps(slots).encode()
    return resp
