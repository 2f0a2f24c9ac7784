"""A reservation has exactly one owner at every moment and is released exactly once, whichever
way its request ends. The races are driven by events (the fake backend's gate, the gateway's own
state), never by sleeps: each test reproduces its interleaving on every run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from llamarig.gateway.admission import Admission, AdmitRequest, Ledger, Pool, Rejected
from llamarig.gateway.backends import BackendState, choose_backend
from llamarig.gateway.config import BackendConfig

MSG = [{"role": "user", "content": "hello"}]


async def until(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait, yielding to the loop, until ``pred()`` holds (a state change = an event); bounded."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"condition not reached in {timeout} s")
        await asyncio.sleep(0.005)


def _request(path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


class Client:
    """A raw HTTP/1.1 client on the gateway's loop (we need its socket's port)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.port: int = writer.get_extra_info("sockname")[1]

    @classmethod
    async def send(cls, port: int, path: str, body: dict[str, Any]) -> Client:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_request(path, body))
        await w.drain()
        return cls(r, w)

    def close(self) -> None:
        self.writer.transport.abort()


def server_conn(gw: Any, client: Client) -> Any:
    """The gateway's connection object serving ``client`` (matched by the client's port)."""
    for c in gw.http.conns:
        if c.transport is not None and c.transport.get_extra_info("peername")[1] == client.port:
            return c
    raise AssertionError("no server connection for the client")


def accounting(gw: Any) -> tuple[int, int, int]:
    return gw.ledger.total_reserved(), gw.ledger.total_in_flight(), gw.admission.queued


def test_hangup_in_the_turn_the_queued_request_is_admitted_leaks_nothing(lt: Any) -> None:
    """The reported race (keep-alive path, two full backends): the first stream's client and the
    queued stream's client hang up back to back. Handler 1's cleanup releases its reservation,
    ``pump()`` admits the queued request, and handler 3's cancellation arrives in the same loop
    turn. Before the fix ``asyncio.wait_for`` swallowed that late cancellation inside the
    admission task, the task ended holding 8192 tokens / 1 slot of b0, and b0 never admitted
    anything again."""
    gate_a, gate_b = asyncio.Event(), asyncio.Event()  # each backend holds its streams after 1 token
    fa = lt.fake(tokens=4, n_ctx=8192, total_slots=1, gate=gate_a)
    fb = lt.fake(tokens=4, n_ctx=8192, total_slots=1, gate=gate_b)
    gw = lt.gateway({"admission": {"keepalive_s": 30, "queue_timeout_s": 30, "prompt_tokens": "estimate"},
                     "health": {"interval_s": 3600}, "tiers": {"B": {"max_tokens": 8192}}},
                    backends=[fa.url, fb.url])
    clients: list[Client] = []

    async def run() -> None:
        stream = {"messages": MSG, "stream": True, "max_tokens": 8192}  # clamped: 8192 reserved
        try:
            c1 = await Client.send(gw.port, "/v1/chat/completions", stream)
            clients.append(c1)
            await c1.reader.readuntil(b"data: ")  # streaming from b0, held by the gate
            c2 = await Client.send(gw.port, "/v1/chat/completions", stream)
            clients.append(c2)
            await c2.reader.readuntil(b"data: ")  # streaming from b1: both pools are full
            assert accounting(gw) == (2 * 8192, 2, 0)
            c3 = await Client.send(gw.port, "/v1/chat/completions", stream)
            clients.append(c3)
            await until(lambda: gw.admission.queued == 1)
            s1, s3 = server_conn(gw, c1), server_conn(gw, c3)
            # both clients hang up in one loop turn: their connection_lost callbacks run back
            # to back, cancelling handler 1 (which releases b0 and pumps the queue) and handler 3
            s1.transport.abort()
            s3.transport.abort()
            done, _ = await asyncio.wait({s1.task, s3.task}, timeout=10)
            assert len(done) == 2, "a handler did not end"
            # handler 1's upstream went away: its reservation waits for the backend's /slots to
            # show it stopped (this fake has none: one reading), then nothing may hold b0
            await until(lambda: gw.ledger.reserved["b0"] == 0 and not gw.pipeline.detached)
            for _ in range(3):  # let any stray task run (there must be none holding tokens)
                await asyncio.sleep(0)
            assert gw.ledger.reserved == {"b0": 0, "b1": 8192} and gw.ledger.in_flight == {"b0": 0, "b1": 1}
            assert gw.admission.queued == 0 and list(gw.ledger.active.values())[0].backend == "b1"
            # b0 admits again: a new request is served there while b1 is still held
            gate_a.set()
            c4 = await Client.send(gw.port, "/v1/chat/completions", {"messages": MSG, "max_tokens": 8})
            clients.append(c4)
            head = await asyncio.wait_for(c4.reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200") and b"X-Llamarig-Backend: b0" in head
            gate_b.set()
            await asyncio.wait_for(c2.reader.readuntil(b"data: [DONE]"), 10)
            await until(lambda: accounting(gw) == (0, 0, 0))
        finally:
            gate_a.set()
            gate_b.set()
            for c in clients:
                c.close()

    lt.run(run(), timeout=60)
    assert lt.call(lambda: gw.status()["reserved_tokens"]) == 0


# ---------------------------------------------------------------------------- admission level


def _admission(pool: int = 1000, slots: int = 1, **kw: Any) -> tuple[Admission, Ledger]:
    led = Ledger()
    st = BackendState(BackendConfig(url="http://a:1", name="a"))
    st.pool = Pool(pool, slots, pool, "t")
    st.healthy = True
    opts: dict[str, Any] = {"queue_size": 8, "queue_timeout_s": 30.0, "retry_after_s": 1.0}
    opts.update(kw)
    adm = Admission(led, lambda req, ex: choose_backend([st], led, req.tokens, None, ex), **opts)
    return adm, led


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_acquire_cancelled_in_the_turn_it_is_admitted_releases() -> None:
    """``pump()`` hands the queued request its reservation and the caller is cancelled in the same
    turn: the caller sees CancelledError (the cancellation is not swallowed) and the reservation
    is released, not left in a finished task."""

    async def main() -> None:
        adm, led = _admission()
        first = await adm.acquire(AdmitRequest(600, "B", key="k"))
        waiter = asyncio.ensure_future(adm.acquire(AdmitRequest(600, "B", key="k")))
        await until(lambda: adm.queued == 1)
        adm.release(first)  # pump: the waiter is admitted...
        assert led.total_in_flight() == 1
        waiter.cancel()  # ...and its caller goes away in the same turn
        res = await asyncio.gather(waiter, return_exceptions=True)
        assert isinstance(res[0], asyncio.CancelledError), res
        assert (led.total_reserved(), led.total_in_flight(), adm.queued, adm.per_key) == (0, 0, 0, {})
        assert not led.active
    run(main())


def test_acquire_cancelled_while_queued_and_after_timeout() -> None:
    async def main() -> None:
        adm, led = _admission(queue_timeout_s=0.05)
        first = await adm.acquire(AdmitRequest(600, "B", key="k"))
        waiter = asyncio.ensure_future(adm.acquire(AdmitRequest(600, "B", key="k")))
        await until(lambda: adm.queued == 1)
        waiter.cancel()
        assert isinstance((await asyncio.gather(waiter, return_exceptions=True))[0], asyncio.CancelledError)
        assert adm.queued == 0 and adm.per_key == {"k": 1}
        # the deadline passes while queued: 429, nothing held, the key's count back
        try:
            await adm.acquire(AdmitRequest(600, "B", key="k"))
        except Rejected as e:
            assert e.code == "queue_timeout" and e.retry_after >= 1
        else:
            raise AssertionError("expected a queue timeout")
        assert adm.queued == 0 and adm.per_key == {"k": 1}
        adm.release(first)
        adm.release(first)  # idempotent
        assert (led.total_reserved(), led.total_in_flight(), adm.per_key) == (0, 0, {})
    run(main())


def test_ticket_hand_over_abandon_and_shutdown() -> None:
    """The ticket owns what ``pump()`` hands it until ``take()``; ``abandon()`` is idempotent and
    a no-op after ``take()``; shutdown rejects waiters and gives their key counts back."""

    async def main() -> None:
        adm, led = _admission()
        first = await adm.acquire(AdmitRequest(600, "B", key="k"))
        t = adm.enqueue(AdmitRequest(600, "B", key="k"))
        assert not await t.wait(0)  # still queued
        adm.release(first)  # admitted: the ticket holds the reservation now
        assert await t.wait(0) and led.total_in_flight() == 1
        r = t.take()
        t.abandon()  # after take(): the caller owns it, nothing happens
        assert led.total_in_flight() == 1 and not r.released
        adm.release(r)
        adm.release(r)
        # admitted but abandoned before take(): released once, however often abandoned
        first = await adm.acquire(AdmitRequest(600, "B", key="k"))
        t = adm.enqueue(AdmitRequest(600, "B", key="k"))
        adm.release(first)
        t.abandon()
        t.abandon()
        assert (led.total_reserved(), led.total_in_flight(), adm.per_key) == (0, 0, {})
        # shutdown while queued: Rejected(503), key counts back, abandon harmless
        first = await adm.acquire(AdmitRequest(600, "B", key="k"))
        t = adm.enqueue(AdmitRequest(600, "B", key="q"))
        adm.reject_all("shutting_down", "bye")
        assert await t.wait(0)
        try:
            t.take()
        except Rejected as e:
            assert e.status == 503 and e.code == "shutting_down"
        else:
            raise AssertionError("expected a rejection")
        t.abandon()
        assert adm.queued == 0 and adm.per_key == {"k": 1}
        adm.release(first)
        assert (led.total_reserved(), led.total_in_flight(), adm.per_key, led.active) == (0, 0, {}, {})
    run(main())
