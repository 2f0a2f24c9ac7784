"""The live page in headless Chromium against the real llama-server (build 11434, synthetic llama):
behind the real gateway (``/ui/``) and alone (``llamarig top --web``), under traffic. What the
page shows equals ``/gateway/status`` and ``llamarig top --once --json``; the charts move; the
console stays clean (no error, no CSP violation, no failed load). Every wait is for an event (an
update the page received, a request in flight), bounded.

``LLAMARIG_CAPTURES=DIR`` also writes the screenshots of docs/captures (desktop 1280x800 light,
phone 390x844 dark; English and Chinese)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.top.helpers import decoding_tasks, get_json, wait_for
from tests.web.cdp import Browser

pytestmark = pytest.mark.server

#: what the page shows: its figures by data-fig, its slot rows, its chart data and canvases
READ = """(() => {
  const S = window.__llamarig, q = (k) => { const e = document.querySelector('[data-fig="' + k + '"]'); return e ? e.textContent : null; };
  return {updates: S.updates, doc: S.doc, points: S.data[0].length, decode: S.data[1].filter(v => v !== null),
          canvases: document.querySelectorAll('.uplot canvas').length,
          figs: {in_flight: q('in_flight'), queue: q('queue'), reserved: q('reserved'), cells: q('pool_cells'),
                 gpu_power: q('gpu_power'), decode: q('decode_tok_s')},
          gpuTitle: (document.querySelector('[data-fig="gpu_power"]') || {}).title,
          verdict: document.getElementById('verdict').getAttribute('data-verdict'),
          verdictText: document.getElementById('verdict').textContent,
          slots: [...document.querySelectorAll('#slots tbody tr')].map(tr => [tr.dataset.slot, tr.children[1].textContent,
                   tr.querySelector('[data-fig="ctx"]').textContent]),
          title: document.title, lang: document.documentElement.lang};
})()"""

SIZES = (("desktop", 1280, 800, False, False), ("phone", 390, 844, True, True))


def n(v: int | None) -> str:
    return "\u2014" if v is None else f"{v:,}"


async def read(b: Browser, after: int = 0) -> dict[str, Any]:
    """The page once it has shown more than ``after`` updates."""
    await b.wait(f"window.__llamarig && window.__llamarig.updates > {after}")
    return dict(await b.js(READ))


async def captures(b: Browser, url: str, name: str) -> None:
    out = os.environ.get("LLAMARIG_CAPTURES")
    if not out:
        return
    for lang in ("en", "zh"):
        for size, w, h, mobile, dark in SIZES:
            await b.size(w, h, mobile, dark)
            await b.open(f"{url}?lang={lang}")
            await b.wait("window.__llamarig && window.__llamarig.updates >= 4 && window.__llamarig.data[0].length >= 8")
            await b.screenshot(Path(out) / f"{name}-{size}-{lang}.png")


def test_gateway_page_equals_status_and_top(np2: Any, long_request: Any, web_gateway: Any, chromium: str,
                                            cli: Any) -> None:
    gw = web_gateway(np2.url)
    long_request(gw)  # 60000 tokens: decodes for longer than the test (as in tests/top)
    wait_for("a slot decoding", lambda: len(decoding_tasks(np2.url)) == 1)
    wait_for("a request in flight", lambda: get_json(gw + "/gateway/status")["in_flight"] == 1)

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Browser() as b:
            await b.size(1280, 800)
            await b.open(gw + "/ui")  # redirected to /ui/
            first = await read(b)
            page = await read(b, first["updates"] + 1)
            status = get_json(gw + "/gateway/status")
            # the charts move: more points, and a decode rate above zero among them
            later = await read(b, page["updates"] + 2)
            assert later["points"] > page["points"] >= 2 and max(later["decode"]) > 0
            assert later["canvases"] == 4
            await captures(b, gw + "/ui/", "web-gateway")
            assert b.problems == [], b.problems
            return page, status

    page, status = asyncio.run(run())
    code, out, err = cli("top", "--url", gw, "--once", "--json")
    assert code == 0, err
    top = json.loads(out)
    snap = page["doc"]["snapshot"]
    g = snap["gateway"]
    # the page's figures are its update's, and equal /gateway/status and top --once --json
    assert g["in_flight"] == status["in_flight"] == top["gateway"]["in_flight"] == 1
    assert g["reserved_tokens"] == status["reserved_tokens"] == top["gateway"]["reserved_tokens"] > 0
    assert g["pool_tokens"] == status["pool"]["tokens"] == top["gateway"]["pool_tokens"]
    assert g["queue"]["length"] == status["queue"]["length"] == top["gateway"]["queue"]["length"] == 0
    assert page["figs"]["in_flight"] == "1" and page["figs"]["queue"] == "0"
    assert page["figs"]["reserved"] == f"{n(g['reserved_tokens'])} / {n(g['pool_tokens'])}"
    assert sorted(r["id"] for r in g["requests"]) == sorted(str(r["id"]) for r in status["requests"])
    assert [r["key"] for r in g["requests"]] == [None]  # keys by name only; none configured here
    assert [s["n_ctx"] for s in snap["slots"]] == [s["n_ctx"] for s in top["slots"]] == [65536, 65536]
    assert sorted(s["phase"] for s in snap["slots"]) == sorted(s["phase"] for s in top["slots"]) == ["decode", "idle"]
    assert sorted(row[1] for row in page["slots"]) == ["decode", "idle"]
    pool = snap["servers"][0]["pool"]
    assert pool["tokens"] == top["servers"][0]["pool"]["tokens"] and pool["source"] == top["servers"][0]["pool"]["source"]
    assert page["figs"]["cells"].startswith(f"{n(pool['cells_used'])} / {n(pool['tokens'])} (")
    # measured by both (a rate of the same task between two readings; its size is the machine's)
    assert snap["decode_tok_s"] is not None and top["decode_tok_s"] is not None
    # no GPU on this machine: a dash, and why, on hover
    if not snap["gpu"]["available"]:
        assert page["figs"]["gpu_power"] == "\u2014" and page["gpuTitle"]
    assert page["verdict"] in ("healthy", "near_overflow") and page["title"] == "llamarig live"
    metrics = get_text(gw + "/metrics")
    assert 'llamarig_alert_threshold{kind="pool"} 90.0' in metrics and "llamarig_alerts_firing" in metrics


def get_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


def test_top_web_without_a_gateway_in_chinese(np2: Any, long_request: Any, top_web: Any, chromium: str,
                                              cli: Any) -> None:
    long_request(np2.url)
    wait_for("a slot decoding", lambda: len(decoding_tasks(np2.url)) == 1)
    url = top_web(np2.url, "--interval", "0.5", "--alert-pool", "50")
    # and one whose threshold the decoding slot crosses at once: the alert, its notification, /metrics
    low = top_web(np2.url, "--interval", "0.5", "--alert-pool", "0.01")

    async def run() -> dict[str, Any]:
        async with Browser(lang="zh-CN") as b:  # the browser's language picks the page's
            await b.size(390, 844, mobile=True, dark=True)
            await b.open(url)
            first = await read(b)
            page = await read(b, first["updates"] + 1)
            later = await read(b, page["updates"] + 2)
            assert later["points"] > page["points"] and max(later["decode"]) > 0 and later["canvases"] == 4
            await captures(b, url, "web-top")
            await b.open(low)
            alarmed = await read(b)
            await b.call("Browser.grantPermissions", permissions=["notifications"], origin=low.split("/ui/")[0])
            await b.js("document.getElementById('notify').click()")
            told = await b.wait("window.__llamarig.notify && window.__llamarig.notified")  # shown once, by key
            assert told.startswith("near_overflow|pool") and alarmed["verdict"] == "near_overflow"
            assert b.problems == [], b.problems
            return page | {"alarmed": alarmed}

    page = asyncio.run(run())
    code, out, err = cli("top", "--url", np2.url, "--once", "--json")
    assert code == 0, err
    top = json.loads(out)
    snap = page["doc"]["snapshot"]
    assert snap["mode"] == top["mode"] == "server" and snap["gateway"] is None
    assert [s["n_ctx"] for s in snap["slots"]] == [s["n_ctx"] for s in top["slots"]]
    assert sorted(s["state"] for s in snap["slots"]) == sorted(s["state"] for s in top["slots"]) == ["busy", "idle"]
    assert snap["servers"][0]["pool"]["tokens"] == top["servers"][0]["pool"]["tokens"]
    assert snap["servers"][0]["total_slots"] == top["servers"][0]["total_slots"] == 2
    busy = next(s for s in snap["slots"] if s["state"] == "busy")
    row = next(r for r in page["slots"] if r[0] == f"server/{busy['id']}")
    assert row[1] == "解码" and row[2] == f"{n(busy['ctx_used'])} / {n(busy['n_ctx'])}"
    assert page["lang"] == "zh-CN" and page["title"] == "llamarig 实时"
    assert any("\u4e00" <= c <= "\u9fff" for c in page["verdictText"])
    assert page["doc"]["thresholds"]["pool_pct"] == 50.0 and not page["doc"]["crossed"]
    alarmed = page["alarmed"]["doc"]
    assert [c["kind"] for c in alarmed["crossed"]] == ["pool"] and "KV 池" in alarmed["crossed"][0]["text"]
    metrics = get_text(low.replace("/ui/", "/metrics"))
    assert 'llamarig_alert{kind="pool",subject="server"} 1.0' in metrics and 'llamarig_alerts_firing{kind="pool"} 1.0' in metrics
