"""``--help`` in the user's language, at the terminal's width.

Every command is a :class:`HelpCommand` (or :class:`Group`): its help, its options' help, its
epilog and click's own words (Usage, Options, [default: ...]) are catalogue messages, looked up
when the help is written, not when the command is defined, so the language chosen by
``llamarig --lang``, ``$LLAMARIG_LANG`` or the locale applies (``--lang`` is eager and read
before ``--help``: ``llamarig --lang zh plan --help`` and ``LANG=zh_CN.UTF-8 llamarig plan
--help`` both give Chinese). Help strings are marked ``N_("...")`` where they are written.

:class:`HelpFormatter` wraps at the terminal's width, at most 80 columns (78 of text), counting
a Chinese character as two cells and breaking between Chinese characters (click's own formatter
counts characters and breaks only at spaces: Chinese lines ran past the edge). A paragraph that
starts with ``\\b`` is kept as written (examples). ``examples=[...]`` on a command lists command
lines under a translated heading; they are never translated.

plan reads its own arguments (llama-server's spellings), so its help is a :class:`HelpPage`
written through the same formatter.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import click

from llamarig.cli.lang import N_, _
from llamarig.cli.layout import (
    KEEP,
    cells,
    command_lines,
    console_width,
    has_wide,
    keep_together,
    wrap,
)

#: the widest help, whatever the terminal (click's own default: 80 columns, 2 of margin)
MAX_WIDTH = 80
#: click's own words, in the catalogue
CLICK_WORDS = (N_("Show this message and exit."), N_("Show the version and exit."))


def help_width() -> int:
    """Columns of help text: the terminal's, at most 80, less click's margin of 2."""
    return max(min(console_width(MAX_WIDTH), MAX_WIDTH) - 2, 30)


def help_paragraphs(text: str) -> list[tuple[str, bool]]:
    """A help text (a docstring or ``help=``) as its paragraphs: (text, verbatim). A paragraph
    is one catalogue message, its blanks and line breaks folded to single blanks; a verbatim one
    (``\\b``: examples) is kept as written and never translated. scripts/messages extracts the
    messages the same way."""
    out = []
    for para in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        if para.lstrip(" ").startswith("\b"):
            out.append((para.lstrip(" "), True))
        elif para.strip():
            out.append((" ".join(para.split()), False))
    return out


def tr(text: str | None) -> str:
    """A help text in the CLI's language, paragraph by paragraph (:func:`help_paragraphs`)."""
    if not text:
        return ""
    return "\n\n".join(p if verbatim else _(p) for p, verbatim in help_paragraphs(text))


class HelpFormatter(click.HelpFormatter):
    """click's help formatter, measuring in terminal cells and wrapping Chinese (layout.wrap)."""

    def __init__(self, indent_increment: int = 2, width: int | None = None, max_width: int | None = None) -> None:
        super().__init__(indent_increment, width=help_width(), max_width=MAX_WIDTH)

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        lead = " " * self.current_indent + (prefix if prefix is not None else _("Usage: ")) + prog + " "
        if not args:
            self.write(lead.rstrip() + "\n")
            return
        hang = " " * min(cells(lead), 24)
        for line in wrap(keep_together(args, r"\[[^\[\]]*\]"), self.width, indent=hang, first_indent=lead):
            self.write(line.replace(KEEP, " ") + "\n")

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        for i, para in enumerate(_paragraphs(text)):
            if i:
                self.write("\n")
            if para.startswith("\b"):
                for line in para[1:].strip("\n").split("\n"):
                    for part in command_lines(line, self.width - self.current_indent):
                        self.write(indent + part + "\n")
                continue
            for line in wrap(" ".join(para.split()), self.width, indent=indent):
                self.write(line + "\n")

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_col = min(max((cells(a) for a, _b in rows), default=0), col_max) + col_spacing
        indent = " " * self.current_indent
        hang = indent + " " * first_col
        for term, text in rows:
            if not text:
                self.write(indent + term + "\n")
                continue
            if cells(term) <= first_col - col_spacing:
                lead = indent + term + " " * (first_col - cells(term))
            else:
                self.write(indent + term + "\n")
                lead = hang
            paras = _paragraphs(text)
            for k, para in enumerate(paras):
                body = para[1:].strip("\n").split("\n") if para.startswith("\b") else None
                if body is not None:
                    lines = [(lead if k == 0 and i == 0 else hang) + ln for i, ln in enumerate(body)]
                else:
                    lines = wrap(" ".join(para.split()), self.width, indent=hang, first_indent=lead if k == 0 else hang)
                for line in lines:
                    self.write(line + "\n")

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        self.write_paragraph()
        self.write_heading(name)
        self.indent()
        try:
            yield
        finally:
            self.dedent()

    def write_heading(self, heading: str) -> None:
        colon = "：" if any(cells(c) == 2 for c in heading) else ":"
        self.write(f"{'':>{self.current_indent}}{heading}{colon}\n")


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs; one starting with ``\\b`` keeps its lines."""
    out = []
    for para in re.split(r"\n\s*\n", text.strip("\n")):
        para = para.strip("\n")
        if para.strip():
            out.append(para.lstrip(" ") if para.lstrip(" ").startswith("\b") else para)
    return out


class HelpContext(click.Context):
    formatter_class = HelpFormatter


# ------------------------------------------------------------------------------ commands


_EXTRA = re.compile(r"\s*\[([^\[\]]*)\]$")


def _extras(text: str) -> str:
    """click's ``[default: X; required]`` in the CLI's language."""
    words = {"required": _("required")}
    items = []
    for item in text.split("; "):
        key, sep, value = item.partition(": ")
        if sep and key == "default":
            if any(c.isalpha() for c in value) and has_wide(_("default: {value}")):
                value = f"`{value}`"  # a word among Chinese: a value to type, as written
            items.append(_("default: {value}").format(value=value))
        elif sep and key == "env var":
            items.append(_("env var: {value}").format(value=value))
        else:
            items.append(words.get(item, item))
    return _("[{items}]").format(items=_("; ").join(items))


def option_record(param: click.Parameter, ctx: click.Context) -> tuple[str, str] | None:
    """(spellings, help) of an option as click writes it, the help and click's extras translated."""
    if not isinstance(param, click.Option):
        return None
    original = param.help
    param.help = tr(original) if original else original
    try:
        rec = param.get_help_record(ctx)
    finally:
        param.help = original
    if rec is None:
        return None
    spec, text = rec
    m = _EXTRA.search(text)
    if m:
        head = text[:m.start()]
        gap = "" if not head or has_wide(head[-1]) else "  "  # a Chinese sentence needs no blank before （
        text = head + gap + _extras(m.group(1))
    return spec, text


class HelpCommand(click.Command):
    """A click command whose help is written in the user's language (see the module)."""

    context_class = HelpContext

    def __init__(self, *args: Any, examples: Sequence[str] = (), **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.examples = tuple(examples)
        for p in self.params:  # a number's placeholder: N or X, not click's INTEGER / FLOAT
            if isinstance(p, click.Option) and p.metavar is None and not p.is_flag:
                kind = "X" if isinstance(p.type, (click.types.FloatParamType, click.FloatRange)) else (
                    "N" if isinstance(p.type, (click.types.IntParamType, click.IntRange)) else None)
                p.metavar = kind

    def get_short_help_str(self, limit: int = 45) -> str:
        text = tr(self.short_help) if self.short_help else tr(self.help).split("\n\n")[0]
        return " ".join(text.split())

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, " ".join(_usage_words(self.collect_usage_pieces(ctx))))

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        text = tr(self.help)
        if text:
            formatter.write_paragraph()
            with formatter.indentation():
                formatter.write_text(text)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [r for p in self.get_params(ctx) if (r := option_record(p, ctx)) is not None]
        if rows:
            with formatter.section(_("Options")):
                formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.examples:
            with formatter.section(_("Examples")):
                formatter.write_text("\b\n" + "\n".join(self.examples))
        if self.epilog:
            formatter.write_paragraph()
            with formatter.indentation():
                formatter.write_text(tr(self.epilog))

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        opt = super().get_help_option(ctx)
        if opt is not None:
            opt.help = CLICK_WORDS[0]
        return opt


def _usage_words(pieces: list[str]) -> list[str]:
    """click's usage placeholders in the CLI's language ([OPTIONS], COMMAND [ARGS]...)."""
    words = {"[OPTIONS]": _("[OPTIONS]"), "COMMAND [ARGS]...": _("COMMAND [ARGS]..."),
             "[COMMAND] [ARGS]...": _("[COMMAND] [ARGS]..."), "[COMMAND]...": _("[LLAMA-SERVER COMMAND]...")}
    return [words.get(p, p) for p in pieces]


class Group(HelpCommand, click.Group):
    """A click group whose help (and its command list) is written in the user's language."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        HelpCommand.format_options(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, self.short_help_of(name, cmd)))
        if rows:
            with formatter.section(_("Commands")):
                formatter.write_dl(rows)

    def short_help_of(self, name: str, cmd: click.Command) -> str:
        return cmd.get_short_help_str()


Group.command_class = HelpCommand
Group.group_class = Group


def command(name: str, help: str, **kw: Any) -> Callable[[Callable[..., Any]], HelpCommand]:
    """``@click.command`` of a :class:`HelpCommand` with its help (``N_("...")``)."""
    return click.command(name, cls=HelpCommand, help=help, **kw)


def group(name: str, help: str, **kw: Any) -> Callable[[Callable[..., Any]], Group]:
    """``@click.group`` of a :class:`Group` with its help (``N_("...")``)."""
    return click.group(name, cls=Group, help=help, **kw)


def _set_lang(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        from llamarig.i18n import set_language

        set_language(value)
    return value


def lang_option(help: str = N_("Language of the output (default: $LLAMARIG_LANG, else the locale, e.g. "
                               "LANG=zh_CN.UTF-8).")) -> Callable[[Any], Any]:
    """``--lang en|zh``, read before ``--help`` (eager) so that the help is in that language."""
    return click.option("--lang", type=click.Choice(["en", "zh"]), default=None, is_eager=True,
                        callback=_set_lang, help=help)


# ------------------------------------------------------------------------------ plan's page


@dataclass(frozen=True)
class HelpPage:
    """A help page written by hand (plan parses its own arguments): usage, paragraphs, sections
    of (term, help) rows and examples; every text a catalogue msgid."""

    usage: str
    paragraphs: Sequence[str]
    #: (title, rows of (term, help)) or (title, a paragraph)
    sections: Sequence[tuple[str, Sequence[tuple[str, str]] | str]] = field(default_factory=tuple)
    examples: Sequence[str] = ()

    def render(self, prog: str) -> str:
        f = HelpFormatter()
        f.write_usage(prog, _(self.usage))
        for para in self.paragraphs:
            f.write_paragraph()
            with f.indentation():
                f.write_text(_(para))
        for title, rows in self.sections:
            with f.section(_(title)):
                if isinstance(rows, str):
                    f.write_text(_(rows))
                else:
                    f.write_dl([(term, _(text) if text else "") for term, text in rows], col_max=26)
        if self.examples:
            with f.section(_("Examples")):
                f.write_text("\b\n" + "\n".join(self.examples))
        return f.getvalue()


# ------------------------------------------------------------------------------ click's errors


def usage_error_text(e: click.UsageError) -> str:
    """A click usage error in the CLI's language (click writes its own messages in English)."""
    from click import exceptions as x

    if isinstance(e, x.NoSuchOption):
        hint = ""
        if e.possibilities:
            hint = _(" (did you mean: {names}?)").format(names=", ".join(sorted(e.possibilities)))
        return _("no such option: {option}").format(option=e.option_name) + hint
    if isinstance(e, x.MissingParameter) and e.param is not None:
        name = e.param.get_error_hint(e.ctx) if e.ctx is not None else (e.param.name or "")
        if isinstance(e.param, click.Argument):
            return _("missing argument {name}").format(name=name)
        return _("missing option {name}").format(name=name)
    if isinstance(e, x.BadParameter):
        hint = e.param_hint if isinstance(e.param_hint, str) else " / ".join(e.param_hint or ())
        name = e.param.get_error_hint(e.ctx) if e.param is not None and e.ctx is not None else hint
        return _("invalid value for {name}: {reason}").format(name=name, reason=_bad_value(e.message))
    msg = " ".join(e.format_message().split())
    m = re.match(r"Got unexpected extra arguments? \((.*)\)$", msg)
    if m:
        return _("unexpected extra argument(s): {args}").format(args=m.group(1))
    m = re.match(r"Option '(.+)' requires an argument\.$", msg)
    if m:
        return _("option {option} needs a value").format(option=m.group(1))
    m = re.match(r"No such command '(.+)'\.$", msg)
    if m:
        return _("no such command: {name}").format(name=m.group(1))
    return msg


def _bad_value(message: str) -> str:
    """click's reasons for a bad value (its types' messages) in the CLI's language."""
    m = re.match(r"(.+) is not one of (.+)\.$", message) or re.match(r"(.+) is not (.+)\.$", message)
    if m and "valid" not in m.group(2):
        return _("{value} is not one of {choices}").format(value=m.group(1), choices=m.group(2))
    m = re.match(r"(.+) is not a valid (integer|float|integer range|float range)\.$", message)
    if m:
        kind = {"integer": _("whole number"), "float": _("number")}.get(m.group(2), m.group(2))
        return _("{value} is not a {kind}").format(value=m.group(1), kind=kind)
    m = re.match(r"(.+) is not in the range (.+)\.$", message)
    if m:
        return _("{value} is not in the range {range}").format(value=m.group(1), range=m.group(2))
    return message
