"""``llamarig top --web``: the page for a llama-server without a gateway, served by aiohttp.

Routes (the gateway serves the same under ``/ui/``, llamarig.gateway.ui): ``/ui/`` the page,
``/ui/events`` its server-sent events, ``/ui/strings.json`` its words, ``/ui/snapshot.json``
the latest update as one document, the static files, ``/metrics`` the alert gauges; ``/``
sends the browser to ``/ui/``. Every route only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from llamarig.errors import InputError
from llamarig.extras import needed
from llamarig.i18n import _
from llamarig.top.collect import Collector
from llamarig.web import assets
from llamarig.web.alerts import Thresholds
from llamarig.web.feed import Feed, snapshot_body
from llamarig.web.gauges import AlertGauges
from llamarig.web.strings import lang_of, strings_body

with needed("bench"):
    from aiohttp import web
    from prometheus_client import CollectorRegistry, generate_latest

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(feed: Feed, key: str | None) -> web.Application:
    registry = CollectorRegistry(auto_describe=True)
    gauges = AlertGauges(registry, feed.thresholds)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not assets.allowed(request.remote, request.headers.get("Authorization", ""), key):
            return web.Response(status=401, text="the admin key is needed from another machine\n",
                                headers={**assets.HEADERS, **assets.CHALLENGE})
        return await handler(request)

    async def page(request: web.Request) -> web.StreamResponse:
        got = assets.asset(request.match_info.get("name", ""))
        if got is None:
            return web.Response(status=404, text="not found\n", headers=assets.HEADERS)
        body, ctype = got
        return web.Response(body=body, headers={**assets.HEADERS, "Content-Type": ctype, "Cache-Control": "no-cache"})

    async def events(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=assets.SSE_HEADERS)
        await resp.prepare(request)
        lang = lang_of(request.query.get("lang"), request.headers.get("Accept-Language", ""))
        async with contextlib.aclosing(feed.events(lang)) as stream:  # a page gone: unsubscribed at once
            async for chunk in stream:
                await resp.write(chunk)
        return resp

    def lang(request: web.Request) -> str:
        return lang_of(request.query.get("lang"), request.headers.get("Accept-Language", ""))

    async def strings(request: web.Request) -> web.StreamResponse:
        return web.Response(body=strings_body(lang(request)),
                            headers={**assets.HEADERS, "Content-Type": "application/json; charset=utf-8"})

    async def snapshot(request: web.Request) -> web.StreamResponse:
        feed.start()
        return web.Response(body=snapshot_body(feed, lang(request)),
                            headers={**assets.HEADERS, "Content-Type": "application/json; charset=utf-8",
                                     "Cache-Control": "no-store"})

    async def metrics(request: web.Request) -> web.StreamResponse:
        gauges.update(feed.last, feed.crossed())
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def home(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui/")

    app = web.Application(middlewares=[guard])
    app.router.add_get("/", home)
    app.router.add_get("/ui", home)
    app.router.add_get("/ui/events", events)
    app.router.add_get("/ui/strings.json", strings)
    app.router.add_get("/ui/snapshot.json", snapshot)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/ui/{name:[A-Za-z0-9.]*}", page)

    async def on_startup(app: web.Application) -> None:
        feed.start()

    async def on_cleanup(app: web.Application) -> None:
        await feed.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


async def serve(feed: Feed, host: str, port: int, key: str | None,
                ready: Callable[[str], None] | None = None) -> None:
    """Serve the page on ``host:port`` until cancelled; ``ready`` gets the URL once listening."""
    runner = web.AppRunner(make_app(feed, key), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or ()
        bound = sockets[0].getsockname()[1] if sockets else port
        if ready is not None:
            ready(f"http://{host if ':' not in host else f'[{host}]'}:{bound}/ui/")
        while True:
            await asyncio.sleep(3600)
    finally:
        await runner.cleanup()


def parse_bind(text: str) -> tuple[str, int]:
    """``[HOST:]PORT`` (``8088``, ``0.0.0.0:8088``, ``[::1]:8088``) -> (host, port); loopback
    when no host is given."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError(_("--web {value}: expected [HOST:]PORT, e.g. 8088 or 0.0.0.0:8088").format(value=text))
    return host, int(port)


def check_bind(host: str, key: str | None, option: str) -> None:
    """Off loopback only with the admin key."""
    if not assets.is_loopback(host) and not key:
        raise InputError(_("{option} {host}: another machine may read the page only with the admin key "
                           "(--web-key KEY or $LLAMARIG_WEB_KEY); or keep it on 127.0.0.1 and use an SSH tunnel")
                         .format(option=option, host=host))
    if key is not None and len(key) < 8:
        raise InputError(_("the admin key must be at least 8 characters"))


def run(url: str, bind: str, key: str | None, interval_s: float, thresholds: Thresholds, opts: Mapping[str, Any],
        ready: Callable[[str], None]) -> None:
    """``llamarig top --web``: serve the page of the server at ``url`` until interrupted."""
    host, port = parse_bind(bind)
    check_bind(host, key, "--web")
    feed = Feed(lambda: Collector(url, **opts), interval_s, thresholds)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(feed, host, port, key, ready))
