"""The gateway's live page: ``/ui/`` (llamarig.web), fed by ``llamarig top``'s collector reading
this gateway's own ``/gateway/status``, ``/gateway/slots`` and ``/metrics`` over loopback, so the
page shows what ``llamarig top --url`` and ``/gateway/status`` show, derived once (llamarig.top).

One feed per gateway, started by the first visit (or at start-up with ``[ui] watch = true``) and
kept until the gateway stops, so the charts hold the last hour whoever opens the page. Every
route only reads. A client from another machine needs ``[ui] admin_key`` (HTTP Basic password
or Bearer); without one configured, the page answers this machine only.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from llamarig.gateway.http import Request, Response, StreamResponse
from llamarig.i18n import _, localize
from llamarig.top.collect import Collector
from llamarig.web import assets
from llamarig.web.alerts import Thresholds
from llamarig.web.feed import Feed, snapshot_body
from llamarig.web.gauges import AlertGauges
from llamarig.web.strings import lang_of, strings_body

if TYPE_CHECKING:
    from llamarig.gateway.config import GatewayConfig, UiConfig
    from llamarig.gateway.server import Gateway

PREFIX = "/ui/"
Handler = Callable[[Request], Awaitable[Response | StreamResponse]]


def thresholds(ui: UiConfig) -> Thresholds:
    return Thresholds(ui.alert_power_w, ui.alert_temp_c, ui.alert_pool_pct, ui.alert_queue)


class Page:
    """The routes of the page on one gateway, its feed and its ``/metrics`` gauges."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        cfg = gw.cfg
        self.feed = Feed(self._collector, cfg.ui.interval_s, thresholds(cfg.ui))
        self.gauges = AlertGauges(gw.metrics.registry, self.feed.thresholds)

    def _collector(self) -> Collector:
        cfg = self.gw.cfg
        host = cfg.server.host
        host = "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host == "::" else host)
        url = f"http://{f'[{host}]' if ':' in host else host}:{self.gw.port}"
        key = cfg.keys[0].key if cfg.keys else None  # in this process only: never on the page
        return Collector(url, api_key=key, timeout_s=max(2.0, cfg.health.timeout_s))

    def routes(self, add: Callable[[str, str, Handler], None]) -> None:
        add("GET", "/ui", self._guarded(self._home))
        add("GET", PREFIX + "events", self._guarded(self._events))
        add("GET", PREFIX + "strings.json", self._guarded(self._strings))
        add("GET", PREFIX + "snapshot.json", self._guarded(self._snapshot))
        for name in assets.FILES:
            add("GET", PREFIX + name, self._guarded(functools.partial(self._asset, name=name)))

    def apply_config(self, cfg: GatewayConfig) -> None:
        """A reload: the new thresholds from the next update on (the interval needs a restart)."""
        self.feed.thresholds = thresholds(cfg.ui)
        self.gauges.set_thresholds(self.feed.thresholds)

    def update_gauges(self) -> None:
        self.gauges.update(self.feed.last, self.feed.crossed())

    def _guarded(self, fn: Handler) -> Handler:
        async def handler(request: Request) -> Response | StreamResponse:
            ui = self.gw.cfg.ui
            if not ui.enabled:
                return _refuse(404, _("the live page is off ([ui] enabled = false)"), self.gw.lang)
            t = request.conn.transport
            peer = t.get_extra_info("peername") if t is not None else None
            ip = peer[0] if isinstance(peer, tuple) and peer else None
            if not assets.allowed(ip, request.headers.get("Authorization", ""), ui.admin_key):
                return _refuse(401, _("the live page needs the admin key from another machine ([ui] admin_key)"),
                               self.gw.lang, assets.CHALLENGE)
            return await fn(request)
        return handler

    async def _home(self, request: Request) -> Response:
        return Response(status=308, headers={**assets.HEADERS, "Location": PREFIX})

    async def _asset(self, request: Request, name: str) -> Response:
        got = assets.asset(name)
        if got is None:
            return _refuse(404, _("not found"), self.gw.lang)
        body, ctype = got
        return Response(body=body, headers={**assets.HEADERS, "Cache-Control": "no-cache"}, content_type=ctype)

    def _lang(self, request: Request) -> str:
        q = dict(p.partition("=")[::2] for p in request.query.split("&") if p)
        return lang_of(q.get("lang"), request.headers.get("Accept-Language", ""))

    async def _strings(self, request: Request) -> Response:
        return Response(body=strings_body(self._lang(request)), headers=assets.HEADERS,
                        content_type="application/json; charset=utf-8")

    async def _snapshot(self, request: Request) -> Response:
        self.feed.start()
        return Response(body=snapshot_body(self.feed, self._lang(request)),
                        headers={**assets.HEADERS, "Cache-Control": "no-store"},
                        content_type="application/json; charset=utf-8")

    async def _events(self, request: Request) -> StreamResponse:
        resp = StreamResponse(headers=assets.SSE_HEADERS)
        await resp.prepare(request)
        async with contextlib.aclosing(self.feed.events(self._lang(request))) as stream:  # a page gone: unsubscribed
            async for chunk in stream:
                await resp.write(chunk)
        return resp


def _refuse(status: int, message: str, lang: str, headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"message": localize(message, lang), "type": "invalid_request_error", "param": None, "code": "ui"}}
    return Response(status=status, body=json.dumps(body).encode(), content_type="application/json",
                    headers={**assets.HEADERS, **(headers or {})})
