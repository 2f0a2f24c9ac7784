"""A headless Chromium driven over its DevTools protocol (https://chromedevtools.github.io/devtools-protocol/)
with aiohttp's websocket client: load a page, read what it shows, collect its console errors and
failed requests, take screenshots at a given size. Chromium is stopped by pid, always."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """``async with Browser() as b: await b.open(url)``; ``b.problems`` are the console errors,
    uncaught exceptions, CSP violations and failed loads seen."""

    def __init__(self, lang: str = "en-US") -> None:
        self.lang = lang
        self.proc: subprocess.Popen[bytes] | None = None
        self.tmp = tempfile.TemporaryDirectory(prefix="llamarig-cdp-")
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.problems: list[str] = []
        self.session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Browser:
        assert CHROMIUM is not None
        prof = Path(self.tmp.name)
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             f"--user-data-dir={prof}", "--remote-debugging-port=0", f"--lang={self.lang}",
             f"--accept-lang={self.lang}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = prof / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or len(port_file.read_text().split()) < 2:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = await r.json()
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = await self.session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=64 << 20)
        self.reader = asyncio.get_running_loop().create_task(self._read())
        for domain in ("Runtime", "Log", "Page", "Network"):
            await self.call(f"{domain}.enable")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.reader is not None:
            self.reader.cancel()
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.tmp.cleanup()

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data:
                fut = self.pending.pop(data["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(data)
                continue
            self._event(data.get("method", ""), data.get("params", {}))

    def _event(self, method: str, p: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.problems.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.problems.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            if "favicon" not in str(e.get("url", "")):
                self.problems.append(f"log: {e.get('source')}: {e.get('text')} {e.get('url', '')}")
        elif method == "Network.loadingFailed" and not p.get("canceled"):
            self.problems.append(f"load failed: {p.get('errorText')} {p.get('blockedReason', '')}")

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        i = next(self.ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
        res = await asyncio.wait_for(fut, 60)
        if "error" in res:
            raise RuntimeError(f"{method}: {res['error']}")
        return dict(res.get("result", {}))

    async def size(self, width: int, height: int, mobile: bool = False, dark: bool = False) -> None:
        await self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                        deviceScaleFactor=2 if mobile else 1, mobile=mobile)
        await self.call("Emulation.setEmulatedMedia", features=[
            {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}])

    async def open(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def js(self, expr: str) -> Any:
        r = await self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    async def wait(self, expr: str, timeout_s: float = 60.0) -> Any:
        """Until ``expr`` is truthy (bounded; the page's own events decide when)."""
        deadline = time.monotonic() + timeout_s
        while True:
            v = await self.js(expr)
            if v:
                return v
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expr}; problems: {self.problems}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> None:
        r = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)
        path.write_bytes(base64.b64decode(r["data"]))
