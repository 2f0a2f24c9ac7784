"""`llamarig check` / `llamarig explain` end to end: JSON format, exit codes, --fix, explain in
English and Chinese, and the examples of docs/check.md and docs/explain.md."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).with_name("fixtures")


def run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "llamarig.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, env=e, cwd=ROOT)


def test_json_format_and_exit_1() -> None:
    p = run("check", str(FIX / "seed000_user_final.sh"), "--json", "--bundled")
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert set(d) >= {"invocations", "findings", "schema"}
    assert d["schema"]["source"] == "bundled" and d["schema"]["build"] == 11434
    inv = d["invocations"][0]
    assert inv["line"] == 5 and inv["argv"][0] == "./llama3-server" and inv["cut_line"] == 10
    for f in d["findings"]:
        assert set(f) >= {"rule", "severity", "line", "flag", "message", "fix"}
        assert f["severity"] in ("error", "warning", "info")
    assert any(f["rule"] == "unknown-flag" and f["flag"] == "--max-slots" for f in d["findings"])


def test_json_schema_of_output() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = {
        "type": "object", "required": ["invocations", "findings", "schema"],
        "properties": {
            "invocations": {"type": "array", "items": {"type": "object", "required": ["argv", "line"],
                            "properties": {"argv": {"type": "array", "items": {"type": "string"}},
                                           "line": {"type": "integer"}}}},
            "findings": {"type": "array", "items": {"type": "object",
                         "required": ["rule", "severity", "line", "flag", "message", "fix"],
                         "properties": {"severity": {"enum": ["error", "warning", "info"]},
                                        "line": {"type": "integer"}, "flag": {"type": ["string", "null"]},
                                        "fix": {"type": ["string", "null"]}}}},
            "schema": {"type": "object", "required": ["source", "build"]},
        },
    }
    p = run("check", str(FIX / "seed002.sh"), "--json", "--bundled")
    jsonschema.validate(json.loads(p.stdout), schema)


def test_clean_exit_0_and_stdin() -> None:
    p = run("check", "-", "--bundled", stdin="llama-server -m m.gguf -c 8192 -np 2 --kv-unified\n")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 error(s)" in p.stdout


def test_unreadable_input_exit_2(tmp_path: Path) -> None:
    p = run("check", str(tmp_path / "missing.sh"))
    assert p.returncode == 2 and "cannot read" in p.stderr and "Traceback" not in p.stderr
    b = tmp_path / "bin.dat"
    b.write_bytes(b"\x7fELF\x00\x00\x01")
    p = run("check", str(b))
    assert p.returncode == 2 and "binary data" in p.stderr
    p = run("check", str(tmp_path))
    assert p.returncode == 2 and "directory" in p.stderr


def test_bad_server_bin_exit_3(tmp_path: Path) -> None:
    p = run("check", str(FIX / "seed002.sh"), "--server-bin", str(tmp_path / "nope"))
    assert p.returncode == 3 and "Traceback" not in p.stderr


def test_human_output_groups_by_invocation() -> None:
    p = run("check", str(FIX / "seed000_optimized.sh"), "--bundled", "--cores", "6")
    assert p.returncode == 1
    assert "invocation 1: line 5" in p.stdout and "cut off at line 10" in p.stdout
    assert "continuation-broken" in p.stdout and "kill-by-name" in p.stdout


def test_fix_prints_a_script() -> None:
    p = run("check", str(FIX / "seed000_user_final.sh"), "--fix", "--bundled")
    assert p.returncode == 0  # --fix repaired every error it found: 0 (docs/check.md "Exit codes")
    fixed = p.stdout
    assert "--max-slots" not in fixed.split("./llama3-server")[-1]
    q = run("check", "-", "--bundled", "--json", stdin=fixed)
    assert not [f for f in json.loads(q.stdout)["findings"] if f["severity"] == "error"]


def test_explain_english_and_chinese() -> None:
    p = run("explain", "--bundled", "--json", "--", "llama-server", "-c", "8192", "-np", "2", "--max-slots", "4")
    d = json.loads(p.stdout)
    rows = d["invocations"][0]["rows"]
    assert [r["flag"] for r in rows] == ["-c", "-np", "--max-slots"]
    assert rows[0]["default"] == "0" and "context" in rows[0]["what"]
    assert not rows[2]["known"] and "--parallel" in rows[2]["what"]
    p = run("explain", "--bundled", "--lang", "zh", "--json", "--", "llama-server", "-c", "8192", "--max-slots", "4")
    rows = json.loads(p.stdout)["invocations"][0]["rows"]
    assert "KV" in rows[0]["what"] and "槽位" in rows[1]["what"]
    p = run("explain", "--bundled", "--lang", "zh", str(FIX / "seed002.sh"))
    assert p.returncode == 0 and "参数" in p.stdout


@pytest.mark.server
def test_explain_with_model_memory(synth_model) -> None:
    model = synth_model("llama", n_embd=128, n_head=4, n_head_kv=2, head_dim=32)
    p = run("explain", "--bundled", "--json", "--", "llama-server", "-m", str(model), "-c", "4096", "-np", "1",
            "-ctk", "q8_0", "-ctv", "q8_0")
    rows = {r["flag"]: r for r in json.loads(p.stdout)["invocations"][0]["rows"]}
    # 2 layers x (row(q8_0, 64) + row(q8_0, 64)) x 4096 cells = 2 x (68 + 68) x 4096 = 1114112 B
    assert rows["-c"]["effect"].startswith("KV 1.06 MiB with q8_0/q8_0")
    assert "weights" in rows["-m"]["effect"]


def _doc_examples(name: str) -> list[str]:
    text = (ROOT / "docs" / name).read_text(encoding="utf-8")
    return [m.group(1).strip() for m in re.finditer(r"```console\n\$ (.+?)\n", text)]


@pytest.mark.parametrize("doc", ["check.md", "explain.md"])
def test_docs_examples_run(doc: str) -> None:
    examples = _doc_examples(doc)
    assert examples, doc
    for ex in examples:
        args = shlex.split(ex)
        assert args[0] == "llamarig"
        p = run(*args[1:])
        assert p.returncode in (0, 1), (ex, p.stderr)
        assert "Traceback" not in p.stderr


@pytest.mark.parametrize("garbage", ["\\\n\\\n'", "llama-server -c \"$(\n", "services: [\n", "\ufffd\ufffd -m --",
                                     "[Service]\nExecStart=llama-server --port=\n"])
def test_garbage_gives_findings_or_clean_error(garbage: str) -> None:
    p = run("check", "-", "--bundled", "--json", stdin=garbage)
    assert p.returncode in (0, 1, 2) and "Traceback" not in p.stderr
    if p.returncode != 2:
        assert "findings" in json.loads(p.stdout)
