"""Reading a command line or a bash script the way bash does: which argv llama-server really
receives.

bash's own rules for quoting, ``\\``-newline continuation, comments (a ``#`` at the start of a
word runs to the end of the line, so a comment line after a ``\\`` line *ends* the command),
blank lines, ``;`` ``&&`` ``||`` ``|`` ``&``, redirections, here-documents, ``NAME=value``
assignments before the command, ``export``, wrappers (``nohup``, ``stdbuf``, ``env``, ``sudo``,
``taskset``, ``numactl``...), ``docker run``; shell functions (a body is read; calling a function
is not starting llama-server). Pure text processing: no command is run. Garbage in gives notes,
never an exception.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Command, Invocation, Note, Parsed, Word
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
from llamarig.i18n import _, os_error

# ----------------------------------------------------------------------------- lexer

_OPS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
_OP_CHARS = frozenset("&|;()")

#: a lexer token: (kind "word" | "op" | "redir", text, line, start offset, end offset)
Token = tuple[str, str, int, int, int]
# bash(1) REDIRECTION: [n]< [n]> [n]>| [n]>> &> &>> [n]<& [n]>& [n]<> << <<- <<<; an unquoted
# all-digit word glued to the operator is the file descriptor (`2>`, `10>&1`)
_REDIR_OP_RE = re.compile(r"(?:\d+|\{[A-Za-z_][A-Za-z0-9_]*\})?(?:>>|>&|>\||<<<|<<-|<<|<&|<>|>|<)|&>>|&>")
# runs of characters that stand for themselves, read in one step (the lexer stays linear and
# fast on megabytes): outside quotes, anything but blanks, quotes, `\`, `$`, backquotes and
# metacharacters; inside double quotes, anything but `"`, `\`, `$`, backquotes and newlines
_PLAIN_RE = re.compile(r"[^ \t\r\n'\"\\$`&|;()<>]+")
_DQ_PLAIN_RE = re.compile(r"[^\"\\$`\n]+")
_BLANKS_RE = re.compile(r"[ \t\r]+")
_ARRAY_HEAD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=$")
_INDEX_RE = re.compile(r"^\[[^\]]*\]=")

#: a piece of a word and how it was quoted: "" unquoted, '"' inside double quotes, "'" literal
#: (single quotes, $'...', a backslash escape), "`" a command substitution (kept as written)
Part = tuple[str, str]


class _Lexer:
    """A bash-subset lexer producing words (with the line each starts on) and operators."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.line = 1
        self.tokens: list[Token] = []
        self.heredocs: list[tuple[str, bool]] = []
        self.problems: list[tuple[int, str]] = []
        #: word start offset -> how its pieces were quoted (words with a `$` to expand only)
        self.parts: dict[int, tuple[Part, ...]] = {}
        #: word start offset -> the elements of a `NAME=(...)` array assignment
        self.arrays: dict[int, list[Word]] = {}

    def run(self) -> list[Token]:
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c == "\n":
                self.tokens.append(("op", "\n", self.line, self.i, self.i + 1))
                self.i += 1
                self.line += 1
                if self.heredocs:
                    self._skip_heredocs()
                continue
            if c in " \t\r":
                m = _BLANKS_RE.match(s, self.i)
                self.i = m.end() if m else self.i + 1
                continue
            if c == "\\" and self.i + 1 < self.n and s[self.i + 1] == "\n":
                self.i += 2
                self.line += 1
                continue
            if c == "#":
                while self.i < self.n and s[self.i] != "\n":
                    self.i += 1
                continue
            m = _REDIR_OP_RE.match(s, self.i)
            if m and not (c in "<>" and s.startswith("(", self.i + 1)):
                self._redirect(m)
                continue
            op = next((o for o in _OPS if s.startswith(o, self.i)), None) if c in _OP_CHARS else None
            if op:
                self.tokens.append(("op", op, self.line, self.i, self.i + len(op)))
                self.i += len(op)
                continue
            self._word()
        return self.tokens

    def _skip_heredocs(self) -> None:
        for delim, strip in self.heredocs:
            while self.i < self.n:
                end = self.s.find("\n", self.i)
                end = self.n if end < 0 else end
                body = self.s[self.i:end]
                self.i = min(end + 1, self.n)
                self.line += 1
                if (body.lstrip("\t") if strip else body) == delim:
                    break
        self.heredocs = []

    def _redirect(self, m: re.Match[str]) -> None:
        """A redirection (bash(1) REDIRECTION): the operator, then its target word, which may be
        quoted and may follow blanks. Bash removes both from the command's argv; the text as
        written (quotes kept) goes into one ``redir`` token."""
        line = self.line
        op = m.group(0)
        self.i = m.end()
        gap = False
        while self.i < self.n:
            if self.s[self.i] in " \t\r":
                self.i += 1
                gap = True
            elif self.s.startswith("\\\n", self.i):
                self.i += 2
                self.line += 1
                gap = True
            else:
                break
        c = self.s[self.i] if self.i < self.n else "\n"
        if c in "\n#" or c in _OP_CHARS or (c in "<>" and not self.s.startswith("(", self.i + 1)):
            self.problems.append((line, _("redirection `{op}` without a target").format(op=op)))
            self.tokens.append(("redir", op, line, m.start(), self.i))
            return
        start = self.i
        target, _line, _parts = self._read_word()
        if op in ("<<", "<<-") and target:
            self.heredocs.append((target, op == "<<-"))
        self.tokens.append(("redir", op + (" " if gap else "") + self.s[start:self.i], line, m.start(), self.i))

    def _word(self) -> None:
        start = self.i
        text, start_line, parts = self._read_word()
        if self.i == start:  # nothing a word can start with: never loop on it
            self.i += 1
            return
        if self.i < self.n and self.s[self.i] == "(" and _ARRAY_HEAD_RE.match(text) \
                and self.s[start:self.i] == text:
            self._array(text, start, start_line)
            return
        if parts is not None:
            self.parts[start] = parts
        self.tokens.append(("word", text, start_line, start, self.i))

    def _array(self, head: str, start: int, start_line: int) -> None:
        """``NAME=( element ... )`` (bash(1) Arrays): the elements are words, separated by blanks
        and newlines, with comments allowed between them; one token for the whole assignment."""
        s = self.s
        self.i += 1  # the `(`
        elements: list[Word] = []
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\r":
                self.i += 1
            elif c == "\n":
                self.i += 1
                self.line += 1
            elif s.startswith("\\\n", self.i):
                self.i += 2
                self.line += 1
            elif c == "#":
                nl = s.find("\n", self.i)
                self.i = self.n if nl < 0 else nl
            elif c == ")":
                self.i += 1
                break
            else:
                w_start = self.i
                text, line, parts = self._read_word()
                if self.i == w_start:  # an operator inside the array: bash's syntax error
                    self.problems.append((self.line, _("unexpected `{c}` in the array assignment").format(c=c)))
                    self.i += 1
                    continue
                m = _INDEX_RE.match(text)
                if m:  # `[2]=value`: the value (indices are not tracked)
                    text, parts = text[m.end():], None
                elements.append(Word(text, line, s[w_start:self.i], w_start, self.i, parts))
        else:
            self.problems.append((start_line, _("unterminated array assignment `(`")))
        self.arrays[start] = elements
        self.tokens.append(("word", head + "(" + " ".join(w.text for w in elements) + ")",
                            start_line, start, self.i))

    def _read_word(self) -> tuple[str, int, tuple[Part, ...] | None]:
        """One word: its text after quote removal, the line it starts on, and, when it holds a
        ``$`` that bash would expand, how each piece of it was quoted (for the expansion)."""
        s = self.s
        start_line = self.line
        parts: list[Part] = []  # (text, quoting): "" unquoted, '"' double quotes, "'" literal, "`" substitution
        dollar = False
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\r\n" or (not parts and c == "#"):
                break
            plain = _PLAIN_RE.match(s, self.i)
            if plain:
                parts.append((plain.group(0), ""))
                self.i = plain.end()
                continue
            if c in _OP_CHARS:
                break
            if c in "<>":
                if s.startswith("(", self.i + 1):  # process substitution <(...) >(...)
                    self.i += 1
                    parts.append((c + self._subst("(", ")"), "`"))
                    continue
                break  # `<` and `>` are metacharacters: `a>b` is the word `a` and `>b`
            if c == "\\":
                if self.i + 1 < self.n:
                    nxt = s[self.i + 1]
                    if nxt == "\n":
                        self.i += 2
                        self.line += 1
                        continue
                    parts.append((nxt, "'"))
                    self.i += 2
                    continue
                self.i += 1
                continue
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    self.problems.append((self.line, _("unterminated single quote")))
                    end = self.n
                chunk = s[self.i + 1:end]
                parts.append((chunk, "'"))
                self.line += chunk.count("\n")
                self.i = end + 1
                continue
            if c == "$" and s.startswith("$'", self.i):
                end = self.i + 2
                out: list[str] = []
                while end < self.n and s[end] != "'":
                    if s[end] == "\\" and end + 1 < self.n:
                        out.append({"n": "\n", "t": "\t"}.get(s[end + 1], s[end + 1]))
                        end += 2
                        continue
                    out.append(s[end])
                    end += 1
                parts.append(("".join(out), "'"))
                self.line += s[self.i:end].count("\n")
                self.i = end + 1
                continue
            if c == '"':
                self.i += 1
                opened = len(parts)
                while self.i < self.n and s[self.i] != '"':
                    run = _DQ_PLAIN_RE.match(s, self.i)
                    if run:
                        parts.append((run.group(0), '"'))
                        self.i = run.end()
                        continue
                    ch = s[self.i]
                    if ch == "\\" and self.i + 1 < self.n:
                        nxt = s[self.i + 1]
                        if nxt == "\n":
                            self.line += 1
                            self.i += 2
                            continue
                        if nxt in '"\\$`':
                            parts.append((nxt, "'"))
                            self.i += 2
                            continue
                    if ch == "$" and s.startswith("$(", self.i):
                        dollar = True
                        parts.append((self._subst("$(", ")"), "`"))
                        continue
                    if ch == "`":
                        dollar = True
                        parts.append((self._subst("`", "`"), "`"))
                        continue
                    if ch == "\n":
                        self.line += 1
                    elif ch == "$":
                        dollar = True
                    parts.append((ch, '"'))
                    self.i += 1
                if self.i >= self.n:
                    self.problems.append((start_line, _("unterminated double quote")))
                self.i += 1
                if len(parts) == opened:
                    parts.append(("", '"'))  # `""`: an empty word all the same
                continue
            if c == "$" and (s.startswith("$(", self.i) or s.startswith("${", self.i)):
                dollar = True
                if s[self.i + 1] == "(":
                    parts.append((self._subst("$(", ")"), "`"))
                else:
                    parts.append((self._subst("${", "}"), ""))
                continue
            if c == "`":
                dollar = True
                parts.append((self._subst("`", "`"), "`"))
                continue
            if c == "$":
                dollar = True
            parts.append((c, ""))
            self.i += 1
        text = "".join(p[0] for p in parts)
        if not dollar:
            return text, start_line, None
        merged: list[Part] = []  # adjacent pieces quoted alike, joined: `$` + `NAME` is `$NAME`
        for t, q in parts:
            if merged and merged[-1][1] == q and q in ("", '"'):
                merged[-1] = (merged[-1][0] + t, q)
            else:
                merged.append((t, q))
        return text, start_line, tuple(merged)

    def _subst(self, open_: str, close: str) -> str:
        """Consume a $(...), ${...} or `...` substitution verbatim (nesting-aware)."""
        s = self.s
        start = self.i
        self.i += len(open_)
        depth = 1
        while self.i < self.n and depth:
            ch = s[self.i]
            if ch == "\\":
                self.i += 2
                continue
            if close != "`" and s.startswith(open_, self.i):
                depth += 1
                self.i += len(open_)
                continue
            if ch == close:
                depth -= 1
            elif ch == "\n":
                self.line += 1
            self.i += 1
        if depth:
            self.problems.append((self.line, _("unterminated {open}").format(open=open_)))
        return s[start:self.i]


def _split_commands(tokens: list[Token], src: str, lex: _Lexer, shift: int = 0) -> list[Command]:
    cmds: list[Command] = []
    cur: list[Word] = []
    redirs: list[str] = []
    end_pos = -1

    def flush(term: str, line: int) -> None:
        nonlocal cur, redirs, end_pos
        if cur:
            cmds.append(Command(words=cur, line=cur[0].line, end_line=line, terminator=term,
                                redirects=redirs, end_pos=end_pos))
        cur, redirs, end_pos = [], [], -1

    last_line = 1
    for typ, text, line, start, end in tokens:
        last_line = line
        if typ == "op":
            flush(text, line)
            continue
        end_pos = max(end_pos, end)
        if typ == "redir":  # never part of the argv (the lexer read the target too)
            redirs.append(text)
        else:
            elements = lex.arrays.get(start)
            cur.append(Word(text, line, src[start:end].replace("\\\n", ""), start, end, lex.parts.get(start),
                            None if elements is None else tuple(
                                replace(e, line=e.line + shift) if shift else e for e in elements)))
    flush("", last_line)
    return cmds


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
    while i < len(words):
        t = words[i].text
        if t.startswith("-"):
            if "=" in t:
                name, _, val = t.partition("=")
                if name in ("-e", "--env"):
                    n, _, v = val.partition("=")
                    env.append((n, v, words[i].line))
                i += 1
                continue
            if t in _DOCKER_VALUE_OPTS:
                if t in ("-e", "--env") and i + 1 < len(words):
                    n, _, v = words[i + 1].text.partition("=")
                    env.append((n, v, words[i].line))
                i += 2
                continue
            i += 1
            continue
        break
    if i >= len(words):
        return None
    image = words[i].text
    if "llama.cpp" in image or "llama-cpp" in image or "llama_cpp" in image:
        j = i + 1
        if ":full" in image and j < len(words) and words[j].text in ("--server", "-s"):
            j += 1
        return j, env
    return None


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
    lex = _Lexer(text)
    tokens = lex.run()
    if first_line != 1:
        tokens = [(a, b, ln + first_line - 1, st, en) for a, b, ln, st, en in tokens]
    cmds = _split_commands(tokens, text, lex, first_line - 1)
    lines = text.split("\n")
    notes: list[Note] = [Note("shell-syntax", ln + first_line - 1,
                              _("{problem}: the shell would stop here").format(problem=msg), Severity.ERROR)
                         for ln, msg in lex.problems]
    _mark_breaks(cmds, lines, first_line)
    # name -> (name, value, line): a later assignment replaces an earlier one, as in bash (and
    # the environment of every later invocation stays as long as the distinct names, not as
    # long as the script)
    exported: dict[str, tuple[str, str, int]] = {}
    invocations: list[Invocation] = []
    last_inv: Invocation | None = None
    last_k = -1  # index of last_inv in invocations (a list.index per orphan line is quadratic)
    prev: Command | None = None
    functions: set[str] = set()  # shell functions defined so far
    bodies: dict[str, _Function] = {}  # those with a `{ ... }` body, followed where they are called
    called: set[str] = set()
    other_lines: dict[int, list[str]] = {}  # invocation -> the lines of the sourced file it is in
    fixed_lines: set[int] = set()  # lines of function-body invocations --fix rewrites
    keys: list[int] = []  # per invocation: its place in the text (see _Frame.key)
    frame = _Frame(lines)  # where the commands being read come from
    budget = [_MAX_FOLLOWED]  # commands read again through calls and sourced files, left
    sourcing: list[Path] = []  # the files being sourced (a file that sources itself stops)
    scope = Scope()  # variables and arrays assigned so far (readers.shell_vars)
    scope.script_dir = str(origin.parent.resolve()) if origin is not None else None
    bare: set[tuple[str, int]] = set()  # (name, line) of assignments without `export`
    really_exported: set[str] = set()  # names given to a bare `export NAME`
    cwd: str | None = None  # the directory of the last `cd` (as written; subshells not scoped)
    for name, value, line in environ or ():
        if value:  # an empty value here may be one not known (a Kubernetes valueFrom)
            scope.assign(name, [(value, line, False)], line)
    def step(cmd: Command, src: str) -> None:
        nonlocal last_inv, last_k, prev, cwd
        env: list[tuple[str, str, int]] = []
        unknown: list[Unknown] = []
        start = _skip_reserved(cmd.words, 0)
        cmd.words = cmd.words[:start] + _expand_words(cmd.words[start:], scope, unknown)
        for r in cmd.redirects:  # `>> "$log_file"`: a shell variable too (targets are kept as written)
            scope.used.update(_VAR_REF_RE.findall(r))
        if start < len(cmd.words) and cmd.words[start].text == "function" and start + 1 < len(cmd.words):
            # `function NAME ...` whose body is not a `{ ... }` group: read as ordinary commands
            functions.add(cmd.words[start + 1].text)
            start = _skip_reserved(cmd.words, start + 2)
        idx, wrappers = unwrap(cmd.words[start:], env)
        idx += start
        cmd.assignments = env
        if idx >= len(cmd.words):
            if env and cmd.terminator in ("\n", ";", ""):
                # plain assignments affect later commands only if exported; keep them: bash
                # scripts usually `export` them, and a wrong one is worth a look. Arrays cannot
                # be exported; a variable the script itself expands is a shell variable (dropped
                # below unless it is exported)
                arrays = {w.text.partition("=")[0].rstrip("+") for w in cmd.words if w.elements is not None}
                for e in env:
                    if e[0] not in arrays:
                        exported.pop(e[0], None)
                        exported[e[0]] = e
                        bare.add((e[0], e[2]))
            prev = cmd
            return
        prog = cmd.words[idx].text
        rest = cmd.words[idx + 1:]
        base = basename(prog)
        if base == "export":
            for w in rest:
                m = ASSIGN_RE.match(w.text)
                if m:
                    exported.pop(m.group(1), None)
                    exported[m.group(1)] = (m.group(1), m.group(3), w.line)
                else:
                    really_exported.add(w.text)
            prev = cmd
            return
        if base == "shift" and scope.positional is not None:
            n = int(rest[0].text) if rest and rest[0].text.isdigit() else 1
            scope.positional = scope.positional[n:]
            prev = cmd
            return
        if base in ("source", ".") and rest:
            follow_source(cmd, rest)
            prev = cmd
            return
        if base in ("cd", "pushd"):
            cwd = _change_dir(cwd, rest)
            prev = cmd
            return
        if base in ("killall", "pkill"):
            target = next((w.text for w in rest if not w.text.startswith("-")), "")
            notes.append(Note(
                "kill-by-name", cmd.line,
                _("`{command}` kills every process with that name on the machine (other users' servers "
                  "too) and sends SIGTERM without waiting for it to exit; the sleep that follows is a "
                  "guess").format(command=f"{base} {target}"),
                Severity.WARNING))
        docker = docker_args(cmd.words, idx) if base in ("docker", "podman") else None
        # bash(1) COMMAND EXECUTION: a name without a slash that is a defined function runs the
        # function, not a program; `time` is a keyword and keeps that, while external wrappers
        # (nohup, env, sudo...) and `command`/`exec` look the name up on PATH
        calls_function = prog in functions and "/" not in prog and all(w == "time" for w in wrappers)
        # `"$LLAMA_BIN" -m x.gguf ...`: a program from a variable not known here, named like
        # llama-server and given llama-server's arguments
        by_name = cmd.words[idx].opaque and re.search(r"llama|server", prog, re.I) is not None \
            and looks_like_server_args(rest)
        if calls_function and prog in bodies:
            follow_call(bodies[prog], cmd, rest)
            prev = cmd
            return
        if (not calls_function and (is_server_call(prog, rest) or by_name)) or docker is not None:
            if docker is not None:
                start, denv = docker
                env = env + denv
                rest = cmd.words[start:]
            before_args = cmd.words[idx] if docker is None else cmd.words[start - 1]
            inv = Invocation(
                program=prog if docker is None else f"{prog} run … (llama.cpp image)",
                args=list(rest), line=_written_on(cmd, cmd.words[idx]), end_line=cmd.end_line,
                env=[*exported.values(), *env], background=cmd.terminator == "&",
                source="shell", redirects=list(cmd.redirects),
                head=_head_text(src, cmd.words[idx], before_args), tail=_tail_text(src, cmd),
                wrappers=wrapper_words(cmd.words[start:], idx - start) if docker is None else [], cwd=cwd,
                label=frame.label, written_here=frame.here or _fixable_in(frame.span, inv_line=cmd.words[idx].line,
                                                                          words=rest, done=fixed_lines))
            if frame.background or frame.redirects:
                inv.background = inv.background or frame.background
                inv.redirects = inv.redirects + frame.redirects
            if cmd.comment_break is not None:
                inv.cut_line = cmd.comment_break
            invocations.append(inv)
            last_inv, last_k = inv, len(invocations) - 1
            if frame.lines is not lines:
                other_lines[last_k] = frame.lines
            keys.append(inv.line if frame.key is None else frame.key)
            notes.extend(_unknown_notes(unknown, last_k))
        elif prog.startswith("-") and last_inv is not None and last_inv.source == "fragment" \
                and prev is not None and _adjacent(prev, cmd):
            last_inv.args.extend(cmd.words[idx:])
            last_inv.end_line = cmd.end_line
        elif prog.startswith("-") and (last_inv is None or prev is None or not _adjacent(prev, cmd)):
            # flags with no command in front (a pasted "append these" fragment): check them as
            # llama-server arguments
            inv = Invocation(program="llama-server", args=list(cmd.words[idx:]), line=cmd.line,
                             end_line=cmd.end_line, env=[*exported.values(), *env], source="fragment")
            invocations.append(inv)
            keys.append(cmd.line if frame.key is None else frame.key)
            last_inv, last_k = inv, len(invocations) - 1
            notes.extend(_unknown_notes(unknown, last_k))
            notes.append(Note("flags-without-command", cmd.line,
                              _("line {line} starts with `{word}`: run as a script, bash would try to execute "
                                "`{word}` as a command; checked here as llama-server flags").format(
                                  line=cmd.line, word=prog),
                              Severity.INFO, len(invocations) - 1))
        elif prog.startswith("-") and last_inv is not None and prev is not None and _adjacent(prev, cmd):
            # bash runs `--batch-size` as a command: "command not found"
            last_inv.orphans.extend(cmd.words[idx:])
            if last_inv.cut_line is None:
                last_inv.cut_line = prev.comment_break or prev.end_line
            notes.append(Note(
                "orphan-flags", cmd.line,
                _("bash runs `{word}` as a command (\"{word}: command not found\"): {n} word(s) on line(s) "
                  "{lines} never reach llama-server (started on line {start})").format(
                    word=prog, n=len(cmd.words) - idx, start=last_inv.line,
                    lines=cmd.line if cmd.end_line == cmd.line else f"{cmd.line}-{cmd.end_line}"),
                Severity.ERROR, last_k))
            if cmd.terminator == "&":
                last_inv.background = True
            last_inv.redirects.extend(cmd.redirects)
            if last_inv.tail is not None:
                last_inv.tail = _tail_text(src, cmd)
        else:
            last_inv = None if cmd.terminator in ("\n", ";", "") and not prog.startswith("-") else last_inv
        prev = cmd

    def run(seq: list[Command], src: str) -> None:
        nonlocal prev
        i = 0
        while i < len(seq):
            d = _function_def(seq, i)
            if d is not None:
                name, first, off, end = d
                if first is None:  # not a `{ ... }` group: its commands are read as they come
                    functions.add(name)
                    i += 1
                    continue
                functions.add(name)
                bodies[name] = _Function(name, seq, first, off, end, src, frame.lines, frame.file, seq[i].line)
                prev = seq[i]
                i = end + 1
                continue
            step(seq[i], src)
            i += 1

    def spend(n: int, line: int) -> bool:
        if budget[0] < n:
            if budget[0] >= 0:
                notes.append(Note("not-followed", line, _("function calls and sourced files are followed for "
                                  "{n} commands in all; the rest are not read").format(n=_MAX_FOLLOWED),
                                  Severity.INFO))
                budget[0] = -1
            return False
        budget[0] -= n
        return True

    def follow_call(fn: _Function, call: Command, args: list[Word]) -> None:
        """Read ``fn``'s body with the call's arguments as the positional parameters."""
        nonlocal frame
        called.add(fn.name)
        if len(frame.stack) >= _MAX_CALL_DEPTH or fn.name in frame.stack or not spend(fn.end - fn.first + 1, call.line):
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
        saved, saved_frame = scope.positional, frame
        scope.positional = [(w.text, w.line, w.opaque) for w in args]
        span = (fn.seq[fn.first].line, fn.seq[fn.end].end_line) if not fn.file and frame.here else None
        frame = _Frame(fn.lines, fn.file, label, False, (*frame.stack, fn.name),
                       call.terminator == "&" or frame.background, [*frame.redirects, *call.redirects], span,
                       call.line if frame.key is None else frame.key)
        try:
            run(seq, fn.src)
        finally:
            scope.positional, frame = saved, saved_frame

    def follow_source(cmd: Command, rest: list[Word]) -> None:
        """``source FILE [ARGS]``: FILE read in the same variables and functions."""
        nonlocal frame
        w = rest[0]
        target = _SCRIPT_DIR_RE.sub(lambda _m: str(origin.parent.resolve()) if origin else "$0", w.text)
        if w.opaque or "$" in target or "`" in target:
            notes.append(Note("unknown-variable", cmd.line, _("`source {file}`: the file's name is not "
                              "known here; what it sets is not read").format(file=w.raw or w.text),
                              Severity.INFO))
            return
        if origin is None:
            notes.append(Note("source-not-read", cmd.line, _("`source {file}` is not read: the input is not a "
                              "file, so there is no directory to find it in").format(file=w.text),
                              Severity.INFO))
            return
        path = Path(os.path.expanduser(target))
        if not path.is_absolute():
            path = origin.parent / path
        if not path.is_file():
            notes.append(Note("source-missing", cmd.line, _("`source {file}`: {path} is not there: bash stops "
                              "with \"No such file or directory\" (or goes on without what it sets); its "
                              "variables and functions are not known here").format(file=w.text, path=path),
                              Severity.WARNING))
            return
        key = path.resolve()
        if key in sourcing or len(sourcing) >= _MAX_SOURCE_DEPTH:
            notes.append(Note("not-followed", cmd.line, _("`source {file}` is not read again: files source "
                              "each other {n} deep").format(file=w.text, n=len(sourcing)), Severity.INFO))
            return
        try:
            with open(path, "rb") as f:
                sub = f.read(_MAX_SOURCED_BYTES).decode("utf-8", errors="replace").replace("\r\n", "\n")
        except OSError as e:
            notes.append(Note("source-missing", cmd.line, _("`source {file}`: cannot read {path}: {error}").format(
                file=w.text, path=path, error=os_error(e)), Severity.WARNING))
            return
        sub_lex = _Lexer(sub)
        sub_cmds = _split_commands(sub_lex.run(), sub, sub_lex)
        if not spend(len(sub_cmds), cmd.line):
            return
        sub_lines = sub.split("\n")
        _mark_breaks(sub_cmds, sub_lines, 1)
        here = origin.parent.resolve()
        name = os.path.relpath(key, here) if key.is_relative_to(here) else str(path)
        notes.extend(Note("shell-syntax", cmd.line, _("{file} line {line}: {problem}: the shell would stop there").format(
            file=name, line=ln, problem=msg), Severity.ERROR) for ln, msg in sub_lex.problems)
        label = _("in {file}, sourced on line {line}").format(file=name, line=cmd.line) + (
            _(" ({outer})").format(outer=frame.label) if frame.label else "")
        saved, saved_frame = scope.positional, frame
        if len(rest) > 1:
            scope.positional = [(x.text, x.line, x.opaque) for x in rest[1:]]
        frame = _Frame(sub_lines, name, label, False, frame.stack, frame.background, frame.redirects, None,
                       cmd.line if frame.key is None else frame.key)
        sourcing.append(key)
        try:
            run(sub_cmds, sub)
        finally:
            sourcing.pop()
            scope.positional, frame = saved, saved_frame

    run(cmds, text)
    for name, fn in bodies.items():  # never called: read once as written (`$1` not known)
        if name not in called and spend(fn.end - fn.first + 1, fn.line):
            seq = fn.seq[fn.first:fn.end + 1]
            if fn.offset:
                seq = [replace(seq[0], words=seq[0].words[fn.offset:]), *seq[1:]]
            frame = _Frame(fn.lines, fn.file, _("function {name}, never called here").format(name=name) + (
                _(" ({outer})").format(outer=fn.file) if fn.file else ""), fn.file == "", key=fn.line)
            run(seq, fn.src)
    frame = _Frame(lines)
    if keys != sorted(keys):  # in the text's order: a function never called sits where it is defined
        invocations, notes, other_lines = _reorder(keys, invocations, notes, other_lines)
    # explain each cut
    for k, inv in enumerate(invocations):
        if inv.cut_line is not None and inv.orphans:
            notes.append(_cut_note(inv, k, other_lines.get(k, lines), first_line if k not in other_lines else 1))
    # a bare assignment of a variable the script expands is a shell variable, not environment
    # (unless a later `export NAME` exports it)
    shell_only = {(n, ln) for n, ln in bare if n in scope.used and n not in really_exported}
    if shell_only:
        for inv in invocations:
            inv.env = [e for e in inv.env if (e[0], e[2]) not in shell_only]
    return Parsed("shell", invocations, notes, cmds, lines)


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
    seq: list[Command]
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


def _written_on(cmd: Command, w: Word) -> int:
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


def _function_def(seq: list[Command], i: int) -> tuple[str, int | None, int, int] | None:
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
    skip = len(name) + int(plus) + 1
    vparts: list[tuple[str, str]] = []
    for text, q in w.parts:
        if skip >= len(text):
            skip -= len(text)
            continue
        vparts.append((text[skip:], q))
        skip = 0
    subst = any(q == "`" for _, q in vparts)
    got = expand_word(Word(m.group(3), w.line, parts=tuple(vparts)), scope, inner, split=False)
    value = got[0].text if got else ""
    if store:
        if subst:
            here = scope.script_dir and _SCRIPT_DIR_RE.fullmatch(value)
            if here:  # SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)": the script's directory
                scope.assign(name, [(scope.script_dir or "", w.line, False)], w.line)
            else:
                scope.assign(name, None, w.line,
                             why=_("set on line {line} from a command substitution").format(line=w.line))
        else:
            scope.assign(name, [(value, w.line, bool(got) and got[0].opaque)], w.line, append=plus,
                         unknown=inner)
    else:
        unknown.extend(inner)
    if value == m.group(3):
        return w
    return Word(f"{name}{'+' if plus else ''}={value}", w.line, w.raw, w.start, w.end)


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


def _tail_text(src: str, cmd: Command) -> str | None:
    """The rest of the command's last line after its last word or redirection, as written; a
    lone continuation backslash (into a comment or blank line) is dropped."""
    if cmd.end_pos < 0:
        return None
    nl = src.find("\n", cmd.end_pos)
    tail = src[cmd.end_pos:len(src) if nl < 0 else nl].rstrip()
    return "" if tail == "\\" else tail


def _adjacent(prev: Command, cmd: Command) -> bool:
    return prev.terminator in ("\n", "&", ";") and cmd.line - prev.end_line <= 3


def _mark_breaks(cmds: list[Command], lines: list[str], first_line: int) -> None:
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


def _cut_note(inv: Invocation, k: int, lines: list[str], first_line: int) -> Note:
    cut = inv.cut_line or inv.end_line
    idx = cut - first_line
    text = lines[idx].strip() if 0 <= idx < len(lines) else ""
    if text.startswith("#"):
        why = _("line {cut} is a comment: after the `\\` on line {before} the `#` starts a comment that runs "
                "to the end of the line, and that newline ends the command").format(cut=cut, before=cut - 1)
    elif not text:
        why = _("line {cut} is blank: after the `\\` on line {before} the empty line ends the command").format(
            cut=cut, before=cut - 1)
    elif re.search(r"\\[ \t]+$", lines[idx] if 0 <= idx < len(lines) else ""):
        why = _("line {cut} ends with `\\` followed by spaces: the backslash escapes a space, not the "
                "newline").format(cut=cut)
    else:
        why = _("line {cut} does not end with `\\`, so the newline ends the command").format(cut=cut)
    n = len(inv.orphans)
    return Note("continuation-broken", cut,
                _("the llama-server command started on line {start} is cut off at line {cut}: {why}. {n} word(s) "
                  "after it are never passed to llama-server").format(start=inv.line, cut=cut, why=why, n=n),
                Severity.ERROR, k)
