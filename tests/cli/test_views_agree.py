"""One truth across views: explain marks exactly the flags check reports as cut off, on the
field reports' scripts (tests/flags/fixtures/seed*.sh, seed004.service)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from llamarig.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "flags" / "fixtures"
SCRIPTS = sorted(p.name for p in FIXTURES.glob("seed*") if p.suffix in (".sh", ".service"))


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    capsys.readouterr()
    with contextlib.suppress(SystemExit):  # check exits 1 on error findings
        main(list(argv))
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", SCRIPTS)
def test_explain_and_check_agree_on_what_reaches_the_server(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(FIXTURES / name)
    chk = _json(capsys, "check", "--bundled", "--json", path)
    exp = _json(capsys, "explain", "--bundled", "--json", path)
    assert len(chk["invocations"]) == len(exp["invocations"])
    for c, e in zip(chk["invocations"], exp["invocations"], strict=True):
        reaching = [r["flag"] for r in e["rows"] if r["reaches_server"]]
        cut = [r["flag"] for r in e["rows"] if not r["reaches_server"]]
        flags_in_argv = [a for a in c["argv"][1:] if a.startswith("-") and not a.lstrip("-").replace(".", "").isdigit()]
        assert all(f in flags_in_argv for f in reaching), (name, reaching, flags_in_argv)
        assert (c["cut_line"] is not None) == bool(cut), (name, c["cut_line"], cut)
        if cut:
            assert e["cut_line"] == c["cut_line"]


def test_fix_says_what_it_changes_in_the_running_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--max-slots 8 -c 105000` is fixed to `--parallel 8`: 8 slots of 13312 tokens instead of 4
    unified slots of 105216; the fix must say so (stderr), not change what runs silently."""
    script = tmp_path / "run.sh"
    script.write_text("llama-server -m m.gguf --max-slots 8 -c 105000\n")
    capsys.readouterr()
    with contextlib.suppress(SystemExit):
        main(["check", "--bundled", "--fix", str(script)])
    out = capsys.readouterr()
    assert "--parallel 8" in out.out
    assert "slots (-np): 4 (unified KV) -> 8" in out.err
    assert "context per slot: 105216 -> 13312" in out.err


@pytest.mark.parametrize("name", ["seed000_fastllm.pasted.sh", "seed000_fastllm.repaired.sh"])
def test_explain_json_on_fastllm_is_one_document(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """FastLLM (the RTX 3090 field report): explained through its llama-server equivalent, and
    --json stays one JSON document that names the translation."""
    path = str(Path(__file__).resolve().parents[1] / "fixtures" / "pasted" / name)
    exp = _json(capsys, "explain", "--bundled", "--json", path)
    (other,) = exp["other_engines"]
    assert other["engine"] == "FastLLM" and "-sm layer -ts 22,22,20 -np 8" in other["equivalent"]
    assert exp["invocations"][0]["line"] == other["line"]  # the equivalent is explained at its line
