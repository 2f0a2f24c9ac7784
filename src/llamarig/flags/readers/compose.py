"""Reading a docker-compose file: ``services.<name>`` with ``entrypoint`` and ``command`` (each a
list, one item one argv word, or a string, split like a shell would: compose-go splits it with
go-shellwords) and ``environment:`` (a mapping or a list). The container runs entrypoint +
command, as docker does: ``entrypoint`` (even ``''``) replaces the image's ENTRYPOINT and clears
its CMD (https://docs.docker.com/reference/compose-file/services/#entrypoint). A service counts
when that starts llama-server, or when its image is a llama.cpp one (llamarig.flags.readers.containers).
YAML merge keys (``<<: *common``) are resolved, so an image or command set in an anchor counts.
Values are interpolated first (``${VAR:-default}`` ..., from the ``.env`` next to the file:
llamarig.flags.readers.interpolate), as compose does before it splits a string command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Note, Word
from llamarig.flags.readers import yaml_nodes as Y
from llamarig.flags.readers.containers import (
    Env,
    Found,
    attach_note,
    container_invocations,
    merge_found,
)
from llamarig.flags.readers.interpolate import Interpolation, read_env_file
from llamarig.flags.readers.located import ShellSyntaxError, split_words
from llamarig.i18n import _

if TYPE_CHECKING:
    from yaml.nodes import Node


def read_compose(doc: Node, src: Y.Source, dotenv: dict[str, str] | None = None) -> Found:
    """The llama-server commands of a compose document (``services:`` is a mapping).
    ``dotenv``: the variables of the ``.env`` next to the file (None: no file known)."""
    found: Found = ([], [])
    for name, kn, svc in Y.items(Y.get(doc, "services")):
        if not Y.is_map(svc):
            continue
        notes: list[Note] = []
        label = str(name)
        ip = Interpolation(dict(dotenv or {}))
        entry_node = Y.get(svc, "entrypoint")
        entry = _words(entry_node, src, f"services.{name}.entrypoint", notes, ip)
        if entry is None and Y.text_of(entry_node) is not None:
            entry = []  # `entrypoint: ''`: no entrypoint at all (null leaves the image's)
        cmd = _words(Y.get(svc, "command"), src, f"services.{name}.command", notes, ip)
        if entry is None and cmd is None:
            continue
        image_node = Y.get(svc, "image")
        image = ip.text(Y.text_of(image_node) or "", Y.line(image_node)) if image_node is not None else ""
        env = _environment(svc, ip)
        notes += _missing_notes(ip, label, dotenv is not None)
        invs, more = container_invocations(entry, cmd, image, env, "compose", label, Y.line(kn))
        merge_found(found, (invs, [attach_note(n) for n in notes] + more) if invs else
               ([], [n for n in notes if n.kind == "shell-syntax"]))
    return found


_SPEC_URL = "https://github.com/compose-spec/compose-spec/blob/main/spec.md#interpolation"


def _missing_notes(ip: Interpolation, label: str, has_dotenv: bool) -> list[Note]:
    """One note per variable the service's values needed and ``.env`` does not set."""
    out: list[Note] = []
    seen: set[str] = set()
    spec = _("compose spec, Interpolation: {url}").format(url=_SPEC_URL)
    where = _(".env next to the compose file") if has_dotenv else _("a .env file next to the compose file (none found)")
    for m in ip.missing:
        if m.name in seen:
            continue
        seen.add(m.name)
        if m.invalid:
            out.append(Note("shell-syntax", m.line, _("services.{label}: `{name}` is not an interpolation docker "
                            "compose accepts (\"invalid interpolation format\"); {spec}").format(
                                label=label, name=m.name, spec=spec), Severity.ERROR,
                            fix=_("write `${{NAME}}` or `${{NAME:-default}}`, and `$$` for a literal `$`").format()))
        elif m.required is not None:
            out.append(Note("unknown-variable", m.line, _("services.{label}: `${{{name}:?...}}` is not set in "
                            "{where}: docker compose refuses the file (\"required variable {name} is missing a "
                            "value: {required}\") unless the shell that runs it sets {name}; {spec}").format(
                                label=label, name=m.name, where=where, required=m.required, spec=spec),
                            Severity.ERROR))
        else:
            out.append(Note("unknown-variable", m.line, _("services.{label}: `${name}` has no default and is not "
                            "set in {where}: docker compose substitutes an empty string ('The \"{name}\" "
                            "variable is not set. Defaulting to a blank string.') unless the shell that runs "
                            "it sets {name}; checked as empty; {spec}").format(
                                label=label, name=m.name, where=where, spec=spec), Severity.WARNING))
    return out


def _words(node: Node | None, src: Y.Source, where: str, notes: list[Note], ip: Interpolation) -> list[Word] | None:
    if node is None:
        return None
    if Y.is_seq(node):
        out = []
        for it in node.value:
            if Y.is_scalar(it):
                raw = str(it.value)
                value = ip.text(raw, Y.line(it))
                out.append(Word(value, Y.locate(it, src).line_at(0), written=raw if value != raw else ""))
        return out
    text = Y.text_of(node)
    if text is None or not text.strip():
        return None
    try:
        return split_words(ip.located(Y.locate(node, src)))
    except ShellSyntaxError as e:
        notes.append(Note("shell-syntax", Y.line(node), f"{where}: " + str(e), Severity.ERROR))
        return None


def _environment(svc: Node, ip: Interpolation) -> Env:
    env: Env = []
    envs = Y.get(svc, "environment")
    for k, kn, value in Y.items(envs):
        env.append((k, ip.text(Y.text_of(value) or "", Y.line(kn)), Y.line(kn)))
    for it in Y.seq(envs):
        if Y.is_scalar(it):
            n, _, v = str(it.value).partition("=")
            env.append((n, ip.text(v, Y.line(it)), Y.line(it)))
    return env


def read_dotenv(origin: Path | None) -> dict[str, str] | None:
    """The ``.env`` next to a compose file (docker compose reads it for interpolation), or None."""
    if origin is None:
        return None
    p = origin.parent / ".env"
    try:
        if not p.is_file():
            return None
        with open(p, "rb") as f:
            text = f.read(1 << 20).decode("utf-8", errors="replace").replace("\r\n", "\n")
    except OSError:
        return None
    return {n: v for n, v, _ in read_env_file(text)}

