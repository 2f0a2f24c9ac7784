"""The message catalogue: every sentence a person reads, in English or Chinese.

Messages are marked in the code with ``_("...")`` (``{name}`` placeholders, filled with
``.format(...)``, so numbers, flag names and formulas stay as they are). The Chinese texts live
in ``llamarig/locale/zh_CN/LC_MESSAGES/llamarig.po`` (gettext), compiled to the ``.mo`` next to
it by ``scripts/messages compile`` (Babel); at run time the standard library's ``gettext`` reads
the ``.mo``. tests/test_messages.py fails when a marked message has no Chinese, or when the
``.mo`` is older than the ``.po``.

Messages are values. In the library ``_("...")`` makes a :class:`Message`: a ``str`` whose
value is the English text, which also carries its msgid and its fields. So every library result
(check's ``Finding.message`` and fix, the planner's notes and warnings, an error's message,
bench's notes) is English wherever it is used as a string: in ``str()``, in comparisons, in
``--json`` (the same words on every machine), to a library caller. Nothing in the library reads
a process-wide language, and nothing switches one around a computation.

A person's language is chosen once, by the CLI (``--lang zh|en``, else ``$LLAMARIG_LANG``, else
the locale: ``LC_ALL``, ``LC_MESSAGES``, ``LANG``; ``zh_CN.UTF-8`` -> Chinese, else English;
:func:`set_language`), and applied where text is shown: :func:`localize` turns a Message into
its text in a language (the msgid translated, its fields localized in turn, then formatted); a
plain ``str`` comes back as it is. ``cli/`` localizes every library value it prints, and its own
``_`` (the command line's own) translates at once. A library function that writes a whole document
for a person (render's file comments, bench's Markdown and HTML reports) takes the language as a
``lang`` argument.

Text built from messages stays a Message: ``msg + "x"``, ``"x" + msg`` and :func:`join` give a
composite Message whose parts are localized one by one; ``_("{a}; {b}").format(a=m1, b=m2)``
localizes ``m1`` and ``m2``; ``_("; ").join(items)`` is a composite too. An f-string,
``"; ".join(...)`` with a plain separator, ``%`` or other ``str`` methods (``.strip()``...) give a
plain English ``str``: library code does not build text that way.
"""

from __future__ import annotations

import errno
import gettext
import os
import re
import string
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, overload

from llamarig.errors import InputError, UnknownNameError

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "llamarig"
#: languages with a catalogue, and the gettext locale that holds each
LANGUAGES = {"en": None, "zh": "zh_CN"}

_chosen: str | None = None


class Message(str):
    """A catalogue message as a value: ``str(m)`` and ``m == "..."`` are the English text;
    ``msgid``, ``args``/``fields`` (what ``.format`` was given) and ``parts`` (a composite made
    by ``+`` or :func:`join`) let :func:`localize` write it in another language."""

    # the class holds the defaults, an instance only what it has (a finding's message is one of
    # many: benchmarks/RESULTS.md)
    msgid: str
    own: Mapping[str, str] = MappingProxyType({})
    args: tuple[Any, ...] = ()
    fields: Mapping[str, Any] = MappingProxyType({})
    parts: tuple[str, ...] | None = None
    formatted: bool = False

    def __new__(cls, msgid: str, fields: Mapping[str, Any] | None = None, args: tuple[Any, ...] = ()) -> Message:
        if fields is None and not args:
            self = super().__new__(cls, msgid)
        else:
            fields = fields if fields is not None else {}
            self = super().__new__(cls, str.format(msgid, *args, **fields))
            self.formatted = True
            if fields:
                self.fields = fields
            if args:
                self.args = args
        self.msgid = msgid
        return self

    @classmethod
    def given(cls, english: str, **texts: str) -> Message:
        """A text that is not in the catalogue, with its translations given here (``zh="..."``;
        a language without one gets the English)."""
        self = cls(english)
        self.own = {k: v for k, v in texts.items() if v}
        return self

    @classmethod
    def concat(cls, parts: Iterable[str]) -> Message:
        """The parts one after the other (each a Message or a plain str)."""
        ps = tuple(p for p in parts if p != "")
        self = super().__new__(cls, "".join(str.__str__(p) for p in ps))
        self.msgid, self.parts = "", ps
        return self

    def format(self, *args: Any, **fields: Any) -> Message:
        """The message with its placeholders filled; the fields stay values (a Message field
        is localized with it)."""
        if self.parts is not None:  # a composite: format its text as English, like str would
            return Message(str.__str__(self), fields, args)
        return Message(self.msgid, fields, args)

    def __add__(self, other: str) -> Message:
        if not isinstance(other, str):
            return NotImplemented
        return Message.concat((*self._pieces(), *(other._pieces() if isinstance(other, Message) else (other,))))

    def __radd__(self, other: str) -> Message:
        if not isinstance(other, str):
            return NotImplemented
        return Message.concat((other, *self._pieces()))

    def join(self, items: Iterable[str]) -> Message:
        """``_("; ").join(parts)``: a composite Message (the separator is translated too)."""
        return join(self, items)

    def _pieces(self) -> tuple[str, ...]:
        return self.parts if self.parts is not None else (self,)

    def __str__(self) -> Message:
        # itself, so that str(err) of an error made from a Message still localizes
        return self

    def __repr__(self) -> str:
        return f"Message({str.__repr__(self)})"

    def __copy__(self) -> Message:
        return self

    def __deepcopy__(self, memo: object) -> Message:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        if self.parts is not None:
            return (Message.concat, (self.parts,))
        if self.own:
            return (_given, (self.msgid, dict(self.own)))
        return (Message, (self.msgid, dict(self.fields) if self.formatted else None, self.args))


def _given(english: str, texts: dict[str, str]) -> Message:
    return Message.given(english, **texts)


#: the comma between like items of a list (line numbers, layer kinds): the enumeration comma
#: "、" in Chinese, where the catalogue's ", " between clauses is "，"
LIST_SEP = Message.given(", ", zh="、")


def listing(items: Iterable[str]) -> Message:
    """Like items as a list: ``3, 5, 7`` in English, ``3、5、7`` in Chinese."""
    return join(LIST_SEP, items)


def join(sep: str, items: Iterable[str]) -> Message:
    """``sep.join(items)`` as a composite Message (``sep`` and each item may be a Message)."""
    parts: list[str] = []
    for i, item in enumerate(items):
        if i:
            parts.append(sep)
        parts.append(item)
    return Message.concat(parts)


def language_from_env(env: dict[str, str] | None = None) -> str:
    """``$LLAMARIG_LANG``, else the first set of LC_ALL / LC_MESSAGES / LANG; "zh" or "en"."""
    e = os.environ if env is None else env
    for var in ("LLAMARIG_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        v = e.get(var)
        if v:
            return "zh" if v.lower().startswith("zh") else "en"
    return "en"


def check_language(lang: str) -> str:
    """``lang`` if there is a catalogue for it; else an InputError."""
    if lang not in LANGUAGES:
        raise InputError(_("--lang {lang}: expected one of {languages}").format(lang=lang, languages=", ".join(LANGUAGES)))
    return lang


def set_language(lang: str | None) -> str:
    """The CLI's choice of the language a person reads (None: from the environment). Returns
    it. Only ``cli/`` calls this; library code takes a ``lang`` argument where it needs one."""
    global _chosen
    _chosen = check_language(lang) if lang is not None else None
    return language()


def language() -> str:
    """The language chosen by :func:`set_language`, else the environment's."""
    return _chosen or language_from_env()


#: llama-server's own --help texts of the pinned build (summaries and worded defaults), translated
SERVER_DOMAIN = "llama-server"


@cache
def _catalogue(domain: str, lang: str) -> gettext.NullTranslations:
    """The compiled catalogue of ``domain`` (llamarig's messages, or llama-server's help) in ``lang``."""
    loc = LANGUAGES.get(lang)
    if loc is None:
        return gettext.NullTranslations()
    return gettext.translation(domain, localedir=str(LOCALE_DIR), languages=[loc], fallback=True)


def server_text(text: str, lang: str) -> str | None:
    """llama-server's own help text (an option's summary or its default in words) in ``lang``;
    None when the table (locale/*/llama-server.po, the pinned build's options) has none: the
    caller shows the English original, marked as such."""
    if lang == "en" or not text:
        return text
    out = _catalogue(SERVER_DOMAIN, lang).gettext(text)
    return out if out != text or not any(c.isalpha() for c in text) else None


def translate(msgid: str, lang: str) -> str:
    """The catalogue's text for ``msgid`` in ``lang`` (``msgid`` itself when there is none)."""
    return _catalogue(DOMAIN, lang).gettext(msgid) if lang != "en" else msgid


@overload
def localize(value: str, lang: str) -> str: ...
@overload
def localize(value: Any, lang: str) -> Any: ...


def localize(value: Any, lang: str) -> Any:
    """``value`` for a person reading ``lang``: a Message as its text in that language (a plain
    ``str``); a plain ``str`` and anything else unchanged; an error (a field ``.format(error=e)``)
    as its message; lists, tuples and dicts item by item."""
    if isinstance(value, Message):
        if value.parts is not None:  # a plain separator between parts is written in the language too
            return "".join(translate(p, lang) if p in SEPARATORS and not isinstance(p, Message) else localize(p, lang)
                           for p in value.parts)
        if value.own:
            return value.own.get(lang, value.msgid)
        text = translate(value.msgid, lang)
        if not value.formatted:
            return text
        return fill(text, lang, tuple(localize(a, lang) for a in value.args),
                    {k: localize(v, lang) for k, v in value.fields.items()})
    if isinstance(value, str):
        return value
    if isinstance(value, BaseException):  # an error given as a field: its message
        return localize(str(value), lang) if len(value.args) == 1 else value
    if isinstance(value, list):
        return [localize(v, lang) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(localize(v, lang) for v in value)
    if isinstance(value, dict):
        return {k: localize(v, lang) for k, v in value.items()}
    return value


#: the separators library code puts between Messages (``msg + ": " + detail``): a composite's
#: plain separator is written in the reader's language (``：``, ``；``, ``，``)
SEPARATORS = frozenset({": ", "; ", ", "})


class Localized(str):
    """Text already in ``lang`` (from :func:`translator`); ``.format`` localizes the values it is
    given into the same language, so a Message field reads in it too."""

    lang: str

    def __new__(cls, text: str, lang: str) -> Localized:
        self = super().__new__(cls, text)
        self.lang = lang
        return self

    def format(self, *args: Any, **fields: Any) -> str:
        return fill(str(self), self.lang, tuple(localize(a, self.lang) for a in args),
                    {k: localize(v, self.lang) for k, v in fields.items()})


#: Chinese punctuation that carries its own spacing (no blank next to it)
_WIDE_PUNCT = "（）：，。；、！？“”《》【】"
_CJK_CHAR = re.compile(r"[\u3400-\u9fff]")
_LATIN = re.compile(r"[A-Za-z0-9%`]")


def _joint(before: str, after: str) -> tuple[str, str]:
    """The seam between a template's text and a value in Chinese: a blank between Chinese and
    Latin letters or digits, none next to full-width punctuation (``槽位数（-np）为 4``,
    ``-b / -ub 为 2048``)."""
    if not before or not after:
        return before, after
    if before.endswith(" ") and after[0] in _WIDE_PUNCT:
        return before.rstrip(" "), after
    if before[-1] in _WIDE_PUNCT and after.startswith(" "):
        return before, after.lstrip(" ")
    if (_LATIN.match(before[-1]) and _CJK_CHAR.match(after[0])) or (_CJK_CHAR.match(before[-1])
                                                                    and _LATIN.match(after[0])):
        return before + " ", after
    return before, after


def fill(template: str, lang: str, args: tuple[Any, ...], fields: Mapping[str, Any]) -> str:
    """``template.format(*args, **fields)``; in Chinese the seams between the template and each
    value follow the spacing rule of docs/zh/glossary.md (see :func:`_joint`)."""
    if lang != "zh":
        return template.format(*args, **fields)
    pieces: list[str] = []
    auto = 0
    try:
        for literal, name, spec, conv in string.Formatter().parse(template):
            if literal:
                pieces.append(literal)
            if name is None:
                continue
            if name == "":
                name, auto = str(auto), auto + 1
            if "{" in (spec or ""):
                return template.format(*args, **fields)  # a nested field: as str.format does
            one = "{" + name + ("!" + conv if conv else "") + (":" + spec if spec else "") + "}"
            pieces.append(one.format(*args, **fields))
    except (ValueError, IndexError, KeyError):
        return template.format(*args, **fields)
    out = pieces[:1]
    for p in pieces[1:]:
        out[-1], p = _joint(out[-1], p)
        out.append(p)
    return "".join(out)


def translator(lang: str) -> Callable[[str], str]:
    """A ``_`` for code that writes a whole document for a person in ``lang`` (the CLI, bench's
    reports): ``_("...")`` is the catalogue's text in ``lang`` at once. Written as
    ``_ = translator(lang)`` so that the catalogue's extraction still finds each ``_("...")``."""
    def tr(message: str) -> str:
        return Localized(translate(message, lang), lang)
    return tr


def _(message: str) -> str:
    """``message`` as a :class:`Message` (English; :func:`localize` writes it in a language).
    Typed ``str``: a Message is one, and lists of messages stay ``list[str]``."""
    return Message(message)


def did_you_mean(suggestions: list[str]) -> str:
    """`` (did you mean: a, b?)``; empty without suggestions."""
    return _(" (did you mean: {names}?)").format(names=", ".join(suggestions)) if suggestions else ""


def unknown_name(kind: str, name: str, suggestions: list[str] | None = None) -> UnknownNameError:
    """An UnknownNameError whose message is a Message (``kind`` may be one too)."""
    sugg = list(suggestions or [])
    return UnknownNameError(kind, name, sugg, _("unknown {kind} '{name}'{hint}").format(
        kind=kind, name=name, hint=did_you_mean(sugg)))


def data_text(text: str) -> str:
    """A text of a data file (a catalogue entry's name or source) as a Message: English as a
    value, written in a person's language where the catalogue has it (scripts/messages extracts
    these texts from src/llamarig/data/)."""
    return Message(text) if text else text


def N_(message: str) -> str:
    """Mark a message for the catalogue without making a Message here (module-level tables);
    ``_(TABLE[key])`` makes it one where it is used."""
    return message


#: errno -> what the operating system's message says, as a catalogue message (the OS writes
#: its messages in English whatever the locale: "读不了：No such file or directory")
ERRNO_TEXT = {
    "ENOENT": N_("no such file or directory"), "EACCES": N_("permission denied"),
    "EPERM": N_("operation not permitted"), "EISDIR": N_("is a directory"),
    "ENOTDIR": N_("a part of the path is not a directory"), "ENOSPC": N_("no space left on the device"),
    "EROFS": N_("read-only file system"), "EEXIST": N_("already exists"), "ENAMETOOLONG": N_("file name too long"),
    "ELOOP": N_("too many symbolic links"), "EMFILE": N_("too many open files"), "EIO": N_("input/output error"),
    "ENOEXEC": N_("not an executable file"), "ETXTBSY": N_("text file busy"),
    "ECONNREFUSED": N_("connection refused"), "ECONNRESET": N_("connection reset by the peer"),
    "ETIMEDOUT": N_("timed out"), "EHOSTUNREACH": N_("host unreachable"), "ENETUNREACH": N_("network unreachable"),
    "EADDRINUSE": N_("address already in use"), "EADDRNOTAVAIL": N_("address not available on this machine"),
    "EPIPE": N_("broken pipe"), "ENOMEM": N_("out of memory"),
}


def os_error(e: BaseException) -> str:
    """What an OSError says, as a Message for the known errno classes (the OS's own English
    text otherwise); the ``error`` field of "cannot read: {error}" and its kind."""
    code = getattr(e, "errno", None)
    name = errno.errorcode.get(code, "") if isinstance(code, int) else ""
    if name in ERRNO_TEXT:
        return _(ERRNO_TEXT[name])
    if isinstance(e, TimeoutError):
        return _(ERRNO_TEXT["ETIMEDOUT"])
    return getattr(e, "strerror", None) or str(e)


def error_text(e: BaseException) -> str:
    """What went wrong, for a person: an OS error's kind as a catalogue message (a connection
    refused, a timeout, a missing file), else the exception's class and message."""
    inner = getattr(e, "os_error", None)  # aiohttp's connection errors wrap the OSError
    if isinstance(inner, OSError):
        return os_error(inner)
    if isinstance(e, (OSError, TimeoutError)):
        return os_error(e)
    import asyncio  # lazy: only to tell asyncio's timeout (Python < 3.11) from the others

    if isinstance(e, asyncio.TimeoutError):
        return _(ERRNO_TEXT["ETIMEDOUT"])
    return f"{type(e).__name__}: {e}"
