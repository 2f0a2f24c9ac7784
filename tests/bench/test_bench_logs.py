"""``llamarig logs``: seed 000's pasted log, older formats, foreign/truncated/binary files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamarig.bench.logparse import parse_log_text
from llamarig.bench.logs import logs_report
from llamarig.cli.main import main


@pytest.fixture
def seed000(seeds_dir: Path) -> Path:
    return next(seeds_dir.glob("000_*.txt"))


def test_seed000_pasted_log(seed000: Path, validate_doc) -> None:
    doc = logs_report(seed000).to_json()
    validate_doc(doc)
    tl = {t["task"]: t for t in doc["timeline"]}
    assert tl[6822]["decode_tok_s"] == 37.17 and tl[6822]["depth"] == 30511
    assert tl[6890]["decode_tok_s"] == 37.05 and tl[6890]["depth"] == 45168
    assert tl[6822]["cached"] == 30271 and tl[6822]["prompt_eval_n"] == 240
    assert tl[6890]["cached"] == 30576 and tl[6890]["prompt_eval_n"] == 14592
    assert tl[6890]["prefill_tok_s"] == 874.93 and tl[6890]["lcp_similarity"] == 0.677
    assert tl[6822]["restored_checkpoint"] == 30271
    f = {x["name"]: x for x in doc["figures"]}
    assert f["checkpoint_size_mib"]["value"] == pytest.approx(149.626)
    assert f["checkpoints_kept"]["value"] == 14
    assert f["checkpoint_host_ram_mib"]["value"] == pytest.approx(14 * 149.626)
    text = "\n".join(doc["findings"])
    assert "37.17 tok/s at depth 30,511 vs 37.05 tok/s at depth 45,168" in text
    assert "each context checkpoint is 149.6 MiB; 14 kept → 2.0 GiB of host RAM" in text
    assert "only 240 of 30,511 prompt tokens were processed" in text
    # the Chinese text around the log is counted, not fatal
    assert doc["source"]["skipped"] > 100 and doc["source"]["requests"] == 2


def test_logs_cli_outputs(seed000: Path, tmp_path: Path, capsys, validate_doc) -> None:
    j, m, h = tmp_path / "l.json", tmp_path / "l.md", tmp_path / "l.html"
    assert main(["logs", str(seed000), "--json", str(j), "--md", str(m), "--html", str(h)]) in (None, 0)
    out = capsys.readouterr().out
    assert "6890" in out and "149.6 MiB" in out
    validate_doc(json.loads(j.read_text()))
    md = m.read_text()
    assert md.index("## Headline") < md.index("| figure | value | N | how measured |")
    assert "- **decode (from the log)**: 37.1 tok/s (median, p10 37.1 · p90 37.2, n=2)" in md
    assert "<svg" in h.read_text()


def test_older_formats() -> None:
    text = "\n".join([
        "llama_print_timings:        load time =    1234.56 ms",
        "llama_print_timings: prompt eval time =     512.00 ms /   128 tokens (    4.00 ms per token,   250.00 tokens per second)",
        "llama_print_timings:        eval time =    2000.00 ms /   100 runs   (   20.00 ms per token,    50.00 tokens per second)",
        "llama_print_timings:       total time =    2600.00 ms /   228 tokens",
        '{"tid":"1","timestamp":1,"level":"INFO","function":"print_timings","line":1,"msg":"prompt eval time     =     100.00 ms /    50 tokens (    2.00 ms per token,   500.00 tokens per second)","id_slot":0,"id_task":7}',
        '{"tid":"1","timestamp":1,"level":"INFO","function":"print_timings","line":1,"msg":"generation eval time =    1000.00 ms /    41 runs   (   24.39 ms per token,    41.00 tokens per second)","id_slot":0,"id_task":7}',
        "slot print_timing: id  0 | task 9 | prompt eval time =      10.00 ms /    20 tokens (    0.50 ms per token,  2000.00 tokens per second)",
        "slot print_timing: id  0 | task 9 |        eval time =     100.00 ms /    11 tokens (   10.00 ms per token,   100.00 tokens per second)",
        "slot print_timing: id  0 | task 9 | draft acceptance = 0.50000 (    5 accepted /    10 generated), mean len =  2.00",
        "slot      release: id  0 | task 9 | stop processing: n_tokens = 30, truncated = 0",
    ])
    p = parse_log_text(text)
    by = {r.task: r for r in p.requests}
    anon = [r for r in p.requests if r.slot == -1]
    assert anon and anon[0].eval_tok_s == 50.0 and anon[0].prompt_tok_s == 250.0
    assert by[7].prompt_tok_s == 500.0 and by[7].eval_tok_s == 41.0
    assert by[9].eval_tok_s == 100.0 and by[9].draft_accepted == 5 and by[9].depth == 20
    assert p.skipped == 0


def test_foreign_truncated_and_binary_files(tmp_path: Path, capsys) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("这不是日志\nnothing to see here\n" * 50)
    with pytest.raises(SystemExit) as e:  # a file with no llama-server line is bad input, not an empty report
        main(["logs", str(foreign)])
    assert e.value.code == 2
    truncated = tmp_path / "cut.log"
    truncated.write_text(
        "slot print_timing: id  0 | task 1 | prompt eval time =      10.00 ms /    20 tokens (    0.50 ms per token,  2000.00 tokens per second)\n"
        "slot print_timing: id  0 | task 1 |        eval time =     100.0"
    )
    doc = logs_report(truncated).to_json()
    assert doc["source"]["truncated_tail"] is True
    assert doc["timeline"][0]["prefill_tok_s"] == 2000.0 and doc["timeline"][0]["decode_tok_s"] is None
    assert any("truncated" in f for f in doc["findings"])
    binary = tmp_path / "model.gguf"
    binary.write_bytes(b"GGUF\x00\x00\x00\x03" + bytes(100))
    with pytest.raises(SystemExit) as e:
        main(["logs", str(binary)])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["logs", str(tmp_path / "missing.log")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "binary file" in err and "missing.log" in err and "Traceback" not in err


def test_docs_example_matches_output(capsys, tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "logs.md").read_text()
    cmd = next(ln[2:] for ln in doc.splitlines() if ln.startswith("$ llamarig logs "))
    argv = cmd.split()[1:]
    argv[1] = str(root / argv[1])
    argv[argv.index("--html") + 1] = str(tmp_path / "log.html")
    assert main(argv) in (None, 0)
    assert "<svg" in (tmp_path / "log.html").read_text()
    out = " ".join(capsys.readouterr().out.split())
    for finding in ("37.17 tok/s at depth 30,511 vs 37.05 tok/s at depth 45,168 (-0.3 %, each decoding alone)",
                    "each context checkpoint is 149.6 MiB; 14 kept → 2.0 GiB of host RAM",
                    "only 240 of 30,511 prompt tokens were processed"):
        assert finding in out
        assert " ".join(finding.split()) in " ".join(doc.split())


def _info_timings(task: int, prompt_tok_s: float, eval_tok_s: float) -> list[str]:
    """One request's timing block as 2024 server builds logged it (text, key=value suffix)."""
    kv = f'| tid="140" timestamp=1715000000 id_slot=0 id_task={task}'
    return [
        f"INFO [           print_timings] prompt eval time     =     123.45 ms /    10 tokens (   12.35 ms per token, "
        f"{prompt_tok_s:8.2f} tokens per second) {kv} t_prompt_processing=123.45 n_prompt_tokens_processed=10",
        f"INFO [           print_timings] generation eval time =    1000.00 ms /    50 runs   (   20.00 ms per token, "
        f"{eval_tok_s:8.2f} tokens per second) {kv} t_token_generation=1000.0 n_decoded=50",
        f"INFO [           print_timings]           total time =    1123.45 ms {kv} t_total=1123.45",
    ]


def test_old_text_format_reads_slot_and_task_from_suffix(tmp_path: Path) -> None:
    lines = [
        'INFO [    launch_slot_with_task] slot is processing task | tid="140" timestamp=1715000000 id_slot=0 id_task=5',
        *_info_timings(5, 81.0, 50.0),
        *_info_timings(6, 82.0, 40.0),
        *_info_timings(5, 83.0, 30.0),  # task ids repeat (restart): a new request, not an overwrite
    ]
    log = tmp_path / "old-text.log"
    log.write_text("\n".join(lines) + "\n")
    doc = logs_report(log).to_json()
    rows = [(t["slot"], t["task"], t["prefill_tok_s"], t["decode_tok_s"], t["eval_n"]) for t in doc["timeline"]]
    assert rows == [(0, 5, 81.0, 50.0, 50), (0, 6, 82.0, 40.0, 50), (0, 5, 83.0, 30.0, 50)]
    assert doc["source"]["skipped"] == 0 and doc["source"]["orphan_timings"] == 0
    f = {x["name"]: x for x in doc["figures"]}
    assert f["log_decode_tok_s_median"]["n"] == 3 and f["log_decode_tok_s_median"]["value"] == 40.0


def test_timing_lines_pair_only_with_a_block_missing_that_field() -> None:
    # a pinned-build block for task 9, then an old 'llama_print_timings:' block: the old block is a
    # request of its own (it used to overwrite task 9 with 32 tokens at 320 tok/s)
    text = "\n".join([
        "slot launch_slot_: id  0 | task 9 | processing task",
        "slot update_slots: id  0 | task 9 | new prompt, n_ctx_slot = 4096, n_keep = 0, n_prompt_tokens = 300",
        "slot      release: id  0 | task 9 | stop processing: n_past = 340, truncated = 0",
        "slot print_timing: id  0 | task 9 | ",
        "prompt eval time =      71.84 ms /   200 tokens (    0.36 ms per token,  2784.00 tokens per second)",
        "       eval time =     613.59 ms /    40 tokens (   15.34 ms per token,    65.19 tokens per second)",
        "      total time =     685.43 ms /   240 tokens",
        "llama_print_timings:        load time =     500.00 ms",
        "llama_print_timings: prompt eval time =     100.00 ms /    32 tokens (    3.12 ms per token,   320.00 tokens per second)",
        "llama_print_timings:        eval time =    2000.00 ms /    99 runs   (   20.20 ms per token,    49.50 tokens per second)",
        "llama_print_timings:       total time =    2100.00 ms /   131 tokens",
        "llama_print_timings: prompt eval time =      50.00 ms /    16 tokens (    3.12 ms per token,   320.00 tokens per second)",
        "llama_print_timings:        eval time =    1000.00 ms /    20 runs   (   50.00 ms per token,    20.00 tokens per second)",
    ])
    p = parse_log_text(text)
    assert [(r.slot, r.prompt_eval_n, r.prompt_tok_s, r.eval_n, r.eval_tok_s) for r in p.requests] == [
        (0, 200, 2784.0, 40, 65.19),  # task 9 keeps its own figures
        (-1, 32, 320.0, 99, 49.5),  # prompt-eval and eval lines of one old block: one request
        (-1, 16, 320.0, 20, 20.0),  # the next old block (no 'total time' line): a request of its own
    ]
    assert p.requests[0].task == 9 and p.requests[0].depth == 300 and p.requests[0].cached == 100
    assert p.orphan_timings == 2 and p.skipped == 0


def test_task_id_seen_again_after_a_restart_is_a_new_request() -> None:
    block = "\n".join([
        "slot update_slots: id  0 | task 9 | new prompt, n_ctx_slot = 4096, n_keep = 0, n_prompt_tokens = {n}",
        "slot print_timing: id  0 | task 9 | ",
        "prompt eval time =      71.84 ms /   200 tokens (    0.36 ms per token,  2784.00 tokens per second)",
        "       eval time =     613.59 ms /    40 tokens (   15.34 ms per token,    {r} tokens per second)",
        "      total time =     685.43 ms /   240 tokens",
    ])
    p = parse_log_text(block.format(n=300, r=65.0) + "\n" + block.format(n=900, r=60.0) + "\n")
    assert [(r.task, r.depth, r.eval_tok_s) for r in p.requests] == [(9, 300, 65.0), (9, 900, 60.0)]
    from llamarig.bench.logs import analyse

    names = [f.name for f in analyse(p)[0]]
    assert "log_decode_tok_s_task9" in names and len([n for n in names if n.startswith("log_decode_tok_s_task9")]) == 2


SEED_000 = Path(__file__).resolve().parents[1] / "fixtures" / "seeds" / "000_3d5d35932c1dd60e.txt"
SCRIPT_000 = Path(__file__).resolve().parents[1] / "flags" / "fixtures" / "seed000_105k.sh"


def test_logs_turn_the_3090_report_into_findings(tmp_path: Path) -> None:
    """The RTX 3090 field report's log answers its own question: an unlimited reasoning budget
    where the script says 768 (the flag never reached the server: the script is cut off at line
    10); n_ctx_slot = 95232 where the plan of the script's -c 105000 gives 105216
    (tests/app/test_logs_script.py sets it against the plan on the GPU)."""
    from llamarig.app.logs import logs_report

    doc = logs_report(SEED_000, SCRIPT_000, model="qwen3.6-27b:iq4_nl").to_json()
    text = "\n".join(doc["findings"])
    assert "n_ctx_slot = 95232, not the 105216 that" in text and "gives (-c 105000" in text
    assert "--reasoning-budget 768" in text and "never reached llama-server" in text
    assert "cut off at line 10" in text
    # without the script the log still says what ran
    alone = "\n".join(logs_report(SEED_000).to_json()["findings"])
    assert "2147483647" in alone and "n_ctx_slot = 95232" in alone


def test_empty_or_foreign_log_is_bad_input(tmp_path: Path) -> None:
    import pytest

    from llamarig.bench.logs import logs_report
    from llamarig.errors import InputError

    empty = tmp_path / "empty.log"
    empty.write_text("")
    with pytest.raises(InputError, match="empty"):
        logs_report(empty).to_json()
    foreign = tmp_path / "nginx.log"
    foreign.write_text('127.0.0.1 - - [03/Dec/2026:12:00:00 +0000] "GET / HTTP/1.1" 200 612\n' * 3)
    with pytest.raises(InputError, match="not a llama-server log"):
        logs_report(foreign).to_json()


# ---------------------------------------------------------------------------- concurrency and endings
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _truth(name: str) -> list[dict]:
    """What each request of a recorded log did, as the recorder saw it (tests/fixtures/logs/record.py)."""
    return json.loads((LOGS / f"{name}.requests.json").read_text())["requests"]


def test_parallel_decoding_is_not_depth(validate_doc) -> None:
    """The recorded -np 4 -kvu log: one request alone, four in parallel, one alone again, all at
    about the same depth. The slowdown is put down to the requests active at the same time, never
    to depth; the decode median says which concurrency it holds."""
    doc = logs_report(LOGS / "parallel.log").to_json()
    validate_doc(doc)
    truth = _truth("parallel")
    rows = doc["timeline"]
    assert [r["concurrency"] for r in rows] == [1 if t["phase"] == "alone" else 4 for t in truth]
    assert [r["outcome"] for r in rows] == ["done"] * len(truth)
    assert [r["eval_n"] for r in rows] == [t["tokens_predicted"] for t in truth]
    f = {x["name"]: x for x in doc["figures"]}
    n_alone = sum(t["phase"] == "alone" for t in truth)
    n_par = len(truth) - n_alone
    assert f["log_decode_tok_s_median"]["params"] == {"alone": n_alone, "parallel": n_par, "max_concurrency": 4}
    assert (f"{n_alone} decoded alone, {n_par} with others active (up to 4 at once)"
            in f["log_decode_tok_s_median"]["method"])
    assert f["log_decode_tok_s_alone_median"]["n"] == n_alone and f["log_decode_tok_s_parallel_median"]["n"] == n_par
    text = "\n".join(doc["findings"])
    assert "as depth grew" not in text
    (finding,) = [x for x in doc["findings"] if "other requests were active" in x]
    alone, par = f["log_decode_tok_s_alone_median"]["value"], f["log_decode_tok_s_parallel_median"]["value"]
    if par < 0.98 * alone:
        assert "slower per request" in finding and "Parallel decoding shares every step" in finding
    assert "up to 4 at once" in finding


def test_issue_example_is_parallel_decoding_not_depth() -> None:
    """The finding that read 'decode fell from 31.83 to 18.99 tok/s (40.3 %) as depth grew from 99
    to 100 tokens: expected' on a log where a parallel agent stream halved decode."""
    def block(slot: int, task: int, depth: int, rate: float) -> list[str]:
        return [f"slot print_timing: id  {slot} | task {task} | prompt eval time =      10.00 ms /   {depth} tokens "
                "(    0.10 ms per token, 9900.00 tokens per second)",
                f"slot print_timing: id  {slot} | task {task} |        eval time =    1000.00 ms /   100 tokens "
                f"(   10.00 ms per token,    {rate:.2f} tokens per second)",
                f"slot      release: id  {slot} | task {task} | stop processing: n_tokens = {depth + 99}, truncated = 0"]

    lines = ["slot launch_slot_: id  0 | task 1 | processing task, is_child = 0", *block(0, 1, 99, 31.83),
             "slot launch_slot_: id  0 | task 2 | processing task, is_child = 0",
             "slot launch_slot_: id  1 | task 3 | processing task, is_child = 0",
             *block(1, 3, 100, 19.02), *block(0, 2, 100, 18.99)]
    p = parse_log_text("\n".join(lines) + "\n")
    assert [(r.task, r.concurrency) for r in p.requests] == [(1, 1), (2, 2), (3, 2)]
    from llamarig.bench.logs import analyse

    findings = analyse(p)[1]
    assert not [x for x in findings if "as depth grew" in x], findings
    assert any("decode 31.83 tok/s per request while it decoded alone (1 requests) vs 19.00 tok/s while other "
               "requests were active at the same time (2 requests, up to 2 at once)" in x for x in findings), findings


def test_endings_cancel_and_context_exceeded(validate_doc) -> None:
    """The recorded endings log: a request that finished, a streaming client that went away, and three
    requests that filled the 4096 shared cells; each row says how it ended instead of a row of dashes."""
    doc = logs_report(LOGS / "endings.log").to_json()
    validate_doc(doc)
    truth = _truth("endings")
    want = {"done": "done", "cancelled": "cancelled", "overflow": "context_exceeded"}
    assert [r["outcome"] for r in doc["timeline"]] == [want[t["what"]] for t in truth]
    over = [r for r in doc["timeline"] if r["outcome"] == "context_exceeded"]
    assert all(r["error"] == "Context size has been exceeded." and r["concurrency"] == 3 for r in over)
    assert all(r["decode_from"] == "progress" and r["eval_n"] and r["decode_tok_s"] for r in over)
    srv = doc["source"]["server"]
    assert (srv["n_slots"], srv["n_ctx_slot"], srv["kv_unified"], srv["pool_tokens"]) == (4, 4096, True, 4096)
    text = "\n".join(doc["findings"])
    assert "3 requests ended with 'Context size has been exceeded'" in text
    assert "share one KV pool of 4096 cells" in text and "together they did not fit the pool" in text
    assert "1 request(s) were cancelled before they finished" in text
    assert "have no timing lines" not in text


def test_pasted_without_timestamps_reads_the_same() -> None:
    """Pasted into a chat, the timestamps are often gone: the order of the lines is enough."""
    import re

    text = (LOGS / "endings.log").read_text()
    bare = re.sub(r"(?m)^\d+\.\d{2}\.\d{3}\.\d{3} [IWEDT] ", "", text)
    a, b = parse_log_text(text), parse_log_text(bare)
    assert [(r.task, r.outcome, r.concurrency) for r in a.requests] == [(r.task, r.outcome, r.concurrency) for r in b.requests]
    assert all(r.t_start_s is None for r in b.requests) and any(r.t_start_s is not None for r in a.requests)


def test_logs_screen_shows_outcomes(capsys) -> None:
    assert main(["logs", str(LOGS / "endings.log")]) in (None, 0)
    out = capsys.readouterr().out
    assert "cancelled" in out and "context" in out and "~" in out
    assert "[yellow]" not in out and "[/]" not in out


def test_recorded_restarts_each_run_on_its_own(validate_doc) -> None:
    """The recorded log of three runs (tests/fixtures/logs/README.md; tests/bench/test_logs_restarts.py
    makes one afresh against the real server): the old reading paired task ids across runs,
    ran the killed run's three requests through the later runs (a serial run 'with others
    active', 'up to 5 at once' on 1 and 2 slots) and stated three n_ctx_slot values in one line
    and one median."""
    doc = logs_report(LOGS / "restarts.log").to_json()
    validate_doc(doc)
    truth = json.loads((LOGS / "restarts.requests.json").read_text())["runs"]
    runs = doc["runs"]
    assert [len(r["requests"]) for r in truth] == [r["requests"] for r in runs] == [7, 15, 2]
    assert [(r["server"]["n_slots"], r["server"]["n_ctx_slot"]) for r in runs] == [(4, 4096), (1, 2048), (2, 3072)]
    assert [r["exited"] for r in runs] == [False, True, True]
    for k, slots in ((1, 4), (2, 1), (3, 2)):
        assert max(t["concurrency"] for t in doc["timeline"] if t["run"] == k) <= slots
    f = {x["name"]: x for x in doc["figures"]}
    assert f["log_decode_tok_s_median_run2"]["n"] == 15 and "every request decoded alone" in f[
        "log_decode_tok_s_median_run2"]["method"]
    assert not any("n_ctx_slot = 2048, 3072" in x for x in doc["findings"])
    text = "\n".join(doc["findings"])
    assert text.count("llama-server started again") == 2 and "run 1: 3 request(s) were still running" in text
