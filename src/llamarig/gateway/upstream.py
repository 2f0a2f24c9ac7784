"""The gateway's client for its hot path: one POST to a llama-server, response streamed back.

A lean HTTP/1.1 client on asyncio protocols with llhttp (``httptools``) parsing and keep-alive
connection reuse. It exists because aiohttp's general-purpose ``ClientSession.post`` costs about
0.3 ms of CPU per request on this project's 2-core test machine, more than everything else the
gateway does (benchmarks/RESULTS.md, "gateway"). Health checks and rarely used endpoints keep
using aiohttp; ``https://`` backends use :class:`AiohttpUpstream`, the same interface over aiohttp.

What it does, and no more:
- ``POST path`` with a bytes body and Content-Length; responses framed by Content-Length,
  ``Transfer-Encoding: chunked`` (llama-server's SSE streams) or connection close.
- Body chunks are handed over as they arrive (coalesced when several arrived before the reader
  woke), so SSE passes through unchanged. Reading stops (``pause_reading``) while more than
  ``HIGH_WATER`` bytes wait for a slow client, so memory stays bounded.
- Idle connections are reused for ``keepalive_s`` (llama-server's cpp-httplib closes idle
  keep-alive connections after 5 s: CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND). A reused connection
  that fails before any byte of the response arrives is retried once on a fresh connection
  (the request never reached a live server).
- ``close()`` drops the connection: llama-server notices the disconnect and frees the slot.

Errors: :class:`UpstreamConnectError` (nothing reached the backend), :class:`UpstreamPayloadError`
(the response broke off), :class:`asyncio.TimeoutError` (connect or read timeout).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from llamarig.errors import ServerError
from llamarig.extras import needed
from llamarig.gateway.http import Headers
from llamarig.i18n import _, os_error
from llamarig.units import MiB

with needed("gateway"):
    import aiohttp
    import httptools

#: bytes buffered for the reader before the socket stops being read
HIGH_WATER = MiB
LOW_WATER = MiB // 4


class UpstreamError(ServerError):
    """The backend could not be reached or its response broke off."""


class UpstreamConnectError(UpstreamError):
    """Nothing was started on the backend (connection refused, reset before an answer)."""


class UpstreamPayloadError(UpstreamError):
    """The response started but broke off, or is not valid HTTP/1.1."""


class _UpstreamConn(asyncio.Protocol):
    """One keep-alive connection; carries one response at a time."""

    def __init__(self, pool: UpstreamPool, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.resp: UpstreamResponse | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self.parser = httptools.HttpResponseParser(self)
        self.paused = False

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        r = self.resp
        if r is None:  # bytes on an idle connection: not HTTP we understand
            self.abort()
            return
        r.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            r.fail(UpstreamPayloadError(_("invalid HTTP from the backend: {error}").format(error=e)))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        r = self.resp
        if r is None or r.eof:
            return
        if r.status and r.until_close:  # body framed by the connection's end
            r.finish()
            return
        why = f"{type(exc).__name__}: {exc}" if exc else "connection closed"
        if not r.got_bytes:
            r.fail(UpstreamConnectError(_("backend closed the connection before answering ({why})").format(why=why)))
        else:
            r.fail(UpstreamPayloadError(_("response broke off: {why}").format(why=why)))

    def pause_writing(self) -> None:  # request bodies are small: nothing to do
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.resp is not None
        self.resp.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        r = self.resp
        assert r is not None
        r.status = self.parser.get_status_code()
        h = r.headers
        r.until_close = "content-length" not in h and "chunked" not in h.get("transfer-encoding", "")
        r.keep_alive = self.parser.should_keep_alive() and not r.until_close
        if r.head_waiter is not None and not r.head_waiter.done():
            r.head_waiter.set_result(None)

    def on_body(self, body: bytes) -> None:
        assert self.resp is not None
        self.resp.feed(body)

    def on_message_complete(self) -> None:
        assert self.resp is not None
        self.resp.finish()

    # -- flow control (called by the response)
    def pause(self) -> None:
        if not self.paused and self.transport is not None and not self.closed:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class UpstreamResponse:
    """Status, headers and body of one upstream response (the aiohttp-like subset we use)."""

    def __init__(self, conn: _UpstreamConn, read_timeout: float | None) -> None:
        self.conn = conn
        self.read_timeout = read_timeout
        self.status = 0
        self.headers = Headers()
        self.keep_alive = False
        self.until_close = False
        self.got_bytes = False
        self.eof = False
        self.exc: BaseException | None = None
        self.buf: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.head_waiter: asyncio.Future[None] | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.released = False

    # -- fed by the connection
    def feed(self, data: bytes) -> None:
        self.buf.append(data)
        self.buffered += len(data)
        if self.buffered > HIGH_WATER:
            self.conn.pause()
        self._wake()

    def finish(self) -> None:
        self.eof = True
        self._wake()

    def fail(self, exc: BaseException) -> None:
        if self.exc is None and not self.eof:
            self.exc = exc
        if self.head_waiter is not None and not self.head_waiter.done():
            self.head_waiter.set_exception(exc)
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    # -- reader side
    async def _wait(self) -> None:
        loop = asyncio.get_running_loop()
        self.waiter = w = loop.create_future()
        timer = loop.call_later(self.read_timeout, _timeout, w) if self.read_timeout else None
        try:
            await w
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    async def iter_any(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (what has accumulated since the last step, joined)."""
        while True:
            if self.buf:
                data = self.buf.popleft() if len(self.buf) == 1 else b"".join(self.buf)
                self.buf.clear()
                self.buffered = 0
                self.conn.resume()
                yield data
                continue
            if self.exc is not None:
                raise self.exc
            if self.eof:
                return
            await self._wait()

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body; :class:`UpstreamPayloadError` past ``limit`` bytes."""
        return await _read_all(self, limit)

    def release(self) -> None:
        """Done with the response: the connection goes back to the pool when reusable."""
        if self.released:
            return
        self.released = True
        c = self.conn
        c.resp = None
        if self.eof and self.exc is None and self.keep_alive and not c.closed:
            c.pool._put(c)
        else:
            c.abort()

    def close(self) -> None:
        """Drop the connection now (the backend sees the client go and stops generating)."""
        if self.released:
            return
        self.released = True
        self.conn.resp = None
        self.conn.abort()


def _send(conn: _UpstreamConn, data: bytes) -> bool:
    """Write a request on ``conn``; False when its transport is closed already (a backend that
    died since the connection was made or last used: uvloop raises RuntimeError "unable to
    perform operation on <TCPTransport closed=True>" on such a write, asyncio drops it)."""
    t = conn.transport
    if t is None or conn.closed or t.is_closing():
        return False
    try:
        t.write(data)
    except RuntimeError:
        return False
    return True


def _timeout(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(asyncio.TimeoutError())


class UpstreamPool:
    """Keep-alive connections per (host, port), and the one request method the gateway needs."""

    def __init__(self, *, keepalive_s: float = 4.0, max_idle_per_host: int = 256) -> None:
        self.keepalive_s = keepalive_s
        self.max_idle = max_idle_per_host
        self.idle: dict[tuple[str, int], list[_UpstreamConn]] = {}
        self.closed = False

    def _put(self, c: _UpstreamConn) -> None:
        if self.closed:
            c.abort()
            return
        lst = self.idle.setdefault(c.key, [])
        if len(lst) >= self.max_idle:
            c.abort()
            return
        c.idle_since = time.monotonic()
        c.reused = True
        lst.append(c)

    def _get_idle(self, key: tuple[str, int]) -> _UpstreamConn | None:
        lst = self.idle.get(key)
        now = time.monotonic()
        while lst:
            c = lst.pop()  # the most recently used: least likely to have been closed
            if not c.closed and now - c.idle_since < self.keepalive_s:
                return c
            c.abort()
        return None

    async def _connect(self, key: tuple[str, int], timeout: float | None) -> _UpstreamConn:
        loop = asyncio.get_running_loop()
        try:
            _transport, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _UpstreamConn(self, key), key[0], key[1]), timeout)
        except asyncio.TimeoutError:
            raise
        except OSError as e:
            raise UpstreamConnectError(_("cannot connect to {host}:{port}: {error}").format(host=key[0], port=key[1], error=os_error(e))) from None
        return proto

    async def post(self, url: str, body: bytes, headers: dict[str, str] | None = None, *,
                   connect_timeout: float | None = None, read_timeout: float | None = None) -> UpstreamResponse:
        """Send the request and wait for the status line and headers."""
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise UpstreamConnectError(_("{url}: only http:// URLs are served by the lean client").format(url=url))
        key = (u.hostname, u.port or 80)
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items() if k.lower() != "content-length")
        head = (f"POST {path} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Length: {len(body)}\r\n"
                f"{extra}\r\n").encode("latin-1")
        for attempt in (0, 1):
            conn = self._get_idle(key) if attempt == 0 else None
            if conn is None:
                conn = await self._connect(key, connect_timeout)
            resp = UpstreamResponse(conn, read_timeout)
            conn.resp = resp
            loop = asyncio.get_running_loop()
            resp.head_waiter = loop.create_future()
            if not _send(conn, head + body):
                resp.close()
                if conn.reused and attempt == 0:
                    continue  # closed while idle: the request never reached a live server
                raise UpstreamConnectError(_("backend closed the connection before answering ({why})").format(
                    why="connection closed"))
            timer = loop.call_later(read_timeout, _timeout, resp.head_waiter) if read_timeout else None
            try:
                await resp.head_waiter
            except UpstreamConnectError:
                resp.close()
                if conn.reused and attempt == 0:
                    continue  # a stale keep-alive connection: the request never reached a live server
                raise
            except BaseException:
                resp.close()
                raise
            finally:
                if timer is not None:
                    timer.cancel()
            return resp
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.closed = True
        for lst in self.idle.values():
            for c in lst:
                c.abort()
        self.idle.clear()


class AiohttpUpstream:
    """The same interface over aiohttp, for ``https://`` backends."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def post(self, url: str, body: bytes, headers: dict[str, str] | None = None, *,
                   connect_timeout: float | None = None, read_timeout: float | None = None) -> _AiohttpResponse:
        try:
            r = await self.session.post(url, data=body, headers=headers or {},
                                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout,
                                                                      sock_read=read_timeout))
        except aiohttp.ClientConnectionError as e:
            raise UpstreamConnectError(f"{type(e).__name__}: {e}") from None
        return _AiohttpResponse(r)


class _AiohttpResponse:
    def __init__(self, r: aiohttp.ClientResponse) -> None:
        self.r = r
        self.status = r.status
        self.headers = r.headers

    async def iter_any(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.r.content.iter_any():
                yield chunk
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as e:
            raise UpstreamPayloadError(f"{type(e).__name__}: {e}") from None

    async def read(self, limit: int | None = None) -> bytes:
        return await _read_all(self, limit)

    def release(self) -> None:
        self.r.release()

    def close(self) -> None:
        self.r.close()


async def _read_all(resp: UpstreamResponse | _AiohttpResponse, limit: int | None) -> bytes:
    """A response's whole body; :class:`UpstreamPayloadError` past ``limit`` bytes."""
    parts: list[bytes] = []
    n = 0
    async for chunk in resp.iter_any():
        n += len(chunk)
        if limit is not None and n > limit:
            resp.close()
            raise UpstreamPayloadError(_("response body larger than {limit} bytes").format(limit=limit))
        parts.append(chunk)
    return b"".join(parts)


class Clients:
    """The gateway's HTTP clients: the keep-alive pool for ``http://`` backends (the hot path),
    and aiohttp for ``https://`` backends, health checks, token counts and pass-through. Made
    with the gateway; the aiohttp session, which needs a running loop, on :meth:`start`."""

    def __init__(self) -> None:
        self.pool = UpstreamPool()
        self._session: aiohttp.ClientSession | None = None
        self._tls: AiohttpUpstream | None = None

    async def start(self) -> None:
        conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, enable_cleanup_closed=True)
        self._session = aiohttp.ClientSession(connector=conn, auto_decompress=False,
                                              timeout=aiohttp.ClientTimeout(total=None))
        self._tls = AiohttpUpstream(self._session)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the gateway's HTTP clients are not started (Gateway.start)")
        return self._session

    def for_url(self, url: str) -> UpstreamPool | AiohttpUpstream:
        """The client that posts inference requests to ``url``."""
        if url.startswith("http://") or self._tls is None:
            return self.pool
        return self._tls

    async def close(self) -> None:
        self.pool.close()
        if self._session is not None:
            await self._session.close()
