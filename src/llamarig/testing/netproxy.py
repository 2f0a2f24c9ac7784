"""A TCP proxy between llama-server and one rpc-server on loopback: it counts the bytes each way
and can add a one-way delay (a link's latency) and a rate (a link's bandwidth), so that the RPC
network model (llamarig.plan.network) is checked against what really crosses, without root.

Each direction is forwarded in order by its own task: a chunk read at time t is written at
``max(t + delay, end of the previous chunk) + len / rate``: a pipe of fixed latency and
serialisation time, like a switched Ethernet link with no loss. The counters are read between
requests (``snapshot()``); a chunk is counted when it is read.

(``tc netem`` in a network namespace would do the same in the kernel, but needs root and the
sch_netem module, which not every machine the tests run on has.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Traffic:
    """Bytes that crossed so far: ``up`` from llama-server to the rpc-server, ``down`` back."""

    up: int
    down: int
    #: answers: bursts from the rpc-server after llama-server sent something (its waits, at most)
    turns: int = 0
    #: how late the proxy delivered, summed over every chunk (its own scheduling, seconds)
    late_s: float = 0.0

    def __sub__(self, other: Traffic) -> Traffic:
        return Traffic(self.up - other.up, self.down - other.down, self.turns - other.turns,
                       self.late_s - other.late_s)


class DelayProxy:
    """``DelayProxy(upstream_port, delay_s=0.005)``; ``.start()`` returns the port to give
    llama-server's ``--rpc`` (127.0.0.1:PORT); ``.stop()`` closes everything. One client at a
    time, as an rpc-server serves one (ggml/src/ggml-rpc/ggml-rpc.cpp:2145-2155)."""

    def __init__(self, upstream_port: int, delay_s: float = 0.0, rate_bytes_s: float | None = None,
                 upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_s = delay_s
        self.rate = rate_bytes_s
        self.port = 0
        self._up = 0
        self._down = 0
        self._turns = 0
        self._late = 0.0
        self._last_up = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def snapshot(self) -> Traffic:
        return Traffic(self._up, self._down, self._turns, self._late)

    def start(self) -> int:
        self._thread = threading.Thread(target=self._run, name=f"delay-proxy-{self.upstream[1]}", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the delay proxy did not start")
        return self.port

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(self._shutdown)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> DelayProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the loop's thread

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
            loop.run_forever()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()

    def _shutdown(self) -> None:
        assert self._loop is not None
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        self._loop.call_later(0.05, self._loop.stop)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        for sock in (writer.get_extra_info("socket"), up_w.get_extra_info("socket")):
            with contextlib.suppress(OSError, AttributeError):  # as ggml-rpc sets it (transport.cpp:689-695)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        a = asyncio.ensure_future(self._pipe(reader, up_w, up=True))
        b = asyncio.ensure_future(self._pipe(up_r, writer, up=False))
        self._tasks |= {a, b}
        try:
            await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (a, b):
                t.cancel()
            for w in (writer, up_w):
                with contextlib.suppress(Exception):
                    w.close()
            self._tasks -= {a, b}

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, dst))
        try:
            while True:
                data = await src.read(1 << 20)
                if not data:
                    break
                if up:
                    self._up += len(data)
                else:
                    self._down += len(data)
                    self._turns += self._last_up
                self._last_up = up
                queue.put_nowait((time.monotonic(), data))
            await queue.join()
        finally:
            sender.cancel()

    async def _send(self, queue: asyncio.Queue[tuple[float, bytes]], dst: asyncio.StreamWriter) -> None:
        free_at = 0.0  # when the link is free again (rate)
        while True:
            t_read, data = await queue.get()
            due = t_read + self.delay_s
            if self.rate:
                due = max(due, free_at) + len(data) / self.rate
                free_at = due
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._late += max(0.0, time.monotonic() - due)
            dst.write(data)
            await dst.drain()
            queue.task_done()
