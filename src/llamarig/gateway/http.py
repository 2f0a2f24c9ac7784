"""The gateway's HTTP/1.1 server: asyncio protocol + llhttp (``httptools``) parsing.

Written for the gateway's hot path, where aiohttp's server cost about 0.14 ms per request more on
the project's 2-core machine (benchmarks/RESULTS.md, "gateway"): the goal is under 0.5 ms added
in total. It keeps the parts of aiohttp's interface the gateway uses (``Request``, ``Response``,
``StreamResponse.prepare/write``) and what a demanding client expects:

- keep-alive and pipelined requests (answered in order, one at a time per connection);
- bodies with Content-Length or chunked transfer encoding, ``Expect: 100-continue``;
- the request-body limit enforced while reading (413 before the handler runs; the rest of an
  oversized body is never buffered), a 64 KiB limit on the request line + headers (431);
- malformed HTTP answered with 400 and the connection closed; no traceback ever reaches a client;
- streamed responses as chunked transfer encoding (HTTP/1.1) or until close (HTTP/1.0), with
  write back-pressure (a slow client pauses the writer, memory stays bounded);
- a client that disconnects cancels its handler at once (aiohttp's ``handler_cancellation``):
  that is how the upstream request is closed, llama-server frees the slot and the reservation
  is released;
- idle keep-alive connections closed after ``keepalive_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from llamarig.extras import needed
from llamarig.i18n import _

with needed("gateway"):
    import httptools

log = logging.getLogger("llamarig.gateway")

MAX_HEAD_BYTES = 64 * 1024


class Headers(dict[str, str]):
    """Header names stored lower-case; ``get``/``[]``/``in`` are case-insensitive. Used for
    request headers here and for response headers by the upstream client (gateway/upstream.py)."""

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _head(version: bytes, status: int, headers: dict[str, str], extra: str) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"HTTP/{version.decode()} {status} {_reason(status)}\r\n{lines}{extra}\r\n".encode("latin-1")


class Request:
    """One parsed request, its body already read (within the limit)."""

    __slots__ = ("method", "path", "query", "headers", "body", "version", "keep_alive", "conn")

    def __init__(self, conn: _ClientConn, method: str, path: str, query: str, headers: Headers, body: bytes,
                 version: bytes, keep_alive: bool) -> None:
        self.conn = conn
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.version = version
        self.keep_alive = keep_alive

    @property
    def content_length(self) -> int | None:
        v = self.headers.get("content-length")
        return int(v) if v and v.isdigit() else None

    async def read(self) -> bytes:
        return self.body


class Response:
    """A complete response (Content-Length framed)."""

    def __init__(self, *, status: int = 200, body: bytes = b"", headers: dict[str, str] | None = None,
                 text: str | None = None, content_type: str | None = None) -> None:
        self.status = status
        self.body = text.encode() if text is not None else body
        self.headers = dict(headers or {})
        if content_type:
            self.headers["Content-Type"] = content_type
        self.headers.setdefault("Content-Type", "text/plain; charset=utf-8")

    def encode(self, req: Request) -> bytes:
        extra = f"Content-Length: {len(self.body)}\r\n"
        if not req.keep_alive:
            extra += "Connection: close\r\n"
        return _head(req.version, self.status, self.headers, extra) + self.body


class StreamResponse:
    """A response written piece by piece (SSE): chunked on HTTP/1.1, until close on HTTP/1.0."""

    def __init__(self, *, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers = dict(headers or {})
        self.conn: _ClientConn | None = None
        self.chunked = True
        self.finished = False

    async def prepare(self, req: Request) -> None:
        c = req.conn
        self.conn = c
        self.chunked = req.version != b"1.0"
        if not self.chunked:
            req.keep_alive = False
        extra = "Transfer-Encoding: chunked\r\n" if self.chunked else "Connection: close\r\n"
        if self.chunked and not req.keep_alive:
            extra += "Connection: close\r\n"
        c.send(_head(req.version, self.status, self.headers, extra))
        await c.drain()

    async def write(self, data: bytes) -> None:
        c = self.conn
        if c is None:
            # a programming error (a handler's bug), never a user's: not in llamarig's error tree
            raise RuntimeError("write() before prepare()")
        if not data:
            return
        c.send(b"%x\r\n%s\r\n" % (len(data), data) if self.chunked else data)
        if c.write_paused:
            await c.drain()

    def finish(self) -> None:
        if not self.finished and self.conn is not None:
            self.finished = True
            if self.chunked:
                self.conn.send(b"0\r\n\r\n")


Handler = Callable[[Request], Awaitable["Response | StreamResponse"]]


class _ClientConn(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.lost = False
        self.write_paused = False
        self.drain_waiter: asyncio.Future[None] | None = None
        self.pending: deque[Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        self.closing = False
        self._reset_message()

    def _reset_message(self) -> None:
        self.url = b""
        self.headers = Headers()
        self.head_bytes = 0
        self.body: list[bytes] = []
        self.body_len = 0
        self.limit = 0
        self.rejected = False

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.conns.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.server.conns.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the client went away: stop the handler (frees the upstream slot)
        w = self.drain_waiter
        if w is not None and not w.done():
            w.set_exception(ConnectionResetError("client disconnected"))

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, _("protocol upgrade is not supported"))
        except httptools.HttpParserError as e:
            if not self.closing:
                self._fail(400, _("malformed HTTP request: {error}").format(error=e))

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        w = self.drain_waiter
        if w is not None and not w.done():
            w.set_result(None)

    # -- httptools callbacks
    def on_message_begin(self) -> None:
        self._reset_message()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4
        if self.head_bytes > MAX_HEAD_BYTES:
            self._count(0)
        k = name.decode("latin-1").lower()
        v = value.decode("latin-1")
        old = dict.get(self.headers, k)
        dict.__setitem__(self.headers, k, v if old is None else f"{old}, {v}")

    def on_headers_complete(self) -> None:
        if self.closing:
            return
        self.limit = self.server.max_body()
        cl = self.headers.get("content-length")
        if cl and cl.isdigit() and int(cl) > self.limit:
            self._too_large(int(cl))
            return
        if self.headers.get("expect", "").lower() == "100-continue":
            self.send(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self.rejected:
            return
        self.body_len += len(body)
        if self.body_len > self.limit:
            self._too_large(None)
            return
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.rejected or self.closing:
            return
        p = self.parser
        u = httptools.parse_url(self.url) if self.url else None
        req = Request(self, p.get_method().decode("latin-1"), (u.path if u else b"/").decode("latin-1"),
                      (u.query or b"").decode("latin-1") if u else "", self.headers,
                      b"".join(self.body), p.get_http_version().encode(), p.should_keep_alive())
        self.pending.append(req)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._serve())

    # -- helpers
    def _count(self, n: int) -> None:
        self.head_bytes += n
        if self.head_bytes > MAX_HEAD_BYTES and not self.closing:
            self._fail(431, _("request line and headers exceed {limit} bytes").format(limit=MAX_HEAD_BYTES))
            raise httptools.HttpParserError("head too large")

    def _too_large(self, content_length: int | None) -> None:
        self.rejected = True
        resp = self.server.too_large(content_length, self.limit)
        self._send_and_close(resp)

    def _fail(self, status: int, message: str) -> None:
        body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                          "code": "bad_http"}}
        self._send_and_close(Response(status=status, body=json.dumps(body).encode(),
                                      content_type="application/json"))

    def _send_and_close(self, resp: Response) -> None:
        self.closing = True
        if self.task is not None and not self.task.done():
            self.task.cancel()
        dummy = Request(self, "GET", "/", "", Headers(), b"", b"1.1", False)
        self.send(resp.encode(dummy))
        if self.transport is not None:
            self.transport.close()

    def send(self, data: bytes) -> None:
        if self.lost or self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("client disconnected")
        self.transport.write(data)

    async def drain(self) -> None:
        if self.lost:
            raise ConnectionResetError("client disconnected")
        if not self.write_paused:
            return
        self.drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await self.drain_waiter
        finally:
            self.drain_waiter = None

    def _arm_idle(self) -> None:
        if self.server.keepalive_s and not self.lost:
            self.idle_timer = asyncio.get_running_loop().call_later(self.server.keepalive_s, self._idle)

    def _idle(self) -> None:
        if not self.pending and (self.task is None or self.task.done()) and self.transport is not None:
            self.transport.close()

    async def _serve(self) -> None:
        while self.pending and not self.lost:
            req = self.pending.popleft()
            try:
                resp = await self.server.dispatch(req)
            except asyncio.CancelledError:
                return
            except ConnectionError:
                return
            except Exception:  # a bug must not leak a traceback to the client
                log.exception("internal error on %s %s", req.method, req.path)
                body = {"error": {"message": _("internal gateway error"), "type": "server_error", "param": None,
                                  "code": "internal_error"}}
                resp = Response(status=500, body=json.dumps(body).encode(), content_type="application/json")
            try:
                if isinstance(resp, StreamResponse):
                    if resp.conn is None:  # returned without prepare(): an empty stream
                        await resp.prepare(req)
                    resp.finish()
                else:
                    self.send(resp.encode(req))
            except ConnectionError:
                return
            if not req.keep_alive:
                if self.transport is not None:
                    self.transport.close()
                return
        self._arm_idle()


class HttpServer:
    """Routes exact paths (by method) to handlers; anything else goes to ``fallback``."""

    def __init__(self, *, fallback: Handler, max_body: Callable[[], int],
                 too_large: Callable[[int | None, int], Response], keepalive_s: float = 75.0) -> None:
        self.routes: dict[tuple[str, str], Handler] = {}
        self.fallback = fallback
        self.max_body = max_body
        self.too_large = too_large
        self.keepalive_s = keepalive_s
        self.conns: set[_ClientConn] = set()
        self.server: asyncio.base_events.Server | None = None

    def add(self, method: str, path: str, handler: Handler) -> None:
        self.routes[(method, path)] = handler

    async def dispatch(self, req: Request) -> Response | StreamResponse:
        h = self.routes.get((req.method, req.path))
        return await (h or self.fallback)(req)

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _ClientConn(self), host, port, reuse_address=True)

    @property
    def port(self) -> int:
        if self.server is None or not self.server.sockets:
            # a programming error (the port asked before start()), never a user's
            raise RuntimeError("server not started")
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening, cancel running handlers (their cleanup runs) and close every connection."""
        if self.server is not None:
            self.server.close()
        tasks = [c.task for c in self.conns if c.task is not None and not c.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        for c in list(self.conns):
            if c.transport is not None:
                c.transport.close()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)
