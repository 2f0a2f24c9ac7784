"""Fixtures of the live page's tests: the real llama-server and long requests of tests/top, a
gateway with a ``[ui]`` section, ``llamarig top --web`` as a process, headless Chromium."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.top.conftest import long_request, np2  # noqa: F401 - fixtures shared with top's tests
from tests.top.helpers import get_json, stop_pid, wait_for
from tests.web.cdp import CHROMIUM

from llamarig.testing.server import free_port

UI = '[ui]\ninterval_s = 0.5\nwatch = true\n'


@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    return CHROMIUM


def _start(tmp_path: Path, procs: list[subprocess.Popen[bytes]], argv: list[str], name: str) -> Callable[[], None]:
    log_path = tmp_path / f"{name}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    p = subprocess.Popen([sys.executable, "-m", "llamarig", *argv], stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    log.close()
    procs.append(p)

    def alive() -> None:
        if p.poll() is not None:
            raise AssertionError(f"{name} exited:\n" + log_path.read_text())
    return alive


@pytest.fixture
def web_gateway(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``web_gateway(backend, extra_toml="")``: ``llamarig gateway`` with tier B allowed 60000 tokens
    and the page polling every 0.5 s from start-up; its URL once a backend is healthy."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(backend: str, extra: str = "") -> str:
        cfg = tmp_path / "gateway.toml"
        cfg.write_text("[tiers.B]\nmax_tokens = 60000\n" + UI + extra)
        port = free_port()
        alive = _start(tmp_path, procs, ["gateway", "--config", str(cfg), "--backend", backend, "--port", str(port)],
                       f"gateway-{port}")
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            alive()
            try:
                return bool(get_json(url + "/health", timeout=2).get("healthy_backends"))
            except urllib.error.HTTPError:
                return False

        wait_for("gateway healthy", healthy)
        return url

    yield start
    for p in procs:
        stop_pid(p)


@pytest.fixture
def top_web(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``top_web(server_url, *options)``: ``llamarig top --url SERVER --web 127.0.0.1:PORT``; the page's
    URL once it answers."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(server: str, *options: str) -> str:
        port = free_port()
        alive = _start(tmp_path, procs, ["top", "--url", server, "--web", f"127.0.0.1:{port}", *options], f"top-{port}")
        url = f"http://127.0.0.1:{port}/ui/"

        def up() -> bool:
            alive()
            return bool(get_json(url + "strings.json", timeout=2).get("labels"))

        wait_for("top --web answering", up)
        return url

    yield start
    for p in procs:
        stop_pid(p)
