"""The gateway: the HTTP app's wiring (routes, error mapping), lifecycle, reload, and the routes
that are not inference (pass-through, models, health, metrics, status).

Inference requests go through llamarig.gateway.pipeline (parse, admit, forward, release);
/gateway/status and the gauges of /metrics come from llamarig.gateway.status.
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
import functools
import itertools
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from llamarig.errors import LlamarigError
from llamarig.extras import needed
from llamarig.gateway import reasons, retry, ui
from llamarig.gateway import status as gwstatus
from llamarig.gateway.admission import (
    Admission,
    AdmitRequest,
    Ledger,
    ReservationLedger,
    RetryAfter,
)
from llamarig.gateway.backends import Backends
from llamarig.gateway.config import GatewayConfig, load_config, with_overrides
from llamarig.gateway.errors import Rejected, RequestError
from llamarig.gateway.http import HttpServer, Request, Response, StreamResponse
from llamarig.gateway.metrics import GatewayMetrics, RequestLog
from llamarig.gateway.pipeline import Pipeline, authenticate, parse_json, read_body
from llamarig.gateway.pool import Share
from llamarig.gateway.tiers import CHAT, NATIVE, OAI_COMPLETION
from llamarig.gateway.upstream import Clients
from llamarig.i18n import _, localize

with needed("gateway"):
    import aiohttp

log = logging.getLogger("llamarig.gateway")


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(status=status, body=json.dumps(body).encode(), content_type="application/json",
                    headers=headers)


class Gateway:
    """One gateway: config, ledger, admission queue, backends, request pipeline, metrics, the
    HTTP server; all made here (the HTTP clients' session, which needs the loop, on start)."""

    def __init__(self, cfg: GatewayConfig, *, config_path: str | None = None,
                 overrides: dict[str, Any] | None = None, lang: str = "en") -> None:
        self.cfg = cfg
        #: the language of the error bodies' ``message`` (docs/gateway.md#language)
        self.lang = lang
        self.config_path = config_path
        self.overrides = overrides or {}
        self.ledger: ReservationLedger = make_ledger(cfg)
        self.metrics = GatewayMetrics()
        self.reqlog = RequestLog(cfg.server.request_log, cfg.server.log_content)
        self.clients = Clients()
        self.backends = Backends(cfg, self.ledger, self.clients, lang)
        a = cfg.admission
        self.admission = Admission(self.ledger, self.backends.pick, queue_size=a.queue_size,
                                   queue_timeout_s=a.queue_timeout_s, any_backend=self.backends.any_healthy,
                                   diagnose=self.backends.blocked, pool_of=self.backends.pool_of,
                                   tries=max(1, len(cfg.backends)), estimator=self._retry_after)
        self.pipeline = Pipeline(lambda: self.cfg, self.backends, self.admission, self.clients, self.metrics,
                                 self.reqlog, itertools.count(1), lang)
        self.started = time.time()
        self._tasks: list[asyncio.Task[Any]] = []
        self._config_mtime: float | None = None
        self.page = ui.Page(self)  # the live page, /ui/ (llamarig.gateway.ui)
        self.http = self._make_server()
        self.runner: GatewayRunner | None = None

    @property
    def served(self) -> int:
        return self.pipeline.served

    def _retry_after(self, req: AdmitRequest | None, reason: str, ahead: list[AdmitRequest]) -> RetryAfter:
        """Retry-After from the reservations in flight (llamarig.gateway.retry)."""
        cfg = self.cfg
        t = cfg.tiers[cfg.routing.default_tier]
        default = AdmitRequest(t.max_tokens, t.name, t.priority, max_tokens=t.max_tokens,
                               shares=(Share(f"tier:{t.name}", t.max_pool_share, t.max_slots),),
                               backends=frozenset(t.backends) or None)
        return retry.retry_after(self.backends.states, self.ledger, req, reason, ahead,
                                 floor_s=cfg.admission.retry_after_s, interval_s=cfg.health.interval_s, default=default)

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
            srv.add("POST", p, self._wrap(functools.partial(self._passthrough, path=p)))
        for p in ("/props", "/slots"):
            srv.add("GET", p, self._wrap(functools.partial(self._passthrough_get, path=p)))
        srv.add("GET", "/v1/models", self._wrap(self._models))
        srv.add("GET", "/models", self._wrap(self._models))
        srv.add("GET", "/health", self._health)
        srv.add("GET", "/metrics", self._wrap(self._metrics))
        srv.add("GET", "/gateway/status", self._wrap(self._status))
        srv.add("GET", "/gateway/slots", self._wrap(self._slots))
        self.page.routes(lambda m, p, h: srv.add(m, p, self._wrap(h)))
        srv.add("POST", "/gateway/hold", self._wrap(self._hold))
        srv.add("POST", "/gateway/release", self._wrap(self._hold))
        return srv

    def _too_large(self, content_length: int | None, limit: int) -> Response:
        self.metrics.bad_requests.labels("413").inc()
        msg = (_("request body of {size} bytes exceeds the limit of {limit} bytes").format(size=content_length, limit=limit)
               if content_length is not None else
               _("request body exceeds the limit of {limit} bytes").format(limit=limit))
        return json_response(413, localize(RequestError(413, msg, code="body_too_large").body(), self.lang))

    async def _on_startup(self) -> None:
        await self.clients.start()
        self.backends.on_change.append(self.admission.pump)
        adm = self.admission
        await self.ledger.start(on_change=adm.pump, waiting=lambda: adm.queued > 0)
        # the first check, before listening: bounded (each of its requests has health.timeout_s);
        # a backend that fails it is not waited for (the health loop keeps checking it), and
        # Backends.startup_lines() says what it found (the CLI prints them)
        await self.backends.check_all()
        self._warn_pins()
        self.backends.start()
        loop = asyncio.get_running_loop()
        if self.config_path:
            with contextlib.suppress(OSError):
                self._config_mtime = os.stat(self.config_path).st_mtime
            self._tasks.append(loop.create_task(self._watch_config(self.config_path)))
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError, AttributeError):
                loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(self.reload()))

    def _warn_pins(self) -> None:
        """Slot pins on a unified pool: llama-server clears idle slots there while its RAM prompt
        cache is on (docs/gateway.md, "Slot pins")."""
        if not any(t.pin_ttl_s is not None for t in self.cfg.tiers.values()):
            return
        for st in self.backends.states.values():
            sp = st.pool.server if st.pool is not None else None
            if sp is not None and sp.unified:
                log.warning("%s", _("backend {name}: slot pins keep a prompt only where the slot is its cache: on a "
                                    "unified pool (-kvu) start llama-server with --cache-ram 0 or "
                                    "--no-cache-idle-slots, else it clears idle slots at each new task and a pin "
                                    "stops its RAM cache's restore (docs/gateway.md, Slot pins)").format(name=st.name))

    async def _on_cleanup(self) -> None:
        await self.page.feed.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.pipeline.close()
        self.admission.reject_all("shutting_down", reasons.shutting_down_message())
        await self.backends.stop()
        await self.ledger.close()
        await self.clients.close()
        self.reqlog.close()

    # ------------------------------------------------------------------ reload
    async def _watch_config(self, path: str) -> None:
        while True:
            await asyncio.sleep(2.0)
            try:
                m = os.stat(path).st_mtime
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
            log.error("%s", _("config reload failed, keeping the running config: {error}").format(error=e))
            self.metrics.reloads.labels("error").inc()
            return False
        old = self.cfg
        if new.ledger != old.ledger:
            log.warning("%s", _("config reload: ledger changes need a restart; keeping {ledger}").format(
                ledger=self.ledger.describe().get("url", "local")))
            new = replace(new, ledger=old.ledger)
        if (new.server.host, new.server.port) != (old.server.host, old.server.port):
            log.warning("%s", _("config reload: host/port changes need a restart; keeping {host}:{port}").format(
                host=old.server.host, port=old.server.port))
            new = replace(new, server=replace(new.server, host=old.server.host, port=old.server.port))
        self.cfg = new
        self.backends.apply_config(new)
        self.page.apply_config(new)
        a = new.admission
        self.admission.queue_size = a.queue_size
        self.admission.queue_timeout_s = a.queue_timeout_s
        self.admission.tries = max(1, len(new.backends))
        self.reqlog.reopen(new.server.request_log, new.server.log_content)
        await self.backends.check_all()
        self.admission.pump()
        self.metrics.reloads.labels("ok").inc()
        log.info("%s", _("config reloaded from {path}").format(path=self.config_path))
        return True

    # ------------------------------------------------------------------ helpers
    def _wrap(self, fn: Callable[[Request], Awaitable[Response | StreamResponse]]
              ) -> Callable[[Request], Awaitable[Response | StreamResponse]]:
        async def handler(request: Request) -> Response | StreamResponse:
            try:
                return await fn(request)
            except RequestError as e:
                self.metrics.bad_requests.labels(str(e.status)).inc()
                return json_response(e.status, localize(e.body(), self.lang))
            except Rejected as e:
                return json_response(e.status, localize(e.body(), self.lang), {"Retry-After": str(e.retry_after)})
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug must not take the gateway down or leak a traceback
                log.exception("internal error on %s %s", request.method, request.path)
                msg = _("internal gateway error: {error}").format(error=type(e).__name__)
                return json_response(500, {"error": {"message": msg,
                                                     "type": "server_error", "param": None, "code": "internal_error"}})
        return handler

    # ------------------------------------------------------------------ inference
    async def _inference(self, request: Request, kind: str, path: str) -> Response | StreamResponse:
        return await self.pipeline.handle(request, kind, path)

    # ------------------------------------------------------------------ other routes
    async def _passthrough(self, request: Request, path: str) -> Response | StreamResponse:
        cfg = self.cfg
        authenticate(request, cfg)
        raw = read_body(request, cfg.server.max_body_bytes)
        parse_json(raw)
        healthy = self.backends.healthy()
        if not healthy:
            raise self._no_backend()
        return await self._forward("POST", healthy[0].name, path, raw, cfg)

    def _no_backend(self) -> Rejected:
        """503 for a route that is not admitted (pass-through) when no backend is healthy."""
        b = self.backends.blocked(AdmitRequest(1, self.cfg.routing.default_tier)) or reasons.Blocked(reasons.NO_BACKEND)
        return Rejected(503, "no_backend", reasons.cause(b), int(self.cfg.health.interval_s) or 1,
                        reason=reasons.NO_BACKEND, details=b.details)

    async def _passthrough_get(self, request: Request, path: str) -> Response | StreamResponse:
        """GET /props and /slots (query string kept: ``/slots?fail_on_no_slot=1``), so tools that
        probe llama-server (``llamarig bench``) work through the gateway. Behind the API keys;
        answered by the backend the default route would choose (``Backends.default_backend``)."""
        cfg = self.cfg
        authenticate(request, cfg)
        name = self.backends.default_backend()
        if name is None:
            raise self._no_backend()
        resp = await self._forward("GET", name, path + ("?" + request.query if request.query else ""), None, cfg)
        if path == "/slots" and resp.status == 200:
            resp = _redact_slots(resp)
        return resp

    async def _forward(self, method: str, name: str, path: str, raw: bytes | None, cfg: GatewayConfig) -> Response:
        """One non-admitted request to backend ``name``; its status, body and content type come back
        unchanged, with ``X-Llamarig-Backend`` naming the backend that answered."""
        st = self.backends.states[name]
        headers = {**({"Content-Type": "application/json"} if raw is not None else {}), **st.headers()}
        try:
            async with self.clients.session.request(method, st.cfg.url + path, data=raw, headers=headers,
                                            timeout=aiohttp.ClientTimeout(total=cfg.server.read_timeout_s)) as r:
                data = await r.read()
                return Response(status=r.status, body=data,
                                headers={"Content-Type": r.headers.get("Content-Type", "application/json"),
                                         "X-Llamarig-Backend": st.name})
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            self.backends.mark_failure(st.name, f"{type(e).__name__}: {e}")
            raise RequestError(502, _("backend {name} unreachable: {error}").format(name=st.name, error=f"{type(e).__name__}: {e}"),
                               type_="server_error", code="upstream_unreachable") from None

    async def _models(self, request: Request) -> Response | StreamResponse:
        cfg = self.cfg
        authenticate(request, cfg)
        data = [{"id": m, "object": "model", "owned_by": "llamacpp", "created": int(self.started)}
                for m in self.backends.models()]
        data += [{"id": a, "object": "model", "owned_by": "llamarig", "created": int(self.started),
                  "llamarig_tier": t} for a, t in cfg.routing.model_aliases.items()]
        return json_response(200, {"object": "list", "data": data})

    async def _health(self, request: Request) -> Response | StreamResponse:
        n = len(self.backends.healthy())
        if n:
            return json_response(200, {"status": "ok", "healthy_backends": n})
        return json_response(503, {"status": "no healthy backend", "healthy_backends": 0})

    async def _metrics(self, request: Request) -> Response | StreamResponse:
        cfg = self.cfg
        if not cfg.server.public_metrics:
            authenticate(request, cfg)
        if cfg.health.slots_interval_s > 0:  # cells in use as fresh as /gateway/status's
            await self.backends.refresh_slots(cfg.health.slots_interval_s)
        self.update_gauges()
        self.page.update_gauges()
        texts = await self.backends.backend_metrics()
        return Response(body=self.metrics.render(texts), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    def update_gauges(self) -> None:
        gwstatus.update_gauges(self.metrics, self.cfg, self.backends, self.ledger, self.admission)

    def status(self) -> dict[str, Any]:
        return gwstatus.status(self.cfg, self.backends, self.ledger, self.admission, started=self.started,
                               served=self.served, pins=self.pipeline.pins(), cache=self.pipeline.cache)

    async def _status(self, request: Request) -> Response | StreamResponse:
        authenticate(request, self.cfg)
        every = self.cfg.health.slots_interval_s
        if every > 0:
            await self.backends.refresh_slots(every)  # slots held, progress, cells in use: fresh
        await self.ledger.refresh()  # a shared ledger: who holds what, over every replica (last: nothing
        return json_response(200, self.status())  # runs between it and the snapshot)

    async def _slots(self, request: Request) -> Response | StreamResponse:
        """GET /gateway/slots: every backend's ``/slots`` (request text removed), read now with the
        health timeout, what its ``/props`` said and the pool derived from it with the cells of
        that same reading (``/gateway/status``'s ``backends[].pool``, which shows them too until
        the next reading); read-only (``llamarig top``)."""
        authenticate(request, self.cfg)

        async def one(st: Any) -> dict[str, Any]:
            slots, error = await self.backends.read_slots(st)
            return {"name": st.name, "url": st.cfg.url, "healthy": st.healthy, "props": st.props,
                    "pool": gwstatus.pool_json(st), "error": error or None,
                    "slots": [_without_text(s) for s in slots] if isinstance(slots, list) else None}

        states = [s for s in self.backends.states.values() if not s.removed]
        return json_response(200, {"backends": list(await asyncio.gather(*(one(s) for s in states)))})

    async def _hold(self, request: Request) -> Response | StreamResponse:
        """POST /gateway/hold ``{"tiers": ["cron", "B"], "seconds": 600}``: admit nothing of
        those tiers (``cron``: cron jobs) for that long (requests in flight run on, new ones
        wait); POST /gateway/release ``{"tiers": [...]}`` (none: every hold) ends it. An admin
        key when the gateway has keys (``keys[].admin``). Answers the holds now in force."""
        cfg = self.cfg
        key = authenticate(request, cfg)
        if key is not None and not key.admin:
            raise RequestError(403, _("holding tiers needs an admin key (keys[].admin = true)"), code="not_admin")
        body = parse_json(read_body(request, cfg.server.max_body_bytes)) if request.body else {}
        groups = hold_groups(body, cfg)
        adm = self.admission
        if request.path.endswith("/hold"):
            seconds = body.get("seconds", 600)
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 86400:
                raise RequestError(400, _("'{field}' must be a number of seconds in (0, 86400]").format(field="seconds"),
                                   param="seconds")
            if not groups:
                raise RequestError(400, _("'{field}' must be a non-empty array").format(field="tiers"), param="tiers")
            adm.hold(groups, float(seconds))
            log.info("%s", _("held {groups} for {seconds} s").format(groups=", ".join(groups), seconds=seconds))
        else:
            adm.release_holds(groups)
            log.info("%s", _("released the holds of {groups}").format(groups=", ".join(groups) or "*"))
        return json_response(200, {"holds": {g: round(t, 1) for g, t in adm.active_holds().items()}})

    async def _not_found(self, request: Request) -> Response | StreamResponse:
        msg = localize(_("unknown endpoint {method} {path}").format(method=request.method, path=request.path), self.lang)
        return json_response(404, {"error": {"message": msg,
                                             "type": "invalid_request_error", "param": None, "code": "not_found"}})

    # ------------------------------------------------------------------ running
    async def start(self, host: str | None = None, port: int | None = None) -> GatewayRunner:
        """Start serving on the running loop; returns the runner (``await runner.cleanup()``)."""
        await self._on_startup()
        try:
            await self.http.start(host or self.cfg.server.host, self.cfg.server.port if port is None else port)
        except BaseException:
            await self._on_cleanup()  # closes the upstream sessions and the health loop
            raise
        self.runner = GatewayRunner(self)
        if self.cfg.ui.enabled and self.cfg.ui.watch:
            self.page.feed.start()
        return self.runner

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        return self.http.port


def hold_groups(body: Any, cfg: GatewayConfig) -> tuple[str, ...]:
    """The admission groups named by a hold's ``tiers`` (``cron``, or a tier name); RequestError(400)."""
    if not isinstance(body, dict):
        raise RequestError(400, _("request body must be a JSON object"))
    names = body.get("tiers", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RequestError(400, _("'{field}' must be an array").format(field="tiers"), param="tiers")
    out: list[str] = []
    for n in names:
        if n == "cron":
            out.append("cron")
        elif n in cfg.tiers:
            out.append(f"tier:{n}")
        else:
            raise RequestError(400, _("unknown tier '{tier}'; tiers: {tiers}").format(
                tier=n, tiers=", ".join([*cfg.tiers, "cron"])), param="tiers")
    return tuple(out)


def make_ledger(cfg: GatewayConfig) -> ReservationLedger:
    """The in-process ledger, or the shared one in Valkey/Redis when ``ledger.url`` is set."""
    lc = cfg.ledger
    if lc.url is None:
        return Ledger()
    from llamarig.gateway.shared_ledger import RedisLedger  # lazy: the ledger extra, for ledger.url

    return RedisLedger(lc.url, replica=lc.replica, lease_s=lc.lease_s, timeout_s=lc.timeout_s)


class GatewayRunner:
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
          ready: Callable[[Gateway], None] | None = None, lang: str = "en") -> None:
    """Run a gateway until SIGINT/SIGTERM (the CLI entry); error messages in ``lang``."""

    async def main() -> None:
        gw = Gateway(cfg, config_path=config_path, overrides=overrides, lang=lang)
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
            import uvloop  # lazy: optional; half the CPU per streamed token (benchmarks/RESULTS.md)
        except ImportError:
            if loop_kind == "uvloop":
                raise LlamarigError(_("LLAMARIG_GATEWAY_LOOP=uvloop but uvloop is not installed")) from None
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
    resp.body = json.dumps([_without_text(s) for s in slots]).encode()
    return resp


def _without_text(slot: Any) -> Any:
    if isinstance(slot, dict):
        for k in _SLOT_TEXT_FIELDS:
            slot.pop(k, None)
    return slot
