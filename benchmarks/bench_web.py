"""What the live page costs (run on demand, not a test): the CPU of the process that serves it (the
gateway, or `llamarig top --web`) per second of wall time, and the requests per second llama-server
answers, with 0, 1 and 10 pages open.

A real llama-server (the pinned build, $LLAMARIG_SERVER_BIN; synthetic 2-layer llama,
`-c 131072 -np 2 --metrics`) with one long request decoding, behind a counting HTTP proxy (this
script: every GET is counted by path, then forwarded). Either a `llamarig gateway` (its `[ui]`
at the default interval 2 s) in front of the proxy, or `llamarig top --web` on it (`--interval 2`).
A "page" is one reader of `/ui/events` (aiohttp): what a browser's EventSource costs the server
(the page's files are read once, when it opens; the stream is what goes on). CPU is the serving
process's utime + stime (/proc/PID/stat) over each window.

Usage: .venv/bin/python benchmarks/bench_web.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from llamarig.launch.server import start_server
from llamarig.testing.server import free_port
from llamarig.testing.synth import write_model

LONG = """
import json, sys, urllib.request
body = json.dumps({"prompt": "a long story", "n_predict": 30000, "ignore_eos": True, "stream": True}).encode()
req = urllib.request.Request(sys.argv[1] + "/completion", data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=3600) as r:
    for _ in r:
        pass
"""


class CountingProxy:
    """GETs and POSTs forwarded to ``upstream``, each counted by path (streams passed through)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.counts: collections.Counter[str] = collections.Counter()
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)

    async def _start(self) -> None:
        self.session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.counts[request.path] += 1
        body = await request.read()
        async with self.session.request(request.method, self.upstream + request.path_qs, data=body or None,
                                        headers={k: v for k, v in request.headers.items() if k.lower() != "host"}) as r:
            resp = web.StreamResponse(status=r.status, headers={"Content-Type": r.headers.get("Content-Type", "")})
            await resp.prepare(request)
            async for chunk in r.content.iter_any():
                await resp.write(chunk)
            return resp

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def pages(url: str, n: int, seconds: float) -> int:
    """``n`` readers of the page's stream for ``seconds``; the updates they got, summed."""
    got = [0] * n

    async def one(i: int, s: aiohttp.ClientSession) -> None:
        async with s.get(url + "/ui/events?lang=en", timeout=aiohttp.ClientTimeout(total=None)) as r:
            async for line in r.content:
                if line.startswith(b"event: update"):
                    got[i] += 1

    async with aiohttp.ClientSession() as s:
        tasks = [asyncio.create_task(one(i, s)) for i in range(n)]
        await asyncio.sleep(seconds)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
    return sum(got)


def window(pid: int, proxy: CountingProxy, url: str, n: int, seconds: float) -> dict[str, Any]:
    c0, p0, t0 = cpu_s(pid), proxy.snapshot(), time.monotonic()
    if n:
        updates = asyncio.run(pages(url, n, seconds))
    else:
        time.sleep(seconds)
        updates = 0
    dt = time.monotonic() - t0
    c1, p1 = cpu_s(pid), proxy.snapshot()
    per = {k: round((p1.get(k, 0) - p0.get(k, 0)) / dt, 2) for k in ("/slots", "/metrics", "/health", "/props")}
    return {"pages": n, "cpu_s_per_s": round((c1 - c0) / dt, 4), "server_req_per_s": per,
            "updates_per_page_per_s": round(updates / n / dt, 2) if n else None}


def wait_up(url: str) -> None:
    for _ in range(600):
        with contextlib.suppress(OSError, ValueError):
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer")


def run(kind: str, proxy: CountingProxy, tmp: Path, seconds: float) -> list[dict[str, Any]]:
    port = free_port()
    if kind == "gateway":
        cfg = tmp / "gw.toml"
        cfg.write_text("[tiers.B]\nmax_tokens = 60000\n")
        argv = ["gateway", "--config", str(cfg), "--backend", f"http://127.0.0.1:{proxy.port}", "--port", str(port)]
        url = f"http://127.0.0.1:{port}"
    else:
        argv = ["top", "--url", f"http://127.0.0.1:{proxy.port}", "--web", f"127.0.0.1:{port}", "--interval", "2",
                "--no-gpu"]
        url = f"http://127.0.0.1:{port}"
    p = subprocess.Popen([sys.executable, "-m", "llamarig", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(url + "/ui/strings.json")
        if kind == "gateway":
            # the feed starts at the first visit: the 0-page window is the gateway alone (its health loop)
            out = [window(p.pid, proxy, url, 0, seconds)]
            urllib.request.urlopen(url + "/ui/snapshot.json", timeout=10).read()
        else:
            out = [window(p.pid, proxy, url, 0, seconds)]
        out += [window(p.pid, proxy, url, n, seconds) for n in (1, 10)]
        return [{"server": kind, **o} for o in out]
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    a = ap.parse_args()
    binary = os.environ.get("LLAMARIG_SERVER_BIN")
    if not binary:
        sys.exit("set LLAMARIG_SERVER_BIN to the pinned build's llama-server")
    tmp = Path(tempfile.mkdtemp(prefix="bench-web-"))
    model = write_model(tmp / "long.gguf", "llama", n_ctx_train=131072)
    srv = start_server(binary, model, ["-c", "131072", "-np", "2", "--metrics"], log_dir=tmp)
    proxy = CountingProxy(srv.url)
    client = subprocess.Popen([sys.executable, "-c", LONG, srv.url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not any(s.get("is_processing") for s in json.loads(urllib.request.urlopen(srv.url + "/slots").read())):
            time.sleep(0.05)
        for kind in ("gateway", "top"):
            for row in run(kind, proxy, tmp, a.seconds):
                print(json.dumps({**row, "load_average_1m": round(os.getloadavg()[0], 1)}), flush=True)
    finally:
        client.terminate()
        client.wait(timeout=30)
        srv.stop()


if __name__ == "__main__":
    main()
