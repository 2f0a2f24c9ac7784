"""The one-line errors speak the user's language (issue 15): with LANG=zh_CN.UTF-8 a bad model id,
a truncated GGUF, an out-of-range -c, an unknown GPU, a missing log, a misused `--` and bad
tune/bench arguments end with one Chinese line on stderr and the documented exit code
(docs/exit-codes.md); under an English locale the same commands say it in English, with the same
code."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from tests.cli.test_answer_first import CJK, english_sentences

from llamarig import i18n
from llamarig.errors import ExitCode
from llamarig.testing.synth import write_model

MODEL = "qwen3.6-27b:iq4_nl"
#: (name, argv with {gguf} / {truncated} / {header} / {missing} for files made per test, exit code,
#: whether llamarig wrote the message itself: click's own texts ("Invalid value for '--lang'")
#: keep click's English, only llamarig's frame around them is translated)
CASES = [
    ("unknown model id", ["plan", "nosuchmodel-xyz"], ExitCode.BAD_INPUT, True),
    ("unknown quant", ["plan", "qwen3.6-27b:iq4_xx"], ExitCode.BAD_INPUT, True),
    ("-c out of range", ["plan", MODEL, "-c", "99999999999"], ExitCode.BAD_INPUT, True),
    ("unknown --gpu", ["plan", MODEL, "--gpu", "nosuchgpu"], ExitCode.BAD_INPUT, True),
    ("bad --gpu VRAM", ["plan", MODEL, "--gpu", "rtx3090:lots"], ExitCode.BAD_INPUT, True),
    ("flag plan does not know", ["plan", MODEL, "--bogus-flag"], ExitCode.BAD_INPUT, True),
    ("plan -- without a model", ["plan", "--", "llama-server", "-c", "4096"], ExitCode.BAD_INPUT, True),
    ("truncated GGUF data", ["inspect", "{truncated}"], ExitCode.BAD_INPUT, True),
    ("truncated GGUF header", ["plan", "{header}"], ExitCode.BAD_INPUT, True),
    ("missing log", ["logs", "{missing}"], ExitCode.BAD_INPUT, True),
    ("missing launch script", ["check", "{missing}"], ExitCode.BAD_INPUT, True),
    ("llamarig option after --", ["render", "{gguf}", "--", "--gpu", "rtx3090"], ExitCode.BAD_INPUT, True),
    ("tune --try", ["tune", "--try", "bad", "{gguf}"], ExitCode.BAD_INPUT, True),
    ("bench --url", ["bench", "--url", "foo"], ExitCode.BAD_INPUT, True),
    ("bench unknown scenario", ["bench", "--url", "http://127.0.0.1:9", "--scenario", "nosuch"],
     ExitCode.BAD_INPUT, True),
    ("bad --lang", ["--lang", "fr", "plan", MODEL], ExitCode.BAD_INPUT, False),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("errors")
    gguf = write_model(d / "model.gguf", "llama")
    data = gguf.read_bytes()
    (d / "truncated.gguf").write_bytes(data[: len(data) * 3 // 4])  # the header is whole, the data is not
    (d / "header.gguf").write_bytes(data[:40])  # cut inside the metadata
    return {"gguf": str(gguf), "truncated": str(d / "truncated.gguf"), "header": str(d / "header.gguf"),
            "missing": str(d / "no-such.log")}


@pytest.fixture
def locale(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    for var in ("LLAMARIG_LANG", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(var, raising=False)

    def set_(which: str) -> None:
        monkeypatch.setenv("LANG", "zh_CN.UTF-8" if which == "zh" else "C.UTF-8")
        i18n.set_language(None)

    yield set_
    i18n.set_language(None)


def _run(cli, files: dict[str, str], argv: list[str]) -> tuple[int, str]:
    code, _out, err = cli(*(a.format(**files) for a in argv))
    return code, err.strip()


@pytest.mark.parametrize(("name", "argv", "code", "ours"), CASES, ids=[c[0] for c in CASES])
def test_the_error_line_is_chinese_under_a_chinese_locale(name: str, argv: list[str], code: int, ours: bool,
                                                          files, locale, cli) -> None:
    locale("zh")
    got, err = _run(cli, files, argv)
    assert got == code, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("llamarig：错误："), err
    body = err.removeprefix("llamarig：错误：")
    if ours:
        assert CJK.search(body), f"{name}: English left in {err!r}"
        # what stays English is a flag, a number, a path or a quoted word, never a sentence
        assert english_sentences(CJK.sub("\n", body)) == [], err


@pytest.mark.parametrize(("name", "argv", "code", "ours"), CASES, ids=[c[0] for c in CASES])
def test_the_same_errors_are_english_by_default(name: str, argv: list[str], code: int, ours: bool,
                                                files, locale, cli) -> None:
    locale("en")
    got, err = _run(cli, files, argv)
    assert got == code, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("llamarig: error: ") and not CJK.search(err), err


def test_bench_request_errors_are_english_in_the_json_and_chinese_in_the_reports(locale) -> None:
    """A failed request's error line: English in the bench JSON (``doc["errors"]``), the user's
    language in this run's terminal and Markdown reports, also when one note wraps another."""
    import io

    from rich.console import Console

    from llamarig.bench.records import note_text
    from llamarig.bench.report import markdown, terminal
    from llamarig.i18n import N_

    locale("zh")
    timeout = note_text(N_("timeout after {seconds} s"), seconds="30")
    dead = note_text(N_("{n} consecutive failed requests (last: {error})"), n=3, error=timeout)
    errors = ["decode/d=0: " + timeout, note_text(N_("scenario cut short: {reason}"), reason=dead)]
    assert errors == ["decode/d=0: timeout after 30 s",
                      "scenario cut short: 3 consecutive failed requests (last: timeout after 30 s)"]
    missing = note_text(N_("{reason}: interference cannot be detected, samples are marked 'unknown'"),
                        reason=note_text(N_("GET /slots failed: {error}"), error="TimeoutError: "))
    event = note_text(N_("slot {slot} busy with task {task} that llamarig did not start"), slot=1, task=77)
    doc = {"kind": "bench", "target": {"url": "http://127.0.0.1:8080"}, "figures": [], "errors": errors,
           "scenarios": [], "interference": {"missing": [missing],
                                             "events": [{"t_s": 1.5, "kind": "foreign_slot", "detail": event}]}}
    md = markdown(doc, "zh")
    assert "decode/d=0: 30 秒后超时" in md
    assert "场景提前结束：连续 3 个请求失败（最后一个：30 秒后超时）" in md
    assert "GET /slots 失败：TimeoutError:：无法检测干扰" in md and "槽位 1 正在处理任务 77" in md
    assert "interference cannot" not in md and "did not start" not in md
    buf = io.StringIO()
    terminal(doc, Console(file=buf, width=1000), lang="zh")
    assert "30 秒后超时" in buf.getvalue() and "timeout after" not in buf.getvalue()
