"""Text that fits the terminal, in both languages: the one layout mechanism of every view.

- :func:`wrap` (llamarig.text, shared with the library's file comments) breaks text at the width
  in terminal cells (a Chinese character takes two): at spaces, and between Chinese characters,
  never inside an English word, a flag, a number or a `code span`; no line starts with a closing
  mark (，。）…) or ends with an opening one (（“). :func:`wrap_text` does it for styled text.
- :func:`shorten_middle` shortens a path or an id from the middle (``/data/…/model.gguf``): the
  views do that where a column is narrow; ``--json`` always has the whole value.
- :class:`Sheet` is a table that knows when it can no longer be one: while every column keeps
  its whole identifiers (flags, rule ids, numbers, metric names, header labels) and each prose
  column keeps its minimum width, it prints as a table with the prose wrapped inside its
  column; below that it prints one block per row: the row's key columns on the first line, then
  one ``label: text`` line per other column, wrapped with a hanging indent.

Everything here is pure text layout (rich ``Text`` lines); what the cells say comes from the
views, in the user's language.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from rich.text import Text

from llamarig.text import (  # the line-breaking rule, shared with the library (render, --fix)
    KEEP,
    NO_END,
    NO_START,
    SOFT_BREAKS,
    _atoms,
    cells,
    command_lines,
    hang,
    has_wide,
    is_wide,
    keep_together,
    line_spans,
    shorten_middle,
    wrap,
)

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult


__all__ = ["KEEP", "NO_END", "NO_START", "SOFT_BREAKS", "Column", "Sheet", "cells", "command_lines", "echo",
           "has_wide", "is_wide", "keep_together", "labelled", "line_spans", "print_lines", "print_wrapped",
           "shorten_middle", "wrap", "wrap_text"]


def wrap_text(text: Text, width: int, indent: str = "", first_indent: str | None = None) -> list[Text]:
    """:func:`wrap` for styled text: each line keeps the styles of its characters."""
    lead = indent if first_indent is None else first_indent
    out: list[Text] = []
    offset = 0
    for para in text.plain.split("\n"):
        p_first = lead if not out else indent
        for i, (s, e) in enumerate(line_spans(para, width - cells(indent), width - cells(p_first))):
            line = Text(hang(p_first if i == 0 else indent, para[s:e], width))
            line.append_text(text[offset + s:offset + e])
            out.append(line)
        offset += len(para) + 1
    return out


# ------------------------------------------------------------------------------ the sheet


Justify = Literal["left", "right"]


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Sheet`.

    ``prose``: its text may wrap (at spaces and between Chinese characters) and the column may
    be as narrow as ``min_width``; otherwise every cell is shown whole on one line (flags, rule
    ids, numbers, metric names). ``path``: a long value is shortened from the middle rather than
    wrapped. ``key``: the column names the row (the first line of a block when stacked).
    ``ratio``: the share of the room left that a prose column takes.
    """

    header: str
    justify: Justify = "left"
    prose: bool = False
    min_width: int = 16
    path: bool = False
    key: bool = False
    ratio: int = 1
    style: str = ""
    #: the label of this column's line in a stacked block (default: the header)
    label: str | None = None


@dataclass
class _Row:
    cells: list[Text]
    style: str
    tag: Text = field(default_factory=Text)

    def first(self) -> Text:
        """The first cell with the tag after it (the table's view of the row's name)."""
        if not self.tag.plain:
            return self.cells[0]
        out = self.cells[0].copy()
        out.append("" if has_wide(self.tag.plain[:1]) else " ")
        out.append_text(self.tag)
        return out


@dataclass
class Sheet:
    """A table at the widths where its columns stay readable, one block per row below."""

    columns: Sequence[Column]
    title: str | Text | None = None
    gap: int = 2
    header_style: str = "bold"
    rule: bool = True
    #: the label / text separator of a stacked block (default: "：" for Chinese labels, else ": ")
    sep: str | None = None
    #: a blank line between stacked blocks
    spaced: bool = False
    rows: list[_Row] = field(default_factory=list)

    def add_row(self, *cells: str | Text, style: str = "", tag: str | Text = "") -> None:
        """A row; ``tag`` (a short mark, e.g. "(not passed)") follows the row's name: after
        its first cell in the table, at the end of the first line of its block."""
        texts = [c if isinstance(c, Text) else Text(c) for c in cells]
        texts += [Text("") for _ in range(len(self.columns) - len(texts))]
        tag_text = tag if isinstance(tag, Text) else Text(tag)
        self.rows.append(_Row(texts, style, tag_text))

    # -------------------------------------------------------------------- measuring

    def _cell(self, row: _Row, i: int) -> Text:
        return row.first() if i == 0 else row.cells[i]

    def _natural(self, i: int) -> int:
        col = self.columns[i]
        widest = max((max((cells(ln) for ln in self._cell(r, i).plain.split("\n")), default=0)
                      for r in self.rows), default=0)
        return max(cells(col.header), widest)

    def _longest(self, i: int, cap: int = 40) -> int:
        """The widest unbreakable piece of column ``i`` (at most ``cap``: a longer URL or path may
        break after its slashes)."""
        best = 0
        for r in self.rows:
            text = keep_together(self._cell(r, i).plain)
            for para in text.split("\n"):
                for s, e in _atoms(para):
                    if not para[s:e].isspace():
                        best = max(best, min(cap, cells(para[s:e])))
        return best

    def widths(self, width: int) -> list[int] | None:
        """The column widths of the table at ``width`` cells, or None when it must stack."""
        natural = [self._natural(i) for i in range(len(self.columns))]
        flexible = [i for i, c in enumerate(self.columns) if c.prose]
        out = list(natural)
        room = width - self.gap * (len(self.columns) - 1) - sum(n for i, n in enumerate(natural) if i not in flexible)
        room += self._shrink_paths(out, natural, sum(natural[j] for j in flexible) - room)
        # a prose column is never narrower than its longest word (a flag, an identifier, a number
        # with its unit): below that the table would break words, and it stacks instead
        mins = {j: max(cells(self.columns[j].header), min(natural[j], self.columns[j].min_width), self._longest(j))
                for j in flexible}
        if room < sum(mins.values()):
            return None
        if sum(natural[j] for j in flexible) > room:
            self._share(out, natural, mins, flexible, room)
        return out

    def _shrink_paths(self, out: list[int], natural: list[int], need: int) -> int:
        """Give up to ``need`` cells of the path columns (shortened from the middle, down to
        their minimum); return how many were given."""
        given = 0
        for i, col in enumerate(self.columns):
            floor = max(col.min_width, cells(col.header))
            if given >= need:
                break
            if col.path and not col.prose and natural[i] > floor:
                give = min(natural[i] - floor, need - given)
                out[i] -= give
                given += give
        return given

    def _share(self, out: list[int], natural: list[int], mins: dict[int, int], flexible: list[int],
               room: int) -> None:
        """The room of the prose columns shared by ratio, never below a column's minimum nor
        above its natural width (those settle first, the others share what is left)."""
        left, pending = room, list(flexible)
        while pending:
            total = sum(self.columns[j].ratio for j in pending)
            shares = {j: left * self.columns[j].ratio // total for j in pending}
            # a column its share cannot hold settles at its minimum first (the minimums fit the
            # room: widths() checked), then one whose text is narrower than its share
            settled = [j for j in pending if shares[j] <= mins[j]] or [j for j in pending if natural[j] <= shares[j]]
            if not settled:
                for j in pending[:-1]:
                    out[j] = shares[j]
                out[pending[-1]] = left - sum(out[x] for x in pending[:-1])
                return
            for j in settled:
                out[j] = mins[j] if shares[j] <= mins[j] else natural[j]
                left -= out[j]
                pending.remove(j)

    # -------------------------------------------------------------------- rendering

    def lines(self, width: int) -> list[Text]:
        """The sheet as lines of at most ``width`` cells."""
        out: list[Text] = []
        if self.title is not None:
            title = self.title if isinstance(self.title, Text) else Text(self.title)
            out += wrap_text(title, width, indent="  ", first_indent="")
        ws = self.widths(width)
        if ws is None:
            out += self._stacked(width)
        else:
            out += self._table(ws)
        return out

    def _cell_lines(self, cell: Text, col: Column, w: int) -> list[Text]:
        if col.path and not col.prose and cells(cell.plain) > w:
            short = Text(shorten_middle(cell.plain, w))
            if cell.spans:
                short.stylize(cell.spans[0].style)
            return [short]
        if col.prose:
            return wrap_text(cell, w)
        return [cell[s:s + len(part)] for s, part in _line_offsets(cell.plain)]

    def _table(self, ws: list[int]) -> list[Text]:
        out: list[Text] = []
        heads = [Text(c.header, style=self.header_style) for c in self.columns]
        out.append(self._join([[h] for h in heads], ws, ""))
        if self.rule:
            out.append(Text("─" * (sum(ws) + self.gap * (len(ws) - 1)), style="dim"))
        for row in self.rows:
            parts = [self._cell_lines(self._cell(row, i), col, w) for i, (col, w) in enumerate(zip(self.columns, ws,
                                                                                                   strict=True))]
            height = max(len(p) for p in parts)
            for k in range(height):
                out.append(self._join([[p[k]] if k < len(p) else [Text("")] for p in parts], ws, row.style))
        return out

    def _join(self, parts: list[list[Text]], ws: list[int], style: str) -> Text:
        line = Text(style=style)
        last = max((i for i, p in enumerate(parts) if p[0].plain), default=0)
        for i, (p, w, col) in enumerate(zip(parts, ws, self.columns, strict=True)):
            cell = p[0].copy()
            pad = w - cells(cell.plain)
            if col.justify == "right":
                cell = Text(" " * pad) + cell
            elif i < last:
                cell.append(" " * pad)
            if col.style:
                cell.stylize(col.style)
            line.append_text(cell)
            if i < last:
                line.append(" " * self.gap)
        line.rstrip()
        return line

    def _stacked(self, width: int) -> list[Text]:
        out: list[Text] = []
        keys = [i for i, c in enumerate(self.columns) if c.key] or [0]
        for n, row in enumerate(self.rows):
            if self.spaced and n:
                out.append(Text(""))
            head = Text(style=row.style)
            for i in keys:
                cell = row.cells[i]
                if not cell.plain:
                    continue
                if head.plain:
                    head.append("  ")
                col = self.columns[i]
                room = max(24, width - cells(head.plain))
                piece = Text(shorten_middle(cell.plain, room)) if col.path else cell.copy()
                if col.path and cell.spans:
                    piece.stylize(cell.spans[0].style)
                head.append_text(piece)
            head.stylize("bold", 0, len(head.plain))
            if row.tag.plain:
                head.append("" if has_wide(row.tag.plain[:1]) else " ")
                head.append_text(row.tag)
            out += wrap_text(head, width, indent="    ", first_indent="")
            for i, col in enumerate(self.columns):
                if i in keys or not row.cells[i].plain.strip():
                    continue
                out += self._field(col, row.cells[i], width, row.style)
        return out

    def _field(self, col: Column, cell: Text, width: int, style: str) -> list[Text]:
        chinese = any(has_wide(c.label or c.header) for c in self.columns)
        sep = self.sep if self.sep is not None else ("：" if chinese else ": ")
        label = Text((col.label or col.header) + sep, style="dim")
        value = cell.copy()
        if col.path:
            value = Text(shorten_middle(cell.plain, width - 2 - cells(label.plain)))
        body = Text(style=style)
        body.append_text(label)
        body.append_text(value)
        hang = " " * (2 + cells(label.plain))
        if cells(hang) > width // 3:
            hang = "      "
        return wrap_text(body, width, indent=hang, first_indent="  ")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from _as_laid_out(self.lines(options.max_width))


@dataclass
class Para:
    """A paragraph that wraps at the console's width by :func:`wrap_text` when printed (a rich
    renderable: it can sit in a Group next to a :class:`Sheet`), continued with ``indent``."""

    text: Text
    indent: str = "  "
    first_indent: str = ""

    @classmethod
    def of(cls, text: str, style: str = "", indent: str = "  ", first_indent: str = "") -> Para:
        return cls(Text(text, style=style), indent, first_indent)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from _as_laid_out(wrap_text(self.text, options.max_width, indent=self.indent,
                                          first_indent=self.first_indent))


@dataclass
class CommandText:
    """A command to copy (a rich renderable): as it is where it fits the console, else broken at
    blanks into shell continuation lines (:func:`command_lines`), never wrapped mid-word."""

    command: str
    style: str = ""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from _as_laid_out([Text(ln, style=self.style) for ln in command_lines(self.command, options.max_width)])


def _as_laid_out(lines: list[Text]) -> list[Text]:
    """Lines already fitted to the width, for rich to print as they are: never wrapped again
    (a path or URL wider than the terminal stays whole, the terminal folds it) nor cut."""
    for ln in lines:
        ln.no_wrap, ln.overflow = True, "ignore"
    return lines


def _line_offsets(text: str) -> Iterator[tuple[int, str]]:
    pos = 0
    for part in text.split("\n"):
        yield pos, part
        pos += len(part) + 1


def labelled(label: str, text: str, style: str = "") -> Text:
    """``label`` then ``text`` (a full-width colon carries its own space)."""
    out = Text()
    out.append(label, style=style)
    out.append("" if label.endswith("：") else " ")
    out.append(text)
    return out


def print_wrapped(console: Console, text: str | Text, indent: str = "", first_indent: str = "",
                  style: str = "") -> None:
    """``text`` wrapped at the console's width by :func:`wrap_text`, its continuation lines
    indented by ``indent`` (rich's own wrapping puts a Chinese run that does not fit the rest of
    the line on the next line, whole)."""
    t = text if isinstance(text, Text) else Text(text, style=style)
    print_lines(console, wrap_text(t, console.width, indent=indent, first_indent=first_indent))


def print_lines(console: Console, lines: Iterable[Text | str]) -> None:
    """Lines already laid out for the console's width, printed as they are (never re-wrapped)."""
    for ln in lines:  # a plain str is text too, not rich markup ("[...]" in a command)
        console.print(ln if isinstance(ln, Text) else Text(ln), soft_wrap=True, highlight=False)


def stream_width(err: bool = False) -> int | None:
    """The width to wrap plain text at on stdout (stderr with ``err``): the terminal's when the
    stream is one; None for a pipe or a file (a message stays one line for grep and logs)."""
    import os
    import sys

    stream = sys.stderr if err else sys.stdout
    try:
        if not stream.isatty():
            return None
        cols = os.environ.get("COLUMNS", "")
        return int(cols) if cols.isdigit() and int(cols) > 0 else os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return None


def echo(text: str, err: bool = False) -> None:
    """``click.echo`` of a message that wraps at the terminal's width (continuation lines
    indented by two), a single line when the stream is not a terminal."""
    import click

    width = stream_width(err)
    if width is None:
        click.echo(text, err=err)
        return
    for line in text.split("\n"):
        click.echo("\n".join(wrap(line, width, indent="  ", first_indent="")) if cells(line) > width else line,
                   err=err)


def console_width(default: int = 80) -> int:
    """The terminal's width (``COLUMNS`` first, as rich and click read it), else ``default``."""
    import shutil

    return shutil.get_terminal_size((default, 24)).columns
