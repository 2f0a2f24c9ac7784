"""The CLI's text in the language a person chose (``--lang``, ``$LLAMARIG_LANG``, the locale:
:func:`llamarig.i18n.set_language`, called once by ``cli/main.py``).

``cli/`` modules take their ``_`` from here: it translates at once, and the text's ``.format``
localizes its fields, so ``_("line {line}: {message}").format(message=finding.message)`` reads
in one language even though the library's ``finding.message`` is an English
:class:`llamarig.i18n.Message`. Everything else cli prints from the library goes through
:func:`localize`. ``--json`` output uses the library values as they are (English).
"""

from __future__ import annotations

from typing import Any

from llamarig import i18n
from llamarig.i18n import N_

__all__ = ["N_", "_", "lang", "localize"]


def lang() -> str:
    """The language the CLI writes in."""
    return i18n.language()


def localize(value: Any) -> Any:
    """A library value (a Message, an error, a list of them) in the CLI's language; an error
    as its message."""
    return i18n.localize(value, lang())


def _(message: str) -> str:
    """``message`` translated into the CLI's language."""
    return i18n.translator(lang())(message)
