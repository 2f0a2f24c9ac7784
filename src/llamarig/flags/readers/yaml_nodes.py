"""The YAML node graph of a file, with the line every value is written on.

PyYAML's composer (libyaml's when available) gives each node its start and end offset in the
text; a scalar's value is mapped back to the lines it spans (exactly for ``|`` block scalars,
word by word for folded, plain and quoted ones), so a flag read from a YAML list item or from a
multi-line ``cmd: >`` string is reported on its own line. Merge keys (``<<: *anchor``) are
resolved as YAML 1.1 defines them. Values are kept as written (``8080`` stays the text
``8080``): the tools that read these files (Kubernetes, docker compose, llama-swap) take them
as strings.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from typing import TYPE_CHECKING

from llamarig.flags.readers.located import Located

if TYPE_CHECKING:
    from yaml.nodes import Node

_TOKEN_RE = re.compile(r"\S+")


class Source:
    """The text of a YAML file and the offset each of its lines starts at."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(self, offset: int) -> int:
        """1-based line of a character offset."""
        return bisect_right(self.line_starts, offset)

    def lines(self) -> list[str]:
        return self.text.split("\n")


def compose(text: str) -> list[Node] | None:
    """Every document's root node, or None when the text is not YAML."""
    import yaml  # lazy: PyYAML costs ~25 ms of start-up, only YAML input needs it

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return [d for d in yaml.compose_all(text, Loader=loader) if d is not None]
    except yaml.YAMLError:
        return None


def kind(node: Node | None) -> str | None:
    """``mapping``, ``sequence``, ``scalar`` (PyYAML's node ids), None for no node."""
    return None if node is None else getattr(node, "id", None)


def style(node: Node) -> str | None:
    """A scalar's style (``|``, ``>``, ``'``, ``"``; None for plain), None for collections."""
    return getattr(node, "style", None) or None  # libyaml says "" for plain, PyYAML None


def is_map(node: Node | None) -> bool:
    return kind(node) == "mapping"


def is_seq(node: Node | None) -> bool:
    return kind(node) == "sequence"


def is_scalar(node: Node | None) -> bool:
    return kind(node) == "scalar"


def items(node: Node | None) -> Iterator[tuple[str, Node, Node]]:
    """(key text, key node, value node) of a mapping (nothing for anything else), merge keys
    (``<<``) resolved: explicit keys win over merged ones, as in the YAML 1.1 merge-key type."""
    if not is_map(node):
        return
    assert node is not None
    seen: set[str] = set()
    merged: list[Node] = []
    for k, v in node.value:
        if is_scalar(k) and k.value == "<<" and k.tag.endswith(":merge"):
            merged.extend(v.value if is_seq(v) else [v])
            continue
        key = str(k.value) if is_scalar(k) else ""
        seen.add(key)
        yield key, k, v
    for m in merged:
        for key, k, v in items(m):
            if key not in seen:
                seen.add(key)
                yield key, k, v


def seq(node: Node | None) -> list[Node]:
    """The items of a sequence (nothing for anything else)."""
    return list(node.value) if node is not None and is_seq(node) else []


def get(node: Node | None, key: str) -> Node | None:
    for k, _, v in items(node):
        if k == key:
            return v
    return None


def text_of(node: Node | None) -> str | None:
    """A scalar's text as written (None for null and for collections)."""
    if not is_scalar(node):
        return None
    assert node is not None
    if node.tag.endswith(":null") and style(node) is None:
        return None
    return str(node.value)


def locate(node: Node, src: Source) -> Located:
    """A scalar's value with the input line of each of its characters."""
    value = str(node.value)
    first = node.start_mark.line + 1
    st = style(node)
    if st in ("|", ">"):
        first += 1  # the content starts on the line after the indicator
    if node.start_mark.line == node.end_mark.line or not value:
        return Located.at(value, node.start_mark.line + 1)
    if st == "|":
        # literal block: value line k is input line first + k (blank lines included)
        starts, lines = [0], [first]
        for k, m in enumerate(re.finditer("\n", value)):
            if m.end() < len(value):
                starts.append(m.end())
                lines.append(first + k + 1)
        return Located(value, starts, lines)
    # folded, plain or quoted: find each word of the value in the input, in order, within a
    # bounded window after the previous one (escapes and folding change the text in between)
    text = src.text
    pos, end = node.start_mark.index, node.end_mark.index
    starts, lines = [], []
    for m in _TOKEN_RE.finditer(value):
        tok = m.group(0)
        j = text.find(tok, pos, min(end, pos + len(tok) + 4096))
        if j >= 0:
            pos = j + len(tok)
            ln = src.line_of(j)
        else:
            ln = lines[-1] if lines else node.start_mark.line + 1
        if not lines or lines[-1] != ln:
            starts.append(m.start() if starts else 0)
            lines.append(ln)
    return Located(value, starts or [0], lines or [node.start_mark.line + 1])


def line(node: Node) -> int:
    return int(node.start_mark.line) + 1
