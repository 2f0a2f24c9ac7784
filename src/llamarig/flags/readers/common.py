"""What the readers share: recognising llama-server behind wrappers (``nohup``, ``env``,
``sudo``, ``taskset`` ...) and ``NAME=value`` assignments, a backslash that continues a line,
and finding on which line of the text a word was written.
"""

from __future__ import annotations

import re

from llamarig.flags.parsed import Word

ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)

# llama-server, llama3-server, llama_server, a versioned build (llama-server-ec9e0301, as in
# llama-swap's config.example.yaml), server (the name before June 2024)
_SERVER_RE = re.compile(r"^(llama[-_.]?[a-z0-9.]*[-_]?server([-_.][a-z0-9]+)*|server)(\.exe)?$", re.I)
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


def basename(path: str) -> str:
    """The last component of a POSIX path (PurePosixPath(path).name, without building a Path:
    this runs for every word of every command)."""
    return path.rstrip("/").rsplit("/", 1)[-1] if "/" in path else path


def is_server_program(word: str) -> bool:
    name = basename(word.replace("\\", "/"))
    return bool(_SERVER_RE.match(name))


# Options a llama-server command line typically starts with (common/arg.cpp, tools/server/README.md).
# A program named just `server` (the binary's name before llama.cpp renamed its executables to
# llama-* in June 2024) counts as llama-server only when its arguments look like llama-server's.
SERVER_LEAD_FLAGS = frozenset({
    "-m", "--model", "-mu", "--model-url", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file",
    "-dr", "--docker-repo", "--port", "--host", "-c", "--ctx-size", "-ngl", "--gpu-layers",
    "--n-gpu-layers", "-t", "--threads", "-np", "--parallel", "-a", "--alias", "--api-key",
    "-fa", "--flash-attn", "--mmproj", "--jinja", "--chat-template", "-b", "--batch-size",
    "-ub", "--ubatch-size", "--models-dir", "--models-preset", "-h", "--help", "--version",
    "--list-devices", "--path", "--metrics", "--embedding", "--embeddings", "--rerank",
})


def is_server_call(prog: str, args: list[Word]) -> bool:
    """``prog args`` starts llama-server: a llama-server-like name; a bare ``server`` only when
    its first argument is a llama-server option or a ``.gguf`` file is passed."""
    if not is_server_program(prog):
        return False
    name = basename(prog.replace("\\", "/")).lower().removesuffix(".exe")
    if name != "server":
        return True
    first = args[0].text.split("=", 1)[0] if args else ""
    return first in SERVER_LEAD_FLAGS or any(a.text.lower().endswith(".gguf") for a in args)


def looks_like_server_args(words: list[Word]) -> bool:
    """Arguments only llama-server would be given (an option first, and a lead option or a
    .gguf file among them)."""
    return bool(words) and words[0].text.startswith("-") and any(
        w.text.split("=", 1)[0] in SERVER_LEAD_FLAGS or w.text.lower().endswith(".gguf") for w in words)


def unwrap(words: list[Word], env: list[tuple[str, str, int]]) -> tuple[int, list[str]]:
    """Index of the real program after wrappers and assignments; names of wrappers seen."""
    i = 0
    seen: list[str] = []
    while i < len(words):
        w = words[i].text
        m = ASSIGN_RE.match(w)
        if m:
            env.append((m.group(1), m.group(3), words[i].line))
            i += 1
            continue
        name = basename(w)
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


#: wrapper words that are the shell's, not a program: they change nothing in the process started
_SHELL_WORDS = frozenset({"exec", "time", "command", "builtin"})


def wrapper_words(words: list[Word], idx: int) -> list[str]:
    """The wrapper words before the program at ``words[idx]`` (after ``unwrap``), as read: the
    leading ``NAME=value`` assignments (the command's environment) and the shell's own words
    (``exec``, ``time``...) left out; a wrapper's options and assignments (``env -u X A=1``,
    ``stdbuf -oL -eL``, ``taskset -c 0-7``) kept."""
    i = 0
    while i < idx and ASSIGN_RE.match(words[i].text):
        i += 1
    return [w.text for w in words[i:idx] if w.text not in _SHELL_WORDS]


def ends_with_backslash(line: str) -> bool:
    """The line ends in an odd number of backslashes: the last one escapes the newline."""
    m = re.search(r"(\\+)$", line)
    return m is not None and len(m.group(1)) % 2 == 1


def find_line(lines: list[str], needle: str, start: int = 0) -> int:
    """1-based number of the first line from ``start`` (0-based) that contains ``needle``."""
    for i in range(start, len(lines)):
        if needle in lines[i]:
            return i + 1
    return start + 1


def words_on_lines(texts: list[str], lines: list[str], start_line: int) -> list[Word]:
    """Words read out of a YAML value, each with the line it is written on (searched in order
    from ``start_line``)."""
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
