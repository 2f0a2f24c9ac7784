"""The message catalogue: every sentence a person reads, in English or Chinese.

Messages are marked in the code with ``_("...")`` (``{name}`` placeholders, filled with
``.format(...)`` after translation, so numbers, flag names and formulas stay as they are). The
Chinese texts live in ``llamarig/locale/zh_CN/LC_MESSAGES/llamarig.po`` (gettext), compiled to the
``.mo`` next to it by ``scripts/messages compile`` (Babel); at run time the standard library's
``gettext`` reads the ``.mo``. tests/test_messages.py fails when a marked message has no Chinese,
or when the ``.mo`` is older than the ``.po``.

The language: ``--lang zh|en`` (``set_language``), else ``$LLAMARIG_LANG``, else the locale
(``LC_ALL``, ``LC_MESSAGES``, ``LANG``: ``zh_CN.UTF-8`` -> Chinese), else English.

Library text (check's findings, the planner's notes and warnings, the logs findings) is written
in the current language when it is made: ``Finding.message``, ``Plan.notes``/``warnings`` and the
logs document's findings read in the user's language. ``--json`` output never changes with the
language: the CLI builds what it prints as JSON in English (``in_language("en")``, or choosing
English before it computes), so a script that reads the JSON sees the same words on every
machine. explain is the one exception: its ``--json`` carries the language it was asked for
(``"lang"`` in the document), since its rows are the explanation itself.
"""

from __future__ import annotations

import gettext
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from llamarig.errors import InputError, UnknownNameError

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
        raise InputError(_("--lang {lang}: expected one of {languages}").format(lang=lang, languages=', '.join(LANGUAGES)))
    _chosen = lang
    return language()


@contextmanager
def in_language(lang: str) -> Iterator[None]:
    """Within the block, messages are made in ``lang`` (e.g. the English JSON beside a Chinese
    terminal report)."""
    global _chosen
    before = _chosen
    set_language(lang)
    try:
        yield
    finally:
        _chosen = before


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


def did_you_mean(suggestions: list[str]) -> str:
    """`` (did you mean: a, b?)`` in the current language; empty without suggestions."""
    return _(" (did you mean: {names}?)").format(names=", ".join(suggestions)) if suggestions else ""


def unknown_name(kind: str, name: str, suggestions: list[str] | None = None) -> UnknownNameError:
    """An UnknownNameError whose message is in the current language (``kind`` already is)."""
    sugg = list(suggestions or [])
    return UnknownNameError(kind, name, sugg, _("unknown {kind} '{name}'{hint}").format(
        kind=kind, name=name, hint=did_you_mean(sugg)))


def N_(message: str) -> str:
    """Mark a message for the catalogue without translating it here (module-level tables)."""
    return message
