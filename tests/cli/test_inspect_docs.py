"""The ```console examples in docs/inspect.md, run as written: same output, one line per error."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "inspect.md"
BLOCK = re.compile(r"^```console\n(.*?)^```", re.S | re.M)


def _examples() -> list[tuple[str, str]]:
    out = []
    for block in BLOCK.findall(DOC.read_text()):
        cmd, expected = None, []
        for line in block.splitlines() + ["$ "]:
            if line.startswith("$ "):
                if cmd:
                    out.append((cmd, "\n".join(expected)))
                cmd, expected = line[2:].strip(), []
            else:
                expected.append(line)
    return out


def test_doc_has_examples() -> None:
    assert _examples()


@pytest.mark.parametrize(("cmd", "expected"), _examples(), ids=[c for c, _ in _examples()])
def test_console_example(cmd: str, expected: str) -> None:
    argv = shlex.split(cmd)
    assert argv[0] == "llamarig"
    r = subprocess.run([sys.executable, "-m", "llamarig.cli.main", *argv[1:]], capture_output=True,
                       text=True, timeout=60)
    assert (r.stdout + r.stderr).rstrip("\n") == expected
    if expected.startswith("llamarig: error: "):
        assert r.returncode == 2
