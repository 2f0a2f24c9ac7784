"""Cron that yields (issue 40 item 2), against a fake llama-server whose answers are held by an
event: a yielding tier is admitted only while no better priority is in flight or waits; a held
tier (``max_slots = 0``, or POST /gateway/hold) waits, then 429 after its own queue timeout."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from tests.gateway.test_faults import MSG, post, reserved, wait_until

CRON = {"x-llamarig-source": "CRON-digest"}
AGENT = {"x-llamarig-agent": "1"}


def _bg(url: str, body: Any, headers: dict[str, str], out: list[Any]) -> threading.Thread:
    t = threading.Thread(target=lambda: out.append(post(url, body, headers, timeout=30)), daemon=True)
    t.start()
    return t


def test_yielding_cron_waits_for_the_agent_and_never_runs_beside_it(lt: Any) -> None:
    gate = lt.call(asyncio.Event)
    fb = lt.fake(gate=gate, total_slots=4, n_ctx=32768)
    gw = lt.gateway({"cron": {"yields": True}}, backends=[fb.url])
    url = gw.url + "/v1/chat/completions"
    out: list[Any] = []
    agent = _bg(url, {"messages": MSG}, AGENT, out)
    assert wait_until(lambda: len(fb.stats.received) == 1)  # the agent runs (held by the gate)
    cron = _bg(url, {"messages": MSG}, CRON, out)
    assert wait_until(lambda: lt.call(lambda: gw.admission.queued) == 1)
    st = lt.call(gw.status)
    assert len(fb.stats.received) == 1 and st["queue"]["by_tier"] == {"B": 1}  # three slots free: it yields
    lt.call(gate.set)
    agent.join(10)
    cron.join(10)
    assert [o[0] for o in out] == [200, 200] and len(fb.stats.received) == 2
    assert reserved(lt, gw) == 0


def test_without_yield_cron_runs_beside_the_agent(lt: Any) -> None:
    gate = lt.call(asyncio.Event)
    fb = lt.fake(gate=gate, total_slots=4, n_ctx=32768)
    gw = lt.gateway(backends=[fb.url])
    url = gw.url + "/v1/chat/completions"
    out: list[Any] = []
    ts = [_bg(url, {"messages": MSG}, AGENT, out), _bg(url, {"messages": MSG}, CRON, out)]
    assert wait_until(lambda: len(fb.stats.received) == 2)
    lt.call(gate.set)
    for t in ts:
        t.join(10)
    assert reserved(lt, gw) == 0


def test_max_slots_zero_holds_and_the_tiers_queue_timeout_applies(lt: Any) -> None:
    fb = lt.fake()
    gw = lt.gateway({"cron": {"max_slots": 0, "queue_timeout_s": 0.2}}, backends=[fb.url])
    st, _h, body = post(gw.url + "/v1/chat/completions", {"messages": MSG}, CRON)
    err = json.loads(body)["error"]
    assert (st, err["code"], err["reason"]) == (429, "queue_timeout", "tier_cap")
    assert err["details"]["queue_timeout_s"] == 0.2 and "max_slots = 0" in err["message"]
    assert fb.stats.received == [] and post(gw.url + "/v1/chat/completions", {"messages": MSG})[0] == 200


def test_hold_endpoint_holds_a_tier_for_a_window_and_release_ends_it(lt: Any) -> None:
    fb = lt.fake()
    gw = lt.gateway({"cron": {"queue_timeout_s": 20}, "keys": [{"key": "admin-key-1", "admin": True},
                                                                  {"key": "user-key-1"}]}, backends=[fb.url])
    admin, user = {"Authorization": "Bearer admin-key-1"}, {"Authorization": "Bearer user-key-1"}
    assert post(gw.url + "/gateway/hold", {"tiers": ["cron"], "seconds": 60}, user)[0] == 403
    assert post(gw.url + "/gateway/hold", {"tiers": ["nope"]}, admin)[0] == 400
    st, _h, body = post(gw.url + "/gateway/hold", {"tiers": ["cron"], "seconds": 60}, admin)
    assert st == 200 and 59 <= json.loads(body)["holds"]["cron"] <= 60
    out: list[Any] = []
    cron = _bg(gw.url + "/v1/chat/completions", {"messages": MSG}, {**CRON, **user}, out)
    assert wait_until(lambda: lt.call(lambda: gw.admission.queued) == 1)
    assert post(gw.url + "/v1/chat/completions", {"messages": MSG}, user)[0] == 200  # other tiers run
    blocked = lt.call(lambda: gw.admission.blocked(gw.admission.waiting()[0]))
    assert blocked.reason == "held" and blocked.details["group"] == "cron"
    assert len(fb.stats.received) == 1
    st, _h, body = post(gw.url + "/gateway/release", {"tiers": ["cron"]}, admin)
    assert st == 200 and json.loads(body)["holds"] == {}
    cron.join(10)
    assert out[0][0] == 200 and len(fb.stats.received) == 2


def test_an_agent_preempts_a_running_yielding_cron_job(lt: Any) -> None:
    """A yielding cron job already running (sent upstream as a stream) is stopped the moment a
    better priority is admitted on its backend: 503 with Retry-After, the upstream closed."""
    gate = lt.call(asyncio.Event)
    fb = lt.fake(gate=gate, total_slots=4, n_ctx=32768)
    gw = lt.gateway({"cron": {"yields": True}}, backends=[fb.url])
    url = gw.url + "/v1/chat/completions"
    out: list[Any] = []
    cron = _bg(url, {"messages": MSG}, CRON, out)
    assert wait_until(lambda: fb.stats.active == 1)  # the cron job streams upstream, held by the gate
    agent = _bg(url, {"messages": MSG}, AGENT, out)
    cron.join(10)
    st, headers, body = out[0]
    err = json.loads(body)["error"]
    assert (st, err["code"], err["reason"]) == (503, "preempted", "yielding") and int(headers["Retry-After"]) >= 1
    assert wait_until(lambda: fb.stats.client_closed == 1)  # the server's task was stopped
    lt.call(gate.set)
    agent.join(10)
    assert out[1][0] == 200 and wait_until(lambda: reserved(lt, gw) == 0)


def test_yield_after_keeps_cron_out_between_two_agent_turns(lt: Any) -> None:
    fb = lt.fake(total_slots=4, n_ctx=32768)
    gw = lt.gateway({"cron": {"yields": True, "yield_after_s": 3600}}, backends=[fb.url])
    url = gw.url + "/v1/chat/completions"
    assert post(url, {"messages": MSG}, AGENT)[0] == 200  # the agent's turn ended just now
    out: list[Any] = []
    cron = _bg(url, {"messages": MSG}, CRON, out)
    assert wait_until(lambda: lt.call(lambda: gw.admission.queued) == 1)
    assert len(fb.stats.received) == 1  # within an hour of the agent's last turn: it waits
    lt.call(lambda: gw.admission.ended.clear())  # as if the hour had passed
    lt.call(gw.admission.pump)
    cron.join(10)
    assert out[0][0] == 200


def test_bench_hold_asks_the_gateway_and_releases(lt: Any) -> None:
    from llamarig.api import gateway_hold
    from llamarig.errors import InputError

    fb = lt.fake()
    gw = lt.gateway({"keys": [{"key": "admin-key-1", "admin": True}]}, backends=[fb.url])
    gateway_hold(gw.url, "hold", ("cron",), api_key="admin-key-1")
    assert "cron" in lt.call(gw.status)["holds"]
    gateway_hold(gw.url, "release", ("cron",), api_key="admin-key-1")
    assert lt.call(gw.status)["holds"] == {}
    try:
        gateway_hold(gw.url, "hold", ("cron",))
    except InputError as e:
        assert "HTTP 401" in str(e)
    else:
        raise AssertionError("no error without the key")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_gateway_status_at_80_columns_shows_holds_and_cuts_no_cell(lt: Any, lang: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from llamarig.cli.gateway_cmd import gateway_cmd

    fb = lt.fake()
    gw = lt.gateway(backends=[fb.url])
    assert post(gw.url + "/gateway/hold", {"tiers": ["cron"], "seconds": 60})[0] == 200
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("LLAMARIG_LANG", lang)
    out = CliRunner().invoke(gateway_cmd, ["status", "--url", gw.url])
    assert out.exit_code == 0, out.output
    assert "…" not in out.output and max(len(x) for x in out.output.splitlines()) <= 80
    assert ("held: cron" if lang == "en" else "暂停中：cron") in out.output


def test_a_preempted_yielding_stream_ends_with_an_error_event(lt: Any) -> None:
    gate = lt.call(asyncio.Event)
    fb = lt.fake(gate=gate, total_slots=4, n_ctx=32768)
    gw = lt.gateway({"cron": {"yields": True}}, backends=[fb.url])
    url = gw.url + "/v1/chat/completions"
    out: list[Any] = []
    cron = _bg(url, {"messages": MSG, "stream": True}, CRON, out)
    assert wait_until(lambda: fb.stats.active == 1)
    agent = _bg(url, {"messages": MSG}, AGENT, out)
    cron.join(10)
    st, _h, body = out[0]
    assert st == 200 and b'"code": "preempted"' in body  # the stream had started: an SSE error event
    lt.call(gate.set)
    agent.join(10)
    assert out[1][0] == 200 and wait_until(lambda: reserved(lt, gw) == 0)
