"""Shell-accurate reading of what users paste: which argv llama-server really receives.

One reader per format, each in its own module:

* ``bash``: a command line or a bash script (quoting, continuations, comments, wrappers,
  ``docker run``..., function calls, ``source``d files next to it);
* ``systemd``: a unit's ``ExecStart=``, ``Environment=``/``EnvironmentFile=`` and drop-ins;
* ``ini``: llama-server's own ``--models-preset`` file;
* ``yaml``: a YAML file, document by document: ``llama_swap`` (``models.*.cmd``, macros
  expanded), ``compose`` (``services.*.entrypoint``/``command``), ``kubernetes`` (workload
  containers' ``command``/``args``, and Helm values files); lists are argv lists, strings shell
  text (``located``, ``yaml_nodes``: every word keeps its line).

``parse_text`` picks the reader (or takes the one asked for); ``parse_argv`` wraps an argv given
directly. Every reader returns a ``Parsed`` (llamarig.flags.parsed). Everything here is pure text
processing: no command is run. Garbage in gives notes, never an exception.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from llamarig.flags.parsed import Invocation, Note, Parsed, ShellCommand, Word
from llamarig.flags.readers.bash import parse_bash
from llamarig.flags.readers.common import is_server_program
from llamarig.flags.readers.ini import looks_like_preset, parse_preset
from llamarig.flags.readers.systemd import parse_systemd
from llamarig.flags.readers.yaml import parse_yaml
from llamarig.i18n import _

__all__ = [
    "Invocation", "Note", "Parsed", "ShellCommand", "Word",
    "detect_kind", "is_server_program", "parse_argv", "parse_text",
]


_YAML_RE = re.compile(
    r"^(services|models|macros)\s*:\s*$|^(apiVersion|kind)\s*:\s*\S"
    r"|^\s*(-\s+)?(args|extraArgs|command|cmd|entrypoint|containers)\s*:", re.M)


def detect_kind(text: str) -> str:
    """The format of a pasted text: systemd, yaml, ini (a --models-preset file) or shell. A text that looks like YAML but is
    not (or holds nothing YAML-shaped) is read as shell by parse_text."""
    if re.search(r"^\s*ExecStart\s*=", text, re.M) or re.search(r"^\s*\[Service\]\s*$", text, re.M):
        return "systemd"
    if _YAML_RE.search(text):
        return "yaml"
    if looks_like_preset(text):
        return "ini"
    return "shell"


def parse_text(text: str, kind: str | None = None, origin: Path | None = None) -> Parsed:
    """Read a pasted command line, bash script, systemd unit, docker-compose or llama-swap file.
    ``kind`` forces a format (shell, systemd, yaml, ini). ``origin``: the file the text was read from;
    the files next to it that the format reads too are then read (a script's ``source``d files,
    a unit's drop-ins and EnvironmentFile=, a compose file's ``.env``)."""
    text = text.replace("\r\n", "\n").replace("\x00", "")
    kind = kind or detect_kind(text)
    if kind == "ini":
        return parse_preset(text)
    parsed: Parsed | None = None
    if kind == "systemd":
        parsed = parse_systemd(text, origin)
    elif kind == "yaml":
        parsed = parse_yaml(text, origin)
    if parsed is None:
        parsed = parse_bash(text, origin=origin)
    if origin is not None:
        _add_presets(parsed, origin)
    return parsed


#: preset files read per input, and their size
_MAX_PRESET_FILES = 16
_MAX_PRESET_BYTES = 1 << 20


def _add_presets(parsed: Parsed, origin: Path) -> None:
    """The presets of a ``--models-preset FILE`` the input's commands name, when FILE is next to
    the input (a relative name is taken from its directory): each preset an invocation more,
    labelled with the file, its lines those of the file."""
    seen: set[Path] = set()
    for inv in list(parsed.invocations):
        words = [w.text for w in inv.args]
        for i, w in enumerate(words):
            name = words[i + 1] if w == "--models-preset" and i + 1 < len(words) else (
                w.partition("=")[2] if w.startswith("--models-preset=") else "")
            if not name or "$" in name or len(seen) >= _MAX_PRESET_FILES:
                continue
            path = Path(name).expanduser()
            if not path.is_absolute():
                path = origin.parent / path
            try:
                if path in seen or not path.is_file():
                    continue
                with open(path, "rb") as f:
                    text = f.read(_MAX_PRESET_BYTES).decode("utf-8", errors="replace")
            except OSError:
                continue
            seen.add(path)
            sub = parse_preset(text.replace("\r\n", "\n"))
            base = len(parsed.invocations)
            for p in sub.invocations:
                p.label = _("{label} in {file} (--models-preset on line {line})").format(
                    label=p.label, file=path.name, line=inv.line)
                parsed.invocations.append(p)
            parsed.notes.extend(replace(n, message=_("{file} line {line}: {message}").format(
                file=path.name, line=n.line, message=n.message),
                invocation=None if n.invocation is None else n.invocation + base) for n in sub.notes)


def parse_argv(argv: list[str]) -> Parsed:
    """An argv given directly (program first)."""
    words = [Word(a, 1) for a in argv]
    inv = Invocation(argv[0] if argv else "llama-server", words[1:], 1, 1, source="argv")
    return Parsed("argv", [inv], [], [], [])
