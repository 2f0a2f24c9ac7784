"""Reading a docker-compose file: ``services.<name>`` with ``entrypoint`` and ``command`` (each a
list, one item one argv word, or a string, split like a shell would: compose-go splits it with
go-shellwords) and ``environment:`` (a mapping or a list). The container runs entrypoint +
command, as docker does: ``entrypoint`` (even ``''``) replaces the image's ENTRYPOINT and clears
its CMD (https://docs.docker.com/reference/compose-file/services/#entrypoint). A service counts
when that starts llama-server, or when its image is a llama.cpp one (llamarig.flags.readers.containers).
YAML merge keys (``<<: *common``) are resolved, so an image or command set in an anchor counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Note, Word
from llamarig.flags.readers import yaml_nodes as Y
from llamarig.flags.readers.containers import Env, Found, container_invocations
from llamarig.flags.readers.kubernetes import _merge
from llamarig.flags.readers.located import ShellSyntaxError, split_words

if TYPE_CHECKING:
    from yaml.nodes import Node


def read_compose(doc: Node, src: Y.Source) -> Found:
    """The llama-server commands of a compose document (``services:`` is a mapping)."""
    found: Found = ([], [])
    for name, kn, svc in Y.items(Y.get(doc, "services")):
        if not Y.is_map(svc):
            continue
        notes: list[Note] = []
        label = str(name)
        entry_node = Y.get(svc, "entrypoint")
        entry = _words(entry_node, src, f"services.{name}.entrypoint", notes)
        if entry is None and Y.text_of(entry_node) is not None:
            entry = []  # `entrypoint: ''`: no entrypoint at all (null leaves the image's)
        cmd = _words(Y.get(svc, "command"), src, f"services.{name}.command", notes)
        if entry is None and cmd is None:
            continue
        invs, more = container_invocations(entry, cmd, Y.text_of(Y.get(svc, "image")) or "",
                                           _environment(svc), "compose", label, Y.line(kn))
        _merge(found, (invs, notes + more) if invs else ([], [n for n in notes if n.kind == "shell-syntax"]))
    return found


def _words(node: Node | None, src: Y.Source, where: str, notes: list[Note]) -> list[Word] | None:
    if node is None:
        return None
    if Y.is_seq(node):
        return [Word(str(it.value), Y.locate(it, src).line_at(0)) for it in node.value if Y.is_scalar(it)]
    text = Y.text_of(node)
    if text is None or not text.strip():
        return None
    try:
        return split_words(Y.locate(node, src))
    except ShellSyntaxError as e:
        notes.append(Note("shell-syntax", Y.line(node), f"{where}: {e}", Severity.ERROR))
        return None


def _environment(svc: Node) -> Env:
    env: Env = []
    envs = Y.get(svc, "environment")
    for k, kn, value in Y.items(envs):
        env.append((k, Y.text_of(value) or "", Y.line(kn)))
    for it in Y.seq(envs):
        if Y.is_scalar(it):
            n, _, v = str(it.value).partition("=")
            env.append((n, v, Y.line(it)))
    return env

