"""Reading a llama-swap config: ``models.<id>.cmd`` with ``models.<id>.env``, macros expanded
the way llama-swap expands them when it loads the file (https://github.com/mostlygeek/llama-swap,
config.example.yaml "macros" and internal/config/macros.go ``resolveConfigMacros``):

* comment lines (``#`` after blanks) are removed from ``cmd`` first (``StripComments``);
* macros are the global ``macros:`` plus the model's own ``macros:`` (which override globals of
  the same name), with ``MODEL_ID`` first; they are substituted in reverse declaration order, so
  a macro may use the macros declared *before* it, never one declared after it;
* ``${PORT}`` is then ``startPort`` (default 5800) plus the position of the model among the model
  ids (sorted) whose command uses ``${PORT}``;
* a ``${name}`` left over is a config error (``unknown macro``), and ``${env.NAME}`` is replaced
  from llama-swap's own environment before anything else (unknown here: it is kept as written,
  with a note);
* at start, ``SanitizeCommand`` (internal/config/commands.go) drops ``#`` lines again, turns a
  trailing backslash into a space and splits the rest with POSIX shlex, so newlines never end the
  command.

Every word keeps the line it is written on, also when it comes from a macro: a flag inside a
macro is reported on the macro's line.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, TypeAlias

from llamarig.flags.findings import Severity
from llamarig.flags.parsed import Invocation, Note, Word
from llamarig.flags.readers import yaml_nodes as Y
from llamarig.flags.readers.bash import docker_args
from llamarig.flags.readers.common import basename, is_server_call, unwrap
from llamarig.flags.readers.containers import Found
from llamarig.flags.readers.located import Located, LocatedBuilder, ShellSyntaxError, split_words
from llamarig.i18n import _

if TYPE_CHECKING:
    from yaml.nodes import Node

_REF_RE = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
_ENV_RE = re.compile(r"\$\{env\.([a-zA-Z_][a-zA-Z0-9_]*)\}")
_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
_RESERVED = ("PID", "PORT", "MODEL_ID")
#: an expanded command larger than this is cut (macros that use each other many times over can
#: grow without bound; llama-swap itself would build the whole string)
MAX_EXPANDED = 4 * 1024 * 1024

Macro = tuple[str, Located]


def _macro_list(node: Node | None, src: Y.Source, where: str, notes: list[Note]) -> list[Macro]:
    out: list[Macro] = []
    for name, kn, v in Y.items(node):
        if not Y.is_scalar(v):
            notes.append(Note("macro-invalid", Y.line(kn), where + _("macro `{name}` is not a scalar: llama-swap "
                                                                     "refuses to load the config").format(name=name),
                              Severity.ERROR))
            continue
        if not _NAME_RE.match(name) or len(name) >= 64 or name in _RESERVED:
            why = _("is reserved") if name in _RESERVED else _("is not a valid macro name (^[a-zA-Z0-9_-]+$, < 64)")
            notes.append(Note("macro-invalid", Y.line(kn), where + _(
                "macro name `{name}` {why}: llama-swap refuses to load the config (internal/config/macros.go "
                "validateMacro)").format(name=name, why=why), Severity.ERROR))
        value = Y.locate(v, src) if v.tag.endswith(":str") or Y.style(v) is not None else \
            Located.at(_scalar_text(v), Y.line(v))
        if f"${{{name}}}" in value.text:
            notes.append(Note("macro-invalid", Y.line(kn), where + _("macro `{name}` refers to itself: llama-swap "
                                                                     "refuses to load the config").format(name=name),
                              Severity.ERROR))
        out.append((name, value))
    return out


def _scalar_text(v: Node) -> str:
    """A typed macro value as Go's %v prints it (bools lower case, floats without a trailing .0)."""
    t = str(v.value)
    if v.tag.endswith(":bool"):
        return t.lower() if t.lower() in ("true", "false") else t
    if v.tag.endswith(":float"):
        try:
            r = repr(float(t.replace("_", "")))
        except ValueError:
            return t
        return r[:-2] if r.endswith(".0") else r
    if v.tag.endswith(":int"):
        try:
            return str(int(t.replace("_", ""), 0))
        except ValueError:
            return t
    return t


class _Macros:
    """The macros of one model as internal/config/macros.go mergeModelMacros orders them:
    MODEL_ID, the globals, then the model's own (one that has a global's name takes the global's
    place). Built from the global list without copying it, so many models with many global
    macros cost models + macros, not their product."""

    def __init__(self, model_id: str, line: int, glob: list[Macro], glob_index: dict[str, int],
                 local: list[Macro]) -> None:
        self.model_id = Located.at(model_id, line)
        self.glob = glob
        self.glob_index = glob_index
        self.override: dict[str, Located] = {}
        self.extra: list[Macro] = []
        self.extra_index: dict[str, int] = {}
        for name, value in local:
            if name in glob_index:
                self.override[name] = value
            elif name in self.extra_index:
                self.extra[self.extra_index[name]] = (name, value)
            else:
                self.extra_index[name] = len(self.extra)
                self.extra.append((name, value))
        self.size = 1 + len(glob) + len(self.extra)

    def position(self, name: str) -> int | None:
        if name == "MODEL_ID":
            return 0
        i = self.glob_index.get(name)
        if i is not None:
            return 1 + i
        j = self.extra_index.get(name)
        return None if j is None else 1 + len(self.glob) + j

    def value(self, pos: int) -> Located:
        if pos == 0:
            return self.model_id
        if pos <= len(self.glob):
            name, v = self.glob[pos - 1]
            return self.override.get(name, v)
        return self.extra[pos - 1 - len(self.glob)][1]

    def names(self) -> set[str]:
        return {"MODEL_ID", *self.glob_index, *self.extra_index}


class _Expander:
    def __init__(self, macros: _Macros) -> None:
        self.macros = macros
        self.too_big = False

    def expand(self, loc: Located, allowed: int, out: LocatedBuilder, depth: int = 0) -> None:
        """Substitute every ``${name}`` of a macro at a position < ``allowed`` (reverse-order
        substitution: a macro's own value sees only the macros declared before it)."""
        text = loc.text
        pos = 0
        for m in _REF_RE.finditer(text):
            j = self.macros.position(m.group(1))
            if j is None or j >= allowed:
                continue
            out.add(loc, pos, m.start())
            if out.n > MAX_EXPANDED or depth > 64:
                self.too_big = True
                return
            self.expand(self.macros.value(j), j, out, depth + 1)
            pos = m.end()
        out.add(loc, pos, len(text))


def _lines(loc: Located, sanitize: bool) -> Located:
    """StripComments (drop lines that start with ``#`` after blanks); with ``sanitize`` also
    SanitizeCommand's trailing backslash -> space."""
    out = LocatedBuilder()
    text = loc.text
    pos = 0
    first = True
    while pos <= len(text):
        nl = text.find("\n", pos)
        end = len(text) if nl < 0 else nl
        line = text[pos:end]
        trimmed = line.strip()
        if not trimmed.startswith("#"):
            if not first:
                out.add_text("\n", loc.line_at(pos))
            first = False
            if sanitize and trimmed.endswith("\\"):
                lead = len(line) - len(line.lstrip())
                body_end = pos + lead + len(trimmed) - 1
                out.add(loc, pos + lead, body_end)
                out.add_text(" ", loc.line_at(max(body_end - 1, pos)))
            else:
                out.add(loc, pos, end)
        if nl < 0:
            break
        pos = nl + 1
    return out.build()


def _substitute(loc: Located, name: str, value: str) -> Located:
    slug = f"${{{name}}}"
    if slug not in loc.text:
        return loc
    out = LocatedBuilder()
    pos = 0
    while True:
        k = loc.text.find(slug, pos)
        if k < 0:
            break
        out.add(loc, pos, k)
        out.add_text(value, loc.line_at(k))
        pos = k + len(slug)
    out.add(loc, pos)
    return out.build()


#: one model's command after its macros: (id, cmd node, command, env items, the macros in scope)
_Expanded: TypeAlias = "tuple[str, Node, Located, list[tuple[Located, int]], _Macros]"


def read_llama_swap(doc: Node, src: Y.Source) -> Found:
    """The llama-server commands of a llama-swap config (``models:`` is a mapping)."""
    notes: list[Note] = []
    models = Y.get(doc, "models")
    glob = _macro_list(Y.get(doc, "macros"), src, "", notes)
    glob_index = {name: i for i, (name, _) in enumerate(glob)}
    start_text = Y.text_of(Y.get(doc, "startPort"))
    start_port = int(start_text) if start_text and start_text.isdigit() else 5800
    expanded: list[_Expanded] = []
    for mid, kn, cfg in Y.items(models):
        cmd_node = Y.get(cfg, "cmd")
        if Y.is_scalar(cmd_node) and Y.text_of(cmd_node) is not None:
            assert cmd_node is not None
            macros = _Macros(str(mid), Y.line(kn), glob, glob_index,
                             _macro_list(Y.get(cfg, "macros"), src, f"models.{mid}: ", notes))
            expanded.append(_expand_model(str(mid), cfg, cmd_node, macros, src, notes))
    # ${PORT}: one port per model that uses it, in sorted model-id order, from startPort
    port_of = {mid: start_port + i for i, mid in enumerate(
        sorted(mid for mid, _, cmd, _, _ in expanded if "${PORT}" in cmd.text))}
    invocations: list[Invocation] = []
    for e in expanded:
        inv = _model_invocation(e, port_of.get(e[0]), len(invocations), notes)
        if inv is not None:
            invocations.append(inv)
    return invocations, notes


def _expand_model(mid: str, cfg: Node, cmd_node: Node, macros: _Macros, src: Y.Source, notes: list[Note]
                  ) -> _Expanded:
    """A model's ``cmd`` and ``env`` items with its macros expanded."""
    ex = _Expander(macros)
    b = LocatedBuilder()
    ex.expand(_lines(Y.locate(cmd_node, src), sanitize=False), macros.size, b)
    cmd = b.build()
    if ex.too_big:
        notes.append(Note("macro-invalid", Y.line(cmd_node), f"models.{mid}.cmd: " + _(
            "the macros expand to more than {n} characters; checked up to there").format(n=MAX_EXPANDED),
            Severity.WARNING))
    env_items: list[tuple[Located, int]] = []
    env_node = Y.get(cfg, "env")
    for it in (env_node.value if Y.is_seq(env_node) else []):  # type: ignore[union-attr]
        if Y.is_scalar(it):
            eb = LocatedBuilder()
            ex.expand(Y.locate(it, src), macros.size, eb)
            env_items.append((eb.build(), Y.line(it)))
    return mid, cmd_node, cmd, env_items, macros


def _model_invocation(e: _Expanded, port: int | None, k: int, notes: list[Note]) -> Invocation | None:
    """A model's command split into words (``${PORT}`` given its port), as an invocation."""
    mid, _node, cmd, env_items, macros = e
    try:
        words = split_words(_lines(cmd, sanitize=True))
    except ShellSyntaxError as err:
        notes.append(Note("shell-syntax", cmd.line_at(err.offset), f"models.{mid}.cmd: {err}", Severity.ERROR))
        return None
    if port is not None:
        # `${PORT}` has no blanks or quotes: substituting it in the words is the same as in
        # the text, and --fix can write `${PORT}` back
        words = [Word(w.text.replace("${PORT}", str(port)), w.line, written=w.text) if "${PORT}" in w.text else w
                 for w in words]
        env_items = [(_substitute(x, "PORT", str(port)), ln) for x, ln in env_items]
        cmd = _substitute(cmd, "PORT", str(port))
    model_notes = _leftovers(mid, cmd, macros)
    env = [(n, v, ln) for x, ln in env_items for n, _eq, v in [x.text.partition("=")]]
    inv = _server(words, env, mid)
    if inv is not None:
        notes.extend(replace(n, invocation=k) for n in model_notes)
    return inv


def _leftovers(mid: str, cmd: Located, macros: _Macros) -> list[Note]:
    """Notes for what is left unexpanded: unknown macros (llama-swap refuses the config) and
    ``${env.NAME}`` (llama-swap's environment, unknown here)."""
    out: list[Note] = []
    names = macros.names()
    seen: set[str] = set()
    for m in _REF_RE.finditer(cmd.text):
        name = m.group(1)
        if name in seen:
            continue
        seen.add(name)
        why = (_(" (a macro may only use macros declared before it)") if name in names else "")
        out.append(Note("unknown-macro", cmd.line_at(m.start()),
                        _("llama-swap refuses to load this config: unknown macro '{macro}' found in {where}{why} "
                          "(internal/config/macros.go validateMacroUses)").format(
                            macro="${" + name + "}", where=f"{mid}.cmd", why=why), Severity.ERROR))
    for m in _ENV_RE.finditer(cmd.text):
        name = m.group(1)
        if f"env.{name}" in seen:
            continue
        seen.add(f"env.{name}")
        out.append(Note("unknown-variable", cmd.line_at(m.start()),
                        _("`{ref}` is replaced by llama-swap with its own environment variable {name} when it "
                          "loads the config (it refuses to load when {name} is not set); its value is not known "
                          "here, checked as written").format(ref="${env." + name + "}", name=name), Severity.INFO))
    return out


def _server(words: list[Word], env: list[tuple[str, str, int]], mid: str) -> Invocation | None:
    idx, _ = unwrap(words, env)
    if idx >= len(words):
        return None
    prog = words[idx].text
    if basename(prog) in ("docker", "podman"):
        d = docker_args(words, idx)
        if d is None:
            return None
        start, denv = d
        args = words[start:]
        return Invocation(f"{prog} run … (llama.cpp image)", args, words[idx].line,
                          words[-1].line, env=env + denv, source="llama-swap", label=mid)
    if is_server_call(prog, words[idx + 1:]):
        return Invocation(prog, words[idx + 1:], words[idx].line, words[-1].line, env=env,
                          source="llama-swap", label=mid)
    return None
