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

from dataclasses import dataclass, field, replace
from pathlib import Path

from llamarig.flags.engines import ENGINES
from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, LineNote, Note, Parsed
from llamarig.flags.readers import parse_text
from llamarig.flags.readers.common import ends_with_backslash
from llamarig.flags.readers.paste import scan
from llamarig.i18n import N_, _, listing

__all__ = ["LineNote", "ScriptReading", "read_script", "reading_of", "verdict"]


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
    SGLang, Ollama, LM Studio), as meant, read like llama-server's (``Invocation.engine`` names
    the engine; their flags are never judged as llama-server's).

    ``parsed``: the text as meant, as the readers read it: what check lints. Its invocations
    are the meant commands with the words the shell (of the repaired text) gives them as
    ``args`` and the rest of what was meant as ``orphans``; its notes include one per line note.
    """

    received: tuple[Invocation, ...]
    meant: Invocation | None
    meant_each: tuple[Invocation, ...] = ()
    why_not: tuple[str, ...] = ()
    ambiguous_lines: tuple[int, ...] = ()
    line_notes: tuple[LineNote, ...] = ()
    others: tuple[Invocation, ...] = ()
    parsed: Parsed | None = field(default=None, compare=False, repr=False)

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
        why.append(_("line(s) {lines}: llama-server flags with no command to join them to").format(
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
                         tuple(_meant_of(inv) for inv in src.others), src)


#: how bad each kind of garbled line is: an error where the command does not get what was meant
_SEVERITY = {"paste-prose": Severity.WARNING, "paste-fence": Severity.WARNING}


def read_script(text: str, kind: str | None = None, origin: Path | None = None) -> ScriptReading:
    """The received and the meant commands of a launch text (a script, a unit, a YAML file, a
    command line), and a note per garbled line. ``kind`` forces a format (llamarig.flags.readers
    .parse_text); ``origin``: the file the text was read from."""
    text = text.replace("\r\n", "\n").replace("\x00", "")
    received = parse_text(text, kind, origin)
    if received.kind != "shell":
        return reading_of(received)
    repaired = scan(text)
    meant = parse_text(repaired.text, "shell", origin) if repaired.notes else received
    notes = sorted([*repaired.notes, *_breaks(meant, repaired.lines)], key=lambda n: n.line)
    meant.line_notes = notes
    meant.notes.extend(Note(n.kind, n.line, n.message, _SEVERITY.get(n.kind, Severity.ERROR)) for n in notes)
    return reading_of(received, meant, tuple(notes))


def _breaks(parsed: Parsed, lines: list[str]) -> list[LineNote]:
    """Each place a meant command is cut after its first cut (which its ``continuation-broken``
    note names): a line of it that lost its ``\\``, a blank or comment line after a ``\\``."""
    out: list[LineNote] = []
    for inv in [*parsed.invocations, *parsed.others]:
        if inv.source == "fragment" or not inv.orphans:
            continue
        at = sorted({inv.line, *(w.line for w in inv.intended_args)})
        for first, nxt in zip(at, at[1:], strict=False):
            out.extend(_break(first, nxt, lines, inv.cut_line))
    return out


def _break(first: int, nxt: int, lines: list[str], cut: int | None) -> list[LineNote]:
    """The note on the line where the command on line ``first`` stops before line ``nxt``, if
    it does (none at ``cut``, the first cut)."""
    text = lines[first - 1] if 0 < first <= len(lines) else ""
    if not ends_with_backslash(text):
        if first == cut:
            return []
        return [LineNote(first, "missing-backslash", text, _(
            "line {line} lost its trailing `\\`: the command ends there, and line {next} runs as a command of "
            "its own").format(line=first, next=nxt), text)]
    gap = first + 1
    if gap >= nxt or gap == cut:
        return []
    between = lines[gap - 1] if gap <= len(lines) else ""
    if between.strip():
        msg = _("line {line} is a comment after the `\\` on line {before}: it ends the command, and line {next} "
                "runs as a command of its own").format(line=gap, before=first, next=nxt)
    else:
        msg = _("line {line} is blank after the `\\` on line {before}: it ends the command, and line {next} "
                "runs as a command of its own").format(line=gap, before=first, next=nxt)
    return [LineNote(gap, "gap-after-backslash", between, msg, between)]


#: the kinds of garbled lines, grouped as check's verdict names them
_GROUPS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("paste-prose",), N_("{n} line(s) of prose lost their `#` (lines {lines})")),
    (("missing-backslash", "gap-after-backslash", "comment-after-backslash"),
     N_("{n} line(s) where a command breaks (a `\\` lost, or a blank, comment or `\\ #` after one: lines {lines})")),
    (("paste-fence",), N_("{n} code-block label(s) (lines {lines})")),
    (("paste-bullet", "paste-numbered", "paste-prompt"), N_("{n} list marker(s) or prompt(s) (lines {lines})")),
    (("paste-fullwidth", "paste-quotes", "paste-dash", "paste-prose-tail"),
     N_("{n} line(s) with typography or prose inside the command (lines {lines})")),
)


def verdict(parsed: Parsed) -> list[str]:
    """The answer first, for check: what a chat did to the text (its garbled lines by kind) and
    which commands are other engines' (catalogue messages)."""
    out: list[str] = []
    by_kind: dict[str, list[int]] = {}
    for n in parsed.line_notes:
        by_kind.setdefault(n.kind, []).append(n.line)
    parts = []
    for kinds, text in _GROUPS:
        lines = sorted({ln for k in kinds for ln in by_kind.get(k, [])})
        if lines:
            parts.append(_(text).format(n=len(lines), lines=_few(lines)))
    if parts and any(k.startswith("paste-") for k in by_kind):
        out.append(_("pasted from a chat and garbled: {parts}; `llamarig check --fix` writes it as meant").format(
            parts=_("; ").join(parts)))
    elif parts:
        out.append(_("the commands are cut: {parts}; `llamarig check --fix` joins them").format(parts=_("; ").join(parts)))
    for inv in parsed.others:
        sub = inv.args[0].text if inv.args else ""
        out.append(_("line {line}: `{command}` is {engine}, not llama-server (its flags and llama-server equivalent "
                     "are below)").format(line=inv.line, command=f"{inv.program} {sub}".strip(),
                                          engine=ENGINES[inv.engine].name))
    return out


def _few(lines: list[int]) -> str:
    """Line numbers as a short list: the first five and the last."""
    shown = [str(n) for n in lines] if len(lines) <= 6 else [*(str(n) for n in lines[:5]), "…", str(lines[-1])]
    return listing(shown)
