"""``llamarig bench`` against the real llama-server (build 11434) with a tiny synthetic model."""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from llamarig.bench.html import render_html
from llamarig.bench.logparse import parse_log_text
from llamarig.bench.logs import logs_report
from llamarig.bench.runner import FIT_CTX, BenchConfig, InterferenceError, run_bench
from llamarig.cli.main import main

pytestmark = pytest.mark.server


def figs(doc: dict) -> dict[str, dict]:
    return {f["name"]: f for f in doc["figures"]}


def test_decode_agrees_with_server_timings_and_log(np2_server, validate_doc) -> None:
    doc = run_bench(BenchConfig(url=np2_server.url, scenarios=("decode",), k=4, n_predict=48, warmup=1)).to_json()
    validate_doc(doc)
    f = figs(doc)
    med = f["decode_tok_s_median"]
    assert med["n"] == 4 and len(med["samples"]) == 4 and med["unit"] == "tok/s"
    assert "predicted_n − 1" in med["method"] and "warm-up" in med["method"]
    measured = [r for r in doc["requests"] if r["scenario"] == "decode" and not r["warmup"]]
    assert len(measured) == 4 and all(r["status"] == 200 for r in measured)
    # the server's own figure (timings.predicted_per_second) agrees within 2 %
    server_own = statistics.median(r["timings"]["predicted_per_second"] for r in measured)
    assert med["value"] == pytest.approx(server_own, rel=0.02)
    # ... and so do the server's log lines for the same requests (the last 5 print_timing blocks)
    parsed = parse_log_text(np2_server.log, "server.log")
    logged = [r.eval_tok_s for r in parsed.requests if r.eval_tok_s is not None][-4:]
    assert statistics.median(logged) == pytest.approx(med["value"], rel=0.02)
    # every request produced exactly max_tokens (ignore_eos) and a client-clock rate too
    assert all(r["timings"]["predicted_n"] == 48 for r in measured)
    assert f["decode_client_tok_s_median"]["value"] > 0
    assert doc["interference"]["reconciliation"]["counters"]["tokens_predicted_total"]["excess"] == 0
    assert doc["gpu"]["available"] is False and "nvidia-smi" in doc["gpu"]["reason"]


def test_cold_prefill_is_cold_and_validation_catches_cache(np2_server) -> None:
    cfg = BenchConfig(url=np2_server.url, scenarios=("prefill",), prefill_lengths=(64, 256), repeats=2, warmup=1)
    doc = run_bench(cfg).to_json()
    pre = [r for r in doc["requests"] if r["scenario"] == "prefill"]
    assert len(pre) == 5
    for r in pre:
        assert r["timings"]["cache_n"] == 0
        assert r["timings"]["prompt_n"] == r["expected_prompt_tokens"]
        assert r["valid"]
    f = figs(doc)
    assert f["prefill_tok_s_256_median"]["n"] == 2
    assert f["prefill_tok_s_256_median"]["params"]["prompt_tokens"] == pytest.approx(256, abs=4)
    assert "cache_prompt=false" in f["prefill_tok_s_256_median"]["method"]
    # the same scenario with the prompt cache left on (and no salt): the validation rejects hits
    warm = run_bench(BenchConfig(url=np2_server.url, scenarios=("prefill",), prefill_lengths=(256,), repeats=2,
                                 warmup=0, prefill_cache_prompt=True, prefill_salt=False)).to_json()
    wr = [r for r in warm["requests"] if r["scenario"] == "prefill"]
    assert any(r["timings"]["cache_n"] > 0 for r in wr)
    rejected = [r for r in wr if not r["valid"]]
    assert rejected and all("cache_n" in r["reject_reason"] for r in rejected)
    assert figs(warm)["prefill_tok_s_256_median"]["n"] < 2


@pytest.fixture(scope="module")
def ttft_depth_concurrency_doc(np2_server) -> dict:
    """One run of ttft, depth and concurrency against the real server, shared by the scenario
    checks (always run) and the HTML-in-Chromium check (skipped without Chromium)."""
    cfg = BenchConfig(url=np2_server.url, scenarios=("ttft", "depth", "concurrency"), ttft_prefix=256, repeats=2,
                      depths=(0, 600, FIT_CTX, 4096), concurrency=(1, 2), n_predict=24)
    return run_bench(cfg).to_json()


def test_warm_ttft_depth_concurrency(np2_server, ttft_depth_concurrency_doc, validate_doc, tmp_path: Path) -> None:
    doc = ttft_depth_concurrency_doc
    validate_doc(doc)
    f = figs(doc)
    warm = [r for r in doc["requests"] if r["scenario"] == "ttft" and not r["warmup"]]
    assert warm and all(r["valid"] for r in warm)
    assert all(r["timings"]["cache_n"] >= r["expected_prompt_tokens"] - 4 for r in warm)
    assert f["ttft_warm_ms_median"]["n"] == 2 and f["ttft_warm_ms_median"]["params"]["cache_n_median"] >= 250
    deep = f["decode_tok_s_at_depth_600_median"]
    assert deep["params"]["depth_median"] == pytest.approx(600, abs=8)
    assert f["decode_tok_s_at_depth_0_median"]["value"] > 0 and deep["value"] > 0
    # 'ctx': the deepest point that fits the 1024-token slot with 24 generated tokens; 4096 does not fit
    ctx_point = 1024 - 24 - 16 - 5
    full = f[f"decode_tok_s_at_depth_{ctx_point}_median"]
    assert full["value"] > 0 and ctx_point - 8 <= full["params"]["depth_median"] <= 1024 - 24
    depth_reqs = [r for r in doc["requests"] if r["scenario"] == "depth"]
    assert all(r["status"] == 200 and r["timings"]["predicted_n"] == 24 for r in depth_reqs)
    notes = next(s for s in doc["scenarios"] if s["name"] == "depth")["notes"]
    assert any(n.startswith(f"depth 'ctx' = {ctx_point}: slot context 1024") for n in notes)
    assert any(n.startswith("depth 4096 skipped: 4096 + 24 generated") for n in notes)
    assert not any("depth_4k" in name for name in f)
    # concurrency: 2 rounds (--repeats) of N parallel requests; each round's whole span is a sample,
    # and each round where both streams decoded at once a steady-state sample (24 tokens each: on
    # a loaded machine one stream may finish before the other starts, and that round has none)
    whole = f["concurrency_2_round_tok_s"]
    assert whole["value"] > 0 and whole["n"] == 2 and len(whole["samples"]) == 2
    assert whole["value"] == pytest.approx(statistics.median(whole["samples"]))
    assert whole["spread"]["p10"] <= whole["value"] <= whole["spread"]["p90"]
    agg = f["concurrency_2_aggregate_tok_s"]
    assert agg["n"] == agg["params"]["steady_rounds"] <= 2 and len(agg["params"]["window_s"]) == agg["n"]
    if agg["n"]:
        assert agg["value"] == pytest.approx(statistics.median(agg["samples"]))
    else:
        assert agg["value"] is None and agg["note"]
    assert f["concurrency_2_per_stream_tok_s_median"]["n"] == 4
    assert len([r for r in doc["requests"] if r["scenario"] == "concurrency" and not r["warmup"]]) == 2 * 1 + 2 * 2
    assert doc["interference"]["events"] == []  # our own parallel streams are not interference
    # a self-contained HTML report (no external resources)
    html = tmp_path / "report.html"
    html.write_text(render_html(doc), encoding="utf-8")
    text = html.read_text()
    assert "<svg" in text and "http://" not in text.replace(np2_server.url, "").replace("http://www.w3.org", "")


def test_real_run_reads_headline_first(ttft_depth_concurrency_doc) -> None:
    """The real run's HTML and Markdown: the headline (warm TTFT, decode vs depth, concurrency,
    with unit and n) before the plots and the table; each method text once."""
    from llamarig.bench.report import markdown, method_key

    doc = ttft_depth_concurrency_doc
    page, md = render_html(doc), markdown(doc)
    assert page.index('<div class="head">') < page.index('<div class="plots">') < page.index("<table>")
    assert md.index("## Headline") < md.index("## Figures")
    head = md[md.index("## Headline"):md.index("## Figures")]
    assert "**warm TTFT**:" in head and " ms (median" in head and "n=2; cached prefix ~256 tokens" in head
    assert "**decode vs depth**:" in head and "**2 parallel streams, steady-state decode**:" in head and "tok/s" in head
    methods = {method_key(f["method"]) for f in doc["figures"]}
    assert len(methods) < len(doc["figures"])  # siblings (median, p10, p90, max) share their method
    for m in methods:
        assert md.count(m) == 1, m


def test_html_report_opens_in_chromium(ttft_depth_concurrency_doc, tmp_path: Path, open_in_chromium) -> None:
    """The HTML report of the real run opens in headless Chromium without console errors, in
    English and in Chinese."""

    html = tmp_path / "report.html"
    html.write_text(render_html(ttft_depth_concurrency_doc), encoding="utf-8")
    lines, rc = open_in_chromium(html, tmp_path / "report.png")
    assert rc == 0 and lines == []
    assert (tmp_path / "report.png").stat().st_size > 10_000
    zh = tmp_path / "report-zh.html"
    zh.write_text(render_html(ttft_depth_concurrency_doc, "zh"), encoding="utf-8")
    assert "<h2>要点</h2>" in zh.read_text()
    lines, rc = open_in_chromium(zh, tmp_path / "report-zh.png")
    assert rc == 0 and lines == [] and (tmp_path / "report-zh.png").stat().st_size > 10_000
    # positive control: the same check sees a console error
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom')</script></body></html>")
    assert open_in_chromium(bad, tmp_path / "bad.png")[0]


def _foreign_client(url: str, stop: threading.Event, done: list[int], errors: list[str]) -> None:
    """Another agent's cron job: back-to-back long generations pinned to slot 1 (900 of the
    slot's 1024 tokens), so slot 1 is busy whenever the bench looks; errors are kept, not lost."""
    body = json.dumps({"prompt": "foreign agent cron job", "n_predict": 900, "ignore_eos": True, "id_slot": 1}).encode()
    while not stop.is_set():
        req = urllib.request.Request(url + "/completion", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                r.read()
            done.append(1)
        except Exception as e:  # noqa: BLE001 - the test asserts on it
            errors.append(repr(e))
            stop.wait(0.1)


def _wait_slot_busy(url: str, slot: int, timeout_s: float = 120) -> None:
    """Wait for the event "slot N is processing" (not for a time): the bench then starts while
    the foreign work certainly runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "/slots", timeout=30) as r:
            slots = json.loads(r.read())
        if any(s.get("id") == slot and s.get("is_processing") for s in slots):
            return
        time.sleep(0.02)
    raise AssertionError(f"slot {slot} never became busy")


def test_interference_detected_and_strict(np2_server, validate_doc) -> None:
    stop = threading.Event()
    done: list[int] = []
    errors: list[str] = []
    t = threading.Thread(target=_foreign_client, args=(np2_server.url, stop, done, errors), daemon=True)
    t.start()
    try:
        _wait_slot_busy(np2_server.url, 1)
        cfg = BenchConfig(url=np2_server.url, scenarios=("decode",), k=6, n_predict=64, slot=0, poll_interval_s=0.05)
        doc = run_bench(cfg).to_json()
        _wait_slot_busy(np2_server.url, 1)
        with pytest.raises(InterferenceError, match="slot 1"):
            run_bench(BenchConfig(url=np2_server.url, scenarios=("decode",), k=6, n_predict=64, slot=0,
                                  poll_interval_s=0.05, strict=True)).to_json()
    finally:
        stop.set()
        t.join(timeout=300)
    assert not errors, errors
    validate_doc(doc)
    ev = doc["interference"]["events"]
    assert any(e["kind"] == "foreign_slot" and e["slot"] == 1 for e in ev)
    assert figs(doc)["interference_events"]["value"] >= 1
    measured = [r for r in doc["requests"] if not r["warmup"]]
    assert any(r["contaminated"] for r in measured)
    assert "foreign work" in figs(doc)["decode_tok_s_median"]["note"]
    # foreign requests that finished between the /metrics scrapes show up as excess tokens
    rec = doc["interference"]["reconciliation"]["counters"]["tokens_predicted_total"]
    assert rec["excess"] >= 0 and rec["server_delta"] >= rec["ours"]
    assert done  # the foreign client really ran


def test_cli_outputs_and_real_log(np2_server, tmp_path: Path, validate_doc, capsys) -> None:
    j, h, m = tmp_path / "run.json", tmp_path / "run.html", tmp_path / "run.md"
    rc = main(["bench", "--url", np2_server.url, "-s", "decode,prefill", "--lengths", "64,8k,ctx", "--repeats", "2",
               "--k", "2", "-n", "16", "--json", str(j), "--html", str(h), "--md", str(m)])
    assert rc in (None, 0)
    out = " ".join(capsys.readouterr().out.split())
    assert "decode_tok_s_median" in out and "methods" in out
    # the skipped point and the resolved 'ctx' point are said in the output, with the reason
    assert "prefill: length 8192 skipped: 8192 + 1 generated + 16 margin exceeds the slot context 1024" in out
    assert "prefill: length 'ctx' = 1002: slot context 1024" in out
    doc = json.loads(j.read_text())
    validate_doc(doc)
    assert doc["config"]["prefill_lengths"] == [64, 8192, "ctx"]
    ctx_fig = figs(doc)["prefill_tok_s_1002_median"]
    assert ctx_fig["n"] == 2 and ctx_fig["value"] > 0
    assert 990 <= ctx_fig["params"]["prompt_tokens"] <= 1024 - 1
    assert "length 8192 skipped" in m.read_text()
    assert doc["target"]["total_slots"] == 2 and doc["target"]["build_info"]
    md = m.read_text()
    assert md.index("- **decode**: ") < md.index("- **prefill at 64 tokens**: ") < md.index("| figure | value | N | how measured |")
    assert "decode_tok_s_median" in md and "<svg" in h.read_text()
    # the terminal opens with the headline too: the decode median, its unit and n, before the table
    assert out.index("decode: ") < out.index("prefill at 64 tokens: ") < out.index("decode_tok_s_median")
    assert "tok/s (median, p10" in out and "n=2)" in out
    # `llamarig logs` on this real server's log (build 11434 format)
    log = tmp_path / "server.log"
    log.write_text(np2_server.log)
    ldoc = logs_report(log).to_json()
    validate_doc(ldoc)
    assert ldoc["source"]["requests"] >= 3
    assert ldoc["source"]["skipped"] <= 5
    tl = [t for t in ldoc["timeline"] if t["decode_tok_s"] is not None]
    assert tl and all(t["depth"] and t["depth"] > 0 for t in tl)
    assert any(f["name"] == "log_decode_tok_s_median" for f in ldoc["figures"])


def test_spec_acceptance_and_missing_endpoints(llama_server, synth_model, tmp_path: Path, validate_doc) -> None:
    srv = llama_server(synth_model("llama"), "-c", "1024", "-np", "1", "--spec-type", "ngram-simple", "--no-slots")
    base = llama_server(synth_model("llama"), "-c", "1024", "-np", "1")
    prompts = tmp_path / "abc.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "user", "content": "a b c a b c a b c a b c a b c"}]}) + "\n")
    doc = run_bench(BenchConfig(url=srv.url, scenarios=("spec", "workload"), k=2, n_predict=64, temperature=0.0,
                                endpoint="completion", prompt_set=str(prompts), baseline_url=base.url, workload=prompts)).to_json()
    validate_doc(doc)
    f = figs(doc)["spec_acceptance"]
    measured = [r for r in doc["requests"] if not r["warmup"] and r["scenario"] == "spec" and "target" not in r["extra"]]
    assert len(measured) == 2
    dn = sum(r["timings"]["draft_n"] for r in measured)
    da = sum(r["timings"]["draft_n_accepted"] for r in measured)
    assert dn > 0 and f["value"] == pytest.approx(da / dn)
    assert "draft_n_accepted" in f["method"]
    names = figs(doc)
    assert names["spec_baseline_decode_tok_s_median"]["n"] == 2 and names["spec_speedup"]["value"] > 0
    baseline = [r for r in doc["requests"] if r["extra"].get("target") == base.url]
    assert len(baseline) == 3 and all("draft_n" not in r["timings"] for r in baseline)
    assert names["workload_decode_tok_s_median"]["n"] == 1 and "replayed" in names["workload_decode_tok_s_median"]["method"]
    inter = doc["interference"]
    assert not inter["slots_endpoint"] and not inter["metrics_endpoint"]
    assert any("/slots" in m and "501" in m for m in inter["missing"])
    assert any("--metrics" in m for m in inter["missing"])
    assert all(r["contaminated"] is None for r in doc["requests"])
    assert figs(doc)["interference_events"]["value"] is None


def test_docs_examples_run(np2_server, tmp_path: Path, monkeypatch) -> None:
    """Every `$ llamarig bench --url http://127.0.0.1:8080 …` example of docs/bench.md runs."""
    import shlex

    docs = Path(__file__).resolve().parents[2] / "docs" / "bench.md"
    cmds = [ln[2:] for ln in docs.read_text().splitlines() if ln.startswith("$ llamarig bench --url http://127.0.0.1:8080")]
    assert len(cmds) >= 4
    monkeypatch.chdir(tmp_path)
    for cmd in cmds:
        argv = shlex.split(cmd.replace("http://127.0.0.1:8080", np2_server.url))[1:] + ["-q"]
        assert main(argv) in (None, 0), cmd
    assert (tmp_path / "decode.json").exists() and (tmp_path / "run.html").exists()


def test_hybrid_model_warm_ttft_and_checkpoint_log(llama_server, synth_model, tmp_path: Path, validate_doc) -> None:
    """Qwen3.6-like hybrid (gated delta net): the cache is reused only via context checkpoints;
    warm TTFT still works append-only, and the server's trace log yields checkpoint records."""
    srv = llama_server(synth_model("qwen35"), "-c", "2048", "-np", "1", "-lv", "4", "--checkpoint-min-step", "64")
    doc = run_bench(BenchConfig(url=srv.url, scenarios=("ttft",), ttft_prefix=300, repeats=2)).to_json()
    warm = [r for r in doc["requests"] if not r["warmup"]]
    assert all(r["valid"] for r in warm), [r["reject_reason"] for r in warm]
    assert all(r["expected_prompt_tokens"] - 8 <= r["timings"]["cache_n"] < r["expected_prompt_tokens"] + 1 for r in warm)
    log = tmp_path / "hybrid.log"
    log.write_text(srv.log)
    ldoc = logs_report(log).to_json()
    validate_doc(ldoc)
    f = figs(ldoc)
    assert f["checkpoints_kept"]["value"] >= 1 and f["checkpoint_size_mib"]["value"] > 0
    assert any(t["restored_checkpoint"] for t in ldoc["timeline"])
    assert any("context checkpoint is" in x for x in ldoc["findings"])


def test_server_stopping_mid_run_keeps_what_was_measured(llama_server, synth_model) -> None:
    srv = llama_server(synth_model("llama"), "-c", "1024", "-np", "1", "--metrics")

    def progress(label: str, done: int, total: int) -> None:
        if done == 4:  # warm-up + 3 measured requests, then the server goes away
            srv.stop()

    doc = run_bench(BenchConfig(url=srv.url, scenarios=("decode", "prefill"), k=20, n_predict=16,
                                prefill_lengths=(64,), wait_ready_s=2), progress).to_json()
    dec = figs(doc)["decode_tok_s_median"]
    assert dec["n"] == 3 and dec["value"] > 0
    assert any("cut short: 3 consecutive failed requests" in e for e in doc["errors"])
    assert doc["aborted"].startswith("server unreachable after scenario 'decode'")
    assert [s["name"] for s in doc["scenarios"]] == ["decode"]


def test_concurrency_is_the_steady_state_of_the_parallel_streams(llama_server, synth_model, validate_doc) -> None:
    """Four streams on four slots: the concurrency figure is the rate of all four while all were
    decoding (every decoding slot gains a token per step), not their tokens over a round that also
    holds prefill and queueing (the report's 49.6 tok/s for four streams of about 28 each)."""
    srv = llama_server(synth_model("llama", n_ctx_train=8192), "-c", "8192", "-np", "4", "-kvu", "--metrics")
    doc = run_bench(BenchConfig(url=srv.url, scenarios=("concurrency",), concurrency=(4,), repeats=2, n_predict=96,
                                warmup=1)).to_json()
    validate_doc(doc)
    f = figs(doc)
    agg, whole = f["concurrency_4_aggregate_tok_s"], f["concurrency_4_round_tok_s"]
    assert agg["params"]["steady_rounds"] == 2 and agg["n"] == 2 and whole["n"] == 2
    assert all(w > 0 for w in agg["params"]["window_s"]) and all(t > 0 for t in agg["params"]["tokens_in_window"])
    assert "steady state" in agg["method"] and "prefill" in whole["method"]
    per = f["concurrency_4_per_stream_tok_s_median"]["value"]
    # four streams decoding together: about four times one stream's rate (a factor of two of slack)
    assert agg["value"] >= 0.5 * 4 * per, (agg["value"], per)
    streams = [r for r in doc["requests"] if r["scenario"] == "concurrency" and not r["warmup"]]
    assert len(streams) == 8 and all(r["timings"]["predicted_n"] == 96 for r in streams)
    ttft = [n for n in f if n.startswith("concurrency_4_ttft_")]
    assert ttft and all(("_cold_" in n or "_warm_" in n) for n in ttft)


def test_ttft_says_cold_or_warm(llama_server, synth_model) -> None:
    """The same decode run twice: the first answers from prompts the server has not seen, the
    second from its prompt cache; the two TTFTs never share a figure, and each says how many
    prompt tokens were cached."""
    srv = llama_server(synth_model("llama"), "-c", "2048", "-np", "1", "--metrics")
    cfg = BenchConfig(url=srv.url, scenarios=("decode",), k=3, n_predict=16, warmup=0, prompt_set="tetris")
    first, second = figs(run_bench(cfg).to_json()), figs(run_bench(cfg).to_json())
    cold = first["decode_ttft_cold_ms_median"]
    assert "decode_ttft_warm_ms_median" not in first or first["decode_ttft_warm_ms_median"]["n"] < 3
    assert cold["params"]["cached_tokens_median"] < cold["params"]["prompt_tokens_median"] / 2
    warm = second.get("decode_ttft_warm_ms_median")
    assert warm is not None and warm["params"]["cached_tokens_median"] >= warm["params"]["prompt_tokens_median"] / 2, second.keys()
