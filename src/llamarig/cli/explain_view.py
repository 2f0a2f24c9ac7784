"""``llamarig explain``'s human output: per command, where its flags come from, whether the
script cuts it off, then one row per flag (what it does in this build, its default, its effect
on this model, the check findings on it) as a table where the terminal is wide enough and one
block per flag where it is not (cli/layout.py). A flag cut off from the command is marked on its
own row, the sentence that says why comes once above them; llama-server's English help text
where the table of the pinned build's options has no translation is in quotes, explained once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llamarig.cli.lang import _
from llamarig.cli.layout import Column, Sheet, has_wide

if TYPE_CHECKING:
    from rich.console import Console

    from llamarig.flags.schema import Schema

def _what(row: dict[str, Any]) -> str:
    what = str(row["what"])
    return "“" + what + "”" if row.get("original") else what


def _style(row: dict[str, Any]) -> str:
    if not row["reaches_server"]:
        return "dim red"
    return "" if row["known"] else "bold red"


def sheet(rows: list[dict[str, Any]], title: str) -> Sheet:
    """The flags of one command: a table where its columns stay readable, else blocks."""
    cols = [Column(_("flag"), key=True), Column(_("value"), key=True, path=True, min_width=20),
            Column(_("what it does (this build)"), prose=True, min_width=24, ratio=7, label=_("what it does")),
            Column(_("default"), prose=True, min_width=8, ratio=2),
            Column(_("effect"), prose=True, min_width=16, ratio=4)]
    out = Sheet(cols, title=title, sep="：" if has_wide(_("flag")) else ": ")
    for row in rows:
        out.add_row(str(row["flag"]), str(row["value"]), _what(row), str(row["default"]), str(row["effect"]),
                    style=_style(row), tag="" if row["reaches_server"] else _("(not passed)"))
    return out


def render(invocations: list[dict[str, Any]], schema: Schema, console: Console) -> None:
    """Each command's heading, its cut-off line if any, its flags, and one note on the English
    originals when some flag's help has no translation."""
    from rich.markup import escape

    originals = False
    for inv in invocations:
        title = _("line {line}: {program} ({schema})").format(
            line=inv["line"], program=inv["argv"][0], schema=schema.label())
        if inv["cut_line"]:
            n_cut = sum(1 for row in inv["rows"] if not row["reaches_server"])
            console.print(escape(_("the command is cut off at line {line}: the {n} flag(s) marked {mark} never reach "
                                   "llama-server (as `llamarig check` reports)").format(
                line=inv["cut_line"], n=n_cut, mark=_("(not passed)"))), style="bold red")
        console.print(sheet(inv["rows"], title))
        originals = originals or any(r.get("original") for r in inv["rows"])
    if originals:
        console.print(escape(_("text in “quotes”: llama-server's own help, not translated yet for this build")),
                      style="dim")
