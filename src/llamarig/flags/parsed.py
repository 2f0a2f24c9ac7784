"""What a reader makes of a pasted text: the llama-server invocations in it (the argv each one
really receives, word by word with its line) and notes about the text itself. The readers
(llamarig.flags.readers) produce these; the rules (llamarig.flags.rules) consume them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llamarig.flags.findings import Severity


@dataclass(frozen=True)
class Word:
    text: str
    line: int  # 1-based line where the word starts
    raw: str = field(default="", compare=False)  # as written (quotes kept), shell input only
    start: int = field(default=-1, compare=False)  # offsets into the parsed text, shell input only
    end: int = field(default=-1, compare=False)
    #: shell input: how each piece was quoted, for a word with a `$` to expand (readers.bash)
    parts: tuple[tuple[str, str], ...] | None = field(default=None, compare=False, repr=False)
    #: shell input: the elements of a `NAME=( ... )` array assignment
    elements: tuple[Word, ...] | None = field(default=None, compare=False, repr=False)
    #: the word is the value of a variable unknown here (`"$@"`, `$EXTRA` from the caller's
    #: environment): it may stand for any number of arguments, so it is not judged
    opaque: bool = field(default=False, compare=False)
    #: the word as written before a llama-swap macro was substituted (`--port ${PORT}`): what
    #: --fix writes back
    written: str = field(default="", compare=False)


@dataclass(frozen=True)
class LineNote:
    """One line of a text that is not what its author meant, and what it is.

    ``line``: its 1-based number in the text. ``kind``: what it is, also the id of the check
    finding that names it (docs/check.md): ``paste-prose`` (prose that lost its ``#``: bash runs
    its first word as a command), ``paste-fence`` (a code block's label or fence left by the
    chat: ``bash``, ``运行``, ``plaintext``, a line of backquotes), ``paste-bullet``,
    ``paste-numbered`` (a list marker before a command), ``paste-prompt`` (a leading ``$``
    prompt), ``paste-fullwidth`` (full-width spaces or punctuation in a command),
    ``paste-quotes`` (smart quotes), ``paste-dash`` (a dash the chat turned ``--`` into),
    ``paste-prose-tail`` (prose after the flags on a command line), ``comment-after-backslash``
    (``\\ # comment`` at the end of a line: the ``\\`` escapes a blank, the comment's words
    become arguments), ``missing-backslash`` (a line of a command that lost its trailing
    ``\\``, so the command ends there), ``gap-after-backslash`` (a blank, comment or prose line
    after a ``\\`` line, which ends the command). ``text``: the line as written. ``message``:
    what bash does with it and what was meant (a catalogue message). ``repaired``: the line as
    the meant text has it (a comment for prose, the command without its list marker...), or
    None when the meant text drops it (a fence label). ``comment``: text the repair moved off
    the line (the comment after ``\\``, prose after flags on a line that goes on): --fix writes
    it above the command."""

    line: int
    kind: str
    text: str
    message: str
    repaired: str | None
    comment: str = ""


@dataclass(frozen=True)
class Note:
    """Something the reader found about the text itself (not about a flag)."""

    kind: str  # continuation-broken | orphan-flags | space-after-backslash | killall | ...
    line: int
    message: str
    severity: Severity = Severity.ERROR
    invocation: int | None = None  # index of the llama-server invocation concerned
    fix: str | None = None  # the repair, when the kind's usual one does not fit (rules/script.py)


@dataclass
class Invocation:
    """One llama-server start found in the input."""

    program: str
    args: list[Word]  # what llama-server actually receives (program excluded)
    line: int  # line of the program word
    end_line: int
    env: list[tuple[str, str, int]] = field(default_factory=list)  # (name, value, line)
    background: bool = False
    orphans: list[Word] = field(default_factory=list)  # flags cut off by a broken continuation
    cut_line: int | None = None  # line where the command was cut off
    source: str = "shell"  # shell | systemd | compose | llama-swap | argv
    label: str = ""  # e.g. the compose service or llama-swap model id
    redirects: list[str] = field(default_factory=list)  # `> log 2>&1` as written (kept by --fix)
    # shell input: the command's first line up to the word before the arguments, as written
    # (`cd ~ && nohup llama-server`, `docker run … IMAGE`), and the rest of its last line after
    # its last word or redirection (` &`, `; }`, ` && echo ok  # note`); --fix keeps both
    head: str = ""
    tail: str | None = None
    #: the words between the command's assignments and the program, as read: wrappers that run
    #: llama-server (`stdbuf -oL -eL`, `taskset -c 0-7`, `nohup`, `env -u X`); shell keywords
    #: (`exec`, `time`, `command`) left out
    wrappers: list[str] = field(default_factory=list)
    #: the directory the input runs it in, as written: the last `cd DIR` before it (bash), or
    #: `WorkingDirectory=` (systemd); None when the input does not say
    cwd: str | None = None
    #: False when the invocation was read from another file (a sourced one, a systemd drop-in)
    #: or from a function body with one call's arguments: --fix leaves its text as written
    written_here: bool = True
    #: a --models-preset section: its (key, value) pairs as written, [*]'s first; the argv is
    #: made from them with the build's options (llamarig.flags.preset)
    preset: list[tuple[Word, Word]] | None = None
    #: the inference server it starts: "llama-server", or another engine's (llamarig.flags.engines:
    #: "fastllm", "vllm", "sglang", "ollama", "lmstudio"), whose commands are kept in
    #: ``Parsed.others`` and never judged against llama-server's flags
    engine: str = "llama-server"

    @property
    def argv(self) -> list[str]:
        return [self.program] + [w.text for w in self.args]

    @property
    def intended_args(self) -> list[Word]:
        """The arguments the author meant to pass: the received ones plus the cut-off ones."""
        return self.args + self.orphans


@dataclass
class ShellCommand:
    """A simple shell command."""

    words: list[Word]
    line: int
    end_line: int
    terminator: str = "\n"  # ; & && || | \n or "" at EOF
    assignments: list[tuple[str, str, int]] = field(default_factory=list)
    comment_break: int | None = None  # line of a comment/blank line that ended this command
    redirects: list[str] = field(default_factory=list)
    end_pos: int = -1  # offset just after the command's last word or redirection


@dataclass
class Parsed:
    kind: str  # shell | systemd | compose | llama-swap
    invocations: list[Invocation]
    notes: list[Note]
    commands: list[ShellCommand] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    #: commands of other inference servers (``Invocation.engine`` names which)
    others: list[Invocation] = field(default_factory=list)
    #: a text read as meant (llamarig.flags.reading): its garbled lines, what each was and how
    #: it was repaired (``lines`` are the repaired lines)
    line_notes: list[LineNote] = field(default_factory=list)

