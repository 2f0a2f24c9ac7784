"""Fixtures for ``llamarig top`` against the real llama-server: a 2-slot server whose slots hold
64K tokens (so one request decodes for a long while), a long streaming request in its own
process (stopped by pid; the server frees the slot when the client goes away), a gateway in
front, and waits on events (a slot decoding, a reservation in flight), never on time."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.top.helpers import LONG_CLIENT, SERVER_ARGS, get_json, stop_pid, wait_for

from llamarig.testing.server import RunningServer, free_port


@pytest.fixture
def long_request() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """``long_request(url, n_predict=60000)`` starts a long streaming request in a child process;
    every one is stopped by pid at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(url: str, n_predict: int = 60000) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([sys.executable, "-c", LONG_CLIENT, url, str(n_predict)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        return p

    yield start
    for p in procs:
        stop_pid(p)


@pytest.fixture
def np2(llama_server: Callable[..., RunningServer], synth_model: Callable[..., Path]) -> RunningServer:
    return llama_server(synth_model("llama", n_ctx_train=131072), *SERVER_ARGS)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """``gateway(backend_url, key=None)`` starts ``llamarig gateway`` (a process) in front of the backend,
    with tier B allowed 60000 tokens; returns its URL once /health says a backend is up."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(backend: str, key: str | None = None) -> str:
        cfg = tmp_path / "gateway.toml"
        cfg.write_text("[tiers.B]\nmax_tokens = 60000\n" + (f'[[keys]]\nkey = "{key}"\nname = "alice"\n' if key else ""))
        port = free_port()
        log = open(tmp_path / f"gateway-{port}.log", "wb")  # noqa: SIM115 - closed below
        p = subprocess.Popen([sys.executable, "-m", "llamarig", "gateway", "--config", str(cfg), "--backend", backend,
                              "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        procs.append(p)
        url = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            if p.poll() is not None:
                raise AssertionError("gateway exited:\n" + (tmp_path / f"gateway-{port}.log").read_text())
            try:
                return bool(get_json(url + "/health", timeout=2).get("healthy_backends"))
            except urllib.error.HTTPError:
                return False

        wait_for("gateway healthy", healthy)
        return url

    yield start
    for p in procs:
        stop_pid(p)
