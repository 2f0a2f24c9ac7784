"""Reading a command line or a bash script the way bash does: which argv llama-server really
receives.

bash's own rules for quoting, ``\\``-newline continuation, comments (a ``#`` at the start of a
word runs to the end of the line, so a comment line after a ``\\`` line *ends* the command),
blank lines, ``;`` ``&&`` ``||`` ``|`` ``&``, redirections, here-documents (the lexer,
llamarig.flags.readers.bash_lexer); here the interpreter over its commands: ``NAME=value``
assignments before the command, ``export``, wrappers (``nohup``, ``stdbuf``, ``env``, ``sudo``,
``taskset``, ``numactl``...), ``docker run``; shell functions (a body is read; calling a function
is not starting llama-server). Pure text processing: no command is run. Garbage in gives notes,
never an exception.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from llamarig.flags.engines import ENGINES, engine_of
from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Parsed, ShellCommand, Word
from llamarig.flags.readers.bash_lexer import Lexer, split_commands
from llamarig.flags.readers.common import (
    ASSIGN_RE,
    basename,
    ends_with_backslash,
    is_server_call,
    looks_like_server_args,
    unwrap,
    wrapper_words,
)
from llamarig.flags.readers.shell_vars import Scope, Unknown, expand_word
from llamarig.i18n import _

# ----------------------------------------------------------------------------- commands

# bash(1) SHELL GRAMMAR "Compound Commands": reserved words that may stand before a simple command
_RESERVED = frozenset({"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"})


def _skip_reserved(words: list[Word], i: int) -> int:
    while i < len(words) and words[i].text in _RESERVED:
        i += 1
    return i


_DOCKER_VALUE_OPTS = {
    "-p", "--publish", "-v", "--volume", "-e", "--env", "--name", "--gpus", "--runtime", "-w",
    "--workdir", "--device", "--ipc", "--shm-size", "--network", "--net", "--entrypoint", "-u",
    "--user", "--restart", "--mount", "--cpus", "-m", "--memory", "--env-file", "-l", "--label",
    "--ulimit", "--cap-add", "--security-opt", "--hostname", "--add-host", "--platform", "--pull",
    "--log-driver", "--log-opt", "--group-add", "--cpuset-cpus", "--memory-swap", "--tmpfs",
}


def docker_args(words: list[Word], start: int) -> tuple[int, list[tuple[str, str, int]]] | None:
    """For ``docker|podman run ... IMAGE ARGS``: the index of ARGS[0] if IMAGE is a llama.cpp
    server image; env from -e."""
    i = start + 1
    if i >= len(words) or words[i].text not in ("run", "create"):
        return None
    i += 1
    env: list[tuple[str, str, int]] = []
    while i < len(words) and words[i].text.startswith("-"):
        i += _docker_option(words, i, env)
    if i >= len(words):
        return None
    image = words[i].text
    if "llama.cpp" in image or "llama-cpp" in image or "llama_cpp" in image:
        j = i + 1
        if ":full" in image and j < len(words) and words[j].text in ("--server", "-s"):
            j += 1
        return j, env
    return None


def _docker_option(words: list[Word], i: int, env: list[tuple[str, str, int]]) -> int:
    """One option of ``docker run`` (an ``-e NAME=value`` noted in ``env``): how many words it takes."""
    t = words[i].text
    name, eq, val = t.partition("=")
    if eq:
        if name in ("-e", "--env"):
            n, _eq, v = val.partition("=")
            env.append((n, v, words[i].line))
        return 1
    if t not in _DOCKER_VALUE_OPTS:
        return 1
    if t in ("-e", "--env") and i + 1 < len(words):
        n, _eq, v = words[i + 1].text.partition("=")
        env.append((n, v, words[i].line))
    return 2


# ----------------------------------------------------------------------------- scripts


def parse_bash(text: str, first_line: int = 1, environ: list[tuple[str, str, int]] | None = None,
               origin: Path | None = None) -> Parsed:
    """Read a bash script (``first_line``: the line of the input it starts on). ``environ``: the
    environment it runs in (a container's), known to its ``$VAR`` expansions. ``origin``: the
    script's path: the files it ``source``s are looked for next to it.

    Shell functions (bash(1) FUNCTIONS): a function with a ``{ ... }`` body is read where it is
    called, once per call, with the call's arguments as ``$1`` ... ``"$@"`` (``shift`` followed);
    one never called is read once as written. ``source FILE`` / ``. FILE`` reads FILE (relative
    to the script's directory) in the same variables, at most _MAX_SOURCE_DEPTH deep; a missing
    one is a warning."""
    lex = Lexer(text)
    tokens = lex.run()
    if first_line != 1:
        tokens = [t._replace(line=t.line + first_line - 1) for t in tokens]
    cmds = split_commands(tokens, text, lex, first_line - 1)
    lines = text.split("\n")
    _mark_breaks(cmds, lines, first_line)
    sh = _Interpreter(lines, first_line, origin, environ or ())
    sh.notes.extend(Note("shell-syntax", ln + first_line - 1, _("{problem}: the shell would stop here").format(
        problem=msg), Severity.ERROR) for ln, msg in lex.problems)
    sh.run(cmds, text)
    return sh.finish(cmds)


@dataclass
class _Call:
    """A simple command after expansion: where its program is (after reserved words, the
    assignments and wrappers in front), and what the expansion found."""

    start: int  # first word after reserved words
    idx: int  # the program word
    wrappers: list[str]
    env: list[tuple[str, str, int]]
    unknown: list[Unknown]


class _Interpreter:
    """Runs over a script's simple commands the way bash would, without running anything:
    variables, ``export``, ``cd``, function calls and sourced files are followed; each command
    that starts llama-server becomes an :class:`Invocation` (its argv as received), a line of
    flags after it whose ``\\`` was lost becomes its cut-off words, a line of flags with no
    command in front a fragment."""

    def __init__(self, lines: list[str], first_line: int, origin: Path | None,
                 environ: Iterable[tuple[str, str, int]]) -> None:
        self.lines = lines
        self.first_line = first_line
        self.origin = origin
        self.notes: list[Note] = []
        # name -> (name, value, line): a later assignment replaces an earlier one, as in bash (and
        # the environment of every later invocation stays as long as the distinct names, not as
        # long as the script)
        self.exported: dict[str, tuple[str, str, int]] = {}
        self.invocations: list[Invocation] = []
        self.others: list[Invocation] = []  # other engines' commands (llamarig.flags.engines)
        self.last_inv: Invocation | None = None
        #: index of last_inv in invocations (a list.index per orphan line is quadratic); None for
        #: another engine's command
        self.last_k: int | None = None
        self.prev: ShellCommand | None = None
        self.functions: set[str] = set()  # shell functions defined so far
        self.bodies: dict[str, _Function] = {}  # those with a `{ ... }` body, followed where they are called
        self.called: set[str] = set()
        self.other_lines: dict[int, list[str]] = {}  # invocation -> the lines of the sourced file it is in
        self.fixed_lines: set[int] = set()  # lines of function-body invocations --fix rewrites
        self.keys: list[int] = []  # per invocation: its place in the text (see _Frame.key)
        self.frame = _Frame(lines)  # where the commands being read come from
        self.budget = _MAX_FOLLOWED  # commands read again through calls and sourced files, left
        self.sourcing: list[Path] = []  # the files being sourced (a file that sources itself stops)
        self.scope = Scope()  # variables and arrays assigned so far (readers.shell_vars)
        self.scope.script_dir = str(origin.parent.resolve()) if origin is not None else None
        self.bare: set[tuple[str, int]] = set()  # (name, line) of assignments without `export`
        self.really_exported: set[str] = set()  # names given to a bare `export NAME`
        self.cwd: str | None = None  # the directory of the last `cd` (as written; subshells not scoped)
        for name, value, line in environ:
            if value:  # an empty value here may be one not known (a Kubernetes valueFrom)
                self.scope.assign(name, [(value, line, False)], line)

    # -- walking the commands

    def run(self, seq: list[ShellCommand], src: str) -> None:
        i = 0
        while i < len(seq):
            d = _function_def(seq, i)
            if d is None:
                self.step(seq[i], src)
                i += 1
                continue
            name, first, off, end = d
            self.functions.add(name)
            if first is None:  # not a `{ ... }` group: its commands are read as they come
                i += 1
                continue
            self.bodies[name] = _Function(name, seq, first, off, end, src, self.frame.lines, self.frame.file,
                                          seq[i].line)
            self.prev = seq[i]
            i = end + 1

    def step(self, cmd: ShellCommand, src: str) -> None:
        """One simple command: expanded, then what it does to the reading."""
        unknown: list[Unknown] = []
        env: list[tuple[str, str, int]] = []
        start = _skip_reserved(cmd.words, 0)
        cmd.words = cmd.words[:start] + _expand_words(cmd.words[start:], self.scope, unknown)
        for r in cmd.redirects:  # `>> "$log_file"`: a shell variable too (targets are kept as written)
            self.scope.used.update(_VAR_REF_RE.findall(r))
        if start < len(cmd.words) and cmd.words[start].text == "function" and start + 1 < len(cmd.words):
            # `function NAME ...` whose body is not a `{ ... }` group: read as ordinary commands
            self.functions.add(cmd.words[start + 1].text)
            start = _skip_reserved(cmd.words, start + 2)
        idx, wrappers = unwrap(cmd.words[start:], env)
        cmd.assignments = env
        if idx + start >= len(cmd.words):
            self._assignments(cmd, env)
        else:
            self._command(cmd, src, _Call(start, idx + start, wrappers, env, unknown))
        self.prev = cmd

    def _assignments(self, cmd: ShellCommand, env: list[tuple[str, str, int]]) -> None:
        """A command of assignments only: plain assignments affect later commands only if
        exported; keep them: bash scripts usually `export` them, and a wrong one is worth a
        look. Arrays cannot be exported; a variable the script itself expands is a shell
        variable (dropped at the end unless it is exported)."""
        if not env or cmd.terminator not in ("\n", ";", ""):
            return
        arrays = {w.text.partition("=")[0].rstrip("+") for w in cmd.words if w.elements is not None}
        for e in env:
            if e[0] not in arrays:
                self.exported.pop(e[0], None)
                self.exported[e[0]] = e
                self.bare.add((e[0], e[2]))

    def _command(self, cmd: ShellCommand, src: str, c: _Call) -> None:
        prog = cmd.words[c.idx].text
        rest = cmd.words[c.idx + 1:]
        base = basename(prog)
        builtin = _BUILTINS.get(base)
        if builtin is not None and builtin(self, cmd, rest):
            return
        if base in ("killall", "pkill"):
            self._kill_note(cmd, base, rest)
        docker = docker_args(cmd.words, c.idx) if base in ("docker", "podman") else None
        # bash(1) COMMAND EXECUTION: a name without a slash that is a defined function runs the
        # function, not a program; `time` is a keyword and keeps that, while external wrappers
        # (nohup, env, sudo...) and `command`/`exec` look the name up on PATH
        calls_function = prog in self.functions and "/" not in prog and all(w == "time" for w in c.wrappers)
        # `"$LLAMA_BIN" -m x.gguf ...`: a program from a variable not known here, named like
        # llama-server and given llama-server's arguments
        by_name = cmd.words[c.idx].opaque and re.search(r"llama|server", prog, re.I) is not None \
            and looks_like_server_args(rest)
        engine = None if calls_function else engine_of(prog, rest)
        if calls_function and prog in self.bodies:
            self.follow_call(self.bodies[prog], cmd, rest)
        elif (not calls_function and (is_server_call(prog, rest) or by_name)) or docker is not None:
            self._server(cmd, src, c, docker)
        elif engine is not None:
            self._engine(cmd, src, c, engine)
        elif prog.startswith("-"):
            self._flag_line(cmd, src, c)
        elif cmd.terminator in ("\n", ";", ""):
            self.last_inv = None

    # -- builtins that change the reading (each True when it handled the command)

    def _export(self, cmd: ShellCommand, rest: list[Word]) -> bool:
        for w in rest:
            m = ASSIGN_RE.match(w.text)
            if m:
                self.exported.pop(m.group(1), None)
                self.exported[m.group(1)] = (m.group(1), m.group(3), w.line)
            else:
                self.really_exported.add(w.text)
        return True

    def _shift(self, cmd: ShellCommand, rest: list[Word]) -> bool:
        if self.scope.positional is None:
            return False
        n = int(rest[0].text) if rest and rest[0].text.isdigit() else 1
        self.scope.positional = self.scope.positional[n:]
        return True

    def _source(self, cmd: ShellCommand, rest: list[Word]) -> bool:
        if not rest:
            return False
        self.follow_source(cmd, rest)
        return True

    def _cd(self, cmd: ShellCommand, rest: list[Word]) -> bool:
        self.cwd = _change_dir(self.cwd, rest)
        return True

    def _kill_note(self, cmd: ShellCommand, base: str, rest: list[Word]) -> None:
        target = next((w.text for w in rest if not w.text.startswith("-")), "")
        self.notes.append(Note(
            "kill-by-name", cmd.line,
            _("`{command}` kills every process with that name on the machine (other users' servers "
              "too) and sends SIGTERM without waiting for it to exit; the sleep that follows is a "
              "guess").format(command=f"{base} {target}"),
            Severity.WARNING))

    # -- llama-server and its flags

    def _server(self, cmd: ShellCommand, src: str, c: _Call,
                docker: tuple[int, list[tuple[str, str, int]]] | None) -> None:
        """A command that starts llama-server (directly, behind wrappers, or in a llama.cpp
        container image)."""
        env = c.env
        prog_word = cmd.words[c.idx]
        rest = cmd.words[c.idx + 1:]
        if docker is not None:
            start, denv = docker
            env = env + denv
            rest = cmd.words[start:]
        before_args = prog_word if docker is None else cmd.words[docker[0] - 1]
        frame = self.frame
        inv = Invocation(
            program=prog_word.text if docker is None else f"{prog_word.text} run … (llama.cpp image)",
            args=list(rest), line=_written_on(cmd, prog_word), end_line=cmd.end_line,
            env=[*self.exported.values(), *env], background=cmd.terminator == "&",
            source="shell", redirects=list(cmd.redirects),
            head=_head_text(src, prog_word, before_args), tail=_tail_text(src, cmd),
            wrappers=wrapper_words(cmd.words[c.start:], c.idx - c.start) if docker is None else [], cwd=self.cwd,
            label=frame.label, written_here=frame.here or _fixable_in(frame.span, inv_line=prog_word.line,
                                                                      words=rest, done=self.fixed_lines))
        if frame.background or frame.redirects:
            inv.background = inv.background or frame.background
            inv.redirects = inv.redirects + frame.redirects
        if cmd.comment_break is not None:
            inv.cut_line = cmd.comment_break
        self._add(inv, cmd.line, c.unknown)

    def _engine(self, cmd: ShellCommand, src: str, c: _Call, engine: str) -> None:
        """A command of another inference server (FastLLM, vLLM...): kept apart, its flags
        never judged as llama-server's; lines of flags after it whose ``\\`` was lost are its
        cut-off words."""
        prog_word = cmd.words[c.idx]
        inv = Invocation(
            program=prog_word.text, args=list(cmd.words[c.idx + 1:]), line=_written_on(cmd, prog_word),
            end_line=cmd.end_line, env=[*self.exported.values(), *c.env], background=cmd.terminator == "&",
            source="shell", redirects=list(cmd.redirects), head=_head_text(src, prog_word, prog_word),
            tail=_tail_text(src, cmd), wrappers=wrapper_words(cmd.words[c.start:], c.idx - c.start), cwd=self.cwd,
            label=self.frame.label, written_here=self.frame.here, engine=engine)
        if cmd.comment_break is not None:
            inv.cut_line = cmd.comment_break
        self.others.append(inv)
        self.last_inv, self.last_k = inv, None

    def _add(self, inv: Invocation, line: int, unknown: list[Unknown]) -> None:
        self.invocations.append(inv)
        self.last_inv, self.last_k = inv, len(self.invocations) - 1
        if self.frame.lines is not self.lines:
            self.other_lines[self.last_k] = self.frame.lines
        self.keys.append(line if self.frame.key is None else self.frame.key)
        self.notes.extend(_unknown_notes(unknown, self.last_k))

    def _flag_line(self, cmd: ShellCommand, src: str, c: _Call) -> None:
        """A command whose first word is an option: the rest of a command whose ``\\`` was lost
        (its words are cut off), more of a fragment, or a fragment of its own."""
        adjacent = self.last_inv is not None and self.prev is not None and self._adjacent(self.prev, cmd)
        if adjacent and self.last_inv is not None and self.last_inv.source == "fragment":
            self.last_inv.args.extend(cmd.words[c.idx:])
            self.last_inv.end_line = cmd.end_line
        elif adjacent:
            self._orphans(cmd, src, c)
        else:
            self._fragment(cmd, c)

    def _fragment(self, cmd: ShellCommand, c: _Call) -> None:
        """Flags with no command in front (a pasted "append these" fragment): checked as
        llama-server arguments."""
        inv = Invocation(program="llama-server", args=list(cmd.words[c.idx:]), line=cmd.line,
                         end_line=cmd.end_line, env=[*self.exported.values(), *c.env], source="fragment")
        self._add(inv, cmd.line, c.unknown)
        word = cmd.words[c.idx].text
        self.notes.append(Note("flags-without-command", cmd.line,
                               _("line {line} starts with `{word}`: run as a script, bash would try to execute "
                                 "`{word}` as a command; checked here as llama-server flags").format(
                                   line=cmd.line, word=word),
                               Severity.INFO, self.last_k))

    def _orphans(self, cmd: ShellCommand, src: str, c: _Call) -> None:
        """bash runs `--batch-size` as a command ("command not found"): its words are cut off
        from the command before it."""
        last, prev = self.last_inv, self.prev
        assert last is not None and prev is not None
        last.orphans.extend(cmd.words[c.idx:])
        if last.cut_line is None:
            last.cut_line = prev.comment_break or prev.end_line
        lines = cmd.line if cmd.end_line == cmd.line else f"{cmd.line}-{cmd.end_line}"
        word, n = cmd.words[c.idx].text, len(cmd.words) - c.idx
        if last.engine in ENGINES:
            msg = _("bash runs `{word}` as a command (\"{word}: command not found\"): {n} word(s) on line(s) "
                    "{lines} never reach {program} (started on line {start})").format(
                        word=word, n=n, start=last.line, lines=lines, program=last.program)
        else:
            msg = _("bash runs `{word}` as a command (\"{word}: command not found\"): {n} word(s) on line(s) "
                    "{lines} never reach llama-server (started on line {start})").format(
                        word=word, n=n, start=last.line, lines=lines)
        self.notes.append(Note("orphan-flags", cmd.line, msg, Severity.ERROR, self.last_k))
        if cmd.terminator == "&":
            last.background = True
        last.redirects.extend(cmd.redirects)
        if last.tail is not None:
            last.tail = _tail_text(src, cmd)

    def _adjacent(self, prev: ShellCommand, cmd: ShellCommand) -> bool:
        """``cmd`` follows ``prev`` with only blank and comment lines between them: a line of
        flags there was meant for the command before."""
        if prev.terminator not in ("\n", "&", ";"):
            return False
        lines = self.frame.lines
        base = self.first_line if lines is self.lines else 1
        for ln in range(prev.end_line + 1, cmd.line):
            idx = ln - base
            text = lines[idx].strip() if 0 <= idx < len(lines) else ""
            if text and not text.startswith("#"):
                return False
        return True

    # -- functions and sourced files

    def spend(self, n: int, line: int) -> bool:
        """Whether ``n`` more commands may be read again (calls, sourced files); the first time
        the budget runs out, a note."""
        if self.budget < n:
            if self.budget >= 0:
                self.notes.append(Note("not-followed", line, _(
                    "function calls and sourced files are followed for {n} commands in all; the rest are not "
                    "read").format(n=_MAX_FOLLOWED), Severity.INFO))
                self.budget = -1
            return False
        self.budget -= n
        return True

    def follow_call(self, fn: _Function, call: ShellCommand, args: list[Word]) -> None:
        """Read ``fn``'s body with the call's arguments as the positional parameters."""
        frame = self.frame
        self.called.add(fn.name)
        if len(frame.stack) >= _MAX_CALL_DEPTH or fn.name in frame.stack \
                or not self.spend(fn.end - fn.first + 1, call.line):
            return
        seq = [replace(c, words=list(c.words)) for c in fn.seq[fn.first:fn.end + 1]]
        if fn.offset:
            seq[0] = replace(seq[0], words=seq[0].words[fn.offset:])
        if fn.file:
            label = _("function {name} of {file}, called on line {line}").format(
                name=fn.name, file=fn.file, line=call.line)
        else:
            label = _("function {name}, called on line {line}").format(name=fn.name, line=call.line)
        if frame.label:
            label += _(" ({outer})").format(outer=frame.label)
        span = (fn.seq[fn.first].line, fn.seq[fn.end].end_line) if not fn.file and frame.here else None
        inner = _Frame(fn.lines, fn.file, label, False, (*frame.stack, fn.name),
                       call.terminator == "&" or frame.background, [*frame.redirects, *call.redirects], span,
                       call.line if frame.key is None else frame.key)
        self._within(inner, [(w.text, w.line, w.opaque) for w in args], seq, fn.src)

    def _within(self, frame: _Frame, positional: list[tuple[str, int, bool]] | None,
                seq: list[ShellCommand], src: str) -> None:
        """Read ``seq`` in ``frame``, with ``positional`` as ``$1``... (None: unchanged)."""
        saved, saved_frame = self.scope.positional, self.frame
        if positional is not None:
            self.scope.positional = positional
        self.frame = frame
        try:
            self.run(seq, src)
        finally:
            self.scope.positional, self.frame = saved, saved_frame

    def follow_source(self, cmd: ShellCommand, rest: list[Word]) -> None:
        """``source FILE [ARGS]``: FILE read in the same variables and functions."""
        path = self._source_path(cmd, rest[0])
        if path is None:
            return
        sub = self._read_sourced(cmd, rest[0], path)
        if sub is None:
            return
        sub_lex = Lexer(sub)
        sub_cmds = split_commands(sub_lex.run(), sub, sub_lex)
        if not self.spend(len(sub_cmds), cmd.line):
            return
        sub_lines = sub.split("\n")
        _mark_breaks(sub_cmds, sub_lines, 1)
        assert self.origin is not None
        here = self.origin.parent.resolve()
        key = path.resolve()
        name = os.path.relpath(key, here) if key.is_relative_to(here) else str(path)
        self.notes.extend(Note("shell-syntax", cmd.line, _(
            "{file} line {line}: {problem}: the shell would stop there").format(
                file=name, line=ln, problem=msg), Severity.ERROR) for ln, msg in sub_lex.problems)
        frame = self.frame
        label = _("in {file}, sourced on line {line}").format(file=name, line=cmd.line) + (
            _(" ({outer})").format(outer=frame.label) if frame.label else "")
        inner = _Frame(sub_lines, name, label, False, frame.stack, frame.background, frame.redirects, None,
                       cmd.line if frame.key is None else frame.key)
        self.sourcing.append(key)
        try:
            self._within(inner, [(x.text, x.line, x.opaque) for x in rest[1:]] if len(rest) > 1 else None,
                         sub_cmds, sub)
        finally:
            self.sourcing.pop()

    def _source_path(self, cmd: ShellCommand, w: Word) -> Path | None:
        """The file ``source WORD`` reads, or None (with a note) when it is not read."""
        origin = self.origin
        target = _SCRIPT_DIR_RE.sub(lambda _m: str(origin.parent.resolve()) if origin else "$0", w.text)
        if w.opaque or "$" in target or "`" in target:
            self.notes.append(Note("unknown-variable", cmd.line, _(
                "`source {file}`: the file's name is not known here; what it sets is not read").format(
                    file=w.raw or w.text), Severity.INFO))
            return None
        if origin is None:
            self.notes.append(Note("source-not-read", cmd.line, _(
                "`source {file}` is not read: the input is not a file, so there is no directory to find it "
                "in").format(file=w.text), Severity.INFO))
            return None
        path = Path(os.path.expanduser(target))
        if not path.is_absolute():
            path = origin.parent / path
        if not path.is_file():
            self.notes.append(Note("source-missing", cmd.line, _(
                "`source {file}`: {path} is not there: bash stops with \"No such file or directory\" (or goes "
                "on without what it sets); its variables and functions are not known here").format(
                    file=w.text, path=path), Severity.WARNING))
            return None
        if path.resolve() in self.sourcing or len(self.sourcing) >= _MAX_SOURCE_DEPTH:
            self.notes.append(Note("not-followed", cmd.line, _(
                "`source {file}` is not read again: files source each other {n} deep").format(
                    file=w.text, n=len(self.sourcing)), Severity.INFO))
            return None
        return path

    def _read_sourced(self, cmd: ShellCommand, w: Word, path: Path) -> str | None:
        try:
            with open(path, "rb") as f:
                return f.read(_MAX_SOURCED_BYTES).decode("utf-8", errors="replace").replace("\r\n", "\n")
        except OSError as e:
            self.notes.append(Note("source-missing", cmd.line, _("`source {file}`: cannot read {path}: {error}").format(
                file=w.text, path=path, error=e.strerror or e), Severity.WARNING))
            return None

    # -- the end

    def finish(self, cmds: list[ShellCommand]) -> Parsed:
        """Functions never called read once as written, the invocations in the text's order,
        each cut explained, shell-only variables left out of the environment."""
        for name, fn in self.bodies.items():  # never called: read once as written (`$1` not known)
            if name not in self.called and self.spend(fn.end - fn.first + 1, fn.line):
                seq = fn.seq[fn.first:fn.end + 1]
                if fn.offset:
                    seq = [replace(seq[0], words=seq[0].words[fn.offset:]), *seq[1:]]
                self.frame = _Frame(fn.lines, fn.file, _("function {name}, never called here").format(name=name) + (
                    _(" ({outer})").format(outer=fn.file) if fn.file else ""), fn.file == "", key=fn.line)
                self.run(seq, fn.src)
        self.frame = _Frame(self.lines)
        invocations, notes, other = self.invocations, self.notes, self.other_lines
        if self.keys != sorted(self.keys):  # in the text's order: a function never called sits where it is defined
            invocations, notes, other = _reorder(self.keys, invocations, notes, other)
        for k, inv in enumerate(invocations):
            if inv.cut_line is not None and inv.orphans:
                notes.append(_cut_note(inv, k, other.get(k, self.lines), self.first_line if k not in other else 1))
        notes.extend(_cut_note(inv, None, self.lines, self.first_line) for inv in self.others
                     if inv.cut_line is not None and inv.orphans)
        # a bare assignment of a variable the script expands is a shell variable, not environment
        # (unless a later `export NAME` exports it)
        shell_only = {(n, ln) for n, ln in self.bare if n in self.scope.used and n not in self.really_exported}
        if shell_only:
            for inv in invocations:
                inv.env = [e for e in inv.env if (e[0], e[2]) not in shell_only]
        return Parsed("shell", invocations, notes, cmds, self.lines, self.others)


#: builtins that change the reading: `export`, `shift`, `source`/`.`, `cd`/`pushd`
_BUILTINS: dict[str, Callable[[_Interpreter, ShellCommand, list[Word]], bool]] = {
    "export": _Interpreter._export, "shift": _Interpreter._shift, "source": _Interpreter._source,
    ".": _Interpreter._source, "cd": _Interpreter._cd, "pushd": _Interpreter._cd,
}


#: commands read again through function calls and sourced files, in all (a script that calls a
#: function a million times stays linear); calls nested deeper than this, and sourced files
_MAX_FOLLOWED = 100_000
_MAX_CALL_DEPTH = 16
_MAX_SOURCE_DEPTH = 8
_MAX_SOURCED_BYTES = 4 * 1024 * 1024
# the script's own directory as scripts write it: $(dirname "$0"), $(dirname "${BASH_SOURCE[0]}"),
# $(cd "$(dirname "$0")" && pwd)
_SCRIPT_DIR_RE = re.compile(
    r'\$\(\s*cd\s+"?(?P<a>\$\(\s*dirname\s+"?\$(?:0|\{0\}|BASH_SOURCE|\{BASH_SOURCE(?:\[0\])?\})"?\s*\))"?'
    r'\s*(?:&&|;)\s*pwd(?:\s+-P)?\s*\)'
    r'|\$\(\s*dirname\s+"?\$(?:0|\{0\}|BASH_SOURCE|\{BASH_SOURCE(?:\[0\])?\})"?\s*\)')


@dataclass
class _Function:
    """A shell function with a ``{ ... }`` body: ``seq[first:end + 1]`` (the first command from
    word ``offset``: `function f { llama-server ...` has its first command on the definition's line)."""

    name: str
    seq: list[ShellCommand]
    first: int
    offset: int
    end: int
    src: str
    lines: list[str]
    file: str  # "" the script itself, else the sourced file it is defined in
    line: int


@dataclass
class _Frame:
    """Where the commands being read come from: their file's lines, a label for the invocations
    found (the function call, the sourced file), whether --fix may rewrite them in place."""

    lines: list[str]
    file: str = ""
    label: str = ""
    here: bool = True
    stack: tuple[str, ...] = ()  # functions being called
    background: bool = False  # the call runs in the background (`start_server &`)
    redirects: list[str] = field(default_factory=list)
    #: lines of the function body being read (in the script itself): an invocation all written
    #: there (no argument of the call in it) is fixed in place, once
    span: tuple[int, int] | None = None
    #: where its invocations go in the text's order: the line of the top-level call or `source`
    key: int | None = None


def _written_on(cmd: ShellCommand, w: Word) -> int:
    """The line ``w`` is written on in ``cmd``: a program word from a variable carries the line of
    the variable's value (`"$LLAMA_DIR"/llama-server`), the command starts on its own line."""
    return w.line if cmd.line <= w.line <= cmd.end_line else cmd.line


def _reorder(keys: list[int], invocations: list[Invocation], notes: list[Note], other: dict[int, list[str]]
             ) -> tuple[list[Invocation], list[Note], dict[int, list[str]]]:
    """The invocations sorted by ``keys`` (stable), the notes' and ``other``'s indices moved along."""
    perm = sorted(range(len(invocations)), key=lambda k: (keys[k], k))
    new = {old: i for i, old in enumerate(perm)}
    return ([invocations[k] for k in perm],
            [n if n.invocation is None else replace(n, invocation=new[n.invocation]) for n in notes],
            {new[k]: v for k, v in other.items()})


def _fixable_in(span: tuple[int, int] | None, inv_line: int, words: list[Word], done: set[int]) -> bool:
    """An invocation read in a function body (``span``) that --fix may rewrite in place: every
    argument written in the body (none from the call), and the first call to reach it."""
    if span is None or inv_line in done or not all(span[0] <= w.line <= span[1] for w in words):
        return False
    done.add(inv_line)
    return True


def _function_def(seq: list[ShellCommand], i: int) -> tuple[str, int | None, int, int] | None:
    """``seq[i]`` defines a function (bash(1) SHELL GRAMMAR, Shell Function Definitions:
    ``NAME () BODY`` or ``function NAME [()] BODY``): (name, index of the body's first command,
    the word it starts at, index of the command holding the closing ``}``); the first index is
    None when the body is not a ``{ ... }`` group."""
    words = seq[i].words
    s = _skip_reserved(words, 0)
    if s < len(words) and words[s].text == "function" and s + 1 < len(words):
        name = words[s + 1].text
        first, off = (i, s + 2) if s + 2 < len(words) else (i + 1, 0)
    elif seq[i].terminator == "(" and len(words) - s == 1 and "=" not in words[s].text \
            and words[s].parts is None:
        name, first, off = words[s].text, i + 1, 0
    else:
        return None
    depth = 0
    j, o = first, off
    while j < len(seq):
        ws = seq[j].words
        k = o
        if j == first and k >= len(ws):  # `function NAME()`: the `()` ends the command
            j, o = j + 1, 0
            first, off = j, 0
            continue
        if depth == 0 and (k >= len(ws) or ws[k].text != "{"):
            return name, None, 0, first
        while k < len(ws) and ws[k].text in _RESERVED:
            depth += 1 if ws[k].text == "{" else -1 if ws[k].text == "}" else 0
            k += 1
        if depth <= 0:
            return name, first, off, j
        j, o = j + 1, 0
    return name, first, off, len(seq) - 1


_DECLARE = frozenset({"export", "declare", "typeset", "local", "readonly"})
_VAR_REF_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_READS = frozenset({"read", "mapfile", "readarray"})


def _is_assignment(w: Word) -> bool:
    if w.elements is not None:
        return True
    m = ASSIGN_RE.match(w.text)
    if not m:
        return False
    # bash: the `NAME=` must be written unquoted
    prefix = m.group(1) + m.group(2) + "="
    return not w.raw or w.raw.startswith(prefix)


def _assign(w: Word, scope: Scope, unknown: list[Unknown], store: bool) -> Word:
    """An assignment word, its value expanded (no word splitting); ``store``: it sets a shell
    variable (a bare assignment, or declare/export/local), else it is only the command's env.
    References its value keeps as written are reported where the variable is used."""
    m = ASSIGN_RE.match(w.text)
    assert m is not None
    name, plus = m.group(1), bool(m.group(2))
    inner: list[Unknown] = []
    if w.elements is not None:
        vals: list[tuple[str, int, bool]] = []
        for e in w.elements:
            vals.extend((f.text, f.line, f.opaque) for f in expand_word(e, scope, inner))
        if store:
            scope.assign(name, vals, w.line, array=True, append=plus, unknown=inner)
        return w
    if w.parts is None:
        if store:
            scope.assign(name, [(m.group(3), w.line, False)], w.line, append=plus)
        return w
    vparts = _value_parts(w.parts, len(name) + int(plus) + 1)
    got = expand_word(Word(m.group(3), w.line, parts=tuple(vparts)), scope, inner, split=False)
    value = got[0].text if got else ""
    if store:
        _store(scope, name, plus, value, w.line, bool(got) and got[0].opaque, any(q == "`" for _, q in vparts), inner)
    else:
        unknown.extend(inner)
    if value == m.group(3):
        return w
    return Word(f"{name}{'+' if plus else ''}={value}", w.line, w.raw, w.start, w.end)


def _value_parts(parts: tuple[tuple[str, str], ...], skip: int) -> list[tuple[str, str]]:
    """The pieces of an assignment word after its ``NAME=`` (``skip`` characters)."""
    out: list[tuple[str, str]] = []
    for text, q in parts:
        if skip >= len(text):
            skip -= len(text)
            continue
        out.append((text[skip:], q))
        skip = 0
    return out


def _store(scope: Scope, name: str, plus: bool, value: str, line: int, opaque: bool, subst: bool,
           inner: list[Unknown]) -> None:
    """A variable set from an expanded value: the script's directory for SCRIPT_DIR="$(cd
    "$(dirname "$0")" && pwd)", not known for another command substitution."""
    if not subst:
        scope.assign(name, [(value, line, opaque)], line, append=plus, unknown=inner)
    elif scope.script_dir and _SCRIPT_DIR_RE.fullmatch(value):
        scope.assign(name, [(scope.script_dir or "", line, False)], line)
    else:
        scope.assign(name, None, line, why=_("set on line {line} from a command substitution").format(line=line))


def _expand_words(words: list[Word], scope: Scope, unknown: list[Unknown]) -> list[Word]:
    """A simple command's words after bash's expansions; assignments update ``scope``."""
    i = 0
    while i < len(words) and _is_assignment(words[i]):
        i += 1
    bare = i == len(words)
    out = [_assign(w, scope, unknown, bare) for w in words[:i]]
    if bare:
        return out
    prog = expand_word(words[i], scope, unknown)
    out.extend(prog)
    name = basename(prog[0].text) if prog else ""
    for k, w in enumerate(words[i + 1:]):
        if name in _DECLARE and _is_assignment(w):
            out.append(_assign(w, scope, unknown, True))
        elif name == "unset":
            scope.unset(w.text)
            out.append(w)
        elif name in _READS and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", w.text) and \
                not (k and words[i + k].text in ("-p", "-d", "-t", "-u", "-n", "-N", "-C", "-c")):
            scope.assign(w.text, None, w.line, why=_("read from input by `{command}` on line {line}").format(
                command=name, line=w.line))
            out.append(w)
        else:
            out.extend(expand_word(w, scope, unknown))
    return out


def _change_dir(cwd: str | None, args: list[Word]) -> str | None:
    """The directory after ``cd ARGS`` (bash(1) ``cd``: no argument is ``$HOME``, written ``~``;
    a relative one is taken from the current directory). ``cd -`` and options are not followed."""
    dirs = [w.text for w in args if not w.text.startswith("-") or w.text == "-"]
    target = dirs[0] if dirs else "~"
    if target == "-" or any(w.opaque for w in args):
        return cwd
    if target.startswith(("/", "~")) or cwd is None:
        return target
    return cwd.rstrip("/") + "/" + target


def _unknown_notes(unknown: list[Unknown], k: int) -> list[Note]:
    """One note per variable of an invocation whose value is not known here."""
    out = []
    seen: set[str] = set()
    for u in unknown:
        if u.name in seen:
            continue
        seen.add(u.name)
        if u.default:
            msg = f"`{u.name}`: " + u.why
        else:
            msg = _("`{name}`: {why}; its value is not known here, checked as written").format(name=u.name, why=u.why)
        out.append(Note("unknown-variable", u.line, msg, Severity.INFO, k))
    return out


def _head_text(src: str, prog: Word, last: Word) -> str:
    """From the start of the program word's line to the end of ``last`` (the program, or a
    container image), as written."""
    if prog.start < 0 or last.end < 0:
        return ""
    return src[src.rfind("\n", 0, prog.start) + 1:last.end]


def _tail_text(src: str, cmd: ShellCommand) -> str | None:
    """The rest of the command's last line after its last word or redirection, as written; a
    lone continuation backslash (into a comment or blank line) is dropped."""
    if cmd.end_pos < 0:
        return None
    nl = src.find("\n", cmd.end_pos)
    tail = src[cmd.end_pos:len(src) if nl < 0 else nl].rstrip()
    return "" if tail == "\\" else tail


def _mark_breaks(cmds: list[ShellCommand], lines: list[str], first_line: int) -> None:
    """Find commands ended by a comment or blank line right after a ``\\`` line."""
    for cmd in cmds:
        if cmd.terminator != "\n":
            continue
        ln = cmd.end_line - first_line  # 0-based index of the line holding the terminator
        if not (0 < ln < len(lines)):
            continue
        here = lines[ln].strip()
        before = lines[ln - 1].rstrip("\r")
        if ends_with_backslash(before) and (not here or here.startswith("#")):
            cmd.comment_break = cmd.end_line


def _cut_note(inv: Invocation, k: int | None, lines: list[str], first_line: int) -> Note:
    cut = inv.cut_line or inv.end_line
    idx = cut - first_line
    text = lines[idx].strip() if 0 <= idx < len(lines) else ""
    if text.startswith("#"):
        why = _("line {cut} is a comment: after the `\\` on line {before} the `#` starts a comment that runs "
                "to the end of the line, and that newline ends the command").format(cut=cut, before=cut - 1)
    elif not text:
        why = _("line {cut} is blank: after the `\\` on line {before} the empty line ends the command").format(
            cut=cut, before=cut - 1)
    elif re.search(r"\\[ \t]+#", lines[idx] if 0 <= idx < len(lines) else ""):
        why = _("line {cut} ends with `\\ #…`: `\\ ` is an escaped blank, so ` #` and the comment's words are "
                "arguments, and as the line does not end with `\\` the newline ends the command").format(cut=cut)
    elif re.search(r"\\[ \t]+$", lines[idx] if 0 <= idx < len(lines) else ""):
        why = _("line {cut} ends with `\\` followed by spaces: the backslash escapes a space, not the "
                "newline").format(cut=cut)
    else:
        why = _("line {cut} does not end with `\\`, so the newline ends the command").format(cut=cut)
    n = len(inv.orphans)
    if inv.engine in ENGINES:
        msg = _("the {engine} command started on line {start} is cut off at line {cut}: {why}. {n} word(s) "
                "after it are never passed to {program}").format(
                    engine=ENGINES[inv.engine].name, start=inv.line, cut=cut, why=why, n=n, program=inv.program)
    else:
        msg = _("the llama-server command started on line {start} is cut off at line {cut}: {why}. {n} word(s) "
                "after it are never passed to llama-server").format(start=inv.line, cut=cut, why=why, n=n)
    return Note("continuation-broken", cut, msg, Severity.ERROR, k)
