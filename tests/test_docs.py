"""Run the documented examples: every ```bash test block in README*.md, docs/*.md and the
Chinese pages docs/zh/*.md.

Each block runs with bash -e in a fresh temporary directory, with the virtualenv's bin first on
PATH and $LLAMARIG_SERVER_BIN set, so the examples work exactly as a user would type them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```bash test\n(.*?)^```", re.S | re.M)


def _blocks() -> list[tuple[str, str]]:
    out = []
    for doc in sorted([*ROOT.glob("README*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("docs/zh/*.md")]):
        for i, m in enumerate(BLOCK.finditer(doc.read_text())):
            out.append((f"{doc.relative_to(ROOT)}#{i + 1}", m.group(1)))
    return out


@pytest.mark.parametrize(("where", "script"), _blocks(), ids=[w for w, _ in _blocks()])
def test_doc_example(where: str, script: str, tmp_path: Path, server_bin: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["LLAMARIG_SERVER_BIN"] = str(server_bin)
    r = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"{where} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
