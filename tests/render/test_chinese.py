"""Issue 15, "Chinese everywhere a person reads", for check and render: with LANG=zh_CN.UTF-8 the
readers' notes (bash functions and `source`, systemd drop-ins and EnvironmentFile=, compose
interpolation and .env, Kubernetes configMapKeyRef, llama-swap, the --models-preset INI), the
findings and fixes, and render's comments leave no English sentence (the detector of
tests/cli/test_answer_first.py, applied to each stretch of text between Chinese characters, so a
table row that starts in Chinese and ends in English is caught); `--json` stays English."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.cli.test_answer_first import CJK, english_sentences

from llamarig.app.check import check
from llamarig.flags.schema import load_bundled
from llamarig.i18n import localize

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "flags" / "fixtures"
CORPUS = FIXTURES / "corpus"
#: one file of each kind the readers know, each raising reader notes
KINDS = [
    "bash-functions/start-llm.sh",  # functions, `source`
    "setup_llama_server.sh",  # a `source` of a file that is not there
    "systemd-dropin/llama-server.service",  # drop-in, EnvironmentFile=
    "compose-env/docker-compose.yml",  # interpolation, .env
    "k8s-configmap-keyref.yaml",  # configMapKeyRef, a Secret
    "llama-swap-aider-qwq.yaml",
    "models-preset-readme.ini",  # a key set twice
]
SCRIPT = FIXTURES / "seed000_optimized.sh"


def english(text: str) -> list[str]:
    """English sentences in ``text``, looking at each stretch between Chinese characters; the
    lines that echo the argv llama-server receives (`收到：`, `被截断`) are words, not prose."""
    out = []
    for line in text.splitlines():
        if line.strip().startswith(("收到：", "被截断")):
            continue
        for seg in CJK.split(line):
            out += english_sentences(seg)
    return out


@pytest.fixture
def zh(chinese_locale: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Chinese locale (tests/conftest.py) on a wide terminal: a finding is never wrapped."""
    monkeypatch.setenv("COLUMNS", "1000")


def test_the_detector_sees_english_after_chinese() -> None:
    assert english("16  警告  unknown-variable  services.llm: `$X` has no default and is not set in .env")
    assert english("  收到：llama-server --flash-attn on --no-mmap --host 0.0.0.0") == []
    assert english("36  警告  value-truncated  `--batch-size 2k`：std::stoi 只读开头的数字") == []


@pytest.mark.parametrize("name", KINDS)
def test_check_speaks_chinese_on_every_reader(name: str, zh: None, cli) -> None:
    path = str(CORPUS / name)
    code, out, err = cli("check", "--bundled", "--cores", "6", path)
    assert code in (0, 1), err
    assert CJK.search(out) and english(out) == [], english(out)
    # the notes and findings themselves (a table may wrap them), and the invocations' labels
    report = check(Path(path).read_text(), schema=load_bundled(), cores=6, base_dir=Path(path).parent,
                   origin=Path(path))
    parsed, findings = report.parsed, report.findings
    texts = [f.message for f in findings] + [f.fix or "" for f in findings]
    texts += [inv.label or "" for inv in parsed.invocations]
    # library values are English (llamarig.i18n.Message); localize writes them in Chinese
    assert [t for t in texts if english(localize(t, "zh"))] == []
    code, fixed, err = cli("check", "--bundled", "--cores", "6", "--fix", path)
    comments = "\n".join(ln for ln in fixed.splitlines() if ln.lstrip().startswith(("# llamarig:", "; llamarig:")))
    assert english(comments + "\n" + err) == []


@pytest.mark.parametrize("name", KINDS)
def test_check_json_stays_english(name: str, zh: None, cli) -> None:
    _code, out, _err = cli("check", "--bundled", "--cores", "6", "--json", str(CORPUS / name))
    doc = json.loads(out)
    words = [f["message"] for f in doc["findings"]] + [f.get("fix") or "" for f in doc["findings"]]
    words += [inv.get("label") or "" for inv in doc.get("invocations", [])]
    assert not CJK.search(" ".join(words)), words


def test_json_labels_are_the_english_ones(zh: None, cli) -> None:
    _code, out, _err = cli("check", "--bundled", "--json", str(CORPUS / "bash-functions" / "start-llm.sh"))
    labels = [inv.get("label") for inv in json.loads(out)["invocations"]]
    assert "function serve, called on line 21" in labels, labels


@pytest.mark.parametrize("fmt", ["bash", "systemd", "compose", "llama-swap"])
def test_render_comments_speak_chinese_and_the_file_still_parses(fmt: str, zh: None, cli, tmp_path: Path) -> None:
    code, out, err = cli("render", "--force", "-f", fmt, "--from-script", str(SCRIPT))
    assert code == 0, err
    assert CJK.search(out) and english(out) == [], english(out)
    assert english(err) == [], english(err)
    if fmt == "bash":
        f = tmp_path / "l.sh"
        f.write_text(out)
        assert subprocess.run(["bash", "-n", str(f)], capture_output=True).returncode == 0
    elif fmt in ("compose", "llama-swap"):
        assert yaml.safe_load(out)
    else:
        assert re.search(r"^ExecStart=", out, re.M) and "[Service]" in out


def test_render_plan_figures_speak_chinese(synth_model, zh: None, cli) -> None:
    from tests.render.conftest import SHAPES

    model = synth_model("llama", **SHAPES["llama"])
    code, out, err = cli("render", "--gpu", "rtx3090", str(model), "-c", "2048", "-np", "1", "-t", "2")
    assert code == 0, err
    assert "结论：放得下" in out and "由 llamarig" in out
    assert english(out) == [], english(out)
    code, _out, err = cli("render", "--ram", "1M", str(model), "-c", "2048")
    assert code == 1 and CJK.search(err)
