"""What a container runs: an image's entrypoint and command, overridden the way docker and
Kubernetes override them, down to the llama-server argv.

* docker / compose (https://docs.docker.com/reference/compose-file/services/#entrypoint):
  ``entrypoint`` replaces the image's ENTRYPOINT *and* clears its CMD; ``command`` replaces CMD;
  the process gets entrypoint + command.
* Kubernetes (https://kubernetes.io/docs/tasks/inject-data-application/define-command-argument-container/):
  ``command`` is the ENTRYPOINT, ``args`` the CMD, with the same rules.

The llama.cpp images (``.devops/*.Dockerfile`` of llama.cpp) have ``ENTRYPOINT
["/app/llama-server"]`` (``:server*`` tags), ``["/app/tools.sh"]`` (``:full*``, which runs
llama-server for a first argument ``--server``/``-s``, .devops/tools.sh:32) or
``["/app/llama-cli"]`` (``:light*``). A command that is a shell (``sh -c SCRIPT``) is read as a
bash script.
"""

from __future__ import annotations

from dataclasses import replace

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Word
from llamarig.flags.readers.bash import parse_bash
from llamarig.flags.readers.common import (
    basename,
    is_server_call,
    is_server_program,
    looks_like_server_args,
    unwrap,
)
from llamarig.i18n import _

_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})

Env = list[tuple[str, str, int]]


def image_kind(image: str) -> str:
    """``server``, ``full``, ``light`` for a llama.cpp image, ``other`` for anything else."""
    low = image.lower()
    name, _, tag = low.rpartition(":") if ":" in low.rsplit("/", 1)[-1] else (low, "", "")
    if not any(k in name for k in ("llama.cpp", "llama-cpp", "llama_cpp", "llamacpp")):
        return "other"
    if tag.startswith("full"):
        return "full"
    if tag.startswith("light"):
        return "light"
    return "server"


Found = tuple[list[Invocation], list[Note]]  # invocations, and notes whose .invocation indexes them


def container_invocations(entry: list[Word] | None, cmd: list[Word] | None, image: str, env: Env,
                          source: str, label: str, line: int) -> Found:
    """The llama-server invocations of one container: ``entry`` is the entrypoint override
    (compose ``entrypoint``, Kubernetes ``command``; None when not set), ``cmd`` the command
    (compose ``command``, Kubernetes ``args``)."""
    if entry is not None:  # the image's ENTRYPOINT and CMD are both replaced
        return argv_invocations(entry + (cmd or []), env, source, label, line)
    kind = image_kind(image)
    args = list(cmd or [])
    # in parentheses (fix_yaml.py tells it from a program by the "(")
    shown = _("(entrypoint of {image})").format(image=image or _("the image"))
    if kind == "full":
        if args and args[0].text in ("--server", "-s"):
            return [_inv(shown, args[1:], env, source, label, line)], []
        return [], []
    if kind == "light":
        return [], []
    if kind == "server":
        notes = []
        if args and is_server_program(args[0].text):
            notes.append(Note(
                "entrypoint-is-server", args[0].line,
                _("{label}: the image's entrypoint is already llama-server (ENTRYPOINT [\"/app/llama-server\"], "
                  "llama.cpp .devops/*.Dockerfile), so the command's first word `{word}` is passed to it as an "
                  "argument (error: invalid argument: {word}); drop it from the command, or set "
                  "`entrypoint:`/`command:` to run it").format(label=label, word=args[0].text),
                Severity.INFO, 0))
        return [_inv(shown, args, env, source, label, line)], notes
    # an image whose entrypoint is not known here: the command either names a program (the
    # image has no ENTRYPOINT) or is arguments that only llama-server takes
    if args and not args[0].text.startswith("-"):
        return argv_invocations(args, env, source, label, line)
    if looks_like_server_args(args):
        return [_inv(shown, args, env, source, label, line)], []
    return [], []


def argv_invocations(words: list[Word], env: Env, source: str, label: str, line: int) -> Found:
    """A complete argv (program first): llama-server behind wrappers, or a shell's ``-c``
    script read as bash."""
    if not words:
        return [], []
    local_env: Env = list(env)
    idx, _ = unwrap(words, local_env)
    if idx >= len(words):
        return [], []
    prog = words[idx]
    rest = words[idx + 1:]
    if basename(prog.text) in _SHELLS:
        script = _shell_script(rest)
        if script is None:
            return [], []
        parsed = parse_bash(script.text, first_line=script.line, environ=local_env)
        for inv in parsed.invocations:
            inv.env = local_env + inv.env
            inv.source, inv.label = source, label
        return parsed.invocations, parsed.notes
    if is_server_call(prog.text, rest):
        return [Invocation(prog.text, list(rest), prog.line, rest[-1].line if rest else prog.line,
                           env=local_env, source=source, label=label)], []
    return [], []


def _shell_script(args: list[Word]) -> Word | None:
    """The SCRIPT of ``sh [-opts] -c SCRIPT [name args...]`` (``-c`` may be clustered: ``-ec``)."""
    for i, w in enumerate(args):
        t = w.text
        if not t.startswith("-") or t == "-":
            return None
        if not t.startswith("--") and "c" in t[1:]:
            return args[i + 1] if i + 1 < len(args) else None
    return None


def _inv(program: str, args: list[Word], env: Env, source: str, label: str, line: int) -> Invocation:
    return Invocation(program, list(args), args[0].line if args else line, args[-1].line if args else line,
                      env=list(env), source=source, label=label)


def attach_note(n: Note) -> Note:
    """A note of the container, shown with its first invocation."""
    return n if n.invocation is not None else replace(n, invocation=0)


def merge_found(into: Found, more: Found) -> None:
    """Append ``more`` to ``into``, re-indexing the notes' invocations."""
    base = len(into[0])
    into[0].extend(more[0])
    for n in more[1]:
        into[1].append(n if n.invocation is None else
                       replace(n, invocation=n.invocation + base))
