"""Reading a docker-compose file: ``services.<name>.command`` (a string, split like a shell
would, or a list) with ``environment:`` (a mapping or a list). A service counts when its command
starts llama-server, or when its image is a llama.cpp one (the command is then the arguments of
the image's entrypoint).
"""

from __future__ import annotations

import shlex
from typing import Any

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Parsed
from llamarig.flags.readers.common import find_line, is_server_call, words_on_lines


def read_compose(data: dict[str, Any], lines: list[str]) -> Parsed:
    """The llama-server commands of a loaded compose file (``data["services"]`` is a dict)."""
    invocations: list[Invocation] = []
    notes: list[Note] = []
    for name, svc in data["services"].items():
        if not isinstance(svc, dict) or "command" not in svc:
            continue
        image = str(svc.get("image", ""))
        key_line = find_line(lines, f"{name}:")
        cmd_line = find_line(lines, "command:", key_line - 1)
        cmd = svc["command"]
        try:
            texts = [str(x) for x in cmd] if isinstance(cmd, list) else shlex.split(str(cmd))
        except ValueError:
            notes.append(Note("shell-syntax", cmd_line, f"services.{name}.command: unbalanced quotes", Severity.ERROR))
            continue
        words = words_on_lines(texts, lines, cmd_line)
        env = []
        envs = svc.get("environment") or []
        items = [f"{k}={v}" for k, v in envs.items()] if isinstance(envs, dict) else [str(x) for x in envs]
        for item in items:
            n, _, v = item.partition("=")
            env.append((n, "" if v == "None" else v, find_line(lines, n, key_line - 1)))
        if words and is_server_call(words[0].text, words[1:]):
            prog, args = words[0].text, words[1:]
        elif "llama.cpp" in image or "llama-cpp" in image or (words and words[0].text.startswith("-")):
            prog, args = f"(entrypoint of {image or 'the image'})", words
        else:
            continue
        invocations.append(Invocation(prog, args, cmd_line, words[-1].line if words else cmd_line,
                                      env=env, source="compose", label=str(name)))
    return Parsed("compose", invocations, notes, [], lines)
