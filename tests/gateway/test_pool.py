"""What admission reserves against (llamarig.gateway.pool): ``/props`` refused without its
fields, the config meeting the server's pool, a group's caps, the log of a server llamarig
launched. The pool itself (the log, /props, the command line, cells in use) is tested in
tests/test_serverpool.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamarig.gateway.config import BackendConfig
from llamarig.gateway.errors import BackendError
from llamarig.gateway.pool import Pool, Share, admission_pool, facts_from_props, group_limits
from llamarig.serverpool import n_ctx_train, server_pool

PROPS = {"default_generation_settings": {"n_ctx": 16384}, "total_slots": 4}
MODELS = {"data": [{"id": "m.gguf", "meta": {"n_ctx": 16384, "n_ctx_train": 16384}}]}

def test_props_alone_exact_below_n_ctx_train_and_a_bound_at_it() -> None:
    f = facts_from_props({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4}, MODELS)
    sp = server_pool(f)
    assert (sp.tokens, sp.bound, sp.source, sp.slots, sp.slot_ctx) == (4096, "exact", "props", 4, 4096)
    # the case: -c 49152 -np 4 -kvu, n_ctx_train 16384: /props shows 16384 per slot
    sp = server_pool(facts_from_props(PROPS, MODELS))
    assert (sp.tokens, sp.bound, sp.capped_by_train) == (16384, "at_least", True)
    assert server_pool(facts_from_props(PROPS, MODELS), unified=False).tokens == 4 * 16384
    assert n_ctx_train(MODELS) == 16384 and n_ctx_train({"data": []}) is None and n_ctx_train(None) is None
    with pytest.raises(BackendError, match="n_ctx"):
        facts_from_props({}, MODELS)
    with pytest.raises(BackendError, match="total_slots"):
        facts_from_props({"default_generation_settings": {"n_ctx": 5}}, MODELS)


def test_config_meets_server() -> None:
    exact = server_pool(facts_from_props({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4}, MODELS))
    b = BackendConfig(url="http://a:1", name="a")
    p = admission_pool(exact, b)
    assert (p.pool_tokens, p.source, p.exact, p.mismatches) == (4096, "props", True, ())
    # the restart: pool_tokens = 49152 configured, the server now has 4096: clamped
    p = admission_pool(exact, BackendConfig(url="http://a:1", name="a", pool_tokens=49152))
    assert p.pool_tokens == 4096 and p.source == "props+config"
    (m,) = p.mismatches
    assert (m.field, m.configured, m.server, m.larger) == ("pool_tokens", 49152, 4096, True)
    assert m.to_json()["action"] == "clamped"
    # smaller: kept, a note
    p = admission_pool(exact, BackendConfig(url="http://a:1", name="a", pool_tokens=2048, slots=2, slot_ctx=8192))
    assert (p.pool_tokens, p.slots, p.slot_ctx) == (2048, 2, 2048)
    assert {(m.field, m.larger) for m in p.mismatches} == {("pool_tokens", False), ("slots", False), ("slot_ctx", True)}
    # a lower bound: a larger configured pool is consistent with it (seed 004: pool_tokens = 307200)
    bound = server_pool(facts_from_props({"default_generation_settings": {"n_ctx": 262144}, "total_slots": 4},
                                         {"data": [{"meta": {"n_ctx_train": 262144}}]}))
    p = admission_pool(bound, BackendConfig(url="http://a:1", name="a", pool_tokens=307200), safety=0.9)
    assert (p.pool_tokens, p.slot_ctx, p.mismatches, p.exact) == (276480, 262144, (), True)
    p = admission_pool(bound, b)
    assert (p.pool_tokens, p.exact) == (262144, False)
    # never read: the config alone, every field set
    assert admission_pool(None, BackendConfig(url="http://a:1", name="a", pool_tokens=100, slots=2,
                                              slot_ctx=50)).source == "config"
    with pytest.raises(BackendError):
        admission_pool(None, b)


def test_shares() -> None:
    pool = Pool(10000, 4, 8192, "props")
    limits = group_limits((Share("tier:B"), Share("cron", 0.25, 1)), pool)
    assert [(g, c.tokens, c.slots) for g, c in limits] == [("cron", 2500, 1)]


def test_the_log_of_a_server_llamarig_launched_is_found(tmp_path: Path) -> None:
    """``llamarig launch`` records the log it gave llama-server (its state file, per port): a
    backend on that loopback port needs no ``log`` in the config (the private state dir is
    the tests' own, tests/conftest.py)."""
    from llamarig.gateway.pool import launched_log
    from llamarig.launch.process import LaunchState, write_state

    log = tmp_path / "launch-18555.log"
    log.write_text("0.00.020.277 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 16384, kv_unified = 'true'\n")
    write_state(LaunchState(1, None, ("llama-server",), "llama-server", "127.0.0.1", 18555, str(log), 0.0))
    assert launched_log("http://127.0.0.1:18555") == str(log)
    assert launched_log("http://127.0.0.1:18556") is None  # nothing launched there
    assert launched_log("http://10.0.0.5:18555") is None  # not this machine
