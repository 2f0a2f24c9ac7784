"""Shell-accurate reading of what users paste: which argv llama-server really receives.

Formats:
  * a command line or a bash script: bash's own rules for quoting, ``\\``-newline continuation,
    comments (a ``#`` at the start of a word runs to the end of the line, so a comment line
    after a ``\\`` line *ends* the command), blank lines, ``;`` ``&&`` ``||`` ``|`` ``&``,
    redirections, ``NAME=value`` assignments before the command, ``export``, wrappers
    (``nohup``, ``stdbuf``, ``env``, ``sudo``, ``taskset``, ``numactl``...), ``docker run``;
    shell functions (a body is read; calling a function is not starting llama-server);
  * a systemd unit's ``ExecStart=``: systemd.syntax(7): a trailing backslash joins the next
    line, and comment lines that follow a backslash line are skipped (the continuation goes on);
    ``Environment=`` assignments;
  * docker-compose ``command:`` (string or list) with ``environment:``;
  * a llama-swap YAML ``cmd:``: llama-swap's SanitizeCommand (proxy/config/config.go) drops
    lines starting with ``#``, turns a trailing backslash into a space and splits the rest with
    POSIX shlex, so newlines never end its command; ``${PORT}`` style macros are kept verbatim.

Everything here is pure text processing: no command is run. Garbage in gives notes, never an
exception.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Word:
    text: str
    line: int  # 1-based line where the word starts
    raw: str = field(default="", compare=False)  # as written (quotes kept), shell input only
    start: int = field(default=-1, compare=False)  # offsets into the parsed text, shell input only
    end: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class Note:
    """Something the reader found about the text itself (not about a flag)."""

    kind: str  # continuation-broken | orphan-flags | space-after-backslash | killall | ...
    line: int
    message: str
    severity: str = "error"
    invocation: int | None = None  # index of the llama-server invocation concerned


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

    @property
    def argv(self) -> list[str]:
        return [self.program] + [w.text for w in self.args]

    @property
    def intended_args(self) -> list[Word]:
        """The arguments the author meant to pass: the received ones plus the cut-off ones."""
        return self.args + self.orphans


@dataclass
class Command:
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
    commands: list[Command] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- bash lexer

_OPS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
_OP_CHARS = frozenset("&|;()")

#: a lexer token: (kind "word" | "op" | "redir", text, line, start offset, end offset)
Token = tuple[str, str, int, int, int]
# bash(1) REDIRECTION: [n]< [n]> [n]>| [n]>> &> &>> [n]<& [n]>& [n]<> << <<- <<<; an unquoted
# all-digit word glued to the operator is the file descriptor (`2>`, `10>&1`)
_REDIR_OP_RE = re.compile(r"(?:\d+|\{[A-Za-z_][A-Za-z0-9_]*\})?(?:>>|>&|>\||<<<|<<-|<<|<&|<>|>|<)|&>>|&>")
_ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)


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
                self.i += 1
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
            self.problems.append((line, f"redirection `{op}` without a target"))
            self.tokens.append(("redir", op, line, m.start(), self.i))
            return
        start = self.i
        target, _line = self._read_word()
        if op in ("<<", "<<-") and target:
            self.heredocs.append((target, op == "<<-"))
        self.tokens.append(("redir", op + (" " if gap else "") + self.s[start:self.i], line, m.start(), self.i))

    def _word(self) -> None:
        start = self.i
        text, start_line = self._read_word()
        if self.i == start:  # nothing a word can start with: never loop on it
            self.i += 1
            return
        self.tokens.append(("word", text, start_line, start, self.i))

    def _read_word(self) -> tuple[str, int]:
        s = self.s
        start_line = self.line
        buf: list[str] = []
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\r\n" or (not buf and c == "#"):
                break
            if c in _OP_CHARS:
                break
            if c in "<>":
                if s.startswith("(", self.i + 1):  # process substitution <(...) >(...)
                    self.i += 1
                    buf.append(c + self._subst("(", ")"))
                    continue
                break  # `<` and `>` are metacharacters: `a>b` is the word `a` and `>b`
            if c == "\\":
                if self.i + 1 < self.n:
                    nxt = s[self.i + 1]
                    if nxt == "\n":
                        self.i += 2
                        self.line += 1
                        continue
                    buf.append(nxt)
                    self.i += 2
                    continue
                self.i += 1
                continue
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    self.problems.append((self.line, "unterminated single quote"))
                    end = self.n
                chunk = s[self.i + 1:end]
                buf.append(chunk)
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
                buf.append("".join(out))
                self.line += s[self.i:end].count("\n")
                self.i = end + 1
                continue
            if c == '"':
                self.i += 1
                out = []
                while self.i < self.n and s[self.i] != '"':
                    ch = s[self.i]
                    if ch == "\\" and self.i + 1 < self.n:
                        nxt = s[self.i + 1]
                        if nxt == "\n":
                            self.line += 1
                            self.i += 2
                            continue
                        if nxt in '"\\$`':
                            out.append(nxt)
                            self.i += 2
                            continue
                    if ch == "$" and s.startswith("$(", self.i):
                        out.append(self._subst("$(", ")"))
                        continue
                    if ch == "`":
                        out.append(self._subst("`", "`"))
                        continue
                    if ch == "\n":
                        self.line += 1
                    out.append(ch)
                    self.i += 1
                if self.i >= self.n:
                    self.problems.append((start_line, "unterminated double quote"))
                self.i += 1
                buf.append("".join(out))
                continue
            if c == "$" and (s.startswith("$(", self.i) or s.startswith("${", self.i)):
                buf.append(self._subst(s[self.i:self.i + 2], ")" if s[self.i + 1] == "(" else "}"))
                continue
            if c == "`":
                buf.append(self._subst("`", "`"))
                continue
            buf.append(c)
            self.i += 1
        return "".join(buf), start_line

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
            self.problems.append((self.line, f"unterminated {open_}"))
        return s[start:self.i]


def _split_commands(tokens: list[Token], src: str) -> list[Command]:
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
            cur.append(Word(text, line, src[start:end].replace("\\\n", ""), start, end))
    flush("", last_line)
    return cmds


# ----------------------------------------------------------------------------- programs

_SERVER_RE = re.compile(r"^(llama[-_.]?[a-z0-9.]*[-_]?server|server)(\.exe)?$", re.I)
_WRAPPERS = {
    "nohup": {}, "exec": {}, "time": {}, "command": {}, "builtin": {},
    "stdbuf": {"-i": 1, "-o": 1, "-e": 1},
    "sudo": {"-u": 1, "-g": 1, "-C": 1, "-h": 1, "-p": 1},
    "nice": {"-n": 1},
    "ionice": {"-c": 1, "-n": 1, "-p": 1},
    "taskset": {},
    "numactl": {"-N": 1, "-m": 1, "-C": 1, "-p": 1, "-i": 1, "-l": 0},
    "timeout": {"-s": 1, "-k": 1},
    "chrt": {},
    "env": {"-u": 1, "-C": 1, "-S": 1},
    "setsid": {}, "unbuffer": {}, "caffeinate": {}, "systemd-run": {"-p": 1, "--unit": 1},
    "gdb": {"-ex": 1, "-x": 1}, "valgrind": {}, "strace": {"-o": 1, "-e": 1}, "xargs": {"-a": 1, "-n": 1},
}
_POSITIONAL_WRAPPER_ARGS = {"timeout": 1, "chrt": 1, "taskset": 1}


def is_server_program(word: str) -> bool:
    name = PurePosixPath(word.replace("\\", "/")).name
    return bool(_SERVER_RE.match(name))


# bash(1) SHELL GRAMMAR "Compound Commands": reserved words that may stand before a simple command
_RESERVED = frozenset({"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"})


def _skip_reserved(words: list[Word], i: int) -> int:
    while i < len(words) and words[i].text in _RESERVED:
        i += 1
    return i


# Options a llama-server command line typically starts with (common/arg.cpp, tools/server/README.md).
# A program named just `server` (the binary's name before llama.cpp renamed its executables to
# llama-* in June 2024) counts as llama-server only when its arguments look like llama-server's.
_SERVER_LEAD_FLAGS = frozenset({
    "-m", "--model", "-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file",
    "-dr", "--docker-repo", "--port", "--host", "-c", "--ctx-size", "-ngl", "--gpu-layers",
    "--n-gpu-layers", "-t", "--threads", "-np", "--parallel", "-a", "--alias", "--api-key",
    "-fa", "--flash-attn", "--mmproj", "--jinja", "--chat-template", "-b", "--batch-size",
    "-ub", "--ubatch-size", "--models-dir", "--models-preset", "-h", "--help", "--version",
    "--list-devices", "--path", "--metrics", "--embedding", "--embeddings", "--rerank",
})


def _is_server_call(prog: str, args: list[Word]) -> bool:
    """``prog args`` starts llama-server: a llama-server-like name; a bare ``server`` only when
    its first argument is a llama-server option or a ``.gguf`` file is passed."""
    if not is_server_program(prog):
        return False
    name = PurePosixPath(prog.replace("\\", "/")).name.lower().removesuffix(".exe")
    if name != "server":
        return True
    first = args[0].text.split("=", 1)[0] if args else ""
    return first in _SERVER_LEAD_FLAGS or any(a.text.lower().endswith(".gguf") for a in args)


def _unwrap(words: list[Word], env: list[tuple[str, str, int]]) -> tuple[int, list[str]]:
    """Index of the real program after wrappers and assignments; names of wrappers seen."""
    i = 0
    seen: list[str] = []
    while i < len(words):
        w = words[i].text
        m = _ASSIGN_RE.match(w)
        if m:
            env.append((m.group(1), m.group(3), words[i].line))
            i += 1
            continue
        name = PurePosixPath(w).name
        if name in _WRAPPERS and i + 1 < len(words):
            seen.append(name)
            opts = _WRAPPERS[name]
            i += 1
            if name == "taskset" and i < len(words) and words[i].text in ("-c", "--cpu-list"):
                i += 1
            while i < len(words) and words[i].text.startswith("-") and not is_server_program(words[i].text):
                t = words[i].text
                i += 1
                if t == "--":
                    break
                if "=" not in t and opts.get(t, 0):
                    i += 1
            for _ in range(_POSITIONAL_WRAPPER_ARGS.get(name, 0)):
                if i < len(words) and not is_server_program(words[i].text):
                    i += 1
            continue
        break
    return i, seen


_DOCKER_VALUE_OPTS = {
    "-p", "--publish", "-v", "--volume", "-e", "--env", "--name", "--gpus", "--runtime", "-w",
    "--workdir", "--device", "--ipc", "--shm-size", "--network", "--net", "--entrypoint", "-u",
    "--user", "--restart", "--mount", "--cpus", "-m", "--memory", "--env-file", "-l", "--label",
    "--ulimit", "--cap-add", "--security-opt", "--hostname", "--add-host", "--platform", "--pull",
    "--log-driver", "--log-opt", "--group-add", "--cpuset-cpus", "--memory-swap", "--tmpfs",
}


def _docker_args(words: list[Word], start: int) -> tuple[int, list[tuple[str, str, int]]] | None:
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


# ----------------------------------------------------------------------------- bash scripts


def parse_shell(text: str, first_line: int = 1) -> Parsed:
    lex = _Lexer(text)
    tokens = lex.run()
    if first_line != 1:
        tokens = [(a, b, ln + first_line - 1, st, en) for a, b, ln, st, en in tokens]
    cmds = _split_commands(tokens, text)
    lines = text.split("\n")
    notes: list[Note] = [Note("shell-syntax", ln + first_line - 1, f"{msg}: the shell would stop here", "error")
                         for ln, msg in lex.problems]
    _mark_breaks(cmds, lines, first_line)
    exported: list[tuple[str, str, int]] = []
    invocations: list[Invocation] = []
    last_inv: Invocation | None = None
    prev: Command | None = None
    functions: set[str] = set()  # shell functions defined so far
    for cmd in cmds:
        env: list[tuple[str, str, int]] = []
        start = _skip_reserved(cmd.words, 0)
        if start < len(cmd.words) and cmd.words[start].text == "function" and start + 1 < len(cmd.words):
            # `function NAME { ...`, `function NAME() ...`: the body (if on this line) follows
            functions.add(cmd.words[start + 1].text)
            start = _skip_reserved(cmd.words, start + 2)
        elif cmd.terminator == "(" and len(cmd.words) - start == 1 and "=" not in cmd.words[start].text:
            # `NAME ()` (the lexer stops the word at `(`): bash only accepts this as a function
            # definition; the body is read as ordinary commands after it
            functions.add(cmd.words[start].text)
            prev = cmd
            continue
        idx, wrappers = _unwrap(cmd.words[start:], env)
        idx += start
        cmd.assignments = env
        if idx >= len(cmd.words):
            if env and cmd.terminator in ("\n", ";", ""):
                exported.extend(env)  # plain assignments affect later commands only if exported;
                # keep them: bash scripts usually `export` them, and a wrong one is worth a look
            prev = cmd
            continue
        prog = cmd.words[idx].text
        rest = cmd.words[idx + 1:]
        base = PurePosixPath(prog).name
        if base == "export":
            for w in rest:
                m = _ASSIGN_RE.match(w.text)
                if m:
                    exported.append((m.group(1), m.group(3), w.line))
            prev = cmd
            continue
        if base in ("killall", "pkill"):
            target = next((w.text for w in rest if not w.text.startswith("-")), "")
            notes.append(Note(
                "kill-by-name", cmd.line,
                f"`{base} {target}` kills every process with that name on the machine (other "
                "users' servers too) and sends SIGTERM without waiting for it to exit; the sleep "
                "that follows is a guess",
                "warning"))
        docker = _docker_args(cmd.words, idx) if base in ("docker", "podman") else None
        # bash(1) COMMAND EXECUTION: a name without a slash that is a defined function runs the
        # function, not a program; `time` is a keyword and keeps that, while external wrappers
        # (nohup, env, sudo...) and `command`/`exec` look the name up on PATH
        calls_function = prog in functions and "/" not in prog and all(w == "time" for w in wrappers)
        if (not calls_function and _is_server_call(prog, rest)) or docker is not None:
            if docker is not None:
                start, denv = docker
                env = env + denv
                rest = cmd.words[start:]
            before_args = cmd.words[idx] if docker is None else cmd.words[start - 1]
            inv = Invocation(
                program=prog if docker is None else f"{prog} run … (llama.cpp image)",
                args=list(rest), line=cmd.words[idx].line, end_line=cmd.end_line,
                env=[e for e in exported] + env, background=cmd.terminator == "&",
                source="shell", redirects=list(cmd.redirects),
                head=_head_text(text, cmd.words[idx], before_args), tail=_tail_text(text, cmd))
            if cmd.comment_break is not None:
                inv.cut_line = cmd.comment_break
            invocations.append(inv)
            last_inv = inv
        elif prog.startswith("-") and last_inv is not None and last_inv.source == "fragment" \
                and prev is not None and _adjacent(prev, cmd):
            last_inv.args.extend(cmd.words[idx:])
            last_inv.end_line = cmd.end_line
        elif prog.startswith("-") and (last_inv is None or prev is None or not _adjacent(prev, cmd)):
            # flags with no command in front (a pasted "append these" fragment): check them as
            # llama-server arguments
            inv = Invocation(program="llama-server", args=list(cmd.words[idx:]), line=cmd.line,
                             end_line=cmd.end_line, env=list(exported) + env, source="fragment")
            invocations.append(inv)
            last_inv = inv
            notes.append(Note("flags-without-command", cmd.line,
                              f"line {cmd.line} starts with `{prog}`: run as a script, bash would try "
                              f"to execute `{prog}` as a command; checked here as llama-server flags",
                              "info", len(invocations) - 1))
        elif prog.startswith("-") and last_inv is not None and prev is not None and _adjacent(prev, cmd):
            # bash runs `--batch-size` as a command: "command not found"
            last_inv.orphans.extend(cmd.words[idx:])
            if last_inv.cut_line is None:
                last_inv.cut_line = prev.comment_break or prev.end_line
            notes.append(Note(
                "orphan-flags", cmd.line,
                f"bash runs `{prog}` as a command (\"{prog}: command not found\"): "
                f"{len(cmd.words) - idx} word(s) on line(s) {cmd.line}-{cmd.end_line} never reach "
                f"llama-server (started on line {last_inv.line})",
                "error", invocations.index(last_inv)))
            if cmd.terminator == "&":
                last_inv.background = True
            last_inv.redirects.extend(cmd.redirects)
            if last_inv.tail is not None:
                last_inv.tail = _tail_text(text, cmd)
        else:
            last_inv = None if cmd.terminator in ("\n", ";", "") and not prog.startswith("-") else last_inv
        prev = cmd
    # explain each cut
    for k, inv in enumerate(invocations):
        if inv.cut_line is not None and inv.orphans:
            notes.append(_cut_note(inv, k, lines, first_line))
    return Parsed("shell", invocations, notes, cmds, lines)


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
        if _ends_with_backslash(before) and (not here or here.startswith("#")):
            cmd.comment_break = cmd.end_line


def _ends_with_backslash(line: str) -> bool:
    m = re.search(r"(\\+)$", line)
    return bool(m) and len(m.group(1)) % 2 == 1


def _cut_note(inv: Invocation, k: int, lines: list[str], first_line: int) -> Note:
    cut = inv.cut_line or inv.end_line
    idx = cut - first_line
    text = lines[idx].strip() if 0 <= idx < len(lines) else ""
    if text.startswith("#"):
        why = (f"line {cut} is a comment: after the `\\` on line {cut - 1} the `#` starts a "
               "comment that runs to the end of the line, and that newline ends the command")
    elif not text:
        why = f"line {cut} is blank: after the `\\` on line {cut - 1} the empty line ends the command"
    elif re.search(r"\\[ \t]+$", lines[idx] if 0 <= idx < len(lines) else ""):
        why = (f"line {cut} ends with `\\` followed by spaces: the backslash escapes a space, "
               "not the newline")
    else:
        why = f"line {cut} does not end with `\\`, so the newline ends the command"
    n = len(inv.orphans)
    return Note("continuation-broken", cut,
                f"the llama-server command started on line {inv.line} is cut off at line {cut}: "
                f"{why}. {n} word(s) after it are never passed to llama-server",
                "error", k)


# ----------------------------------------------------------------------------- systemd


def parse_systemd(text: str) -> Parsed:
    """Read ExecStart= (and Environment=) of a unit file, systemd.syntax(7) continuation rules."""
    raw = text.split("\n")
    entries: list[tuple[str, str, int, list[int]]] = []  # key, value, first line, lines
    i = 0
    while i < len(raw):
        line = raw[i].strip()
        if not line or line[0] in "#;" or line.startswith("["):
            i += 1
            continue
        start = i
        parts = []
        line_nos = [i + 1]
        cur = raw[i].rstrip()
        while _ends_with_backslash(cur) and i + 1 < len(raw):
            parts.append(cur[:-1] + " ")
            i += 1
            # systemd.syntax(7): comment lines following a backslash line are ignored
            while i < len(raw) and raw[i].strip()[:1] in ("#", ";"):
                i += 1
            if i >= len(raw):
                cur = ""
                break
            cur = raw[i].rstrip()
            line_nos.append(i + 1)
        parts.append(cur)
        joined = "".join(parts)
        key, sep, val = joined.partition("=")
        if sep:
            entries.append((key.strip(), val.strip(), start + 1, line_nos))
        i += 1
    env: list[tuple[str, str, int]] = []
    invocations: list[Invocation] = []
    notes: list[Note] = []
    for key, val, ln, line_nos in entries:
        if key == "Environment":
            try:
                for item in shlex.split(val):
                    n, _, v = item.partition("=")
                    env.append((n, v, ln))
            except ValueError:
                notes.append(Note("shell-syntax", ln, "unbalanced quotes in Environment=", "error"))
        elif key in ("ExecStart", "ExecStartPre", "ExecStartPost"):
            v = val.lstrip("@-:+!")
            try:
                words_text = shlex.split(v, comments=False)
            except ValueError:
                notes.append(Note("shell-syntax", ln, f"unbalanced quotes in {key}=", "error"))
                continue
            words = _assign_lines(words_text, raw, line_nos)
            tmp_env: list[tuple[str, str, int]] = []
            idx, _ = _unwrap(words, tmp_env)
            if idx < len(words) and _is_server_call(words[idx].text, words[idx + 1:]):
                inv = Invocation(words[idx].text, words[idx + 1:], words[idx].line,
                                 line_nos[-1], env=list(env) + tmp_env, source="systemd", label=key)
                invocations.append(inv)
            elif idx < len(words) and PurePosixPath(words[idx].text).name in ("killall", "pkill"):
                notes.append(Note("kill-by-name", ln, f"{key}= kills processes by name", "warning"))
    return Parsed("systemd", invocations, notes, [], raw)


def _assign_lines(words: list[str], raw: list[str], line_nos: list[int]) -> list[Word]:
    """Attach a line number to each word by finding it in the unit's physical lines, in order."""
    out: list[Word] = []
    li = 0
    pos = 0
    for w in words:
        probe = w.split()[0] if w.split() else w
        found = None
        for j in range(li, len(line_nos)):
            text = raw[line_nos[j] - 1]
            k = text.find(probe, pos if j == li else 0)
            if k >= 0:
                found = (j, k + len(probe))
                break
        if found:
            li, pos = found
            out.append(Word(w, line_nos[li]))
        else:
            out.append(Word(w, line_nos[min(li, len(line_nos) - 1)]))
    return out


# ----------------------------------------------------------------------------- YAML


def _find_line(lines: list[str], needle: str, start: int = 0) -> int:
    for i in range(start, len(lines)):
        if needle in lines[i]:
            return i + 1
    return start + 1


def parse_yaml(text: str) -> Parsed | None:
    """docker-compose ``services.*.command`` / llama-swap ``models.*.cmd``; None if neither."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    lines = text.split("\n")
    invocations: list[Invocation] = []
    notes: list[Note] = []
    if isinstance(data.get("models"), dict):
        for mid, cfg in data["models"].items():
            if not isinstance(cfg, dict) or not isinstance(cfg.get("cmd"), str):
                continue
            key_line = _find_line(lines, f"{mid}:")
            cmd_line = _find_line(lines, "cmd:", key_line - 1)
            words = _llama_swap_words(cfg["cmd"], lines, cmd_line)
            if words is None:
                notes.append(Note("shell-syntax", cmd_line, f"models.{mid}.cmd: unbalanced quotes", "error"))
                continue
            env: list[tuple[str, str, int]] = []
            for item in cfg.get("env") or []:
                if isinstance(item, str):
                    n, _, v = item.partition("=")
                    env.append((n, v, _find_line(lines, item, key_line - 1)))
            idx, _ = _unwrap(words, env)
            if idx < len(words) and _is_server_call(words[idx].text, words[idx + 1:]):
                invocations.append(Invocation(words[idx].text, words[idx + 1:], words[idx].line,
                                              words[-1].line, env=env, source="llama-swap", label=str(mid)))
        return Parsed("llama-swap", invocations, notes, [], lines)
    if isinstance(data.get("services"), dict):
        for name, svc in data["services"].items():
            if not isinstance(svc, dict) or "command" not in svc:
                continue
            image = str(svc.get("image", ""))
            key_line = _find_line(lines, f"{name}:")
            cmd_line = _find_line(lines, "command:", key_line - 1)
            cmd = svc["command"]
            try:
                texts = [str(x) for x in cmd] if isinstance(cmd, list) else shlex.split(str(cmd))
            except ValueError:
                notes.append(Note("shell-syntax", cmd_line, f"services.{name}.command: unbalanced quotes", "error"))
                continue
            words = _lines_for(texts, lines, cmd_line)
            env = []
            envs = svc.get("environment") or []
            items = [f"{k}={v}" for k, v in envs.items()] if isinstance(envs, dict) else [str(x) for x in envs]
            for item in items:
                n, _, v = item.partition("=")
                env.append((n, "" if v == "None" else v, _find_line(lines, n, key_line - 1)))
            if words and _is_server_call(words[0].text, words[1:]):
                prog, args = words[0].text, words[1:]
            elif "llama.cpp" in image or "llama-cpp" in image or (words and words[0].text.startswith("-")):
                prog, args = f"(entrypoint of {image or 'the image'})", words
            else:
                continue
            invocations.append(Invocation(prog, args, cmd_line, words[-1].line if words else cmd_line,
                                          env=env, source="compose", label=str(name)))
        return Parsed("compose", invocations, notes, [], lines)
    return None


def _llama_swap_words(cmd: str, lines: list[str], cmd_line: int) -> list[Word] | None:
    # llama-swap proxy/config/config.go SanitizeCommand: drop `#` lines, trailing `\` -> space,
    # then POSIX shlex (newlines are plain whitespace)
    kept = []
    for ln in cmd.split("\n"):
        t = ln.strip()
        if t.startswith("#"):
            continue
        kept.append(t[:-1] + " " if t.endswith("\\") else ln)
    try:
        texts = shlex.split("\n".join(kept))
    except ValueError:
        return None
    return _lines_for(texts, lines, cmd_line)


def _lines_for(texts: list[str], lines: list[str], start_line: int) -> list[Word]:
    out = []
    li = start_line - 1
    for t in texts:
        probe = t.split()[0] if t.split() else t
        j = li
        while j < len(lines) and probe not in lines[j]:
            j += 1
        if j < len(lines):
            li = j
        out.append(Word(t, li + 1))
    return out


# ----------------------------------------------------------------------------- entry


def detect_kind(text: str) -> str:
    if re.search(r"^\s*ExecStart\s*=", text, re.M) or re.search(r"^\s*\[Service\]\s*$", text, re.M):
        return "systemd"
    if re.search(r"^(services|models)\s*:\s*$", text, re.M):
        return "yaml"
    return "shell"


def parse_text(text: str, kind: str | None = None) -> Parsed:
    """Read a pasted command line, bash script, systemd unit, docker-compose or llama-swap file.
    ``kind`` forces a format (shell, systemd, yaml)."""
    text = text.replace("\r\n", "\n").replace("\x00", "")
    kind = kind or detect_kind(text)
    if kind == "systemd":
        return parse_systemd(text)
    if kind == "yaml":
        parsed = parse_yaml(text)
        if parsed is not None:
            return parsed
    return parse_shell(text)


def parse_argv(argv: list[str]) -> Parsed:
    """An argv given directly (program first)."""
    words = [Word(a, 1) for a in argv]
    inv = Invocation(argv[0] if argv else "llama-server", words[1:], 1, 1, source="argv")
    return Parsed("argv", [inv], [], [], [])
