"""The inference request pipeline: parse and validate, admit (reserve), forward, release.

:func:`handle` runs one request through small steps on a :class:`Call`, the request's state:

1. :func:`parse`: API key, body, JSON, validation, model, tier decision, the body sent upstream,
   prompt tokens, max_tokens clamped to the largest slot context (client errors raise here,
   before anything is reserved);
2. :func:`admit_and_connect`: a reservation (:func:`admit`: at once, or queued with SSE
   keep-alive comments for a waiting stream), then the upstream request (:func:`connect`), with
   failover to another backend while nothing was sent to the client;
3. :func:`forward_whole` (a JSON answer) or :func:`forward_stream` (SSE, chunk by chunk);
4. :func:`finish`, always: the upstream connection is released or dropped, the reservation is
   released, metrics and the request log are written.

Ownership of the reservation (see llamarig.gateway.admission): ``Call.res`` is the only
reference once :func:`admit` returns it; :func:`give_back` clears it as it releases it, so a
failover and :func:`finish` can never release one twice, and every way out of :func:`handle`
(answer, rejection, upstream error, client gone, cancellation) passes through :func:`finish`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from llamarig.gateway.admission import AdmitRequest, Reservation
from llamarig.gateway.config import GatewayConfig, KeyConfig
from llamarig.gateway.errors import Rejected, RequestError
from llamarig.gateway.http import Request, Response, StreamResponse
from llamarig.gateway.tiers import (
    CHAT,
    NATIVE,
    Decision,
    affinity_key,
    decide,
    estimate_prompt_tokens,
    rewrite,
    validate_body,
)
from llamarig.gateway.upstream import UpstreamConnectError, UpstreamPayloadError
from llamarig.i18n import _, localize
from llamarig.units import MiB

if TYPE_CHECKING:
    from llamarig.gateway.server import Gateway

log = logging.getLogger("llamarig.gateway")

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEPALIVE_COMMENT = b": llamarig gateway: queued for the KV pool\n\n"
_RE_COUNTS = re.compile(rb'"(prompt_n|predicted_n|cache_n|prompt_tokens|completion_tokens)"\s*:\s*(\d+)')
CLIENT_GONE = (ConnectionResetError, ConnectionError, aiohttp.ClientConnectionResetError)
#: a non-streamed upstream answer larger than this is an error (memory stays bounded)
MAX_UPSTREAM_BODY = 256 * MiB
_UPSTREAM_FAILED = (UpstreamConnectError, UpstreamPayloadError, asyncio.TimeoutError, OSError)


def error_event(message: str, code: str, type_: str = "server_error", body: dict[str, Any] | None = None) -> bytes:
    """An SSE event the openai client turns into an APIError (``body``: a whole error body)."""
    err = body or {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return b"data: " + json.dumps(err, ensure_ascii=False).encode() + b"\n\n"


def counts(tail: bytes) -> dict[str, int]:
    """The last value of each token count in the final bytes of a response (llama-server puts
    ``usage`` and ``timings`` at the end of a JSON answer and in the last SSE chunk)."""
    return {m.group(1).decode(): int(m.group(2)) for m in _RE_COUNTS.finditer(tail[-4096:])}


@dataclass(eq=False)
class Call:
    """One inference request on its way through the gateway."""

    request: Request
    path: str  # the upstream path
    cfg: GatewayConfig  # one config for the whole request, even across a reload
    t_arrive: float
    body: dict[str, Any]  # as the client sent it (for the request log)
    d: Decision
    rec: dict[str, Any]  # the request-log record
    areq: AdmitRequest
    aff: str | None
    stream: bool
    deadline: float
    payload: bytes  # the body sent upstream
    read_timeout: float
    res: Reservation | None = None  # the reservation this request owns, while it owns one
    upstream: Any = None  # an UpstreamResponse (or its aiohttp twin for https://)
    resp: StreamResponse | None = None  # the streamed response, once started
    outcome: str = "error"
    tried: set[str] = field(default_factory=set)
    t_admit: float = 0.0
    backend: str | None = None  # where the reservation was (kept after it is released)


# ------------------------------------------------------------------------------ request helpers


def authenticate(request: Request, cfg: GatewayConfig) -> KeyConfig | None:
    """The API key of the request (None when the gateway has no keys); RequestError(401)."""
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
        raise RequestError(401, _("missing or invalid API key (Authorization: Bearer KEY)"), code="invalid_api_key")
    return found


def read_body(request: Request, limit: int) -> bytes:
    # the HTTP layer already stopped reading past the limit in force when the body arrived;
    # a reload may have lowered it since
    if len(request.body) > limit:
        raise RequestError(413, _("request body of {size} bytes exceeds the limit of {limit} bytes").format(
            size=len(request.body), limit=limit), code="body_too_large")
    return request.body


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(400, _("request body is not valid JSON: {error}").format(error=e), code="invalid_json") from None


def check_model(gw: Gateway, body: dict[str, Any], cfg: GatewayConfig) -> None:
    model = body.get("model")
    if not model or cfg.server.accept_any_model or model in cfg.routing.model_aliases:
        return
    assert gw.backends is not None
    known = gw.backends.models()
    if known and model not in known:
        raise RequestError(404, _("model '{model}' not found; available: {models}").format(
            model=model, models=", ".join(known + list(cfg.routing.model_aliases))), code="model_not_found", param="model")


async def post_json(gw: Gateway, url: str, body: Any, headers: dict[str, str], timeout: float) -> tuple[int, Any]:
    """POST a small JSON request to a backend and parse the JSON answer (1 MiB at most)."""
    client: Any = gw.upstream if url.startswith("http://") else gw.upstream_tls
    r = await client.post(url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers},
                          connect_timeout=timeout, read_timeout=timeout)
    try:
        data = await r.read(MiB)
    except BaseException:
        r.close()
        raise
    r.release()
    return r.status, json.loads(data) if r.status == 200 else None


async def count_prompt(gw: Gateway, up: dict[str, Any], kind: str, affinity: str | None,
                       cfg: GatewayConfig) -> tuple[int, str]:
    """(prompt tokens, method). Exact from a backend when configured; estimate on failure."""
    a = cfg.admission
    assert gw.backends is not None
    if a.prompt_tokens == "backend":
        name = gw.backends.affinity.get(affinity)
        healthy = gw.backends.healthy()
        st = next((s for s in healthy if s.name == name), healthy[0] if healthy else None)
        if st is not None:
            try:
                if kind == CHAT:
                    body = {k: v for k, v in up.items() if k != "stream"}
                    status, data = await post_json(gw, st.cfg.url + "/v1/chat/completions/input_tokens", body,
                                                   st.headers(), cfg.health.timeout_s)
                    if status == 200:
                        return int(data["input_tokens"]), "backend"
                elif isinstance(up.get("prompt"), str):
                    status, data = await post_json(gw, st.cfg.url + "/tokenize",
                                                   {"content": up["prompt"], "add_special": True},
                                                   st.headers(), cfg.health.timeout_s)
                    if status == 200:
                        return len(data["tokens"]), "backend"
            except (UpstreamConnectError, UpstreamPayloadError, asyncio.TimeoutError, OSError, ValueError,
                    KeyError, TypeError):
                pass
    return estimate_prompt_tokens(up, a.estimate_bytes_per_token), "estimate"


def clamp_to_context(gw: Gateway, up: dict[str, Any], kind: str, prompt_tokens: int, method: str,
                     max_tokens: int) -> int:
    """max_tokens lowered so prompt + max_tokens fits the largest slot context (written into
    ``up``); RequestError(400) when the prompt alone does not fit."""
    assert gw.backends is not None
    max_ctx = gw.backends.max_slot_ctx()
    if max_ctx is None:
        return max_tokens
    if prompt_tokens >= max_ctx:
        raise RequestError(400, _("the prompt ({tokens} tokens, {method} count) does not fit the context of any "
                                  "backend slot ({ctx} tokens)").format(tokens=prompt_tokens, method=method, ctx=max_ctx),
                           code="exceed_context_size_error")
    if prompt_tokens + max_tokens > max_ctx:
        max_tokens = max_ctx - prompt_tokens  # the server would stop at the context end anyway
        up["n_predict" if kind == NATIVE else "max_tokens"] = max_tokens
        budget = up.get("reasoning_budget_tokens")
        if isinstance(budget, int) and budget >= max_tokens:
            up["reasoning_budget_tokens"] = max_tokens // 2
    return max_tokens


# ------------------------------------------------------------------------------ 1. parse


async def parse(gw: Gateway, request: Request, kind: str, path: str) -> Call:
    """Everything decided before admission. Client errors raise RequestError; nothing is held."""
    t_arrive = time.monotonic()
    cfg = gw.cfg
    key = authenticate(request, cfg)
    body = parse_json(read_body(request, cfg.server.max_body_bytes))
    validate_body(body, kind)
    check_model(gw, body, cfg)
    d = decide(body, request.headers, cfg, key)  # headers are case-insensitive already
    up = rewrite(body, d, cfg, kind)
    aff = affinity_key(body, cfg.routing.affinity_messages)
    prompt_tokens, method = await count_prompt(gw, up, kind, aff, cfg)
    max_tokens = clamp_to_context(gw, up, kind, prompt_tokens, method, d.max_tokens)
    if max_tokens < (d.requested_max_tokens or 0):
        gw.metrics.clamped.labels(d.tier).inc()
    stream = bool(body.get("stream"))
    rec: dict[str, Any] = {
        "id": next(gw.request_ids), "path": request.path, "tier": d.tier, "tier_reason": d.reason, "cron": d.cron,
        "key": key.name if key else None, "stream": stream, "prompt_tokens": prompt_tokens,
        "prompt_count": method, "max_tokens": max_tokens, "requested_max_tokens": d.requested_max_tokens,
        "widened": d.widened,
    }
    areq = AdmitRequest(tokens=prompt_tokens + max_tokens, tier=d.tier, priority=d.priority,
                        key=key.name if key else None, key_limit=key.max_concurrent if key else 0, affinity=aff)
    return Call(request=request, path=path, cfg=cfg, t_arrive=t_arrive, body=body, d=d, rec=rec, areq=areq,
                aff=aff, stream=stream, deadline=t_arrive + cfg.admission.queue_timeout_s,
                payload=json.dumps(up, ensure_ascii=False, separators=(",", ":")).encode(),
                read_timeout=max(cfg.server.read_timeout_s, (d.timeout_s or 0) + 60))


# ------------------------------------------------------------------------------ 2. admit, connect


async def admit(gw: Gateway, call: Call) -> Reservation:
    """A reservation for ``call`` (Rejected when none). While a streaming request waits, send SSE
    comments every ``keepalive_s``; this commits to status 200 (``call.resp``), so a later
    rejection becomes an error event.

    The queued case waits on the admission Ticket in this task (no helper task): if this task is
    cancelled or a write fails at any point, ``abandon()`` leaves the queue or releases the
    reservation the ticket was handed in that same loop turn; ``take()`` passes it over
    synchronously, so the reservation always has exactly one owner."""
    adm = gw.admission
    assert adm is not None
    r = await adm.try_acquire(call.areq)  # the common case: no waiting
    if r is not None:
        return r
    ka = call.cfg.admission.keepalive_s
    if not call.stream or ka <= 0:
        return await adm.acquire(call.areq, call.deadline)
    ticket = adm.enqueue(call.areq, call.deadline)
    try:
        while not await ticket.wait(ka):
            if call.resp is None:
                resp = StreamResponse(status=200, headers=SSE_HEADERS)
                await resp.prepare(call.request)
                call.resp = resp
            await call.resp.write(KEEPALIVE_COMMENT)
        return ticket.take()
    except BaseException:
        ticket.abandon()
        raise


def give_back(gw: Gateway, call: Call) -> None:
    """Release the reservation ``call`` owns, if any; clears it first, so never twice."""
    r, call.res = call.res, None
    if r is not None:
        assert gw.admission is not None
        gw.admission.release(r)


async def connect(gw: Gateway, call: Call) -> bool:
    """Send the request upstream to ``call.res``'s backend. True: ``call.upstream`` holds the
    response head. False: the backend failed before anything reached the client and another
    may be tried (the reservation is released). RequestError(502) when none is left."""
    assert gw.backends is not None and call.res is not None
    cfg, res = call.cfg, call.res
    be = gw.backends.states.get(res.backend)
    url = (be.cfg.url if be else "") + call.path
    client: Any = gw.upstream if url.startswith("http://") else gw.upstream_tls
    try:
        call.upstream = await client.post(
            url, call.payload, {"Content-Type": "application/json", **(be.headers() if be else {})},
            connect_timeout=cfg.server.connect_timeout_s, read_timeout=call.read_timeout)
    except _UPSTREAM_FAILED as e:
        gw.metrics.errors.labels(res.backend, "connect").inc()
        gw.backends.mark_failure(res.backend, f"{type(e).__name__}: {e}", hard=True)
        give_back(gw, call)
        call.tried.add(res.backend)
        if gw.backends.any_healthy() and time.monotonic() < call.deadline:
            return False
        raise RequestError(502, _("backend {name} unreachable: {error}").format(name=res.backend, error=f"{type(e).__name__}: {e}"),
                           type_="server_error", code="upstream_unreachable") from None
    if call.upstream.status == 503 and call.resp is None:
        # loading / sleeping / overloaded before anything was sent: try another backend
        gw.metrics.errors.labels(res.backend, "503").inc()
        gw.backends.mark_failure(res.backend, "answered 503")
        others = [s for s in gw.backends.healthy() if s.name not in call.tried | {res.backend}]
        if others and time.monotonic() < call.deadline:
            call.upstream.close()
            call.upstream = None
            give_back(gw, call)
            call.tried.add(res.backend)
            return False
    return True


async def admit_and_connect(gw: Gateway, call: Call) -> StreamResponse | None:
    """Admission and the upstream request, with failover of requests that have not started
    upstream. None: ``call.upstream`` is ready to forward. A response: the request was rejected
    after keep-alive comments started the stream (the error event is written in it)."""
    while True:
        call.areq.exclude = frozenset(call.tried)
        try:
            call.res = await admit(gw, call)
        except Rejected as e:
            gw.metrics.rejected.labels(call.d.tier, e.reason, e.code).inc()
            call.rec.update(status=e.status, outcome=f"rejected:{e.code}", reason=e.reason, details=e.details)
            call.outcome = f"rejected:{e.code}"
            log.info("%s %s (%s) tier %s: %s", e.status, e.code, e.reason, call.d.tier, localize(e.message, gw.lang))
            if call.resp is not None:  # keep-alive comments already sent: say it in the stream
                with contextlib.suppress(*CLIENT_GONE):
                    await call.resp.write(error_event(e.message, e.code, body=localize(e.body(), gw.lang)))
                return call.resp
            raise
        call.backend = call.res.backend
        call.t_admit = time.monotonic()
        gw.metrics.child(gw.metrics.queue_wait, call.d.tier).observe(call.t_admit - call.t_arrive)
        if await connect(gw, call):
            return None


# ------------------------------------------------------------------------------ 3. forward


def account(gw: Gateway, call: Call, tail: bytes, t_first: float, t_end: float) -> None:
    """Token counts from the answer's last bytes into metrics and the request log."""
    tier, backend = call.d.tier, call.backend or ""
    c = counts(tail)
    prompt = c.get("prompt_n", c.get("prompt_tokens"))
    pred = c.get("predicted_n", c.get("completion_tokens"))
    cache = c.get("cache_n")
    m = gw.metrics
    if prompt is not None:
        m.child(m.tokens, tier, backend, "prompt").inc(prompt)
    if pred is not None:
        m.child(m.tokens, tier, backend, "completion").inc(pred)
    if cache is not None:
        m.child(m.tokens, tier, backend, "cached").inc(cache)
    call.rec.update(upstream_prompt_tokens=prompt, completion_tokens=pred, cached_tokens=cache,
                    ttft_ms=round((t_first - call.t_admit) * 1000, 2),
                    upstream_ms=round((t_end - call.t_admit) * 1000, 2))


def _answer_headers(gw: Gateway, call: Call) -> dict[str, str]:
    """Record where the request went; the X-Llamarig-* headers of the answer."""
    assert gw.backends is not None and call.res is not None
    gw.backends.affinity.set(call.aff, call.res.backend)
    call.rec["backend"] = call.res.backend
    call.rec["queue_ms"] = round((call.t_admit - call.t_arrive) * 1000, 2)
    return {"X-Llamarig-Tier": call.d.tier, "X-Llamarig-Backend": call.res.backend,
            "X-Llamarig-Reserved": str(call.res.tokens)}


def upstream_is_sse(call: Call) -> bool:
    ct: str = call.upstream.headers.get("Content-Type", "application/json")
    return ct.startswith("text/event-stream")


async def forward_whole(gw: Gateway, call: Call) -> Response | StreamResponse:
    """A JSON (non-SSE) upstream answer, read whole (bounded) and passed on."""
    assert gw.backends is not None
    extra = _answer_headers(gw, call)
    backend, up = call.backend or "", call.upstream
    ct = up.headers.get("Content-Type", "application/json")
    try:
        data = await up.read(MAX_UPSTREAM_BODY)
    except (UpstreamPayloadError, asyncio.TimeoutError) as e:
        gw.metrics.errors.labels(backend, "mid_stream").inc()
        gw.backends.mark_failure(backend, f"{type(e).__name__}: {e}")
        raise RequestError(502, _("backend {name} failed: {error}").format(name=backend, error=f"{type(e).__name__}: {e}"),
                           type_="server_error", code="upstream_error") from None
    t_end = time.monotonic()
    gw.metrics.child(gw.metrics.ttft, call.d.tier, backend).observe(t_end - call.t_admit)
    account(gw, call, data, t_end, t_end)
    call.outcome = "ok" if up.status < 400 else f"http_{up.status}"
    if call.resp is not None:  # we already started an SSE response while queued
        await call.resp.write(data if up.status < 400 else
                              error_event(data.decode("utf-8", "replace")[:2000], f"upstream_{up.status}"))
        return call.resp
    return Response(status=up.status, body=data, headers={"Content-Type": ct, **extra})


async def forward_stream(gw: Gateway, call: Call) -> StreamResponse:
    """SSE pass-through, chunk by chunk, bytes unchanged; a backend failing mid-stream becomes an
    error event, a client going away ends it (the upstream connection is dropped in finish)."""
    assert gw.backends is not None
    extra = _answer_headers(gw, call)
    backend, up = call.backend or "", call.upstream
    ct = up.headers.get("Content-Type", "application/json")
    if call.resp is None:
        call.resp = StreamResponse(status=up.status, headers={**SSE_HEADERS, "Content-Type": ct, **extra})
        await call.resp.prepare(call.request)
    resp = call.resp
    t_first: float | None = None
    prev = last = b""
    client_gone = False
    upstream_failed: str | None = None
    try:
        async for chunk in up.iter_any():
            if t_first is None:
                t_first = time.monotonic()
                gw.metrics.child(gw.metrics.ttft, call.d.tier, backend).observe(t_first - call.t_admit)
            try:
                await resp.write(chunk)
            except CLIENT_GONE:
                client_gone = True
                break
            prev, last = last, chunk
    except (UpstreamPayloadError, UpstreamConnectError, asyncio.TimeoutError) as e:
        upstream_failed = f"{type(e).__name__}: {e}"
    tail = prev + last
    if not client_gone and upstream_failed is None and call.path.startswith("/v1/") and up.status == 200 \
            and b"[DONE]" not in tail:
        upstream_failed = "stream ended without [DONE]"
    t_end = time.monotonic()
    account(gw, call, tail, t_first or t_end, t_end)
    if client_gone:
        call.outcome = "client_disconnected"
    elif upstream_failed is not None:
        call.outcome = "upstream_error"
        gw.metrics.errors.labels(backend, "mid_stream").inc()
        gw.backends.mark_failure(backend, upstream_failed)
        with contextlib.suppress(*CLIENT_GONE):
            await resp.write(error_event(_("backend {name} failed mid-stream: {error}").format(
                name=backend, error=upstream_failed), "upstream_error"))
    else:
        call.outcome = "ok" if up.status < 400 else f"http_{up.status}"
    return resp


# ------------------------------------------------------------------------------ 4. finish


def finish(gw: Gateway, call: Call) -> None:
    """Always, exactly once per admitted-or-rejected request: drop or keep the upstream
    connection, release the reservation, count the outcome, write the request log."""
    up = call.upstream
    if up is not None:
        if call.outcome == "ok":
            up.release()
        else:
            up.close()  # drop the connection: llama-server sees it and frees the slot
    r = call.res
    give_back(gw, call)
    if r is not None:
        m = gw.metrics
        m.child(m.requests, call.d.tier, r.backend, call.outcome).inc()
        m.child(m.duration, call.d.tier, r.backend).observe(time.monotonic() - r.admitted_at)
    call.rec["outcome"] = call.outcome
    call.rec.setdefault("status", up.status if up is not None else None)
    call.rec["total_ms"] = round((time.monotonic() - call.t_arrive) * 1000, 2)
    gw.served += 1
    gw.reqlog.write(call.rec, call.body)


async def handle(gw: Gateway, request: Request, kind: str, path: str) -> Response | StreamResponse:
    """One inference request (``kind``: tiers.CHAT / OAI_COMPLETION / NATIVE) to upstream ``path``."""
    call = await parse(gw, request, kind, path)
    try:
        early = await admit_and_connect(gw, call)
        if early is not None:
            return early
        if upstream_is_sse(call):
            return await forward_stream(gw, call)
        return await forward_whole(gw, call)
    except CLIENT_GONE:
        call.outcome = "client_disconnected"
        return call.resp or Response(status=499)
    except asyncio.CancelledError:
        call.outcome = "client_disconnected"
        raise
    finally:
        finish(gw, call)
