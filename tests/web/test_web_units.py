"""The page's parts that need no server: bounded memory, thresholds and the verdict, who may read
the page, its words in both languages, its options."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from llamarig.hardware.telemetry import GpuRaw, GpuReading
from llamarig.top import derive
from llamarig.top.model import Raw, ServerRaw, Snapshot
from llamarig.web import alerts, assets
from llamarig.web.feed import QUEUE, Feed, document
from llamarig.web.serve import check_bind, parse_bind
from llamarig.web.strings import LABELS, labels

SLOT = {"id": 0, "is_processing": True, "n_ctx": 1000, "id_task": 1, "n_prompt_tokens": 950,
        "next_token": [{"n_decoded": 5, "n_remain": 100, "has_next_token": True}]}


def snap(t: float, gpus: tuple[GpuRaw, ...] = (), prev: Snapshot | None = None) -> Snapshot:
    gpu = GpuReading(True, gpus=gpus, source="nvml") if gpus else GpuReading(False, "off", "off")
    raw = Raw("http://x", "server", t, 1000.0 + t, (ServerRaw("server", "http://x", True, slots=(SLOT,)),), gpu)
    return derive.build(prev, raw)


def test_a_day_of_updates_keeps_an_hour_and_a_slow_page_skips() -> None:
    feed = Feed(lambda: None, 1.0, alerts.Thresholds())  # type: ignore[arg-type,return-value]
    q: asyncio.Queue[bytes] = asyncio.Queue(maxsize=QUEUE)
    feed.pages.add(("zh", q))
    s = snap(0.0)
    for i in range(86400 // 10):  # a day at 10 s, same memory as an hour at 1 s
        feed.publish(s)
        if i == 5000:
            assert len(feed.samples) == 3600
    assert len(feed.samples) == 3600 and q.qsize() == QUEUE  # never more than QUEUE pending
    ev = q.get_nowait().decode()
    assert ev.startswith("event: update\ndata: ")
    doc = json.loads(ev.split("data: ", 1)[1])
    assert doc["snapshot"]["slots"][0]["ctx_used"] == 950 and doc["verdict"]["kind"] == "near_overflow"
    assert "KV" in doc["verdict"]["text"] and any("槽" in a["text"] for a in doc["alerts"])


def test_thresholds_cross_and_name_the_verdict() -> None:
    hot = (GpuRaw(0, "RTX 3090", 20000.0, 24576.0, power_w=390.0, temp_c=83.0),)
    th = alerts.Thresholds(power_w=350.0, temp_c=80.0, pool_pct=99.0, queue=4)
    s = snap(0.0, hot)
    over = alerts.crossed(s, th)
    assert [(c.kind, c.subject, c.value) for c in over] == [("power", "GPU0", 390.0), ("temperature", "GPU0", 83.0)]
    assert alerts.verdict(s, over) == "too_hot"
    doc = document(s, th, "en")
    assert doc["crossed"][0]["text"] == "GPU0: drawing 390 W, threshold 350 W"
    assert document(s, th, "zh")["crossed"][0]["text"] == "GPU0：功耗 390 W，阈值 350 W"
    cool = alerts.Thresholds(power_w=400.0, temp_c=90.0, pool_pct=99.0)
    assert alerts.crossed(s, cool) == () and alerts.verdict(s, ()) == "near_overflow"  # slot 95 % full (top's alert)


def test_only_loopback_or_the_admin_key() -> None:
    basic = "Basic " + base64.b64encode(b"anyone:s3cret-key").decode()
    assert assets.allowed("127.0.0.1", "", None) and assets.allowed("::1", "", None)
    assert not assets.allowed("192.168.1.20", "", None)
    assert not assets.allowed("192.168.1.20", basic, None)  # no key configured: this machine only
    assert assets.allowed("192.168.1.20", basic, "s3cret-key")
    assert assets.allowed("10.0.0.2", "Bearer s3cret-key", "s3cret-key")
    assert not assets.allowed("10.0.0.2", "Bearer wrong-key!", "s3cret-key")
    assert not assets.allowed("10.0.0.2", "Basic !!!", "s3cret-key")


def test_bind_rules() -> None:
    assert parse_bind("8088") == ("127.0.0.1", 8088)
    assert parse_bind("0.0.0.0:9000") == ("0.0.0.0", 9000)
    assert parse_bind("[::1]:9000") == ("::1", 9000)
    with pytest.raises(Exception, match="expected \\[HOST:\\]PORT"):
        parse_bind("here")
    check_bind("127.0.0.1", None, "--web")
    with pytest.raises(Exception, match="only with the admin key"):
        check_bind("0.0.0.0", None, "--web")
    check_bind("0.0.0.0", "long-enough", "--web")


def test_every_label_has_chinese_and_the_assets_ship() -> None:
    zh, en = labels("zh"), labels("en")
    assert set(zh) == set(LABELS) == set(en)
    untranslated = [k for k in LABELS if zh[k] == en[k] and any(c.isalpha() for c in en[k])
                    and k not in ("tok_s", "gpus")]
    assert not untranslated, untranslated
    for name in assets.FILES:
        got = assets.asset(name)
        assert got is not None and got[0], name
    html = assets.asset("")[0].decode()  # type: ignore[index]
    assert "<script>" not in html and "http://" not in html and "https://" not in html  # no inline script, no CDN
    assert "script-src 'self'" in assets.CSP and "unsafe" not in assets.CSP


def test_top_web_refuses_another_machine_without_a_key(cli: Any) -> None:
    code, out, err = cli("top", "--url", "http://127.0.0.1:9", "--web", "0.0.0.0:0")
    assert code == 2 and "admin key" in err and "SSH" in err, (code, err)
