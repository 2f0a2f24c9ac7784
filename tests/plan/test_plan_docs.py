"""docs/plan.md examples run; docs/accuracy.md is what scripts/accuracy.py generates."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from llamarig.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = re.findall(r"^\$ llamarig (.+)$", (ROOT / "docs" / "plan.md").read_text(), re.M)


@pytest.mark.parametrize("cmd", EXAMPLES)
def test_plan_doc_example_runs(cmd: str, capsys) -> None:
    try:
        rc = main(shlex.split(cmd))
    except SystemExit as e:  # pragma: no cover - an error exit is a failure here
        pytest.fail(f"exit {e.code}: {capsys.readouterr().err}")
    assert rc in (None, 0, 1)
    out = capsys.readouterr().out
    assert "llama-server" in out


def test_accuracy_doc_is_current() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "accuracy.py"), "--check"], cwd=ROOT)
    assert r.returncode == 0, "docs/accuracy.md is stale: run scripts/accuracy.py"


def test_json_schema_doc_matches_output(capsys) -> None:
    import json

    doc = (ROOT / "docs" / "plan.md").read_text()
    schema = doc[doc.index("## `--json` schema"):]
    main(["plan", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", "-c", "8192", "--json"])
    d = json.loads(capsys.readouterr().out)
    for key in list(d) + list(d["devices"][0]) + list(d["host"]):
        assert f'"{key}"' in schema, f"{key} missing from the documented schema"
