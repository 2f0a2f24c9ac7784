"""Issue 15's "done when", as a user sees it: with COLUMNS=80 the README plan says fits / does not
fit and the free memory in its first lines and stays short, `models` and `gpus` are one line per
entry; with LANG=zh_CN.UTF-8 plan, check, explain, logs, the bench/logs reports and the gateway's
errors speak Chinese (no English sentence left beyond flag names, numbers, quoted log lines and
paths). explain and check agreeing on the field reports: tests/cli/test_views_agree.py."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from llamarig import i18n
from llamarig.app.logs import logs_report
from llamarig.bench.report import markdown, terminal
from llamarig.gateway import reasons

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "flags" / "fixtures"
SEED_LOG = ROOT / "tests" / "fixtures" / "seeds" / "000_3d5d35932c1dd60e.txt"
#: the field reports' launch files (RTX 3090, two GPUs, the 307K-context MTP unit)
SCRIPTS = sorted(p.name for p in FIXTURES.glob("seed*") if p.suffix in (".sh", ".service"))
README_PLAN = ["plan", "qwen3.6-27b:iq4_nl", "--mmproj", "f16", "--gpu", "rtx3090", "-c", "105000"]

CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
#: English function words: three of them on a line without any Chinese make it an English sentence
STOPWORDS = frozenset({
    "the", "is", "are", "was", "were", "of", "to", "and", "with", "not", "for", "by", "from",
    "that", "this", "which", "it", "its", "be", "been", "has", "have", "than", "when", "if",
    "will", "would", "can", "does", "do", "no", "only", "into", "on", "at", "as", "or", "an", "a",
    "every", "each",
})
#: what stays as written in both languages: code spans, quoted log lines, URLs
VERBATIM = re.compile(r"`[^`]*`|'[^']*'|\"[^\"]*\"|https?://\S+")


def english_sentences(text: str) -> list[str]:
    """The lines of ``text`` that are English prose (no Chinese, three English function words
    outside code spans and quotes)."""
    out = []
    for line in text.splitlines():
        if CJK.search(line):
            continue
        words = re.findall(r"[A-Za-z][A-Za-z']*", VERBATIM.sub(" ", line))
        if sum(w.lower() in STOPWORDS for w in words) >= 3:
            out.append(line.strip())
    return out


def test_the_detector_finds_english_and_passes_chinese() -> None:
    assert english_sentences("  9  info  ctx-padded  `-c 65000` is rounded up to 65024 (a multiple of 256)")
    assert english_sentences("fix: remove it (or run a text-only instance without --mmproj)")
    assert english_sentences("  9  提示  ctx-padded  `-c 65000` 会向上取整到 65024（256 的倍数）") == []
    assert english_sentences("--ctx-size 65000 --parallel 1 -ngl 99 --log-file /tmp/llama.log") == []


@pytest.fixture
def lang(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """lang("zh" | "en", columns): the locale a user has (no --lang) and the terminal width."""
    for var in ("LLAMARIG_LANG", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(var, raising=False)

    def set_(which: str, columns: int) -> None:
        monkeypatch.setenv("LANG", "zh_CN.UTF-8" if which == "zh" else "C.UTF-8")
        monkeypatch.setenv("COLUMNS", str(columns))
        i18n.set_language(None)

    yield set_
    i18n.set_language(None)


# ------------------------------------------------------------------------------ short, answer first


@pytest.mark.parametrize("which", ["en", "zh"])
def test_readme_plan_answers_in_its_first_lines_at_80_columns(which: str, lang, cli) -> None:
    lang(which, 80)
    code, out, _ = cli(*README_PLAN)
    lines = out.splitlines()
    assert code == 0 and len(lines) <= 45, len(lines)
    head = "\n".join(lines[:4])
    if which == "en":
        assert lines[0].startswith("fits: CUDA0 (RTX 3090)") and "1.29-1.38 GiB free" in lines[0]
        assert lines[1] == "free is a range: the file size is an estimate"
    else:
        assert lines[0].startswith("放得下：CUDA0 (RTX 3090)") and "剩 1.29-1.38 GiB" in lines[0]
        assert lines[1] == "剩余是一个范围：文件大小是估算值"
    assert "859.54 MiB" in head  # host RAM at start
    assert max(len(ln) for ln in lines[:2]) <= 80  # verdict lines are not wrapped mid-figure


@pytest.mark.parametrize("command", ["models", "gpus"])
def test_catalogues_are_one_line_per_entry_at_80_columns(command: str, lang, cli) -> None:
    lang("en", 80)
    code, out, _ = cli(command)
    assert code == 0 and len(out.splitlines()) <= 80, len(out.splitlines())


# ------------------------------------------------------------------------------ Chinese everywhere


def _chinese(out: str) -> None:
    assert CJK.search(out), out[:400]
    assert english_sentences(out) == []


def test_plan_speaks_chinese(lang, cli) -> None:
    lang("zh", 1000)  # wide: one sentence per line
    code, out, _ = cli(*README_PLAN)
    assert code == 0
    _chinese(out)
    # does not fit (-ngl 99: --fit may not move layers): the suggestions too
    code, out, _ = cli("plan", "qwen3.6-27b:iq4_nl", "--gpu", "rtx4060ti16", "-c", "105000", "-ngl", "99")
    assert out.startswith("放不下：CUDA0") and "可以试试" in out
    _chinese(out)
    # the optimiser, with a target it cannot meet: the table, the winner and why it is impossible
    code, out, _ = cli("plan", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", "--target-ctx", "105000",
                       "--target-decode", "60")
    assert "按这些要求做不到" in out
    _chinese("\n".join(ln for ln in out.splitlines() if "formula" not in ln and "公式" not in ln))


@pytest.mark.parametrize("name", SCRIPTS)
def test_check_and_explain_speak_chinese_on_the_field_reports(name: str, lang, cli) -> None:
    lang("zh", 1000)
    path = str(FIXTURES / name)
    _code, out, _ = cli("check", "--bundled", "--cores", "6", path)
    _chinese(out)
    _code, fixed, err = cli("check", "--bundled", "--cores", "6", "--fix", path)
    _chinese("\n".join(ln for ln in fixed.splitlines() if ln.startswith("# llamarig:")) + "\n中" + err)
    _code, out, _ = cli("explain", "--bundled", path)
    _chinese(out)


def test_logs_and_reports_speak_chinese(lang, cli, tmp_path: Path) -> None:
    lang("zh", 1000)
    code, out, _ = cli("logs", str(SEED_LOG), "--script", str(FIXTURES / "seed000_optimized.sh"))
    assert code == 0 and "n_ctx_slot = 95232" in out
    _chinese(out)
    doc = logs_report(SEED_LOG, FIXTURES / "seed000_optimized.sh").to_json()
    _chinese(markdown(doc, "zh"))
    buf = io.StringIO()
    terminal(doc, Console(file=buf, width=1000), lang="zh")
    _chinese(buf.getvalue())


def test_json_stays_english_under_a_chinese_locale(lang, cli, tmp_path: Path) -> None:
    import json

    lang("zh", 80)
    _code, out, _ = cli("check", "--bundled", "--json", str(FIXTURES / "seed000_optimized.sh"))
    msgs = " ".join(f["message"] for f in json.loads(out)["findings"])
    assert not CJK.search(msgs) and "cut off at line 10" in msgs
    _code, out, _ = cli(*README_PLAN, "--json")
    assert not CJK.search(" ".join(json.loads(out)["notes"]))
    j = tmp_path / "logs.json"
    cli("logs", str(SEED_LOG), "--json", str(j), "--quiet")
    assert not CJK.search(" ".join(json.loads(j.read_text())["findings"]))


def test_gateway_errors_speak_chinese(lang) -> None:
    lang("zh", 80)
    busy = {"busy_slots": 4, "slots": 4, "reserved_tokens": 436, "pool_tokens": 307200, "need_tokens": 109}
    blocks = [reasons.Blocked(reasons.SLOTS_BUSY, busy), reasons.Blocked(reasons.POOL_FULL, busy),
              reasons.Blocked(reasons.EXCEEDS_SLOT_CTX, {"need_tokens": 9000, "slot_ctx": 8192}),
              reasons.Blocked(reasons.NO_BACKEND, {"backends": 2, "healthy_backends": 0}), None]
    texts = [reasons.queue_timeout_message(2.0, b) for b in blocks]
    texts += [reasons.queue_full_message(8, 8, b) for b in blocks]
    texts += [reasons.key_limit_message("team-a", 4, 4), reasons.shutting_down_message(),
              reasons.ledger_unavailable_message("ConnectionError: refused")]
    texts += [reasons.backend_problem_line("a", "http://127.0.0.1:8080", k, "HTTP 503", 2.0, 5.0)
              for k in reasons.PROBLEMS if k != reasons.ERROR]
    texts += [reasons.label(r) for r in reasons.REASONS]
    for t in texts:  # Messages: English values, Chinese for a Chinese reader (the gateway's lang)
        _chinese(i18n.localize(t, "zh"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_explain_and_check_name_the_same_cut_in_chinese(name: str, lang, cli) -> None:
    """What a Chinese reader sees agrees too: the line check says the command is cut off at is
    the line explain marks (the JSON side: tests/cli/test_views_agree.py)."""
    lang("zh", 1000)
    path = str(FIXTURES / name)
    _code, chk, _ = cli("check", "--bundled", "--cores", "6", path)
    _code, exp, _ = cli("explain", "--bundled", path)
    cut_check = set(re.findall(r"第 \d+ 条命令（第 \d+ 行起）在第 (\d+) 行被截断", chk))
    cut_explain = set(re.findall(r"这条命令在第 (\d+) 行被截断", exp))
    assert cut_check == cut_explain, (cut_check, cut_explain)


def test_bench_notes_are_english_in_the_json_and_chinese_in_the_reports(lang) -> None:
    """A bench run's notes (skipped points, rejected samples) go into the JSON in English and
    into this run's terminal and Markdown reports in the user's language."""
    from llamarig.bench.records import note_text
    from llamarig.i18n import N_

    lang("zh", 1000)
    note = note_text(N_("{what} {p} skipped: listed twice"), ("what",), what=N_("depth"), p=4096)
    assert note == "depth 4096 skipped: listed twice"
    doc = {"kind": "bench", "target": {"url": "http://127.0.0.1:8080"}, "figures": [], "errors": [],
           "scenarios": [{"name": "depth", "notes": [note]}]}
    md = markdown(doc, "zh")
    assert "深度 4096 跳过：重复列出" in md and note not in md
    buf = io.StringIO()
    terminal(doc, Console(file=buf, width=1000), lang="zh")
    assert "深度 4096 跳过：重复列出" in buf.getvalue()
    _chinese(md)
