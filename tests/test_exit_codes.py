"""One home for exit codes: llamarig.errors.ExitCode. docs/exit-codes.md lists exactly those
codes, and the error classes carry them."""

from __future__ import annotations

import re
from pathlib import Path

from llamarig.errors import ExitCode, GGUFError, InputError, LlamarigError, ServerError

ROOT = Path(__file__).resolve().parent.parent


def test_doc_lists_every_exit_code() -> None:
    doc = (ROOT / "docs" / "exit-codes.md").read_text()
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", doc, re.M)}
    assert documented == {int(c) for c in ExitCode}


def test_errors_carry_their_codes() -> None:
    assert LlamarigError.exit_code == ExitCode.PROBLEMS
    assert InputError.exit_code == GGUFError.exit_code == ExitCode.BAD_INPUT
    assert ServerError.exit_code == ExitCode.ENVIRONMENT


def test_no_literal_exit_codes_in_the_cli() -> None:
    bad = []
    for f in sorted((ROOT / "src" / "llamarig").rglob("*.py")):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"sys\.exit\(\d+\)|exit_code\s*=\s*\d+\b", line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, bad
