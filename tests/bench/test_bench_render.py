"""How a bench/logs document reads: the headline first (decode, prefill, TTFT, concurrency,
speculative acceptance, each with its unit and n), then the plots, then the table, whose rows
cite each distinct method once as a numbered footnote; Chinese labels from the catalogue under
LANG=zh_CN.UTF-8 or --lang zh, a CJK font stack, and JSON that never changes with the language."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from llamarig import i18n
from llamarig.bench.html import FONT_STACK, render_html
from llamarig.bench.records import single_figure, stat_figures
from llamarig.bench.report import (
    footnotes,
    headline_lines,
    markdown,
    method_key,
    terminal,
    write_json,
)
from llamarig.cli.main import main

DECODE = "5 chat requests × max_tokens=128 with ignore_eos; rate = (timings.predicted_n − 1) ÷ timings.predicted_ms"
PREFILL = "3 /completion requests of ~{n} prompt tokens, cache_prompt=false; rate = timings.prompt_n ÷ timings.prompt_ms"


def _doc() -> dict:
    """A bench document as runner.run_bench writes it (figures, series, config), built from the
    same record helpers: decode, prefill at 256 and 1024 tokens, warm TTFT, concurrency 1 and 2,
    speculative (MTP) acceptance, interference."""
    figs = stat_figures("decode_tok_s", [65.1, 66.0, 67.8, 68.9, 69.4], "tok/s", DECODE, scenario="decode",
                        method_zh="5 个请求 × 128 token，串行流式")
    figs += stat_figures("decode_ttft_cold_ms", [120.0, 130.0, 125.0, 128.0, 131.0], "ms",
                         "the decode requests; client time to the first token; cold: cache_n under half the prompt",
                         stats=("median",), scenario="decode",
                         params={"cache": "cold", "cached_tokens_median": 4, "prompt_tokens_median": 412})
    for n, vals in ((256, [800.0, 816.0, 830.0]), (1024, [1010.0, 1020.0, 1031.0])):
        figs += stat_figures(f"prefill_tok_s_{n if n < 1024 else '1k'}", vals, "tok/s", PREFILL.format(n=n),
                             stats=("median", "p10", "max"), scenario="prefill", params={"prompt_tokens": n})
    figs += stat_figures("ttft_warm_ms", [41.0, 45.0, 44.0], "ms", "append-only prompts on a primed slot; client TTFT",
                         stats=("median", "p90", "max"), scenario="ttft")
    for n, rounds in ((1, [66.0, 68.0]), (2, [119.0, 123.0])):
        figs.append(single_figure(f"concurrency_{n}_aggregate_tok_s", sum(rounds) / 2, "tok/s",
                                  f"median over N=2 rounds of {n} parallel chat requests; Σ predicted_n ÷ wall time",
                                  samples=rounds, scenario="concurrency"))
        figs.append(single_figure(f"concurrency_{n}_round_tok_s", sum(rounds) / 2.4, "tok/s",
                                  "whole round: Σ predicted_n ÷ (last token − first request sent)",
                                  samples=[x / 1.2 for x in rounds], scenario="concurrency"))
        figs += stat_figures(f"concurrency_{n}_per_stream_tok_s", [60.0 / n, 61.0 / n], "tok/s",
                             f"2 round(s) of {n} parallel chat requests; per request decode", stats=("median",),
                             scenario="concurrency")
    figs.append(single_figure("spec_acceptance", 0.62, "ratio", "Σ timings.draft_n_accepted (310) ÷ Σ timings.draft_n (500)",
                              samples=[0.55, 0.6, 0.62, 0.66, 0.7], scenario="spec"))
    figs.append(single_figure("interference_events", 0.0, "events", "GET /slots polled every 0.2 s (40 polls)",
                              scenario="interference", params={"polls": 40}))
    return {
        "kind": "bench", "target": {"url": "http://127.0.0.1:8080", "build_info": "b11434", "model": "m.gguf"},
        "config": {"ttft_prefix": 2048}, "figures": [f.to_json() for f in figs],
        "scenarios": [{"name": "prefill", "series": {"prefill_vs_length": [{"length": 256, "tok_s": 816.0},
                                                                           {"length": 1024, "tok_s": 1020.0}]}},
                      {"name": "concurrency", "series": {"concurrency": [
                          {"streams": 1, "aggregate_tok_s": 67.0, "per_stream_tok_s": 60.5},
                          {"streams": 2, "aggregate_tok_s": 121.0, "per_stream_tok_s": 30.25}]}}],
        "interference": {"missing": [], "events": []}, "errors": [],
    }


@pytest.fixture
def english(english_locale: None) -> None:
    """The locale says English (tests/conftest.py english_locale)."""


@pytest.fixture
def chinese(chinese_locale: None) -> None:
    """The locale says Chinese (tests/conftest.py chinese_locale)."""


def test_headline_says_the_figures_users_ask_for_first(english) -> None:
    lines = headline_lines(_doc())
    assert lines[0] == "decode: 67.8 tok/s (median, p10 65.5 · p90 69.2, n=5)"
    assert "prefill at 256 tokens: 816 tok/s (median, p10 803 · p90 827, n=3)" in lines
    assert "prefill at 1k tokens: 1,020 tok/s (median, p10 1,012 · p90 1,029, n=3)" in lines
    assert any(ln.startswith("warm TTFT: 44.0 ms (median") and "n=3; cached prefix ~2048 tokens" in ln for ln in lines)
    assert ("TTFT, cold (decode requests): 128 ms (median, p10 122 · p90 131, n=5; 4 of 412 prompt tokens cached "
            "(medians))") in lines
    conc = next(ln for ln in lines if "parallel streams" in ln)
    assert conc.startswith("2 parallel streams, steady-state decode: 121 tok/s (median over rounds") and "n=2" in conc
    assert "1 stream: 67.0 tok/s" in conc and "30.2 tok/s per stream" in conc
    assert "whole round with prefill and queueing 101 tok/s" in conc
    assert "speculative acceptance (accepted ÷ drafted): 0.620 (p10 0.570 · p90 0.684, n=5)" in lines
    assert lines[-1] == "interference: 0 events (40 /slots polls)"
    order = [next(i for i, ln in enumerate(lines) if ln.startswith(w)) for w in ("decode:", "prefill", "warm TTFT", "2 parallel", "speculative")]
    assert order == sorted(order)


def test_a_figure_without_a_value_says_why(english) -> None:
    doc = _doc()
    doc["figures"] = [single_figure("spec_acceptance", None, "ratio", "Σ draft_n_accepted ÷ Σ draft_n",
                                    note="no response carried timings.draft_n").to_json()]
    assert headline_lines(doc) == ["speculative acceptance (accepted ÷ drafted): — (no response carried timings.draft_n)"]


def _methods(doc: dict) -> list[str]:
    return sorted({method_key(f["method"]) for f in doc["figures"]})


def test_markdown_headline_first_and_each_method_once(english) -> None:
    doc = _doc()
    md = markdown(doc)
    assert md.index("## Headline") < md.index("## Figures") < md.index("### Methods")
    assert "- **decode**: 67.8 tok/s (median, p10 65.5 · p90 69.2, n=5)" in md
    assert "| figure | value | N | how measured |" in md
    for m in _methods(doc):
        assert md.count(m) == 1, m  # the footnote, never repeated per row
    rows = [ln for ln in md.splitlines() if ln.startswith("| decode_tok_s_")]
    assert len(rows) == 4 and all(ln.endswith(" ¹ |") for ln in rows)
    assert "| decode_tok_s_p10 | 65.5 tok/s (p10 65.5 · p90 69.2) | 5 | 10th percentile ¹ |" in rows
    fn = footnotes(doc["figures"])
    assert len(fn.texts) == len(_methods(doc))
    assert f"- ¹ {DECODE}" in md.splitlines()


def test_html_headline_then_plots_then_table_each_method_once(english) -> None:
    doc = _doc()
    page = render_html(doc)
    head, plots, table = page.index('<div class="head">'), page.index('<div class="plots">'), page.index("<table>")
    assert head < plots < table
    cards = page[head:plots]
    assert "decode</div>" in cards and '67.8 <span class="u">tok/s</span>' in cards
    assert "prefill at 256 tokens" in cards and "median, p10 65.5 · p90 69.2, n=5" in cards
    assert "speculative acceptance" in cards and "0.620" in cards
    for m in _methods(doc):
        assert page.count(m.replace("'", "&#x27;")) == 1, m
    assert page[table:].count('<sup><a href="#m1">1</a></sup>') == 4  # decode median, p10, p90, max
    assert '<li id="m1">' in page and 'href="#f-decode_tok_s_median"' in cards


def test_html_declares_language_charset_and_cjk_fonts(chinese) -> None:
    page = render_html(_doc(), "zh")
    assert '<meta charset="utf-8">' in page and '<html lang="zh-CN">' in page
    for font in ("Noto Sans CJK SC", "Source Han Sans SC", "PingFang SC", "Microsoft YaHei"):
        assert f'"{font}"' in FONT_STACK
    assert f"font-family:{FONT_STACK}" in page and FONT_STACK.endswith("sans-serif")
    assert '<html lang="en">' in render_html(_doc())


def test_lang_zh_renders_chinese_headings(chinese, tmp_path: Path) -> None:
    doc = _doc()
    md = markdown(doc, "zh")
    assert md.startswith("# llamarig bench 报告")
    assert md.index("## 要点") < md.index("## 指标") < md.index("### 测法")
    assert "- **解码**：67.8 tok/s（中位数，p10 65.5 · p90 69.2，n=5）" in md
    assert "**冷 prefill（256 token）**：816 tok/s" in md and "**投机解码接受率（接受 ÷ 草稿）**：0.620" in md
    assert "| 指标 | 数值 | N | 测法 |" in md
    assert "- ¹ 5 个请求 × 128 token，串行流式。" + DECODE in md  # the Chinese summary before the method
    page = render_html(doc, "zh")
    assert "<h2>要点</h2>" in page and "<h2>图表</h2>" in page and "<th>测法</th>" in page
    assert "冷 prefill 速度与 prompt 长度" in page and ">并发<" in page  # plot titles from the catalogue
    buf = io.StringIO()
    terminal(doc, Console(file=buf, width=160), lang="zh")
    out = buf.getvalue().splitlines()
    assert out[1].strip().startswith("解码：67.8 tok/s（中位数")
    # the JSON never changes with the language
    write_json(doc, tmp_path / "zh.json")
    write_json(doc, tmp_path / "en.json")
    assert (tmp_path / "zh.json").read_bytes() == (tmp_path / "en.json").read_bytes()


def test_terminal_opens_with_the_headline(english) -> None:
    buf = io.StringIO()
    terminal(_doc(), Console(file=buf, width=120))
    out = buf.getvalue().splitlines()
    assert out[0].startswith("bench http://127.0.0.1:8080")
    assert out[1].strip() == "decode: 67.8 tok/s (median, p10 65.5 · p90 69.2, n=5)"
    table = next(i for i, ln in enumerate(out) if re.match(r"\s*figure\W+value\W+unit", ln))
    assert all("decode_tok_s" not in ln for ln in out[:table])
    assert sum(DECODE in ln for ln in out) == 1  # "[1] …" once under the table


def test_logs_cli_in_chinese(seeds_dir: Path, tmp_path: Path, capsys) -> None:
    """`llamarig --lang zh logs FILE --md --html`: the RTX 3090 report's log, headline first."""
    seed = next(seeds_dir.glob("000_*.txt"))
    m, h, j = tmp_path / "l.md", tmp_path / "l.html", tmp_path / "l.json"
    try:
        assert main(["--lang", "zh", "logs", str(seed), "--md", str(m), "--html", str(h), "--json", str(j)]) in (None, 0)
    finally:
        i18n.set_language(None)
    out = capsys.readouterr().out
    assert out.index("解码（日志）：37.1 tok/s") < out.index("请求（时间线）")
    md = m.read_text()
    assert md.index("## 要点") < md.index("## 结论") < md.index("## 指标")
    assert "**prefill（日志）**：722 tok/s（中位数" in md
    assert '<html lang="zh-CN">' in h.read_text()
    assert json.loads(j.read_text())["figures"][0]["name"] == "log_decode_tok_s_median"


def test_docs_show_one_reference_screenshot_per_language() -> None:
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "bench.md").read_text()
    for lang in ("en", "zh"):
        img = root / "docs" / "images" / f"bench-report-{lang}.png"
        assert f"(images/bench-report-{lang}.png)" in text
        assert img.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and img.stat().st_size < 300_000
