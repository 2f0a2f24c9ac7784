"""The final llama-server argv of ``render`` / ``launch``: path-valued options made absolute,
llamarig options written after the model caught, and ``llamarig check``'s rules run on it.

Path-valued options are found in the flag schema of the build (value hints ``FNAME``, ``FILE``,
``PATH``, ``DIR``, ``JINJA_TEMPLATE_FILE``, ``FNAME:SCALE,...``; common/arg.cpp prints them in
``--help``), minus ``--hf-file`` (a file inside a Hugging Face repository, not a local path).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llamarig.catalogue.models import is_catalogue_id
from llamarig.errors import one_line
from llamarig.flags.argv import Arg, Command
from llamarig.flags.model import model_loader
from llamarig.flags.readers import parse_argv
from llamarig.flags.rules import Context, lint
from llamarig.i18n import _
from llamarig.render.common import is_flag

if TYPE_CHECKING:
    from llamarig.flags.findings import Finding
    from llamarig.flags.schema import Schema

#: value hints of options whose value is a local file or directory (llama-server --help)
PATH_HINTS = frozenset({"FNAME", "FILE", "PATH", "DIR", "JINJA_TEMPLATE_FILE", "FNAME:SCALE,..."})
#: FILE-hinted options that are not local paths
NOT_LOCAL = frozenset({"--hf-file"})
#: path options whose value is a directory (the rest name files)
DIR_OPTIONS = frozenset({"--path", "--slot-save-path", "--media-path", "--models-dir", "--log-prompts-dir",
                         "--video-ffmpeg-dir"})
#: path options llama-server writes to (a container mounts them read-write)
WRITTEN_OPTIONS = frozenset({"--log-file", "--slot-save-path", "--lookup-cache-dynamic", "--log-prompts-dir"})
#: spellings used when the schema has no value hint for an option (an old cached schema)
FALLBACK_PATH_SPELLINGS = frozenset({
    "-m", "--model", "-mm", "--mmproj", "-md", "--model-draft", "--spec-draft-model", "--chat-template-file",
    "--api-key-file", "--ssl-key-file", "--ssl-cert-file", "--lora", "--grammar-file", "--log-file", "-lcs",
    "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic", "--slot-save-path", "--control-vector"})
#: llamarig options that are never meant for llama-server, even if a build had the spelling
ALWAYS_LLAMARIG = frozenset({"-o", "--out", "--output", "--ram", "--gpu", "--name", "--format", "-f"})


@dataclass(frozen=True)
class PathOption:
    name: str  # canonical spelling
    is_dir: bool
    listed: bool  # comma-separated values (--lora a,b)
    scaled: bool  # FNAME:SCALE items (--lora-scaled)

    @property
    def written(self) -> bool:
        return self.name in WRITTEN_OPTIONS


def path_option(token: str, schema: Any) -> PathOption | None:
    """The path option a flag token names, or None."""
    key = token.split("=", 1)[0]
    hit = schema.lookup(key) if schema is not None else None
    if hit is None:
        if key in FALLBACK_PATH_SPELLINGS:
            return PathOption(key, key == "--slot-save-path", key in ("--lora", "--control-vector"), False)
        return None
    opt, positive = hit
    if not positive or not opt.takes_value or opt.name in NOT_LOCAL:
        return None
    hint = opt.value_hint or ""
    if hint not in PATH_HINTS and not set(opt.all_spellings) & FALLBACK_PATH_SPELLINGS:
        return None
    scaled = ":SCALE" in hint
    listed = scaled or "comma-separated" in opt.help
    return PathOption(opt.name, hint == "DIR" or opt.name in DIR_OPTIONS, listed, scaled)


def map_paths(args: Command | Sequence[str], schema: Any, fn: Callable[[PathOption, str], str]) -> list[str]:
    """``args`` (a Command, not parsed again, or server args) with every local path value ``v``
    of a path option replaced by ``fn(option, v)`` (each item of a comma-separated list; the
    FNAME of FNAME:SCALE items)."""
    return map_command(Command.of(args, schema, program=False), fn, schema).server_args()


def map_command(cmd: Command, fn: Callable[[PathOption, str], str], schema: Any) -> Command:
    """:func:`map_paths` on a parsed command: the same command with its path values mapped
    (the path options as ``schema`` has them; None: the fallback spellings alone)."""
    return Command(cmd.program, tuple(_map_arg(a, schema, fn) for a in cmd.args), cmd.schema)


def _map_arg(a: Arg, schema: Any, fn: Callable[[PathOption, str], str]) -> Arg:
    g = a.words
    po = path_option(g[0], schema) if is_flag(g[0]) and "=" not in g[0] else None
    if po is None or len(g) < 2:
        return a
    return replace(a, values=(_map_value(po, g[1], fn), *g[2:]))


def _map_value(po: PathOption, value: str, fn: Callable[[PathOption, str], str]) -> str:
    items = value.split(",") if po.listed else [value]
    mapped = []
    for item in items:
        path, scale = item, ""
        if po.scaled and ":" in item:
            p, s = item.rsplit(":", 1)
            try:
                float(s)
                path, scale = p, ":" + s
            except ValueError:
                pass
        mapped.append((fn(po, path) if path and path != "-" else path) + scale)
    return ",".join(mapped)


def absolutize(args: Command | Sequence[str], schema: Any, bases: Sequence[Path]) -> tuple[list[str], list[str]]:
    """(args with every relative path value absolute, the spellings that changed):
    :func:`absolutize_command` on server args."""
    cmd, changed = absolutize_command(Command.of(args, schema, program=False), bases, schema)
    return cmd.server_args(), changed


def absolutize_command(cmd: Command, bases: Sequence[Path], schema: Any) -> tuple[Command, list[str]]:
    """(the command with every relative path value absolute, the spellings that changed).

    ``~`` is expanded (systemd and llama-server do not). A relative path is joined to the first of
    ``bases`` where it exists, else to ``bases[0]`` (a file the server will create). A model that
    is no file but a catalogue id (``qwen3.6-27b:iq4_nl``, which render plans for) is kept."""
    changed: list[str] = []

    def fix(po: PathOption, p: str) -> str:
        if placeholder(p):  # `.../x.jinja`, `/path/to/model.gguf`: for the user to fill in, not a path
            return p
        q = os.path.expanduser(p)
        if not os.path.isabs(q):
            base = next((b for b in bases if (b / q).exists()), None)
            if base is None and po.name in ("--model", "-m") and catalogue_id(q):
                return p
            q = os.path.normpath(os.path.join(os.path.abspath(base or bases[0]), q))
        if q != p and po.name not in changed:
            changed.append(po.name)
        return q

    return map_command(cmd, fix, schema), changed


#: path components that stand for a path the writer left out (`.../chat.jinja`, `…/x`)
_ELIDED = ("...", "…")


def placeholder(path: str) -> bool:
    """Whether ``path`` is a placeholder someone left to fill in, not a path: a component ``...``
    or ``…`` (report 004's ``.../chat_template_fixed_patched.jinja``), ``/path/to/``, ``<...>``."""
    parts = path.replace("\\", "/").split("/")
    return any(p in _ELIDED for p in parts) or "/path/to/" in f"/{path}" or (path.startswith("<") and path.endswith(">"))


def placeholders(args: Command | Sequence[str], schema: Any) -> list[str]:
    """The path values of ``args`` that are placeholders (:func:`placeholder`), as written."""
    found: list[str] = []

    def grab(_po: PathOption, p: str) -> str:
        if placeholder(p) and p not in found:
            found.append(p)
        return p

    map_paths(args, schema, grab)
    return found


def catalogue_id(text: str) -> bool:
    """Whether ``text`` names a catalogue model (never raises: without the catalogue, a path is a path)."""
    try:
        return bool(is_catalogue_id(text))
    except Exception:  # the catalogue is the planner's: without it, a path is a path
        return False


def working_directory(args: Command | Sequence[str], schema: Any) -> str:
    """A working directory for a service: the model's directory (the service user must be able to
    read it anyway), else the current one."""
    found: list[str] = []

    def grab(po: PathOption, p: str) -> str:
        if po.name == "--model" or po.name == "-m":
            found.append(p)
        return p

    map_paths(args, schema, grab)
    if found and os.path.isabs(found[-1]):
        return os.path.dirname(found[-1]) or "/"
    return os.getcwd()


def misplaced_options(args: Command | Sequence[str], schema: Any, own: Iterable[str]) -> list[str]:
    """llamarig options (``own`` spellings) found where llama-server flags belong: spellings that
    this llama-server does not know, and those that are always llamarig's (-o, --ram, --gpu, ...)."""
    own_set = set(own)
    bad: list[str] = []
    for g in Command.of(args, schema, program=False).groups():
        key = g[0].split("=", 1)[0]
        if not is_flag(key) or key not in own_set:
            continue
        known = schema is not None and schema.lookup(key) is not None
        if (not known or key in ALWAYS_LLAMARIG) and key not in bad:
            bad.append(key)
    return bad


def check_argv(argv: Sequence[str], schema: Schema, *, cores: int | None = None,
               base_dir: Path | None = None) -> list[Finding]:
    """``llamarig check``'s findings (llamarig.flags.rules.lint) for one argv (program first),
    with the model's GGUF header when ``-m`` is readable."""
    ctx = Context(physical_cores=cores, cores_source="this machine")
    loader = model_loader(None, base_dir)

    def safe_loader(inv: Any, c: Any) -> Any:
        try:
            return loader(inv, c)
        except Exception:  # an unreadable model is the planner's and the server's to report
            return c

    _parsed, findings = lint(parse_argv(list(argv)), schema, ctx, safe_loader)
    return findings


def finding_line(f: Finding) -> str:
    """One line for a finding: ``[rule] message (fix: ...)``."""
    text = "[" + f.rule + "] " + f.message  # + keeps the Message (llamarig.i18n)
    if f.fix:
        text += _(" (fix: {fix})").format(fix=f.fix)
    return one_line(text, 600)
