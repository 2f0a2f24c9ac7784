"""check --fix comments are never cut: a cut comment cut a KV type name in half ('iq4_n...')."""

from __future__ import annotations

from pathlib import Path

from llamarig.flags.fix import fix_text
from llamarig.flags.readers import parse_text
from llamarig.flags.rules import lint
from llamarig.flags.schema import load_bundled

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "seed000_105k.sh"


def test_fix_comments_are_whole_and_wrapped() -> None:
    schema = load_bundled()
    parsed = parse_text(FIXTURE.read_text())
    readings, findings = lint(parsed, schema)
    fixed = fix_text(parsed, readings, findings, schema)
    comments = [ln for ln in fixed.splitlines() if ln.startswith(("# llamarig", "#   "))]
    assert not any(ln.rstrip().endswith("...") for ln in comments), comments
    assert "iq4_nl, q5_0, q5_1" in fixed  # the whole list of allowed KV types
    fix_comments = [ln for ln in comments if "killall" not in ln]  # the killall note is one fixed line
    assert all(len(ln) <= 100 or " " not in ln[2:] for ln in fix_comments)
