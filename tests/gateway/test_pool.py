"""The pool as llama-server has it (llamarig.gateway.pool): derivation, the config meeting the
server, the log. The log lines are build 11434's, as its server printed them (default verbosity)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamarig.gateway.config import BackendConfig
from llamarig.gateway.errors import BackendError
from llamarig.gateway.pool import (
    Pool,
    ServerFacts,
    Share,
    admission_pool,
    cells_in_use,
    facts_from_props,
    group_limits,
    n_ctx_train,
    newer_start,
    read_log,
    server_pool,
)

PROPS = {"default_generation_settings": {"n_ctx": 16384}, "total_slots": 4}
MODELS = {"data": [{"id": "m.gguf", "meta": {"n_ctx": 16384, "n_ctx_train": 16384}}]}

#: llama-server 11434, `-c 49152 -np 4 -kvu` on a model with n_ctx_train 16384 (default verbosity)
LOG_49152 = """\
0.00.001.423 I srv  llama_server: initializing ...
0.00.002.683 I cmn  common_param: common_params_print_info: verbosity = 3 (adjust with the `-lv N` CLI arg)
0.00.003.242 I srv    load_model: loading model '/tmp/tiny.gguf'
0.00.008.661 W llama_context: n_ctx_seq (49152) > n_ctx_train (16384) -- possible training context overflow
0.00.018.510 W srv    load_model: the slot context (49152) exceeds the training context of the model (16384) - capping
0.00.020.277 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 16384, kv_unified = 'true'
0.00.021.833 I srv  llama_server: listening on http://127.0.0.1:18431
"""
#: the same server restarted with `-c 4096 -np 4 -kvu` (appended to the same file)
LOG_4096 = """\
0.00.001.100 I srv  llama_server: initializing ...
0.00.020.100 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'
"""
#: `-c 2048 -np 2 -kvu --kv-unified-per-slot 512`
LOG_PER_SLOT = """\
0.00.001.100 I srv  llama_server: initializing ...
0.00.010.000 I srv    load_model: capping per-slot context (2048) to --kv-unified-per-slot (512)
0.00.020.100 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 512, kv_unified = 'true'
"""
#: `-c 2048 -np 2` (not unified: each slot owns 1024)
LOG_SPLIT = """\
0.00.001.100 I srv  llama_server: initializing ...
0.00.020.100 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 1024, kv_unified = 'false'
"""


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


def test_the_log_gives_the_whole_pool(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_text(LOG_49152)
    lg = read_log(str(p))
    assert lg is not None and (lg.n_slots, lg.n_ctx_slot, lg.n_ctx_seq, lg.kv_unified) == (4, 16384, 49152, True)
    sp = server_pool(facts_from_props(PROPS, MODELS, lg))
    assert (sp.tokens, sp.bound, sp.source, sp.unified) == (49152, "exact", "log", True)
    # a restart appended to the same file: the last start counts, and it is found in the new bytes
    size = p.stat().st_size
    assert not newer_start(str(p), size)
    with p.open("a") as fh:
        fh.write("0.01.000.000 I slot print_timing: id  0 | task 5 | eval time = 10 ms\n" * 50 + LOG_4096)
    assert newer_start(str(p), size)
    lg = read_log(str(p))
    assert lg is not None and (lg.n_ctx_slot, lg.n_ctx_seq) == (4096, 4096)
    # the log of another start than /props shows is not used
    stale = facts_from_props(PROPS, MODELS, lg)
    assert server_pool(stale).source == "props"
    p.write_text(LOG_PER_SLOT)
    lg = read_log(str(p))
    assert lg is not None and server_pool(ServerFacts(2, 512, 16384, lg)).tokens == 2048
    p.write_text(LOG_SPLIT)
    lg = read_log(str(p))
    assert lg is not None and not lg.kv_unified
    assert server_pool(ServerFacts(2, 1024, 16384, lg)).tokens == 2048
    p.write_text("no server here\n")
    assert read_log(str(p)) is None and read_log(str(tmp_path / "missing.log")) is None
    p.write_text("")
    assert read_log(str(p)) is None


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


def test_shares_and_cells() -> None:
    pool = Pool(10000, 4, 8192, "props")
    limits = group_limits((Share("tier:B"), Share("cron", 0.25, 1)), pool)
    assert [(g, c.tokens, c.slots) for g, c in limits] == [("cron", 2500, 1)]
    slots = [{"id": 0, "n_prompt_tokens": 120, "is_processing": True}, {"id": 1, "n_prompt_tokens": 30},
             {"id": 2, "n_ctx": 4096}]
    assert cells_in_use(slots) == 150 and cells_in_use({"error": 1}) is None


def test_the_log_of_a_server_llamarig_launched_is_found(tmp_path: Path) -> None:
    """``llamarig launch`` records the log it gave llama-server (its state file, per port): a
    backend on that loopback port needs no ``log`` in the config (the private state dir is
    the tests' own, tests/conftest.py)."""
    from llamarig.gateway.pool import launched_log
    from llamarig.launch.process import LaunchState, write_state

    log = tmp_path / "launch-18555.log"
    log.write_text(LOG_49152)
    write_state(LaunchState(1, None, ("llama-server",), "llama-server", "127.0.0.1", 18555, str(log), 0.0))
    assert launched_log("http://127.0.0.1:18555") == str(log)
    assert launched_log("http://127.0.0.1:18556") is None  # nothing launched there
    assert launched_log("http://10.0.0.5:18555") is None  # not this machine
