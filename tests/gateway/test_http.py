"""The gateway's HTTP/1.1 server layer (llamarig.gateway.http) spoken to over raw sockets:
keep-alive, pipelining, chunked request bodies, Expect: 100-continue, HTTP/1.0, body and header
limits, malformed requests, streamed responses, and handler cancellation on disconnect."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from llamarig.gateway.http import HttpServer, Request, Response, StreamResponse


def make_server(events: list[str]) -> HttpServer:
    async def echo(req: Request) -> Response:
        return Response(body=json.dumps({"path": req.path, "query": req.query, "n": len(req.body),
                                         "ct": req.headers.get("Content-Type")}).encode(),
                        content_type="application/json")

    async def stream(req: Request) -> StreamResponse:
        resp = StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        for i in range(3):
            await resp.write(f"data: {i}\n\n".encode())
        return resp

    async def forever(req: Request) -> StreamResponse:
        resp = StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        try:
            while True:
                await resp.write(b"data: x\n\n")
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    async def boom(req: Request) -> Response:
        raise ValueError("a bug")

    async def not_found(req: Request) -> Response:
        return Response(status=404, text="nope")

    srv = HttpServer(fallback=not_found, max_body=lambda: 1000,
                     too_large=lambda cl, lim: Response(status=413, text=f"too large {cl} {lim}"))
    srv.add("POST", "/echo", echo)
    srv.add("GET", "/stream", stream)
    srv.add("GET", "/forever", forever)
    srv.add("GET", "/boom", boom)
    return srv


async def exchange(port: int, data: bytes, *, until: bytes | None = None, wait: float = 0.3) -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(data)
    await w.drain()
    out = b""
    try:
        while True:
            chunk = await asyncio.wait_for(r.read(65536), wait)
            if not chunk:
                break
            out += chunk
            if until is not None and until in out:
                break
    except asyncio.TimeoutError:
        pass
    w.close()
    return out


def with_server(fn: Callable[[int, list[str]], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        events: list[str] = []
        srv = make_server(events)
        await srv.start("127.0.0.1", 0)
        try:
            return await fn(srv.port, events)
        finally:
            await srv.close()

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_keepalive_pipelining_and_chunked_request_body() -> None:
    async def t(port: int, _: list[str]) -> None:
        req = (b"POST /echo?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
               b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        out = await exchange(port, req, until=b'"n": 5')
        assert out.count(b"HTTP/1.1 200 OK") == 2  # both answered, in order, on one connection
        first, second = out.split(b"HTTP/1.1 200 OK")[1:]
        assert b'"query": "x=1"' in first and b'"ct": "application/json"' in first
        assert b'"n": 5' in second

    with_server(t)


def test_expect_continue_http10_and_streaming() -> None:
    async def t(port: int, _: list[str]) -> None:
        out = await exchange(port, b"POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
                             until=b'"n": 3')
        assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")
        out = await exchange(port, b"GET /stream HTTP/1.1\r\nHost: a\r\n\r\n", until=b"0\r\n\r\n")
        assert b"Transfer-Encoding: chunked" in out and b"9\r\ndata: 2\n\n\r\n0\r\n\r\n" in out
        out = await exchange(port, b"GET /stream HTTP/1.0\r\n\r\n")  # no chunking: the body ends at close
        assert b"Connection: close" in out and out.endswith(b"data: 0\n\ndata: 1\n\ndata: 2\n\n")

    with_server(t)


def test_limits_and_malformed_requests_get_a_status_not_a_hang() -> None:
    async def t(port: int, _: list[str]) -> None:
        out = await exchange(port, b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 413") and b"too large 5000 1000" in out
        body = b"x" * 1500
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        out = await exchange(port, b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
        assert out.startswith(b"HTTP/1.1 413") and b"too large None 1000" in out
        out = await exchange(port, b"GET /x HTTP/1.1\r\nHost: a\r\nX-Big: " + b"y" * 70000 + b"\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 431")
        out = await exchange(port, b"this is not http\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 400") and b"malformed HTTP request" in out
        out = await exchange(port, b"GET /boom HTTP/1.1\r\nHost: a\r\n\r\n", until=b"internal_error")
        assert out.startswith(b"HTTP/1.1 500") and b"Traceback" not in out
        out = await exchange(port, b"GET /nowhere HTTP/1.1\r\nHost: a\r\n\r\n", until=b"nope")
        assert out.startswith(b"HTTP/1.1 404")

    with_server(t)


def test_client_disconnect_cancels_the_handler() -> None:
    async def t(port: int, events: list[str]) -> None:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /forever HTTP/1.1\r\nHost: a\r\n\r\n")
        await r.readuntil(b"data: x")
        w.transport.abort()
        for _ in range(100):
            if events:
                break
            await asyncio.sleep(0.01)
        assert events == ["cancelled"]

    with_server(t)
