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


def test_two_comments_sharing_a_continuation_line_both_stay_whole() -> None:
    """The K and V findings end in the same wrapped line (the allowed types): both keep it."""
    schema = load_bundled()
    parsed = parse_text("llama-server -m m.gguf -ctk q2_K -ctv q2_K -fa on\n")
    readings, findings = lint(parsed, schema)
    fixed = fix_text(parsed, readings, findings, schema)
    joined = " ".join(ln.removeprefix("#   ") for ln in fixed.splitlines())
    assert joined.count("iq4_nl, q5_0, q5_1") == 2, fixed


def test_chinese_fix_comments_wrap_between_characters_at_100_columns() -> None:
    from llamarig import i18n
    from llamarig.flags.fix import _cells

    i18n.set_language("zh")
    try:
        schema = load_bundled()
        parsed = parse_text(FIXTURE.read_text())
        readings, findings = lint(parsed, schema)
        fixed = fix_text(parsed, readings, findings, schema)
    finally:
        i18n.set_language(None)
    comments = [ln for ln in fixed.splitlines() if ln.startswith(("# llamarig", "#   ")) and "killall" not in ln]
    joined = " ".join(ln.removeprefix("#   ") for ln in comments)
    assert "不支持的缓存类型" in joined and "iq4_nl, q5_0, q5_1" in joined
    assert all(_cells(ln) <= 100 for ln in comments), [ln for ln in comments if _cells(ln) > 100]
