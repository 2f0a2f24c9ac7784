"""The gateway's ``/ui/`` routes in process: who may read the page (this machine; another only with
``[ui] admin_key``), its headers, the ``[ui]`` section's checks, the key masked in ``--check``. The
peer address is the one thing a loopback test cannot produce, so the connection is a stand-in
that names it; everything else is the gateway's own code."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from click.testing import CliRunner

from llamarig.cli.gateway_cmd import gateway_cmd
from llamarig.errors import InputError
from llamarig.gateway.config import build_config
from llamarig.gateway.http import Headers, Request, Response
from llamarig.gateway.server import Gateway


class _Transport:
    def __init__(self, ip: str) -> None:
        self.ip = ip

    def get_extra_info(self, name: str) -> Any:
        return (self.ip, 40000) if name == "peername" else None


class _Conn:
    def __init__(self, ip: str) -> None:
        self.transport = _Transport(ip)


def get(gw: Gateway, path: str, ip: str, auth: str = "") -> Response:
    headers = Headers({"authorization": auth} if auth else {})
    req = Request(_Conn(ip), "GET", path, "lang=zh", headers, b"", b"1.1", True)  # type: ignore[arg-type]
    resp = asyncio.run(gw.http.dispatch(req))
    assert isinstance(resp, Response)
    return resp


def gateway(ui: dict[str, Any]) -> Gateway:
    return Gateway(build_config({"backends": [{"url": "http://127.0.0.1:9"}], "ui": ui}))


def test_this_machine_reads_the_page_another_needs_the_key() -> None:
    gw = gateway({"admin_key": "s3cret-admin"})
    ok = get(gw, "/ui/", "127.0.0.1")
    assert ok.status == 200 and b'src="app.js"' in ok.body
    assert ok.headers["Content-Security-Policy"].startswith("default-src 'none'; script-src 'self'")
    assert ok.headers["X-Frame-Options"] == "DENY" and ok.headers["Content-Type"].startswith("text/html")
    refused = get(gw, "/ui/", "192.168.1.20")
    assert refused.status == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
    assert b"admin_key" in refused.body
    basic = "Basic " + base64.b64encode(b"me:s3cret-admin").decode()
    assert get(gw, "/ui/app.js", "192.168.1.20", basic).status == 200
    assert get(gw, "/ui/strings.json", "10.1.2.3", "Bearer s3cret-admin").status == 200
    assert get(gw, "/ui/app.js", "10.1.2.3", "Bearer wrong-admin").status == 401
    words = json.loads(get(gw, "/ui/strings.json", "127.0.0.1").body)
    assert words["lang"] == "zh" and words["labels"]["gateway"] == "网关"
    assert get(gw, "/ui", "127.0.0.1").headers["Location"] == "/ui/"


def test_without_a_key_another_machine_never_reads_it() -> None:
    gw = gateway({})
    assert get(gw, "/ui/", "::1").status == 200
    assert get(gw, "/ui/", "192.168.1.20", "Basic " + base64.b64encode(b"x:").decode()).status == 401


def test_the_page_can_be_turned_off() -> None:
    assert get(gateway({"enabled": False}), "/ui/", "127.0.0.1").status == 404


def test_ui_section_is_checked_and_its_key_masked(tmp_path: Any) -> None:
    with pytest.raises(InputError, match="ui.admin_key: the admin key must be at least 8"):
        build_config({"ui": {"admin_key": "short"}})
    with pytest.raises(InputError, match="ui.alert_pool_pct: must be <= 100"):
        build_config({"ui": {"alert_pool_pct": 120}})
    p = tmp_path / "gw.toml"
    p.write_text('[[backends]]\nurl = "http://127.0.0.1:9"\n[ui]\nadmin_key = "s3cret-admin"\nalert_power_w = 350\n')
    out = CliRunner().invoke(gateway_cmd, ["--config", str(p), "--check"])
    assert out.exit_code == 0 and '"admin_key": "***"' in out.output and "s3cret" not in out.output
    assert '"alert_power_w": 350.0' in out.output


def test_pages_that_leave_are_forgotten() -> None:
    """Ten pages open the stream and go away: the feed keeps no queue of theirs (bounded memory)."""
    import aiohttp

    async def run() -> tuple[int, int, bytes]:
        gw = gateway({"interval_s": 0.2})
        runner = await gw.start(port=0)
        try:
            url = f"http://127.0.0.1:{gw.port}/ui/events"
            async with aiohttp.ClientSession() as s:
                resps = [await s.get(url) for _ in range(10)]
                first = await resps[0].content.readuntil(b"\n\n")
                for _ in range(100):  # every page subscribed (an event, bounded)
                    if len(gw.page.feed.pages) == 10:
                        break
                    await asyncio.sleep(0.05)
                during = len(gw.page.feed.pages)
                for r in resps:
                    r.close()
            for _ in range(100):  # each disconnect cancels its handler, which unsubscribes
                if not gw.page.feed.pages:
                    break
                await asyncio.sleep(0.05)
            return during, len(gw.page.feed.pages), first
        finally:
            await runner.cleanup()

    during, after, first = asyncio.run(run())
    assert during == 10 and after == 0 and first.startswith(b"retry: 3000")
