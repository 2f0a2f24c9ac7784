"""Pure parts of bench: statistics, figure records, compare, /metrics and nvidia-smi parsing,
workload files, Markdown, the JSON Schema itself."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from llamarig.bench.client import RequestSample
from llamarig.bench.compare import compare_docs
from llamarig.bench.gpu import energy_joules
from llamarig.bench.monitor import Monitor, Scrape, Tracker, parse_metrics, reconcile
from llamarig.bench.prompts import TETRIS_PROMPT, load_workload, prompt_set
from llamarig.bench.records import percentile, spread_of, stat_figures
from llamarig.bench.report import markdown, schema
from llamarig.cli.main import main
from llamarig.errors import InputError
from llamarig.hardware.telemetry import parse_nvidia_smi


def test_percentile_matches_numpy_type7() -> None:
    np = pytest.importorskip("numpy")
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    for q in (0, 10, 50, 90, 100):
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    sp = spread_of(xs)
    assert sp["min"] == 1.0 and sp["max"] == 9.0 and "type 7" in sp["percentile_method"]


def test_stat_figures_carry_method_and_samples() -> None:
    figs = stat_figures("decode_tok_s", [10.0, 20.0, 30.0], "tok/s", "what was sent")
    med = figs[0]
    assert med.name == "decode_tok_s_median" and med.value == 20.0 and med.n == 3
    assert med.samples == (10.0, 20.0, 30.0) and med.method == "median over N=3 requests; what was sent"
    empty = stat_figures("x", [], "tok/s", "m")[0]
    assert empty.value is None and empty.note == "no valid sample"
    jsonschema.validate(med.to_json(), schema()["$defs"]["figure"])


def test_server_decode_formula_uses_raw_fields() -> None:
    s = RequestSample(seq=0, scenario="decode", status=200)
    s.timings = {"predicted_n": 65, "predicted_ms": 1000.0, "predicted_per_second": 999.0}
    assert s.server_decode_tok_s == pytest.approx(64.0)  # (n − 1) / t, not the server's own field
    s.ttft_s, s.t_last_s = 0.5, 1.5
    assert s.client_decode_tok_s == pytest.approx(64.0)


def _doc(name: str, samples: list[float], unit: str = "tok/s") -> dict:
    f = stat_figures(name, samples, unit, "method text")[0]
    return {"figures": [f.to_json()]}


def test_compare_noise_band() -> None:
    a = _doc("decode_tok_s", [40.0, 41.0, 42.0, 43.0, 44.0])
    within = _doc("decode_tok_s", [40.5, 41.5, 42.5, 43.5, 44.5])
    better = _doc("decode_tok_s", [50.0, 51.0, 52.0, 53.0, 54.0])
    assert compare_docs(a, within)[0].verdict == "within noise"
    row = compare_docs(a, better)[0]
    assert row.verdict == "B better" and row.delta_pct == pytest.approx(100 * 10 / 42)
    slower_ttft = compare_docs(_doc("ttft_ms", [10, 11, 12], "ms"), _doc("ttft_ms", [30, 31, 32], "ms"))[0]
    assert slower_ttft.verdict == "B worse"
    one = compare_docs(_doc("x", [1.0]), _doc("x", [2.0]))[0]
    assert one.verdict == "noise unknown (N<2)"


def test_compare_cli(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_doc("decode_tok_s", [40.0, 41.0, 42.0])))
    b.write_text(json.dumps(_doc("decode_tok_s", [60.0, 61.0, 62.0])))
    out = tmp_path / "cmp.json"
    assert main(["bench", "compare", str(a), str(b), "--json", str(out)]) in (None, 0)
    assert "B better" in capsys.readouterr().out
    assert json.loads(out.read_text())["rows"][0]["verdict"] == "B better"
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        main(["bench", "compare", str(a), str(tmp_path / "bad.json")])
    assert e.value.code == 2


def test_parse_metrics_and_reconcile() -> None:
    text = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
llamacpp:tokens_predicted_total 300
llamacpp:requests_deferred 0
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5
garbage line here
"""
    m = parse_metrics(text)
    assert m["prompt_tokens_total"] == 120 and m['spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] == 5
    first = Scrape(0, {"prompt_tokens_total": 100, "tokens_predicted_total": 200}, "1")
    last = Scrape(1, {"prompt_tokens_total": 150, "tokens_predicted_total": 290}, "1")
    rec = reconcile(first, last, {"prompt_n": 50, "predicted_n": 64})
    assert rec["counters"]["tokens_predicted_total"]["excess"] == 26 and rec["foreign_work_completed"]
    assert reconcile(None, last, {}) == {"available": False}
    assert reconcile(first, Scrape(2, last.values, "2"), {"prompt_n": 50, "predicted_n": 90})["restart"] is True
    # through a gateway the backend's samples carry a label: their sum stands for the total
    gw = parse_metrics('llamacpp:tokens_predicted_total{backend="a"} 10\n'
                       'llamacpp:tokens_predicted_total{backend="b"} 5\nllamacpp:prompt_tokens_total 7\n'
                       'llamacpp:prompt_tokens_total{backend="a"} 99\n')
    assert gw["tokens_predicted_total"] == 15 and gw["prompt_tokens_total"] == 7


def test_monitor_flags_foreign_slots_without_a_server() -> None:
    tr = Tracker()
    mon = Monitor(client=None, tracker=tr, interval_s=0.1)  # type: ignore[arg-type]
    tr.start(0)
    busy = [{"id": 0, "is_processing": True, "id_task": 5}, {"id": 1, "is_processing": True, "id_task": 9}]
    mon.check(busy, 1.0)
    assert mon.events == []  # one poll is not enough (slot release lag)
    mon.check(busy, 1.1)
    assert [e.kind for e in mon.events] == ["foreign_slot"] and mon.events[0].slot == 1
    assert mon.foreign_between(1.0, 1.05) and not mon.foreign_between(5.0, 6.0)
    tr.end(0)
    tr.start(None)
    idle_ours = [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}]
    for t in (2.0, 2.1, 2.2):
        mon.check(idle_ours, t)
    assert len(mon.events) == 1  # our own unpinned request is not foreign


def test_nvidia_smi_parsing_and_energy() -> None:
    out = "0, NVIDIA GeForce RTX 3090, 300.5, 47, 1800, 9751, 23230, 24576, 98\n1, NVIDIA X, [N/A], 40, 1, 2, 3, 4, 5\n"
    rows = parse_nvidia_smi(out)
    assert rows[0].power_w == 300.5 and rows[0].temp_c == 47 and rows[1].power_w is None and rows[0].index == 0
    samples = [{"t_s": 0.0, "index": 0, "power_w": 100.0}, {"t_s": 2.0, "index": 0, "power_w": 300.0}]
    joules, how = energy_joules(samples) or (0.0, "")
    assert joules == pytest.approx(400.0) and "power" in how
    assert energy_joules([]) is None
    # NVML's energy counter wins where every GPU has it
    counted = [{"t_s": 0.0, "index": 0, "power_w": 100.0, "energy_j": 5000.0},
               {"t_s": 2.0, "index": 0, "power_w": 300.0, "energy_j": 5350.0}]
    assert energy_joules(counted) == (350.0, "the driver's energy counter (NVML), last − first reading")


def test_prompt_sets_and_workload(tmp_path: Path) -> None:
    tet = prompt_set("tetris", 2, 0)
    assert tet[0].messages[1]["content"] == TETRIS_PROMPT and tet[0].messages != tet[1].messages
    assert "俄罗斯方块" in TETRIS_PROMPT
    assert prompt_set("synthetic", 3, 1) == prompt_set("synthetic", 3, 1)  # deterministic
    w = tmp_path / "w.jsonl"
    w.write_text('{"messages":[{"role":"user","content":"hi"}],"max_tokens":7}\n\n'
                 '{"body":{"messages":[{"role":"user","content":"yo"}]}}\n')
    reqs = load_workload(w)
    assert len(reqs) == 2 and reqs[0].max_tokens == 7
    w.write_text('{"messages":[]}\n')
    with pytest.raises(InputError, match=r"w.jsonl:1: 'messages'"):
        load_workload(w)
    w.write_text("not json\n")
    with pytest.raises(InputError, match=r"w.jsonl:1: not JSON"):
        load_workload(w)


def test_markdown_table() -> None:
    doc = {"kind": "bench", "target": {"url": "http://x"}, "figures": [stat_figures("decode_tok_s", [1.0, 2.0], "tok/s", "a | b", method_zh="测法")[0].to_json()]}
    md = markdown(doc)
    assert "| figure | value | N | how measured |" in md
    assert "| decode_tok_s_median | 1.50 tok/s (p10 1.10 · p90 1.90) | 2 | median ¹ |" in md
    assert "- ¹ a | b" in md  # the method, once, as a footnote (a '|' is safe outside the table)


def test_schema_is_valid() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())


def test_monitor_restart_is_per_slot_and_terminal_escapes_markup() -> None:
    import io

    from rich.console import Console

    from llamarig.bench.report import terminal

    mon = Monitor(client=None, tracker=Tracker(), interval_s=0.1)  # type: ignore[arg-type]
    mon.check([{"id": 0, "id_task": 5000, "is_processing": True}, {"id": 1, "id_task": 1200}], 1.0)
    mon.check([{"id": 0, "id_task": 5100, "is_processing": True}, {"id": 1, "id_task": 1200}], 1.1)
    assert not [e for e in mon.events if e.kind == "restart"]  # an idle slot keeps its old task id
    mon.check([{"id": 0, "id_task": 3}], 1.2)
    assert [e.kind for e in mon.events if e.kind == "restart"] == ["restart"]
    buf = io.StringIO()
    doc = {"kind": "bench", "target": {"url": "http://x"}, "figures": [], "errors": ["HTTP 500: [bold]boom[/x]"]}
    terminal(doc, Console(file=buf, width=100))
    assert "[bold]boom[/x]" in buf.getvalue()


def test_single_figure_n_is_len_samples() -> None:
    from llamarig.bench.records import single_figure

    derived = single_figure("checkpoints_kept", 14.0, "checkpoints", "last K per slot")
    assert derived.n == 1 and derived.samples == (14.0,) and derived.spread["p10"] == derived.spread["p90"] == 14.0
    rounds = single_figure("concurrency_2_aggregate_tok_s", 41.0, "tok/s", "median over rounds", samples=[40.0, 42.0])
    assert rounds.n == 2 and rounds.spread["p10"] == pytest.approx(40.2)
    none = single_figure("interference_events", None, "events", "GET /slots not available")
    assert none.n == 0 and none.samples == () and none.spread == {}
    for f in (derived, rounds, none):
        jsonschema.validate(f.to_json(), schema()["$defs"]["figure"])
    # the schema itself refuses a figure with a value but no samples or spread
    bad = {**derived.to_json(), "n": 5, "samples": [], "spread": {}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema(), cls=jsonschema.Draft202012Validator)  # type: ignore[arg-type]


def test_compare_at_80_columns_never_cuts_a_name() -> None:
    import io

    from rich.console import Console

    from llamarig.bench.compare import print_compare

    names = ["decode_tok_s", "decode_client_tok_s", "concurrency_4_per_stream_tok_s", "prefill_ttft_ms_32k"]
    a = {"figures": [f.to_json() for n in names for f in stat_figures(n, [40.0, 41.0, 42.0], "tok/s", "m m m m m m")]}
    b = {"figures": [f.to_json() for n in names for f in stat_figures(n, [50.0, 51.0], "tok/s", "m m m m m m")]}
    buf = io.StringIO()
    print_compare(compare_docs(a, b), Console(file=buf, width=80), "/tmp/runs/ub2048.json", "/tmp/runs/ub4096.json")
    text = buf.getvalue()
    assert "…" not in text and max(len(ln) for ln in text.splitlines()) <= 80
    first_col = "".join(ln.split("│")[0].strip() for ln in text.splitlines() if "│" in ln)
    for n in names:
        for st in ("median", "p10", "p90", "max"):
            assert f"{n}_{st}" in first_col


def test_lengths_and_depths_ctx_keyword(capsys) -> None:
    from types import SimpleNamespace

    from llamarig.bench.runner import FIT_CTX, ScenarioResult
    from llamarig.bench.scenarios import _points
    from llamarig.cli.bench_cmd import _int_list

    assert _int_list("1k,ctx,MAX", "--lengths", ctx=True) == (1024, FIT_CTX, FIT_CTX)
    with pytest.raises(InputError, match="or 'ctx'"):
        _int_list("1k,full", "--lengths", ctx=True)
    with pytest.raises(InputError):
        _int_list("ctx", "--concurrency")
    res = ScenarioResult("depth")
    pts = _points(SimpleNamespace(n_ctx_slot=4096), (0, 2048, FIT_CTX, 8192, FIT_CTX), 128, res, "depth")  # type: ignore[arg-type]
    assert pts == [0, 2048, 4096 - 128 - 16 - 20]
    assert res.notes[0] == "depth 'ctx' = 3932: slot context 4096 − 128 generated − 36 margin"
    assert res.notes[1].startswith("depth 8192 skipped: 8192 + 128 generated + 16 margin exceeds the slot context 4096")
    assert res.notes[-1] == "depth 3932 skipped: listed twice"
    unknown = ScenarioResult("prefill")
    assert _points(SimpleNamespace(n_ctx_slot=None), (64, FIT_CTX), 1, unknown, "length") == [64]  # type: ignore[arg-type]
    assert "slot context is unknown" in unknown.notes[0]
    # the help says what the code does: points that do not fit are skipped, not clipped
    assert main(["bench", "--help"]) in (None, 0)
    help_text = " ".join(capsys.readouterr().out.split())
    assert "clipped" not in help_text and "'ctx' (or 'max') = the longest prompt that fits the slot context" in help_text
    assert "Lengths that do not fit are skipped" in help_text
