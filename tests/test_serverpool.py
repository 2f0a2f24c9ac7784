"""The KV pool as llama-server has it (llamarig.serverpool), the one derivation the gateway and
top share: from the server's log, its command line, ``/props`` with ``/v1/models``; exact or a
lower bound; the cells in use. The log lines are build 11434's, as its server printed them
(default verbosity); the same against the real server: tests/gateway/test_pool_same.py."""

from __future__ import annotations

from pathlib import Path

from llamarig.serverpool import (
    CellsInUse,
    CommandLayout,
    ServerFacts,
    cells_in_use,
    last_start,
    log_starts,
    n_ctx_train,
    newer_start,
    props_slots,
    seen_tokens,
    server_facts,
    server_pool,
    used_frac,
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


def test_the_log_gives_the_whole_pool(tmp_path: Path) -> None:
    p = tmp_path / "server.log"
    p.write_text(LOG_49152)
    lg = last_start(str(p))
    assert lg is not None and (lg.n_slots, lg.n_ctx_slot, lg.n_ctx_seq, lg.kv_unified) == (4, 16384, 49152, True)
    assert lg.path == str(p) and lg.at == LOG_49152.index("initializing, n_slots")
    sp = server_pool(server_facts(PROPS, MODELS, lg) or ServerFacts(0, 0))
    assert (sp.tokens, sp.bound, sp.source, sp.unified, sp.capped_by_train) == (49152, "exact", "log", True, True)
    # a restart appended to the same file: the last start counts (its own lines: no cap this time),
    # and it is found in the new bytes
    size = p.stat().st_size
    assert not newer_start(str(p), size)
    with p.open("a") as fh:
        fh.write("0.01.000.000 I slot print_timing: id  0 | task 5 | eval time = 10 ms\n" * 50 + LOG_4096)
    assert newer_start(str(p), size)
    lg = last_start(str(p))
    assert lg is not None and (lg.n_ctx_slot, lg.n_ctx_seq) == (4096, 4096)
    assert last_start(str(p), after=lg.at + 1) is None
    # the log of another start than /props shows is not used
    stale = server_facts(PROPS, MODELS, lg)
    assert stale is not None and server_pool(stale).source == "props"
    p.write_text(LOG_PER_SLOT)
    lg = last_start(str(p))
    assert lg is not None and server_pool(ServerFacts(2, 512, 16384, lg)).tokens == 2048
    p.write_text(LOG_SPLIT)
    lg = last_start(str(p))
    assert lg is not None and not lg.kv_unified
    assert server_pool(ServerFacts(2, 1024, 16384, lg)).tokens == 2048
    p.write_text("no server here\n")
    assert last_start(str(p)) is None and last_start(str(tmp_path / "missing.log")) is None
    p.write_text("")
    assert last_start(str(p)) is None


def test_every_start_in_a_text_as_logs_reads_it() -> None:
    """``llamarig logs`` reads every start of a log the same way (bench.logparse): the line of
    each initializing line, the pool before a cap."""
    starts = log_starts(LOG_49152 + LOG_SPLIT)
    assert [(s.line, s.pool_tokens, s.kv_unified) for s in starts] == [(6, 49152, True), (9, 2048, False)]
    assert log_starts("no start-up line here\n") == []


def test_props_alone_exact_below_n_ctx_train_and_a_bound_at_it() -> None:
    f = server_facts({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4}, MODELS)
    assert f is not None
    sp = server_pool(f)
    assert (sp.tokens, sp.bound, sp.source, sp.slots, sp.slot_ctx, sp.unified) == (4096, "exact", "props", 4, 4096, None)
    # the case: -c 49152 -np 4 -kvu, n_ctx_train 16384: /props shows 16384 per slot
    f = server_facts(PROPS, MODELS)
    assert f is not None
    sp = server_pool(f)
    assert (sp.tokens, sp.bound, sp.capped_by_train, sp.exact) == (16384, "at_least", True, False)
    assert server_pool(f, unified=False).tokens == 4 * 16384
    # without /v1/models nothing says the slot is capped
    f = server_facts(PROPS)
    assert f is not None and server_pool(f).bound == "exact"
    assert n_ctx_train(MODELS) == 16384 and n_ctx_train({"data": []}) is None and n_ctx_train(None) is None
    assert props_slots({"total_slots": True, "default_generation_settings": {"n_ctx": 0}}) == (None, None)
    assert server_facts({}, MODELS) is None and server_facts(None) is None


def test_the_command_line() -> None:
    """The running process's ``-c`` is its cache (``--fit`` leaves a set ``-c`` alone); without it
    (``LLAMA_ARG_CTX_SIZE`` in the environment, or none), what /props shows, a lower bound at
    n_ctx_train or at the per-slot cap."""
    # the 307K-context MTP field report: -c 307200 -np 4 -kvu, each slot capped at 262144
    report = ServerFacts(4, 262144, 262144, command=CommandLayout(True, 307200))
    sp = server_pool(report)
    assert (sp.tokens, sp.bound, sp.source, sp.unified, sp.capped_by_train) == (307200, "exact", "command", True, True)
    # -c is padded to 256 cells
    assert server_pool(ServerFacts(4, 1000, 8192, command=CommandLayout(True, 1000))).tokens == 1024
    # no -c on the command line: the slot's context, a lower bound when capped
    sp = server_pool(ServerFacts(4, 16384, 16384, command=CommandLayout(True)))
    assert (sp.tokens, sp.bound, sp.source) == (16384, "at_least", "command")
    assert server_pool(ServerFacts(4, 4096, 16384, command=CommandLayout(True))).bound == "exact"
    assert server_pool(ServerFacts(2, 512, 16384, command=CommandLayout(True, None, 512))).bound == "at_least"
    # split: each slot its own part
    sp = server_pool(ServerFacts(4, 4096, 16384, command=CommandLayout(False, 16384)))
    assert (sp.tokens, sp.unified) == (16384, False)
    # the log, when it is the start /props shows, wins
    lg = log_starts(LOG_49152)[0]
    assert server_pool(ServerFacts(4, 16384, 16384, lg, CommandLayout(True))).source == "log"


def test_cells_in_use() -> None:
    slots = [{"id": 0, "n_prompt_tokens": 120, "is_processing": True, "next_token": [{"n_remain": 380}]},
             {"id": 1, "n_prompt_tokens": 30, "is_processing": False, "next_token": [{"n_remain": 99}]},
             {"id": 2, "n_prompt_tokens": 50, "is_processing": True, "next_token": [{"n_remain": -1}]},
             {"id": 3, "n_ctx": 4096}]
    assert cells_in_use(slots) == CellsInUse(total=200, busy=170, needed=550)
    assert cells_in_use(tuple(slots)) == cells_in_use(slots)
    assert cells_in_use({"error": 1}) is None and cells_in_use([{"id": 0}]) is None and cells_in_use(None) is None


def test_the_figures_every_reader_shows() -> None:
    """What the slots' contexts show (shared: one; split: one each) and how full the pool is: the
    one formula behind the gateway's pool from /props and top's reading without a layout."""
    assert seen_tokens(4096, 4, unified=True) == 4096 and seen_tokens(1024, 4, unified=False) == 4096
    assert server_pool(ServerFacts(4, 1024, 16384), unified=False).tokens == seen_tokens(1024, 4, False)
    assert used_frac(1204, 4096) == 1204 / 4096
    assert used_frac(None, 4096) is None and used_frac(10, None) is None and used_frac(10, 0) is None
