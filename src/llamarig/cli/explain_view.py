"""``llamarig explain``'s human output: per command, where its flags come from, whether the
script cuts it off, then one row per flag (what it does in this build, its default, its effect
on this model, the check findings on it) as a table where the terminal is wide enough and one
block per flag where it is not (cli/layout.py). A flag cut off from the command is marked on its
own row, the sentence that says why comes once above them; llama-server's English help text
where the table of the pinned build's options has no translation is in quotes, explained once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llamarig.cli.lang import _
from llamarig.cli.layout import Column, Sheet, has_wide, print_wrapped

if TYPE_CHECKING:
    from rich.console import Console

    from llamarig.app.explain import ExplainedCommand, ExplainReport
    from llamarig.flags.explain import Row

def _what(row: Row) -> str:
    return "“" + row.what + "”" if row.original else row.what


def _style(row: Row) -> str:
    if not row.reaches_server:
        return "dim red"
    return "" if row.known else "bold red"


def _effect(row: Row, cut: str) -> str:
    """The row's effect without the cut-off sentence (said once above the table for every cut
    flag; the tag on the row marks it)."""
    if row.reaches_server or not row.effect.startswith(cut):
        return row.effect
    rest = row.effect[len(cut):]
    for sep in (_("; "), "; "):
        rest = rest.removeprefix(sep)
    return rest


def sheet(cmd: ExplainedCommand, title: str) -> Sheet:
    """The flags of one command: a table where its columns stay readable, else blocks."""
    cols = [Column(_("flag"), key=True), Column(_("value"), key=True, path=True, min_width=20),
            Column(_("what it does (this build)"), prose=True, min_width=24, ratio=7, label=_("what it does")),
            Column(_("default"), prose=True, min_width=8, ratio=2),
            Column(_("effect"), prose=True, min_width=16, ratio=4)]
    out = Sheet(cols, title=title, sep="：" if has_wide(_("flag")) else ": ")
    cut = _("cut off at line {line}: never reaches llama-server").format(line=cmd.cut_line)
    for row in cmd.rows:
        out.add_row(row.flag, row.value, _what(row), row.default, _effect(row, cut),
                    style=_style(row), tag="" if row.reaches_server else _("(not passed)"))
    return out


def render(result: ExplainReport, console: Console) -> None:
    """Each command's heading, its cut-off line if any, what runs (priced) and what the meant
    command would change, its flags, and one note on the English originals when some flag's help
    has no translation."""
    from rich.markup import escape

    originals = False
    for cmd in result.commands:
        title = _("line {line}: {program} ({schema})").format(
            line=cmd.line, program=cmd.argv[0], schema=result.schema.label())
        if cmd.cut_line:
            n_cut = sum(1 for row in cmd.rows if not row.reaches_server)
            print_wrapped(console, _("the command is cut off at line {line}: the {n} flag(s) marked {mark} never "
                                     "reach llama-server (as `llamarig check` reports)").format(
                line=cmd.cut_line, n=n_cut, mark=_("(not passed)")), indent="  ", style="bold red")
        for line in cmd.summary:  # what runs, priced, and what the meant command would change
            print_wrapped(console, line, indent="  ")
        console.print(sheet(cmd, title))
        originals = originals or any(r.original for r in cmd.rows)
    if originals:
        console.print(escape(_("text in “quotes”: llama-server's own help, not translated yet for this build")),
                      style="dim")
