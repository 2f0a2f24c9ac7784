"""The agent's cache kept warm (issue 40 item 3), against the real llama-server: a pinned
session's second turn finds its prefix in its slot after competing web and cron requests (the
server's own ``cache_n``); without the pin the least-recently-used rule gives its slot away.
``--cache-ram 0``: the server's host-memory prompt cache off, as it is in effect for hybrid
models (llama.cpp #25913 in the issue), so the slot is the only cache."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.server

PREFIX = " ".join(f"rule {i}: keep functions short and name things well." for i in range(25))
AGENT = {"x-llamarig-agent": "1"}


def _chat(url: str, msgs: list[dict[str, str]], headers: dict[str, str], **extra: Any) -> dict[str, Any]:
    body = json.dumps({"messages": msgs, "max_tokens": 4, "ignore_eos": True, **extra}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=120) as r:
        return dict(json.loads(r.read()))


def _second_turn(gw: Any, tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    m1 = [{"role": "system", "content": PREFIX + tag}, {"role": "user", "content": "turn one"}]
    t1 = _chat(gw.url, m1, AGENT)["timings"]
    for i, h in enumerate([{}, {"x-llamarig-source": "cron-digest"}, {}, {"x-llamarig-source": "cron-x"}]):
        _chat(gw.url, [{"role": "user", "content": f"competing request {i} " + "web chat text " * 20}], h)
    m2 = m1 + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "turn two"}]
    return t1, _chat(gw.url, m2, AGENT)["timings"]


def test_a_pinned_agent_finds_its_prefix_after_competing_traffic(lt: Any, synth_model: Any, llama_server: Any,
                                                                 tmp_path: Path) -> None:
    srv = llama_server(synth_model("llama"), "-c", "6144", "-np", "3", "-kvu", "--cache-ram", "0")
    reqlog = tmp_path / "req.jsonl"
    plain = lt.gateway({"tiers": {"C2": {"max_tokens": 64, "reasoning_budget": 16}}}, backends=[srv.url])
    t1, t2 = _second_turn(plain, " (plain)")
    assert t2["cache_n"] < t1["prompt_n"] // 2  # the LRU rule gave its slot to a competing request
    lt.run(plain.runner.cleanup())
    pinned = lt.gateway({"tiers": {"C2": {"max_tokens": 64, "reasoning_budget": 16, "pin_ttl_s": 2700}},
                         "server": {"request_log": str(reqlog)}}, backends=[srv.url])
    t1, t2 = _second_turn(pinned, " (pinned)")
    n_prefix = t1["cache_n"] + t1["prompt_n"]
    assert t2["cache_n"] >= n_prefix - 1 and t2["prompt_n"] < 40  # the whole first turn came from its slot
    st = lt.call(pinned.status)
    (pin,) = st["pins"]["b0"]
    assert pin["tier"] == "C2" and pin["ttl_left_s"] > 2600
    assert st["cache"]["C2"]["hits"] >= 1
    log = [json.loads(x) for x in reqlog.read_text().splitlines()]
    agent = [r for r in log if r["tier"] == "C2"]
    assert {r["id_slot"] for r in agent} == {pin["slot"]} and agent[-1]["pinned"] is True
    assert agent[-1]["cache_state"] == "hit"
    assert all(r["id_slot"] != pin["slot"] for r in log if r["tier"] != "C2")
    # a client naming the pinned slot (llamarig bench pins slot 0) is sent to a free one, not deferred behind it
    _chat(pinned.url, [{"role": "user", "content": "bench"}], {}, id_slot=pin["slot"])
    last = json.loads(reqlog.read_text().splitlines()[-1])
    assert last["id_slot_asked"] == pin["slot"] and last["id_slot"] != pin["slot"]
