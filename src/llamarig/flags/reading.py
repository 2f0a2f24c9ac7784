"""What a launch text means: the commands the shell really runs, the one command its author
meant, and what each garbled line of it is.

A script pasted out of a chat is often not the script its author meant: the comment lines lost
their ``#`` (bash runs the prose as commands), lines lost their trailing ``\\`` (each fragment
of flags is its own shell command, and llama-server gets none of them), list bullets, a ``$``
prompt, smart quotes or full-width punctuation crept in. :func:`read_script` reads such a text
twice: as bash runs it (the *received* commands) and as a person reads it (the *meant* one),
and names every line that differs. Every view that judges a launch (check, fix, explain, logs,
plan, render) works from this pair: figures price what runs, and show what the meant command
would change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from llamarig.flags.parsed import Invocation, Parsed
from llamarig.flags.readers import parse_text
from llamarig.i18n import _

__all__ = ["LineNote", "ScriptReading", "read_script", "reading_of"]


@dataclass(frozen=True)
class LineNote:
    """One line of the text that is not what its author meant, and what it is.

    ``line``: its 1-based number in the text. ``kind``: what it is, also the id of the check
    finding that names it (docs/check.md): ``paste-prose`` (prose that lost its ``#``: bash runs
    its first word as a command), ``paste-no-backslash`` (a line of a command that lost its
    trailing ``\\``, so the command ends there), ``paste-fence`` (a code block's label or fence
    left by the chat: ``bash``, ``运行``, ``plaintext``, a line of backquotes), ``paste-bullet``,
    ``paste-numbered`` (a list marker before a command), ``paste-prompt`` (a leading ``$``
    prompt), ``paste-fullwidth`` (full-width spaces or punctuation in a command), ``paste-quotes``
    (smart quotes), ``paste-dash`` (a dash the chat turned ``--`` into), ``paste-prose-tail``
    (prose after the flags on a command line). ``text``: the line as written. ``message``: what
    bash does with it and what was meant (a catalogue message). ``repaired``: the line as the
    meant text has it (a comment for prose, the command without its list marker...), or None
    when the meant text drops it (a fence label)."""

    line: int
    kind: str
    text: str
    message: str
    repaired: str | None


@dataclass(frozen=True)
class ScriptReading:
    """The pair every view works from: what the shell really runs, and what was meant.

    ``received``: every command of the text that starts llama-server, or that is a line of its
    flags run on its own, exactly as bash reads the text as written: for a server start,
    ``Invocation.args`` is the argv llama-server really receives and ``Invocation.orphans`` the
    words its author wrote for it that the shell cut off (a comment, a blank line or a missing
    ``\\`` ended the command before them); a *fragment* (``Invocation.source == "fragment"``,
    ``program`` "llama-server" by convention) is a line of flags with no command in front,
    which bash runs as a command of its own ("command not found"): it starts nothing.

    ``meant_each``: every llama-server command the author meant, in the text's order, rebuilt
    as a person reads the text (prose lines as comments, list markers and smart quotes undone,
    the cut-off words and the fragments of flags that follow a command joined to it):
    ``args`` is the whole argv meant, ``orphans`` is empty; each word keeps the line it is
    written on. ``meant``: the one command the text means, when there is exactly one; else
    None, and ``why_not`` says why (no command at all, fragments of flags with no command to
    join, several commands) and ``ambiguous_lines`` lists the lines that could not be placed
    (the first line of each candidate command, the lines of an unplaced fragment).

    ``line_notes``: one :class:`LineNote` per line that is not what was meant, in line order.
    ``others``: commands of other inference servers in the text (FastLLM ``ftllm``, vLLM,
    SGLang, Ollama, LM Studio), read like llama-server's (``Invocation.engine`` names the
    engine; their flags are never judged as llama-server's).
    """

    received: tuple[Invocation, ...]
    meant: Invocation | None
    meant_each: tuple[Invocation, ...] = ()
    why_not: tuple[str, ...] = ()
    ambiguous_lines: tuple[int, ...] = ()
    line_notes: tuple[LineNote, ...] = ()
    others: tuple[Invocation, ...] = ()

    @property
    def meant_argv(self) -> list[str] | None:
        """The meant command's argv (program first), or None when there is not one."""
        return self.meant.argv if self.meant is not None else None

    @property
    def garbled(self) -> bool:
        """Whether any line of the text is not what was meant."""
        return bool(self.line_notes)


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def _meant_of(inv: Invocation) -> Invocation:
    """``inv`` as meant: its received and cut-off words as one argv."""
    return replace(inv, args=list(inv.intended_args), orphans=[], cut_line=None,
                   end_line=max([inv.end_line, *(w.line for w in inv.orphans)]))


def reading_of(received: Parsed, meant: Parsed | None = None, line_notes: tuple[LineNote, ...] = ()
               ) -> ScriptReading:
    """The pair from the text read as bash runs it (``received``) and as a person reads it
    (``meant``: the same text with its garbled lines repaired; ``received`` when it has none)."""
    src = meant if meant is not None else received
    servers = [inv for inv in src.invocations if inv.source != "fragment"]
    loose = [inv for inv in src.invocations if inv.source == "fragment"]
    each = tuple(_meant_of(inv) for inv in servers)
    why: list[str] = []
    ambiguous: list[int] = []
    if loose:
        why.append(_("lines {lines} are llama-server flags with no command to join them to").format(
            lines=", ".join(_span(f.line, f.end_line) for f in loose)))
        ambiguous.extend(ln for f in loose for ln in range(f.line, f.end_line + 1))
    if not servers:
        why.append(_("no llama-server command in the text"))
    elif len(servers) > 1:
        why.append(_("{n} llama-server commands (lines {lines}): which one is meant?").format(
            n=len(servers), lines=", ".join(str(s.line) for s in servers)))
        ambiguous.extend(s.line for s in servers)
    meant_one = each[0] if len(each) == 1 and not loose else None
    return ScriptReading(tuple(received.invocations), meant_one, each, tuple(why) if meant_one is None else (),
                         tuple(sorted(set(ambiguous))) if meant_one is None else (), line_notes,
                         tuple(received.others))


def read_script(text: str, kind: str | None = None, origin: Path | None = None) -> ScriptReading:
    """The received and the meant commands of a launch text (a script, a unit, a YAML file, a
    command line), and a note per garbled line."""
    return reading_of(parse_text(text, kind, origin))
