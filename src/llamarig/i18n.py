"""The message catalogue: every sentence a person reads, in English or Chinese.

Messages are marked in the code with ``_("...")`` (``{name}`` placeholders, filled with
``.format(...)`` after translation, so numbers, flag names and formulas stay as they are). The
Chinese texts live in ``llamarig/locale/zh_CN/LC_MESSAGES/llamarig.po`` (gettext), compiled to the
``.mo`` next to it by ``scripts/messages compile`` (Babel); at run time the standard library's
``gettext`` reads the ``.mo``. tests/test_messages.py fails when a marked message has no Chinese,
or when the ``.mo`` is older than the ``.po``.

The language: ``--lang zh|en`` (``set_language``), else ``$LLAMARIG_LANG``, else the locale
(``LC_ALL``, ``LC_MESSAGES``, ``LANG``: ``zh_CN.UTF-8`` -> Chinese), else English. ``--json``
output never changes with the language.
"""

from __future__ import annotations

import gettext
import os
from functools import cache
from pathlib import Path

from llamarig.errors import InputError

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "llamarig"
#: languages with a catalogue, and the gettext locale that holds each
LANGUAGES = {"en": None, "zh": "zh_CN"}

_chosen: str | None = None


def language_from_env(env: dict[str, str] | None = None) -> str:
    """``$LLAMARIG_LANG``, else the first set of LC_ALL / LC_MESSAGES / LANG; "zh" or "en"."""
    e = os.environ if env is None else env
    for var in ("LLAMARIG_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        v = e.get(var)
        if v:
            return "zh" if v.lower().startswith("zh") else "en"
    return "en"


def set_language(lang: str | None) -> str:
    """Choose the language for this process (None: from the environment). Returns it."""
    global _chosen
    if lang is not None and lang not in LANGUAGES:
        raise InputError(f"--lang {lang}: expected one of {', '.join(LANGUAGES)}")
    _chosen = lang
    return language()


def language() -> str:
    return _chosen or language_from_env()


@cache
def _translations(lang: str) -> gettext.NullTranslations:
    loc = LANGUAGES.get(lang)
    if loc is None:
        return gettext.NullTranslations()
    return gettext.translation(DOMAIN, localedir=str(LOCALE_DIR), languages=[loc], fallback=True)


def _(message: str) -> str:
    """``message`` in the current language (itself when there is no translation)."""
    return _translations(language()).gettext(message)


def N_(message: str) -> str:
    """Mark a message for the catalogue without translating it here (module-level tables)."""
    return message
