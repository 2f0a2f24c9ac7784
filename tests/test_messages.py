"""The message catalogue (llamarig.i18n): every marked message has Chinese, the compiled .mo is
current, and the language follows --lang and the locale."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from llamarig import i18n

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_loader("messages_tool", loader=None)
    assert spec is not None
    from importlib.machinery import SourceFileLoader

    loader = SourceFileLoader("messages_tool", str(ROOT / "scripts" / "messages"))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("messages_tool", loader))  # type: ignore[arg-type]
    loader.exec_module(mod)
    return mod


def test_every_message_has_chinese_and_the_mo_is_current() -> None:
    pytest.importorskip("babel")
    bad = _tool().problems()
    assert not bad, "\n".join(bad)


def test_language_from_the_environment() -> None:
    assert i18n.language_from_env({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert i18n.language_from_env({"LANG": "en_US.UTF-8"}) == "en"
    assert i18n.language_from_env({"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}) == "en"
    assert i18n.language_from_env({"LLAMARIG_LANG": "zh", "LANG": "C"}) == "zh"
    assert i18n.language_from_env({}) == "en"


def test_set_language_translates(monkeypatch: pytest.MonkeyPatch) -> None:
    from llamarig.cli.lang import _ as cli_
    try:
        i18n.set_language("zh")
        assert cli_("fits") != "fits" and i18n._("fits") == "fits"  # the CLI's text, the library's value
        i18n.set_language("en")
        assert cli_("fits") == "fits"
    finally:
        i18n.set_language(None)
    with pytest.raises(Exception, match="--lang"):
        i18n.set_language("fr")
    assert sys.modules["llamarig.i18n"] is i18n


def test_no_message_hides_inside_an_f_string() -> None:
    """Babel's extractor does not look inside f-string expressions: f"{_('text')}" would never
    reach the catalogue (and stay English). Translate first, then format."""
    import re

    bad = []
    for f in sorted((ROOT / "src" / "llamarig").rglob("*.py")):
        for i, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"""\bf(["'])[^"']*\{[^}]*\b_\(\s*["']""", line):
                bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)
