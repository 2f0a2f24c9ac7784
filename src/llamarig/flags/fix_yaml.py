"""``check --fix`` for YAML inputs (compose, Kubernetes, Helm values, llama-swap): the file as
written, with each llama-server command's node rewritten in the form it had: a list stays a
list (block or flow, one item per word, every item a string: Kubernetes args are ``[]string``,
so ``on``, ``8080`` and ``true`` are quoted), a string stays a string (a ``|``/``>`` block keeps
its indicator, one flag per line; a one-line string is written double-quoted), words split
from a string keep shell quoting (compose and llama-swap split strings like a POSIX shell). The
comments explaining each change go above the node's key. A command the file does not hold in
one node (split between ``command`` and ``args`` at a flag, or built from a llama-swap macro)
is shown corrected in a comment at the end, the file otherwise as written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llamarig.flags.parsed import Invocation, Parsed
from llamarig.flags.readers import yaml_nodes as Y
from llamarig.flags.readers.located import ShellSyntaxError, split_words
from llamarig.i18n import _, localize

if TYPE_CHECKING:
    from yaml.nodes import Node

    from llamarig.flags.fix import FixedInvocation

_KEYS = frozenset({"command", "args", "cmd", "entrypoint", "extraArgs", "extra_args", "extraArguments",
                   "additionalArgs"})
_PLAIN_RE = re.compile(r"^[A-Za-z0-9_/.~$-][A-Za-z0-9_./:=,+@~${}-]*$")
#: plain scalars YAML 1.1 (PyYAML) or 1.2 read as something other than a string
_NOT_STRING_RE = re.compile(r"^(y|yes|n|no|true|false|on|off|null|~|[-+]?(\d[\d_]*)?\.?\d*(e[-+]?\d+)?|\.inf|\.nan)$",
                            re.I)
_SHELL_SAFE_RE = re.compile(r"^[A-Za-z0-9_@%+=:,./~${}\-]+$")


@dataclass
class _Slot:
    key: Node
    node: Node
    words: list[str]


def _slots(text: str) -> list[_Slot]:
    """Every ``command``/``args``/``cmd``/``entrypoint``/``extraArgs`` value of the file with the
    words it holds."""
    docs = Y.compose(text) or []
    src = Y.Source(text)
    out: list[_Slot] = []
    stack: list[Node] = list(docs)
    while stack:
        n = stack.pop()
        if Y.is_seq(n):
            stack.extend(n.value)
        elif Y.is_map(n):
            for kn, vn in n.value:
                if Y.is_scalar(kn) and str(kn.value) in _KEYS and (Y.is_seq(vn) or Y.text_of(vn)):
                    if Y.is_seq(vn):
                        words = [str(it.value) for it in vn.value if Y.is_scalar(it)]
                        if len(words) != len(vn.value):
                            continue
                    else:
                        try:
                            words = [w.text for w in split_words(Y.locate(vn, src))]
                        except ShellSyntaxError:
                            continue
                    out.append(_Slot(kn, vn, words))
                else:
                    stack.append(vn)
    return out


def _item(word: str, written: dict[str, str]) -> str:
    """A list item that YAML reads back as this exact string (as written, when it was there)."""
    if word in written:
        return written[word]
    if _PLAIN_RE.match(word) and not _NOT_STRING_RE.match(word) and ": " not in word and " #" not in word:
        return word
    return json.dumps(word, ensure_ascii=False)


def _shell(word: str) -> str:
    if word and _SHELL_SAFE_RE.match(word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def _span(slot: _Slot, text: str) -> tuple[int, int]:
    """Where the node is written: from its first character to its last (a block collection's or
    block scalar's end mark lies at the next token, after the newlines)."""
    node = slot.node
    start = node.start_mark.index
    if Y.is_seq(node) and node.value and not getattr(node, "flow_style", False):
        return start, node.value[-1].end_mark.index
    end = node.end_mark.index
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return start, end


def _render(slot: _Slot, text: str, prefix: list[str], groups: list[list[str]]) -> str:
    """The node's new text, in its own form."""
    node = slot.node
    words = prefix + [w for g in groups for w in g]
    if Y.is_seq(node):
        written = {str(it.value): text[it.start_mark.index:it.end_mark.index] for it in node.value}
        if getattr(node, "flow_style", False):
            return "[" + ", ".join(json.dumps(w, ensure_ascii=False) for w in words) + "]"
        col = node.start_mark.column
        # a block sequence written at the key's column (`args:\n- a`) or indented under it
        return ("\n" + " " * col).join(f"- {_item(w, written)}" for w in words)
    st = Y.style(node)
    lines = ([" ".join(_shell(w) for w in prefix)] if prefix else []) + \
        [" ".join(_shell(w) for w in g) for g in groups]
    if st in ("|", ">"):
        start = node.start_mark.index
        header = text[start:text.find("\n", start)].rstrip()
        body = text[text.find("\n", start) + 1:node.end_mark.index]
        m = re.search(r"^( +)\S", body, re.M)
        indent = m.group(1) if m else " " * (slot.key.start_mark.column + 2)
        return header + "\n" + "\n".join(indent + ln for ln in lines if ln)
    return json.dumps(" ".join(lines), ensure_ascii=False)


def fix_yaml(text: str, parsed: Parsed, fixed: list[FixedInvocation], lang: str = "en") -> str:
    """The YAML file with every invocation's node rewritten (see the module docstring); comments in
    ``lang``."""
    slots = _slots(text)
    edits: list[tuple[int, int, str]] = []  # (start, end, new text)
    comments_at: dict[int, list[str]] = {}  # offset of a key's line -> comment lines
    left: list[tuple[Invocation, FixedInvocation]] = []
    used: set[int] = set()
    for inv, fx in zip(parsed.invocations, fixed, strict=True):
        if inv.preset is not None:  # a --models-preset file's, not this file's
            continue
        if not fx.comments and [w for g in fx.groups for w in g] == [w.written or w.text for w in inv.args]:
            continue  # nothing to repair: the node stays as written
        slot = _find(slots, inv, used)
        if slot is None:
            left.append((inv, fx))
            continue
        used.add(id(slot.node))
        n_args = len(inv.args)
        prefix = slot.words[:len(slot.words) - n_args]
        edits.append((*_span(slot, text), _render(slot, text, prefix, fx.groups)))
        if fx.comments:
            line_start = text.rfind("\n", 0, slot.key.start_mark.index) + 1
            pad = " " * slot.key.start_mark.column
            comments_at.setdefault(line_start, []).extend(pad + c for c in fx.comments)
    for pos, lines in comments_at.items():
        edits.append((pos, pos, "\n".join(lines) + "\n"))
    out = text
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + new + out[end:]
    if left:
        out = out.rstrip("\n") + "\n"
        for inv, fx in left:
            out += "\n# llamarig: " + localize(_("{kind} {label} (line {line}): not held in one YAML node as written "
                                         "(built from a macro, a variable or a script): left as it is; the "
                                         "corrected command:").format(kind=parsed.kind, label=inv.label or "",
                                                                     line=inv.line), lang) + "\n"
            out += "".join(f"# {c.lstrip('# ')}\n" for c in fx.comments)
            program = [] if inv.program.startswith("(") else [inv.program]  # `(entrypoint of IMAGE)`
            out += "#   " + " ".join(_shell(w) for w in program + [x for g in fx.groups for x in g]) + "\n"
    return out if out.endswith("\n") else out + "\n"


def _find(slots: list[_Slot], inv: Invocation, used: set[int]) -> _Slot | None:
    """The node holding all of ``inv``'s arguments (they end its words) on the lines it spans."""
    args = [w.written or w.text for w in inv.args]  # `${MODEL}`: the node holds it as written
    if inv.orphans:
        return None
    for s in slots:
        if id(s.node) in used:
            continue
        first, last = s.node.start_mark.line + 1, s.node.end_mark.line + 1
        if args and not all(first <= w.line <= last for w in inv.args):
            continue
        if not args and not first <= inv.line <= last:
            continue
        if len(s.words) >= len(args) and s.words[len(s.words) - len(args):] == args:
            return s
    return None
