"""The gateway's lean upstream client (llamarig.gateway.upstream): framing, keep-alive reuse,
stale connections, bounded buffering, timeouts and broken responses. Raw asyncio servers play
backends that misbehave in ways the real llama-server cannot be made to (the real server is
exercised through the gateway in test_real_server.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from llamarig.gateway.upstream import (
    HIGH_WATER,
    UpstreamConnectError,
    UpstreamPayloadError,
    UpstreamPool,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(r: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await r.readuntil(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    return head, await r.readexactly(n)


async def serve(handler: Handler) -> tuple[asyncio.base_events.Server, str]:
    srv = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    return srv, f"http://127.0.0.1:{port}"


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_content_length_chunked_and_keepalive_reuse() -> None:
    conns: list[int] = []

    async def h(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conns.append(1)
        while True:
            try:
                head, body = await read_request(r)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if b"/stream" in head:
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
                for i in range(3):
                    data = f"data: {i}\n\n".encode()
                    w.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await w.drain()
                    await asyncio.sleep(0.01)
                w.write(b"0\r\n\r\n")
            else:
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                        % (len(body), body))
            await w.drain()

    async def main() -> None:
        srv, url = await serve(h)
        pool = UpstreamPool()
        try:
            r = await pool.post(url + "/x", b'{"a":1}', {"Content-Type": "application/json"})
            assert r.status == 200 and r.headers.get("content-type") == "application/json"
            assert r.headers["Content-Type"] == "application/json" and "CONTENT-LENGTH" in r.headers
            assert await r.read() == b'{"a":1}'
            r.release()
            r = await pool.post(url + "/stream", b"{}")
            chunks = [c async for c in r.iter_any()]
            assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n" and len(chunks) == 3
            r.release()
            assert len(conns) == 1  # both requests on one keep-alive connection
        finally:
            pool.close()
            srv.close()

    run(main())


def test_stale_keepalive_connection_is_retried_once_on_a_fresh_one() -> None:
    seen: list[int] = []

    async def h(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        seen.append(1)
        await read_request(r)
        if len(seen) == 1:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await w.drain()
            await read_request(r)  # second request on this connection: vanish without answering
            w.close()
            return
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
        await w.drain()
        w.close()

    async def main() -> None:
        srv, url = await serve(h)
        pool = UpstreamPool()
        try:
            r = await pool.post(url + "/a", b"{}")
            assert await r.read() == b"ok"
            r.release()
            r = await pool.post(url + "/b", b"{}")
            assert await r.read() == b"fresh" and len(seen) == 2
            r.release()
        finally:
            pool.close()
            srv.close()

    run(main())


def test_a_fresh_connection_closed_before_answering_is_a_connect_error() -> None:
    async def h(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.close()

    async def main() -> None:
        srv, url = await serve(h)
        pool = UpstreamPool()
        try:
            with pytest.raises(UpstreamConnectError):
                await pool.post(url + "/a", b"{}")
            with pytest.raises(UpstreamConnectError, match="cannot connect"):
                await pool.post("http://127.0.0.1:9/a", b"{}")
        finally:
            pool.close()
            srv.close()

    run(main())


def test_broken_off_and_garbled_responses() -> None:
    async def h(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head, _ = await read_request(r)
        if b"/garbled" in head:
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot hex\r\n")
        else:
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await w.drain()
        await asyncio.sleep(0.05)
        w.transport.abort()

    async def main() -> None:
        srv, url = await serve(h)
        pool = UpstreamPool()
        try:
            r = await pool.post(url + "/cut", b"{}")
            got = []
            with pytest.raises(UpstreamPayloadError, match="broke off"):
                async for c in r.iter_any():
                    got.append(c)
            assert got == [b"hello"]
            r.close()
            r = await pool.post(url + "/garbled", b"{}")
            with pytest.raises(UpstreamPayloadError, match="invalid HTTP"):
                await r.read()
            r.close()
        finally:
            pool.close()
            srv.close()

    run(main())


def test_read_timeout_and_until_close_framing_and_body_limit() -> None:
    async def h(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head, _ = await read_request(r)
        if b"/slow" in head:
            await asyncio.sleep(2)
            return
        if b"/big" in head:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n" + b"x" * 4096)
            await w.drain()
            return
        w.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        await w.drain()
        w.close()

    async def main() -> None:
        srv, url = await serve(h)
        pool = UpstreamPool()
        try:
            with pytest.raises(asyncio.TimeoutError):
                await pool.post(url + "/slow", b"{}", read_timeout=0.2)
            r = await pool.post(url + "/close", b"{}")
            assert await r.read() == b"until the end"
            r.release()
            r = await pool.post(url + "/big", b"{}")
            with pytest.raises(UpstreamPayloadError, match="larger than 1000"):
                await r.read(1000)
        finally:
            pool.close()
            srv.close()

    run(main())


def test_slow_reader_pauses_the_socket_memory_stays_bounded() -> None:
    total = 8 * HIGH_WATER

    async def h(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % total)
        block = b"y" * 65536
        for _ in range(total // len(block)):
            w.write(block)
            await w.drain()

    async def main() -> None:
        srv, url = await serve(h)
        pool = UpstreamPool()
        try:
            r = await pool.post(url + "/flood", b"{}")
            await asyncio.sleep(0.5)  # the reader does not read: the client must stop reading
            assert r.buffered <= HIGH_WATER + 262144 and r.conn.paused
            n = 0
            async for c in r.iter_any():
                n += len(c)
                assert r.buffered <= HIGH_WATER + 262144
            assert n == total
            r.release()
        finally:
            pool.close()
            srv.close()

    run(main())
