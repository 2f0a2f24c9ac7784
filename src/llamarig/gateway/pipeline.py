"""The inference request pipeline: parse and validate, admit (reserve), forward, release.

:class:`Pipeline` is made with the gateway, with every collaborator it uses (the config in force,
the backends, admission, the HTTP clients, metrics, the request log); :meth:`Pipeline.handle`
runs one request through its steps on a :class:`Call`, the request's state:

1. :meth:`~Pipeline.parse`: API key, body, JSON, validation, model, tier decision, the body sent
   upstream, prompt tokens, max_tokens clamped to the largest slot context and to the tier's
   share of the pool (client errors raise here, before anything is reserved);
2. :meth:`~Pipeline.admit_and_connect`: a reservation (:meth:`~Pipeline.admit`: at once, or
   queued with SSE keep-alive comments for a waiting stream, or 429 at once for a tier that
   rejects when busy), then the upstream request (:meth:`~Pipeline.connect`), with failover to
   another backend while nothing was sent to the client;
3. :meth:`~Pipeline.forward_whole` (a JSON answer) or :meth:`~Pipeline.forward_stream` (SSE,
   chunk by chunk);
4. :meth:`~Pipeline.finish`, always: the upstream connection is released or dropped, the
   reservation is released, metrics and the request log are written.

Ownership of the reservation (see llamarig.gateway.admission): ``Call.res`` is the only
reference once :meth:`~Pipeline.admit` returns it; :meth:`~Pipeline.give_back` clears it as it
releases it, so a failover and :meth:`~Pipeline.finish` can never release one twice, and every
way out of :meth:`~Pipeline.handle` (answer, rejection, upstream error, client gone,
cancellation) passes through :meth:`~Pipeline.finish`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from llamarig.extras import needed
from llamarig.gateway import aggregate
from llamarig.gateway.admission import Admission, AdmitRequest, Reservation
from llamarig.gateway.backends import Backends
from llamarig.gateway.config import GatewayConfig, KeyConfig
from llamarig.gateway.errors import Rejected, RequestError
from llamarig.gateway.http import Request, Response, StreamResponse
from llamarig.gateway.metrics import GatewayMetrics, RequestLog
from llamarig.gateway.slots import SlotTable
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
from llamarig.gateway.upstream import Clients, UpstreamConnectError, UpstreamPayloadError
from llamarig.i18n import _, localize
from llamarig.units import MiB

with needed("gateway"):
    import aiohttp

log = logging.getLogger("llamarig.gateway")

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
KEEPALIVE_COMMENT = b": llamarig gateway: queued for the KV pool\n\n"
_RE_COUNTS = re.compile(rb'"(prompt_n|predicted_n|cache_n|prompt_tokens|completion_tokens|prompt_ms|predicted_ms)"'
                        rb'\s*:\s*(\d+(?:\.\d+)?)')
CLIENT_GONE = (ConnectionResetError, ConnectionError, aiohttp.ClientConnectionResetError)
#: a non-streamed upstream answer larger than this is an error (memory stays bounded)
MAX_UPSTREAM_BODY = 256 * MiB
#: a stopped request's reservation waits at most this long for the server to show it stopped
LINGER_MAX_S = 60.0
LINGER_POLL_S = 0.1
_UPSTREAM_FAILED = (UpstreamConnectError, UpstreamPayloadError, asyncio.TimeoutError, OSError)


class ClientGone(Exception):
    """The client of a non-streamed request left before it was sent upstream: nothing more is
    started for it (no failover, no retry)."""


def error_event(message: str, code: str, type_: str = "server_error", body: dict[str, Any] | None = None) -> bytes:
    """An SSE event the openai client turns into an APIError (``body``: a whole error body)."""
    err = body or {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return b"data: " + json.dumps(err, ensure_ascii=False).encode() + b"\n\n"


def counts(tail: bytes) -> dict[str, float]:
    """The last value of each token count (and ``prompt_ms``/``predicted_ms``) in the final bytes
    of a response (llama-server puts ``usage`` and ``timings`` at the end of a JSON answer and in
    the last SSE chunk)."""
    return {m.group(1).decode(): float(m.group(2)) for m in _RE_COUNTS.finditer(tail[-4096:])}


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
    queued: bool = False  # it waited in the queue before it was admitted
    slot: int | None = None  # the backend slot it held, when /slots showed it
    #: the client left while the server still runs the request (a non-streamed one): the answer
    #: is read to its end and dropped, and the reservation is kept until then
    client_gone: bool = False
    kind: str = CHAT
    aggregate: bool = False  # non-streamed for the client, a stream upstream (llamarig.gateway.aggregate)
    sent: bool = False  # the request was written to a backend (it may be running there)
    preempted: bool = False  # a better priority took its place (Pipeline.track)
    up: dict[str, Any] = field(default_factory=dict)  # the body sent upstream (``payload`` is its JSON)


class Pipeline:
    """Inference request handling (module docstring)."""

    def __init__(self, config: Callable[[], GatewayConfig], backends: Backends, admission: Admission,
                 clients: Clients, metrics: GatewayMetrics, reqlog: RequestLog, ids: Iterator[int],
                 lang: str = "en") -> None:
        self.config = config  # the config in force (a reload changes it between requests)
        self.backends = backends
        self.admission = admission
        self.clients = clients
        self.metrics = metrics
        self.reqlog = reqlog
        self.ids = ids  # request ids: the request log's, /gateway/status's, X-Llamarig-Request-Id
        self.lang = lang
        self.served = 0
        #: non-streamed requests whose client left while llama-server still runs them
        self.detached: set[asyncio.Task[Any]] = set()
        #: yielding requests a better priority preempts (reservation id -> the call and its task)
        self.preemptible: dict[int, tuple[Call, asyncio.Task[Any]]] = {}
        #: per backend: the slots this gateway gives out and the pins (llamarig.gateway.slots)
        self.slots: dict[str, SlotTable] = {}
        #: per tier: [requests with counts, cache hits, cached tokens, evaluated prompt tokens]
        self.cache: dict[str, list[int]] = {}

    # ------------------------------------------------------------------------------ 1. parse

    def check_model(self, body: dict[str, Any], cfg: GatewayConfig) -> None:
        model = body.get("model")
        if not model or cfg.server.accept_any_model or model in cfg.routing.model_aliases:
            return
        known = self.backends.models()
        if known and model not in known:
            raise RequestError(404, _("model '{model}' not found; available: {models}").format(
                model=model, models=", ".join(known + list(cfg.routing.model_aliases))), code="model_not_found",
                param="model")

    async def post_json(self, url: str, body: Any, headers: dict[str, str], timeout: float) -> tuple[int, Any]:
        """POST a small JSON request to a backend and parse the JSON answer (1 MiB at most)."""
        r = await self.clients.for_url(url).post(url, json.dumps(body).encode(), {"Content-Type": "application/json",
                                                                                  **headers},
                                                 connect_timeout=timeout, read_timeout=timeout)
        try:
            data = await r.read(MiB)
        except BaseException:
            r.close()
            raise
        r.release()
        return r.status, json.loads(data) if r.status == 200 else None

    async def count_prompt(self, up: dict[str, Any], kind: str, affinity: str | None,
                           cfg: GatewayConfig) -> tuple[int, str]:
        """(prompt tokens, method). Exact from a backend when configured; estimate on failure."""
        a = cfg.admission
        if a.prompt_tokens == "backend":
            name = self.backends.affinity.get(affinity)
            healthy = self.backends.healthy()
            st = next((s for s in healthy if s.name == name), healthy[0] if healthy else None)
            if st is not None:
                with contextlib.suppress(UpstreamConnectError, UpstreamPayloadError, asyncio.TimeoutError, OSError,
                                         ValueError, KeyError, TypeError):
                    n = await self._backend_count(st.cfg.url, st.headers(), up, kind, cfg.health.timeout_s)
                    if n is not None:
                        return n, "backend"
        return estimate_prompt_tokens(up, a.estimate_bytes_per_token), "estimate"

    async def _backend_count(self, url: str, headers: dict[str, str], up: dict[str, Any], kind: str,
                             timeout: float) -> int | None:
        if kind == CHAT:
            body = {k: v for k, v in up.items() if k != "stream"}
            status, data = await self.post_json(url + "/v1/chat/completions/input_tokens", body, headers, timeout)
            return int(data["input_tokens"]) if status == 200 else None
        if isinstance(up.get("prompt"), str):
            status, data = await self.post_json(url + "/tokenize", {"content": up["prompt"], "add_special": True},
                                                headers, timeout)
            return len(data["tokens"]) if status == 200 else None
        return None

    def clamp(self, up: dict[str, Any], kind: str, d: Decision, prompt_tokens: int, method: str) -> int:
        """max_tokens lowered so prompt + max_tokens fits the largest slot context on the tier's
        route and its share of the largest pool there (written into ``up``); RequestError(400)
        when the prompt alone does not fit."""
        max_tokens = d.max_tokens
        max_ctx = self.backends.max_slot_ctx(d.backends)
        if max_ctx is None:
            return max_tokens
        if prompt_tokens >= max_ctx:
            raise RequestError(400, _("the prompt ({tokens} tokens, {method} count) does not fit the context of any "
                                      "backend slot ({ctx} tokens)").format(tokens=prompt_tokens, method=method,
                                                                            ctx=max_ctx),
                               code="exceed_context_size_error")
        limit = max_ctx
        pool = self.backends.max_pool(d.backends)
        for sh in d.shares:
            cap = sh.cap(pool).tokens if pool is not None else None
            if cap is not None and cap < limit:
                if prompt_tokens >= cap:
                    raise RequestError(400, _("the prompt ({tokens} tokens, {method} count) does not fit the "
                                              "{cap}-token share of the KV pool that {group} may hold").format(
                        tokens=prompt_tokens, method=method, cap=cap, group=sh.group), code="exceeds_tier_share")
                limit = cap
        if prompt_tokens + max_tokens > limit:
            max_tokens = limit - prompt_tokens  # the server would stop at the context end anyway
            up["n_predict" if kind == NATIVE else "max_tokens"] = max_tokens
            budget = up.get("reasoning_budget_tokens")
            if isinstance(budget, int) and budget >= max_tokens:
                up["reasoning_budget_tokens"] = max_tokens // 2
        return max_tokens

    async def parse(self, request: Request, kind: str, path: str) -> Call:
        """Everything decided before admission. Client errors raise RequestError; nothing is held."""
        t_arrive = time.monotonic()
        cfg = self.config()
        key = authenticate(request, cfg)
        body = parse_json(read_body(request, cfg.server.max_body_bytes))
        validate_body(body, kind)
        self.check_model(body, cfg)
        d = decide(body, request.headers, cfg, key)  # headers are case-insensitive already
        up = rewrite(body, d, cfg, kind)
        aff = affinity_key(body, cfg.routing.affinity_messages)
        prompt_tokens, method = await self.count_prompt(up, kind, aff, cfg)
        max_tokens = self.clamp(up, kind, d, prompt_tokens, method)
        if max_tokens < (d.requested_max_tokens or 0):
            self.metrics.clamped.labels(d.tier).inc()
        stream = bool(body.get("stream"))
        agg = cfg.server.stream_upstream and aggregate.applies(body, kind)
        if agg:
            aggregate.as_stream(up, kind)
        rid = next(self.ids)
        rec: dict[str, Any] = {
            "id": rid, "path": request.path, "tier": d.tier, "tier_reason": d.reason, "cron": d.cron,
            "key": key.name if key else None, "stream": stream, "prompt_tokens": prompt_tokens,
            "prompt_count": method, "max_tokens": max_tokens, "requested_max_tokens": d.requested_max_tokens,
            "widened": d.widened, "upstream_stream": stream or agg,
        }
        areq = AdmitRequest(tokens=prompt_tokens + max_tokens, tier=d.tier, priority=d.priority,
                            key=key.name if key else None, key_limit=key.max_concurrent if key else 0, affinity=aff,
                            request_id=rid, max_tokens=max_tokens, shares=d.shares, backends=d.backends,
                            on_busy=d.on_busy, timeout_s=d.timeout_s, cron=d.cron, yields=d.yields,
                            queue_timeout_s=d.queue_timeout_s, yield_after_s=d.yield_after_s)
        qt = d.queue_timeout_s if d.queue_timeout_s is not None else cfg.admission.queue_timeout_s
        return Call(request=request, path=path, cfg=cfg, t_arrive=t_arrive, body=body, d=d, rec=rec, areq=areq,
                    aff=aff, stream=stream, deadline=t_arrive + qt,
                    payload=json.dumps(up, ensure_ascii=False, separators=(",", ":")).encode(),
                    read_timeout=max(cfg.server.read_timeout_s, (d.timeout_s or 0) + 60), kind=kind, aggregate=agg,
                    up=up)

    # ------------------------------------------------------------------------------ 2. admit, connect

    async def admit(self, call: Call) -> Reservation:
        """A reservation for ``call`` (Rejected when none). A tier that rejects when busy gets 429
        at once. While a streaming request waits, send SSE comments every ``keepalive_s``; this
        commits to status 200 (``call.resp``), so a later rejection becomes an error event.

        The queued case waits on the admission Ticket in this task (no helper task): if this task is
        cancelled or a write fails at any point, ``abandon()`` leaves the queue or releases the
        reservation the ticket was handed in that same loop turn; ``take()`` passes it over
        synchronously, so the reservation always has exactly one owner."""
        adm = self.admission
        r = await adm.try_acquire(call.areq)  # the common case: no waiting
        if r is not None:
            return r
        if call.areq.on_busy == "reject":
            raise adm.busy(call.areq)
        self.make_room(call)
        call.queued = True
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

    def make_room(self, call: Call) -> None:
        """``call`` does not fit now: preempt the yielding requests of a worse priority on the
        backend (of its route) that runs most of them; their reservations go once the server
        shows them stopped, and ``call`` waits in the queue ahead of them."""
        p, allowed = call.areq.priority, call.areq.backends
        by: dict[str, list[tuple[Call, asyncio.Task[Any]]]] = {}
        for other, task in self.preemptible.values():
            o = other.res
            if o is not None and o.priority > p and not other.preempted and (allowed is None or o.backend in allowed):
                by.setdefault(o.backend, []).append((other, task))
        if by:
            for other, task in max(by.values(), key=len):
                self._preempt(other, task, call)

    def _preempt(self, other: Call, task: asyncio.Task[Any], by: Call) -> None:
        o = other.res
        assert o is not None
        other.preempted = True
        by.rec.setdefault("preempted", []).append(o.request_id)
        log.info("request %s (tier %s%s) preempted by request %s (tier %s) on %s", o.request_id, o.tier,
                 ", cron" if o.cron else "", by.rec["id"], by.d.tier, o.backend)
        task.cancel()

    def track(self, call: Call) -> None:
        """``call`` was admitted: preempt the yielding requests it outranks on its backend, and
        keep it where a better one can preempt it (a yielding stream, or a request sent upstream
        as a stream: closing either stops the server's task)."""
        assert call.res is not None
        r = call.res
        for other, task in list(self.preemptible.values()):
            o = other.res
            if o is not None and o.backend == r.backend and o.priority > r.priority and not other.preempted:
                self._preempt(other, task, call)
        task_now = asyncio.current_task()
        if call.areq.yields and (call.stream or call.aggregate) and task_now is not None:
            self.preemptible[r.id] = (call, task_now)

    def place(self, call: Call) -> None:
        """The slot ``call`` is sent to (``id_slot``; llamarig.gateway.slots): its session's pin,
        else an unpinned free slot, when a tier pins slots; a slot the client named that is busy
        here or pinned by another session is moved to a free one. Pin events are logged."""
        assert call.res is not None
        r, cfg = call.res, call.cfg
        st = self.backends.states.get(r.backend)
        if st is None or st.pool is None:
            return
        asked = call.up.get("id_slot")
        asked = asked if isinstance(asked, int) and not isinstance(asked, bool) and asked >= 0 else None
        manage = any(t.pin_ttl_s is not None for t in cfg.tiers.values())
        ch = self.slots.setdefault(r.backend, SlotTable()).choose(
            st.pool.slots, r.id, time.monotonic(), session=call.aff, tier=call.d.tier, pin_ttl_s=call.d.pin_ttl_s,
            asked=asked, manage=manage,
            server_busy=frozenset(s.id for s in st.progress.slots or () if s.processing))
        for ev in ch.events:
            self.metrics.child(self.metrics.pin_events, r.backend, ev.why).inc()
            log.info("slot %s of %s: %s (tier %s, session %s)", ev.slot, r.backend, ev.why, ev.tier, ev.session[:12])
            if ev.why == "pool_needed":
                call.rec["unpinned_slot"] = ev.slot
        if ch.slot is not None and ch.slot != asked:
            call.up["id_slot"] = ch.slot
            call.payload = json.dumps(call.up, ensure_ascii=False, separators=(",", ":")).encode()
        if ch.slot is not None:
            call.rec.update(id_slot=ch.slot, pinned=ch.pinned)
            if asked is not None and ch.slot != asked:
                call.rec["id_slot_asked"] = asked

    def pins(self) -> dict[str, list[dict[str, object]]]:
        """Each backend's pins now (/gateway/status)."""
        now = time.monotonic()
        return {name: t.view(now) for name, t in self.slots.items() if t.pins}

    def give_back(self, call: Call) -> None:
        """Release the reservation ``call`` owns, if any; clears it first, so never twice."""
        r, call.res = call.res, None
        if r is not None:
            self.preemptible.pop(r.id, None)
            table = self.slots.get(r.backend)
            if table is not None:
                table.release(r.id)
            st = self.backends.states.get(r.backend)
            if st is not None:
                call.slot = st.progress.slot_of(r.id) if call.slot is None else call.slot
                st.progress.forget(r.id)
            self.admission.release(r)

    async def connect(self, call: Call) -> bool:
        """Send the request upstream to ``call.res``'s backend. True: ``call.upstream`` holds the
        response head. False: the backend failed before anything reached the client and another
        may be tried (the reservation is released). RequestError(502) when none is left."""
        assert call.res is not None  # admit_and_connect set it
        cfg, res, backends = call.cfg, call.res, self.backends
        be = backends.states.get(res.backend)
        url = (be.cfg.url if be else "") + call.path
        self.place(call)
        call.sent = True
        try:
            call.upstream = await self.clients.for_url(url).post(
                url, call.payload, {"Content-Type": "application/json", **(be.headers() if be else {})},
                connect_timeout=cfg.server.connect_timeout_s, read_timeout=call.read_timeout)
        except _UPSTREAM_FAILED as e:
            self.metrics.errors.labels(res.backend, "connect").inc()
            backends.mark_failure(res.backend, f"{type(e).__name__}: {e}", hard=True)
            self.give_back(call)
            call.tried.add(res.backend)
            if backends.any_healthy() and time.monotonic() < call.deadline:
                return False
            raise RequestError(502, _("backend {name} unreachable: {error}").format(
                name=res.backend, error=f"{type(e).__name__}: {e}"), type_="server_error",
                code="upstream_unreachable") from None
        if call.upstream.status == 503 and call.resp is None:
            # loading / sleeping / overloaded before anything was sent: try another backend
            self.metrics.errors.labels(res.backend, "503").inc()
            backends.mark_failure(res.backend, "answered 503")
            others = [s for s in backends.healthy() if s.name not in call.tried | {res.backend}]
            if others and time.monotonic() < call.deadline:
                call.upstream.close()
                call.upstream = None
                self.give_back(call)
                call.tried.add(res.backend)
                return False
        return True

    async def _rejected(self, call: Call, e: Rejected) -> StreamResponse | None:
        """Count and log a rejection; in a stream already started, say it in an error event."""
        self.metrics.rejected.labels(call.d.tier, e.reason, e.code).inc()
        call.rec.update(status=e.status, outcome=f"rejected:{e.code}", reason=e.reason, details=e.details,
                        retry_after=e.retry_after, retry_after_estimate=e.estimate)
        call.outcome = f"rejected:{e.code}"
        log.info("%s %s (%s) tier %s: %s", e.status, e.code, e.reason, call.d.tier, localize(e.message, self.lang))
        if call.resp is None:
            return None
        with contextlib.suppress(*CLIENT_GONE):  # keep-alive comments already sent: say it in the stream
            await call.resp.write(error_event(e.message, e.code, body=localize(e.body(), self.lang)))
        return call.resp

    async def admit_and_connect(self, call: Call) -> StreamResponse | None:
        """Admission and the upstream request, with failover of requests that have not started
        upstream. None: ``call.upstream`` is ready to forward. A response: the request was rejected
        after keep-alive comments started the stream (the error event is written in it)."""
        while True:
            if call.client_gone:
                raise ClientGone()
            call.areq.exclude = frozenset(call.tried)
            try:
                call.res = await self.admit(call)
            except Rejected as e:
                early = await self._rejected(call, e)
                if early is None:
                    raise
                return early
            call.backend = call.res.backend
            call.t_admit = time.monotonic()
            call.rec.setdefault("admitted_ts", round(time.time(), 3))
            self.metrics.child(self.metrics.queue_wait, call.d.tier).observe(call.t_admit - call.t_arrive)
            self.track(call)
            if await self.connect(call):
                return None

    # ------------------------------------------------------------------------------ 3. forward

    def account(self, call: Call, tail: bytes, t_first: float | None, t_end: float) -> None:
        """Token counts from the answer's last bytes into metrics, the request log and the
        backend's measured rates. ``t_first``: the first streamed byte; None for a whole answer,
        whose first token is when the server says its prompt was done (its ``prompt_ms``, after
        the time the request spent before the server started it, which the gateway cannot see:
        a lower bound), never the whole generation."""
        tier, backend = call.d.tier, call.backend or ""
        c = counts(tail)
        if t_first is not None:
            ttft_ms: float | None = round((t_first - call.t_admit) * 1000, 2)
            method = "first_chunk"
        else:
            prompt_ms = c.get("prompt_ms")
            ttft_ms = round(prompt_ms, 2) if prompt_ms is not None else None
            method = "server_prompt_ms"

        prompt = _i(c.get("prompt_n", c.get("prompt_tokens")))
        pred = _i(c.get("predicted_n", c.get("completion_tokens")))
        cache = _i(c.get("cache_n"))
        m = self.metrics
        for kind_, n in (("prompt", prompt), ("completion", pred), ("cached", cache)):
            if n is not None:
                m.child(m.tokens, tier, backend, kind_).inc(n)
        st = self.backends.states.get(backend)
        if st is not None:
            st.progress.finished(c)
        if cache is not None and prompt is not None:
            c4 = self.cache.setdefault(tier, [0, 0, 0, 0])
            c4[0] += 1
            c4[1] += cache_state(cache, prompt) == "hit"
            c4[2] += cache
            c4[3] += prompt
        state = cache_state(cache, prompt)
        if ttft_ms is not None:
            self.metrics.child(self.metrics.ttft, tier, backend, "1" if call.d.cron else "0",
                               state or "unknown").observe(ttft_ms / 1000)
        call.rec.update(upstream_prompt_tokens=prompt, completion_tokens=pred, cached_tokens=cache,
                        cache_state=state, ttft_ms=ttft_ms, ttft_method=method,
                        upstream_ms=round((t_end - call.t_admit) * 1000, 2))

    def _answer_headers(self, call: Call) -> dict[str, str]:
        """Record where the request went; the X-Llamarig-* headers of the answer."""
        assert call.res is not None  # admitted before anything is forwarded
        self.backends.affinity.set(call.aff, call.res.backend)
        call.rec["backend"] = call.res.backend
        call.rec["queue_ms"] = round((call.t_admit - call.t_arrive) * 1000, 2)
        call.rec["queued"] = call.queued
        return {"X-Llamarig-Tier": call.d.tier, "X-Llamarig-Backend": call.res.backend,
                "X-Llamarig-Reserved": str(call.res.tokens), "X-Llamarig-Request-Id": str(call.rec["id"])}

    def _failed(self, backend: str, error: str) -> None:
        self.metrics.errors.labels(backend, "mid_stream").inc()
        self.backends.mark_failure(backend, error)

    async def forward_whole(self, call: Call) -> Response | StreamResponse:
        """A JSON (non-SSE) upstream answer, read whole (bounded) and passed on."""
        extra = self._answer_headers(call)
        backend, up = call.backend or "", call.upstream
        ct = up.headers.get("Content-Type", "application/json")
        try:
            data = await up.read(MAX_UPSTREAM_BODY)
        except (UpstreamPayloadError, UpstreamConnectError, asyncio.TimeoutError, OSError) as e:
            self._failed(backend, f"{type(e).__name__}: {e}")
            raise RequestError(502, _("backend {name} failed: {error}").format(name=backend, error=f"{type(e).__name__}: {e}"),
                               type_="server_error", code="upstream_error") from None
        t_end = time.monotonic()
        call.outcome = "ok" if up.status < 400 else f"http_{up.status}"
        self.account(call, data, None, t_end)
        if call.resp is not None:  # we already started an SSE response while queued
            await call.resp.write(data if up.status < 400 else
                                  error_event(data.decode("utf-8", "replace")[:2000], f"upstream_{up.status}"))
            return call.resp
        return Response(status=up.status, body=data, headers={"Content-Type": ct, **extra})

    async def forward_aggregate(self, call: Call) -> Response:
        """A non-streamed request's streamed upstream answer, put back together
        (llamarig.gateway.aggregate); a backend failing before its end is a 502 (nothing was
        sent to the client yet)."""
        extra = self._answer_headers(call)
        backend, up = call.backend or "", call.upstream
        agg = aggregate.Aggregator(call.kind)
        t_first: float | None = None
        tail = b""
        try:
            async for chunk in up.iter_any():
                if agg.feed(chunk) and t_first is None:
                    t_first = time.monotonic()
                    if call.res is not None:
                        call.res.t_first = t_first
                if agg.size > MAX_UPSTREAM_BODY:
                    raise UpstreamPayloadError(_("response body larger than {limit} bytes").format(limit=MAX_UPSTREAM_BODY))
                tail = (tail + chunk)[-8192:]
            if not agg.done and agg.error is None:
                raise UpstreamPayloadError(_("stream ended without [DONE]"))
        except (UpstreamPayloadError, UpstreamConnectError, asyncio.TimeoutError, OSError) as e:
            self._failed(backend, f"{type(e).__name__}: {e}")
            raise RequestError(502, _("backend {name} failed: {error}").format(name=backend, error=f"{type(e).__name__}: {e}"),
                               type_="server_error", code="upstream_error") from None
        status, obj = agg.result()
        t_end = time.monotonic()
        call.outcome = "ok" if status < 400 else f"http_{status}"
        call.rec["status"] = status
        self.account(call, tail, t_first or t_end, t_end)
        return Response(status=status, body=json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode(),
                        headers={"Content-Type": "application/json; charset=utf-8", **extra})

    async def _relay(self, call: Call, resp: StreamResponse) -> tuple[bytes, float | None, bool, str | None]:
        """Pass the upstream chunks on: (the last two chunks, the first chunk's time, the client
        went away, why upstream failed)."""
        up = call.upstream
        t_first: float | None = None
        prev = last = b""
        try:
            async for chunk in up.iter_any():
                if t_first is None:
                    t_first = time.monotonic()
                    if call.res is not None:
                        call.res.t_first = t_first
                try:
                    await resp.write(chunk)
                except CLIENT_GONE:
                    return prev + last, t_first, True, None
                prev, last = last, chunk
        except (UpstreamPayloadError, UpstreamConnectError, asyncio.TimeoutError) as e:
            return prev + last, t_first, False, f"{type(e).__name__}: {e}"
        return prev + last, t_first, False, None

    async def forward_stream(self, call: Call) -> StreamResponse:
        """SSE pass-through, chunk by chunk, bytes unchanged; a backend failing mid-stream becomes an
        error event, a client going away ends it (the upstream connection is dropped in finish)."""
        extra = self._answer_headers(call)
        backend, up = call.backend or "", call.upstream
        ct = up.headers.get("Content-Type", "application/json")
        if call.resp is None:
            call.resp = StreamResponse(status=up.status, headers={**SSE_HEADERS, "Content-Type": ct, **extra})
            await call.resp.prepare(call.request)
        resp = call.resp
        tail, t_first, client_gone, upstream_failed = await self._relay(call, resp)
        if not client_gone and upstream_failed is None and call.path.startswith("/v1/") and up.status == 200 \
                and b"[DONE]" not in tail:
            upstream_failed = "stream ended without [DONE]"
        t_end = time.monotonic()
        if client_gone:
            call.outcome = "client_disconnected"
        elif upstream_failed is not None:
            call.outcome = "upstream_error"
            self._failed(backend, upstream_failed)
            with contextlib.suppress(*CLIENT_GONE):
                await resp.write(error_event(localize(_("backend {name} failed mid-stream: {error}").format(
                    name=backend, error=upstream_failed), self.lang), "upstream_error"))
        else:
            call.outcome = "ok" if up.status < 400 else f"http_{up.status}"
        self.account(call, tail, t_first or t_end, t_end)
        return resp

    # ------------------------------------------------------------------------------ 4. finish

    def finish(self, call: Call) -> None:
        """Always, exactly once per admitted-or-rejected request: drop or keep the upstream
        connection, then (:meth:`close_books`) release the reservation, count the outcome, write
        the request log. A request that went upstream and was stopped (its client left, it was
        preempted) keeps its reservation until the server shows it stopped (:meth:`linger`)."""
        up = call.upstream
        if up is not None:
            if call.outcome == "ok":
                up.release()
            else:
                up.close()  # drop the connection: llama-server sees it and frees the slot
        if call.client_gone and call.outcome == "ok":
            call.outcome = "client_disconnected"  # the server ran it to the end; nobody read it
            call.rec["kept_until_server_done"] = True
        if call.res is not None and call.sent and call.outcome in ("client_disconnected", "preempted") \
                and not call.client_gone:
            task = asyncio.get_running_loop().create_task(self.linger(call))
            self.detached.add(task)
            task.add_done_callback(self.detached.discard)
            return
        self.close_books(call)

    async def linger(self, call: Call) -> None:
        """Keep a stopped request's reservation until the backend's ``/slots`` shows no more
        requests processing than the gateway has books for there (llama-server stops a closed
        stream at its next write, after the prompt when it is still being read; at most
        ``LINGER_MAX_S``, and not at all where /slots cannot be read)."""
        try:
            st = self.backends.states.get(call.backend or "")
            end = time.monotonic() + LINGER_MAX_S
            while st is not None and not st.progress.unsupported and time.monotonic() < end:
                slots, error = await self.backends.read_slots(st)
                if error or not isinstance(slots, list):
                    break
                mine = call.res.id if call.res is not None else None
                others = sum(1 for r in self.admission.ledger.active.values()
                             if r.backend == st.name and r.id != mine and not r.released)
                if sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing")) <= others:
                    call.rec["released_when"] = "server_stopped"
                    break
                await asyncio.sleep(LINGER_POLL_S)
            else:
                call.rec.setdefault("released_when", "linger_limit")
        finally:
            self.close_books(call)

    def close_books(self, call: Call) -> None:
        """Release the reservation, count the outcome, write the request log."""
        up = call.upstream
        r = call.res
        self.give_back(call)
        if r is not None:
            m = self.metrics
            m.child(m.requests, call.d.tier, r.backend, call.outcome).inc()
            m.child(m.duration, call.d.tier, r.backend).observe(time.monotonic() - r.admitted_at)
        call.rec["outcome"] = call.outcome
        call.rec["slot"] = call.slot
        if up is not None:
            call.rec["upstream_status"] = up.status
        if call.outcome == "preempted":
            call.rec["status"] = 503
        elif call.outcome == "client_disconnected" and call.resp is None:
            call.rec["status"] = 499  # nothing was answered: nginx's "client closed request"
        elif call.rec.get("status") is None:  # never null
            call.rec["status"] = up.status if up is not None else 500
        call.rec["total_ms"] = round((time.monotonic() - call.t_arrive) * 1000, 2)
        self.served += 1
        self.reqlog.write(call.rec, call.body)

    async def handle(self, request: Request, kind: str, path: str) -> Response | StreamResponse:
        """One inference request (``kind``: tiers.CHAT / OAI_COMPLETION / NATIVE) to upstream ``path``.

        A non-streamed request runs in its own task: llama-server does not stop a non-streamed
        request when its client goes away (it runs the task to the end), so when the client
        leaves after the request went upstream the task goes on, reads the answer to its end and
        only then releases the reservation: the books follow the server (docs/gateway.md,
        "Client gone"). Before it went upstream (queued), the task is cancelled."""
        call = await self.parse(request, kind, path)
        if call.stream or call.aggregate:  # closing the upstream stops it: a client gone cancels it
            return await self.serve(call)
        task = asyncio.get_running_loop().create_task(self.serve(call))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                call.client_gone = True
                if call.res is None:  # not admitted or between failover attempts: nothing upstream
                    task.cancel()
                else:
                    call.res.client_gone = True
                    self.detached.add(task)
                    task.add_done_callback(self.detached.discard)
                    task.add_done_callback(_retrieved)  # its error has nobody to answer: logged in finish
            raise

    async def serve(self, call: Call) -> Response | StreamResponse:
        """Admit, forward and finish ``call`` (:meth:`handle`)."""
        try:
            early = await self.admit_and_connect(call)
            if early is not None:
                return early
            ct: str = call.upstream.headers.get("Content-Type", "application/json")
            if ct.startswith("text/event-stream"):
                return await (self.forward_aggregate(call) if call.aggregate else self.forward_stream(call))
            return await self.forward_whole(call)
        except (*CLIENT_GONE, ClientGone):
            call.outcome = "client_disconnected"
            return call.resp or Response(status=499)
        except asyncio.CancelledError:
            if call.preempted and _uncancel():
                return await self._preempted(call)
            call.outcome = "client_disconnected"
            raise
        except (RequestError, Rejected) as e:
            call.rec["status"] = e.status
            raise
        finally:
            self.finish(call)

    async def _preempted(self, call: Call) -> Response | StreamResponse:
        """The answer of a preempted request: 503 with Retry-After (in a started stream, an error
        event); its upstream is closed in finish."""
        e = self.admission.preempted(call.areq)
        early = await self._rejected(call, e)
        call.outcome = "preempted"
        if early is not None:
            return early
        return Response(status=e.status, body=json.dumps(localize(e.body(), self.lang)).encode(),
                        headers={"Content-Type": "application/json", "Retry-After": str(e.retry_after)})

    async def close(self) -> None:
        """Shutdown: stop reading the answers of requests whose client left (their reservations
        are released and logged as they end)."""
        tasks = list(self.detached)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Read a detached task's outcome, so asyncio does not report it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _uncancel() -> bool:
    """Take back a cancellation this module asked for (a preemption), so the task may answer;
    False where the task was cancelled more than once (its client left too, or a shutdown)."""
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)  # Python >= 3.11
    if uncancel is None:
        return True
    return bool(uncancel() == 0)


def cache_state(cached: int | None, prompt: int | None) -> str | None:
    """How much of the prompt the server took from the slot's cache: "hit" (at least 90 % of it),
    "partial", "miss" (nothing); None when the server gave no counts. ``prompt``: the server's
    ``prompt_n``, the tokens it evaluated; ``cached``: its ``cache_n``, the tokens it reused."""
    if cached is None or prompt is None:
        return None
    if cached == 0:
        return "miss"
    return "hit" if cached >= 0.9 * (cached + prompt) else "partial"


def _i(v: float | None) -> int | None:
    return None if v is None or math.isnan(v) else int(v)
