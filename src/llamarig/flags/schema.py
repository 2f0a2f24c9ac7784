"""The flag schema of a llama-server build: every spelling, value kind, allowed values, default
and environment variable, read from the binary's own ``--help`` and ``--version``.

Layout rules for ``--help`` follow common/arg.cpp (``common_arg::to_string`` and
``print_usage``): the header (spellings + value hint) fills columns 0-39, help text starts at
column 40, continuation lines are indented by 40 spaces, ``(env: NAME)`` is the last help line.
Negated spellings are those matching ``^--?no-`` or ``-nkvo|-nr|-nocb`` (except an option whose
only spelling is negative, e.g. ``--no-host``).

The help text does not say *how* a value is parsed (``std::stoi`` vs ``std::stof`` vs an enum
table). That part comes from the bundled schema of build 11434, whose ``parse`` fields were read
from common/arg.cpp; options unknown to it get a kind inferred from their value hint.

Schemas are cached per binary (path + mtime + size) under ``~/.cache/llamarig/schemas/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from llamarig.binary import CACHE_ROOT, find_binary
from llamarig.errors import InputError, ServerError
from llamarig.i18n import _

SCHEMA_FORMAT = 1
PINNED_BUILD = 11434

#: options whose handler appends instead of replacing (common/arg.cpp: push_back / insert in the
#: handler), so repeating them keeps every value. Keyed by canonical name.
APPENDING = frozenset(
    {
        "--reverse-prompt", "--dry-sequence-breaker", "--logit-bias", "--lora", "--lora-scaled",
        "--control-vector", "--control-vector-scaled", "--alias", "--tags", "--api-key",
        "--spec-type", "--override-tensor", "--spec-draft-override-tensor", "--override-kv",
        "--tensor-filter", "--image", "--spec-draft-cpu-moe", "--cpu-moe",
    }
)

#: value kinds: how llama-server turns the text into a value
#: int: std::stoi (leading integer used, rest ignored); float: std::stof; enum: exact table;
#: kvtype: ggml type name; csv_enum: comma list of an enum; int_auto_all: int | auto | all;
#: string: anything
VALUE_KINDS = ("int", "float", "enum", "kvtype", "csv_enum", "int_auto_all", "string")

_NEG_RE = re.compile(r"^--?no-|^-(nkvo|nr|nocb)$")
_SPELL_RE = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9._+-]*")
_ENV_RE = re.compile(r"^\(env: ([A-Za-z0-9_]+)\)$")
_DEFAULT_RE = re.compile(r"default:\s*([^,;)\n]+)")
_VERSION_RE = re.compile(r"version:\s*(\S+)\s*\(build\s+(\d+),\s*commit\s+([^)\s]+)\)")
_VERSION_RE2 = re.compile(r"version:\s*(\d+)\s*\(([^)\s]+)\)")


@dataclass(frozen=True)
class Option:
    """One llama-server option as the installed build defines it."""

    name: str  # canonical spelling (first long spelling)
    spellings: tuple[str, ...]  # positive spellings
    negations: tuple[str, ...] = ()  # negated spellings (bool pairs)
    kind: str = "flag"  # flag | value | bool_pair | two_values
    value_hint: str | None = None
    value_kind: str | None = None  # one of VALUE_KINDS for value options
    allowed: tuple[str, ...] | None = None
    default: str | None = None
    env: str | None = None
    section: str = ""
    help: str = ""
    removed: bool = False
    deprecated: bool = False
    appending: bool = False

    @property
    def takes_value(self) -> bool:
        return self.kind in ("value", "two_values")

    @property
    def n_values(self) -> int:
        return {"value": 1, "two_values": 2}.get(self.kind, 0)

    @property
    def all_spellings(self) -> tuple[str, ...]:
        return self.spellings + self.negations

    @property
    def summary(self) -> str:
        """The help text's first line, without the env decoration, joined with the lines that
        llama.cpp's fixed-width wrapping split off it: while a parenthesis is open or the line
        ends mid-phrase (``,``, ``or``, ``and``...). A bare first line read "whether to adjust
        unset arguments to fit in device memory ('on' or"."""
        text = re.sub(r"\s*\(env: [A-Za-z0-9_]+\)\s*$", "", self.help).strip()
        lines = [ln.strip() for ln in text.split("\n")]
        out = lines[0]
        for ln in lines[1:]:
            open_paren = out.count("(") > out.count(")")
            if not ln or not (open_paren or _MID_PHRASE.search(out)):
                break
            out += " " + ln
        return out


#: a help line that stops in the middle of a phrase (its next line continues it)
_MID_PHRASE = re.compile(r"(,|\b(or|and|to|the|of|a|an|in|on|for|with|by|is|are|be|if|when|from|not|than|as))$", re.I)


@dataclass
class SchemaMemo:
    """What lookups on one schema remember; never part of its value."""

    spellings: list[str] | None = None
    #: (spelling, n) -> the closest real spellings (llamarig.flags.argv.closest)
    closest: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    #: similarity searches the running lint may still make (None: no lint running, no limit): each
    #: costs a difflib pass over every spelling, so an input with hundreds of thousands of distinct
    #: unknown flags gets suggestions for the first ones only, and stays linear (set by rules.lint)
    search_budget: int | None = None

    def take_search(self) -> bool:
        """Whether one more similarity search is allowed, counting it."""
        if self.search_budget is None:
            return True
        self.search_budget -= 1
        return self.search_budget >= 0


@dataclass(frozen=True)
class Schema:
    """All options of one build, with where they were read from."""

    options: tuple[Option, ...]
    build: int | None
    version: str | None = None
    commit: str | None = None
    source: str = "bundled"  # "binary", "cache" or "bundled"
    origin: str = ""  # path of the binary or bundled file
    by_spelling: dict[str, Option] = field(default_factory=dict, repr=False, compare=False)
    by_env: dict[str, Option] = field(default_factory=dict, repr=False, compare=False)
    memo: SchemaMemo = field(default_factory=SchemaMemo, repr=False, compare=False)

    def __post_init__(self) -> None:
        for o in self.options:
            for s in o.all_spellings:
                self.by_spelling.setdefault(s, o)
            if o.env:
                self.by_env.setdefault(o.env, o)
                if o.kind == "bool_pair":
                    self.by_env.setdefault(_neg_env(o.env), o)

    def lookup(self, token: str) -> tuple[Option, bool] | None:
        """The option a command-line token names, and whether the spelling is positive.
        ``--`` spellings have ``_`` replaced by ``-`` first (common/arg.cpp parse_cli_args)."""
        key = token.replace("_", "-") if token.startswith("--") else token
        opt = self.by_spelling.get(key)
        if opt is None:
            return None
        return opt, key not in opt.negations

    def get(self, name: str) -> Option | None:
        return self.by_spelling.get(name)

    @property
    def spellings(self) -> list[str]:
        if self.memo.spellings is None:
            self.memo.spellings = sorted(self.by_spelling)
        return self.memo.spellings

    def label(self) -> str:
        b = f"build {self.build}" if self.build is not None else _("unknown build")
        return f"{self.source}: {b} ({self.origin})" if self.origin else f"{self.source}: {b}"

    def fingerprint(self) -> str:
        """Hash of every spelling and value hint: equal flag sets give equal fingerprints."""
        items = sorted(f"{o.name}|{','.join(o.all_spellings)}|{o.value_hint or ''}" for o in self.options)
        return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SCHEMA_FORMAT,
            "build": self.build,
            "fingerprint": self.fingerprint(),
            "version": self.version,
            "commit": self.commit,
            "options": [_opt_to_json(o) for o in self.options],
        }


def _neg_env(env: str) -> str:
    # common/arg.cpp: bool pairs also read LLAMA_ARG_NO_<X>
    return env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1) if env.startswith("LLAMA_ARG_") else env


def _opt_to_json(o: Option) -> dict[str, Any]:
    d = asdict(o)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items() if v not in (None, False, "", ())}


def _opt_from_json(d: dict[str, Any]) -> Option:
    kw = dict(d)
    for k in ("spellings", "negations", "allowed"):
        if k in kw and kw[k] is not None:
            kw[k] = tuple(kw[k])
    return Option(**kw)


def schema_from_json(data: dict[str, Any], source: str, origin: str) -> Schema:
    if not isinstance(data, dict) or data.get("format") != SCHEMA_FORMAT:
        raise InputError(_("{origin}: not a llamarig flag schema (format {format})").format(origin=origin, format=SCHEMA_FORMAT))
    return Schema(
        options=tuple(_opt_from_json(o) for o in data["options"]),
        build=data.get("build"),
        version=data.get("version"),
        commit=data.get("commit"),
        source=source,
        origin=origin,
    )


# ----------------------------------------------------------------------------- --help parsing


def _split_header(line: str) -> tuple[str, str]:
    if len(line) > 40 and line[37:40] == "   " and line[40] != " ":
        return line[:40].rstrip(), line[40:].rstrip()
    return line.rstrip(), ""


def _parse_header(header: str) -> tuple[list[str], str]:
    """Spellings and the value hint of a help header line."""
    spellings: list[str] = []
    pos = 0
    while True:
        m = _SPELL_RE.match(header, pos)
        if not m:
            break
        spellings.append(m.group(0))
        pos = m.end()
        rest = header[pos:]
        sep = re.match(r",\s*", rest)
        if sep and re.match(r",\s*-", rest):
            pos += sep.end()
            continue
        break
    return spellings, header[pos:].strip()


def allowed_from_hint(hint: str) -> tuple[str, ...] | None:
    m = re.fullmatch(r"\{([^{}]+)\}", hint) or re.fullmatch(r"\[([A-Za-z0-9_|+-]+)\]", hint)
    if m:
        return tuple(p.strip() for p in re.split(r"[,|]", m.group(1)) if p.strip())
    m = re.fullmatch(r"<(\d)\|(\d)>", hint)
    if m:
        return (m.group(1), m.group(2))
    if re.fullmatch(r"[a-z0-9-]+(,[a-z0-9-]+){3,}", hint):  # --spec-type's list
        return tuple(hint.split(","))
    return None


def infer_kind(hint: str, allowed: tuple[str, ...] | None) -> str:
    if allowed and re.fullmatch(r"[a-z0-9-]+(,[a-z0-9-]+){3,}", hint):
        return "csv_enum"
    if allowed:
        return "enum"
    if hint in ("N", "SECONDS", "MiB", "<0...100>"):
        return "int"
    return "string"


def _negations(spellings: list[str]) -> list[str]:
    """The negative spellings of a bool pair. common_arg::to_string prints ``args`` then
    ``args_neg``, so everything after the first surely negative spelling is negative too; a short
    ``-nX``/``-noX`` whose ``-X`` is listed (``-ndio`` beside ``-dio``, build 9093) is negative."""
    out: list[str] = []
    for i, sp in enumerate(spellings):
        short_neg = not sp.startswith("--") and (
            (sp.startswith("-no") and "-" + sp[3:] in spellings) or (sp.startswith("-n") and "-" + sp[2:] in spellings))
        if _NEG_RE.search(sp) or short_neg:
            out = [x for x in spellings[i:]]
            break
    return out


def parse_help(text: str) -> list[Option]:
    """Parse llama-server ``--help`` output into options (see the module docstring)."""
    return [opt for block in _help_blocks(text) if (opt := _option(*block)) is not None]


def _help_blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """(section, header, help lines) of each option in the help text."""
    blocks: list[tuple[str, str, list[str]]] = []
    section = ""
    for raw in text.splitlines():
        line = raw.rstrip("\n")
        sec = re.fullmatch(r"----- (.+) -----", line.strip())
        if sec:
            section = sec.group(1)
        elif line.startswith("-"):
            header, first = _split_header(line)
            blocks.append((section, header, [first] if first else []))
        elif blocks and line.startswith(" " * 40):
            blocks[-1][2].append(line[40:].rstrip())
    return blocks


def _help_text(lines: list[str]) -> tuple[str, str | None]:
    """The help paragraph without trailing blank lines, and the environment variable its last line names."""
    help_lines = list(lines)
    while help_lines and not help_lines[-1].strip():
        help_lines.pop()
    m = _ENV_RE.match(help_lines[-1].strip()) if help_lines else None
    return "\n".join(help_lines), m.group(1) if m else None


def _option_kind(header: str, hint: str, neg: list[str]) -> str:
    if neg:
        return "bool_pair"
    if not hint:
        return "flag"
    if header.endswith(" START END") or bool(re.fullmatch(r"\S+ \S+", hint) and hint.isupper()):
        return "two_values"
    return "value"


def _option(section: str, header: str, lines: list[str]) -> Option | None:
    spellings, hint = _parse_header(header)
    if not spellings:
        return None
    help_text, env = _help_text(lines)
    neg = _negations(spellings)
    pos = [s for s in spellings if s not in neg]
    if not pos:  # --no-host: a plain flag that happens to start with no-
        pos, neg = neg, []
    kind = _option_kind(header, hint, neg)
    allowed = allowed_from_hint(hint) if hint else None
    am = re.search(r"allowed values:\s*([a-z0-9_, ]+)", help_text)
    if am and not allowed:
        allowed = tuple(v.strip() for v in am.group(1).split(",") if v.strip())
    dm = _DEFAULT_RE.search(help_text.replace("\n", " "))
    flat = " ".join(help_text.split())
    longs = [s for s in pos if s.startswith("--")]
    name = longs[0] if longs else pos[0]
    value_kind = None
    if kind in ("value", "two_values"):
        value_kind = "kvtype" if am and "q8_0" in (allowed or ()) else infer_kind(hint, allowed)
    return Option(name=name, spellings=tuple(pos), negations=tuple(neg), kind=kind, value_hint=hint or None,
                  value_kind=value_kind, allowed=allowed, default=dm.group(1).strip().strip("'\"") if dm else None,
                  env=env, section=section, help=help_text, removed="has been removed" in flat,
                  deprecated="DEPRECATED" in flat, appending=name in APPENDING)


def parse_version(text: str) -> tuple[str | None, int | None, str | None]:
    """(version, build, commit) from ``llama-server --version`` (common/build-info.cpp.in)."""
    m = _VERSION_RE.search(text)
    if m:
        return m.group(1), int(m.group(2)), m.group(3)
    m = _VERSION_RE2.search(text)
    if m:
        return m.group(1), int(m.group(1)), m.group(2)
    return None, None, None


def enrich(opts: list[Option], reference: Schema | None) -> list[Option]:
    """Take value kinds / allowed values the help text cannot show (e.g. that ``-fa`` also
    accepts ``enabled``/``1``, that ``--temp`` is a float) from a reference schema whose kinds
    were read from common/arg.cpp, for options with the same canonical name and value hint."""
    if reference is None:
        return opts
    out = []
    for o in opts:
        ref = reference.get(o.name)
        if ref is not None and ref.kind == o.kind and ref.value_hint == o.value_hint:
            o = replace(o, value_kind=ref.value_kind or o.value_kind, allowed=ref.allowed or o.allowed,
                        appending=ref.appending or o.appending)
            if ref.default and not o.default:
                o = replace(o, default=ref.default)
        out.append(o)
    return out


# ----------------------------------------------------------------------------- loading


def schema_cache_dir() -> Path:
    return CACHE_ROOT / "schemas"


def _cache_key(binary: Path) -> str:
    st = binary.stat()
    ident = f"{binary.resolve()}|{st.st_mtime_ns}|{st.st_size}|{SCHEMA_FORMAT}"
    return hashlib.sha256(ident.encode()).hexdigest()[:24]


def bundled_builds() -> list[int]:
    from importlib import resources  # lazy: ~8 ms of start-up (it imports tempfile)

    d = resources.files("llamarig") / "data" / "schemas"
    builds = []
    try:
        for entry in d.iterdir():
            m = re.fullmatch(r"llama-server-(\d+)\.json", entry.name)
            if m:
                builds.append(int(m.group(1)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(builds)


def load_bundled(build: int | None = None) -> Schema:
    """A schema shipped with llamarig: ``build`` exactly, else the newest one not newer than it,
    else the pinned build."""
    builds = bundled_builds()
    if not builds:
        raise InputError(_("no bundled llama-server schema found in {dir}").format(dir="llamarig/data/schemas"))
    if build is None:
        pick = PINNED_BUILD if PINNED_BUILD in builds else builds[-1]
    else:
        older = [b for b in builds if b <= build]
        pick = older[-1] if older else builds[0]

    data = _bundled_json(pick)
    origin = f"llamarig/data/schemas/llama-server-{pick}.json"
    if build is not None and pick != build:
        origin += (_(", the newest bundled build not newer than {build}") if pick < build else
                   _(", the oldest bundled build (none is as old as {build})")).format(build=build)
    return schema_from_json(data, "bundled", origin)


def _bundled_json(build: int) -> dict[str, Any]:
    from importlib import resources  # lazy: ~8 ms of start-up (it imports tempfile)

    res = resources.files("llamarig") / "data" / "schemas" / f"llama-server-{build}.json"
    data: dict[str, Any] = json.loads(res.read_text(encoding="utf-8"))
    return data


def bundled_provenance() -> list[tuple[int, int, str]]:
    """(build, number of options, how the schema was made) for every bundled schema."""
    out = []
    for b in bundled_builds():
        data = _bundled_json(b)
        out.append((b, len(data.get("options", [])), str(data.get("derived_from") or "unknown")))
    return out


def _run(binary: Path, arg: str, timeout: float) -> str:
    try:
        p = subprocess.run([str(binary), arg], capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ServerError(f"{binary} {arg}: {e}") from e
    return p.stdout + "\n" + p.stderr


def schema_from_binary(binary: Path, timeout: float = 30, reference: Schema | None = None) -> Schema:
    """Run ``binary --help`` and ``--version`` and build its schema (no cache)."""
    help_text = _run(binary, "--help", timeout)
    opts = parse_help(help_text)
    if len(opts) < 20:
        raise ServerError(_("{binary} --help: does not look like llama-server's help ({n} options)").format(
            binary=binary, n=len(opts)))
    version, build, commit = parse_version(_run(binary, "--version", timeout))
    inferred = False
    if not build:
        # binaries built outside git print "build 0, commit unknown": identify the build by an
        # identical flag set among the bundled schemas
        fp = Schema(tuple(opts), None).fingerprint()
        for b in bundled_builds():
            try:
                if load_bundled(b).fingerprint() == fp:
                    build, inferred = b, True
            except InputError:
                continue
    ref = reference
    if ref is None:
        try:
            ref = load_bundled(build)
        except InputError:
            ref = None
    opts = enrich(opts, ref)
    if inferred:
        version = f"{version or '?'} (build inferred: same flags as bundled build {build})"
    return Schema(tuple(opts), build or None, version, commit, source="binary", origin=str(binary))


def load_schema(binary: str | os.PathLike[str] | None = None, *, use_binary: bool = True,
                cache: bool = True) -> Schema:
    """The schema of the user's llama-server: explicit ``binary``, else $LLAMARIG_SERVER_BIN,
    PATH, the build cache (llamarig.binary.find_binary); cached per binary. Falls back to the
    bundled schema of the pinned build when no binary is found and none was named."""
    path: Path | None = None
    if use_binary:
        try:
            path = find_binary("llama-server", binary)
        except ServerError:
            if binary:
                raise
            path = None
    if path is None:
        return load_bundled()
    cache_file = schema_cache_dir() / f"{_cache_key(path)}.json"
    cached = _cached_schema(cache_file, path) if cache else None
    if cached is not None:
        return cached
    try:
        schema = schema_from_binary(path)
    except ServerError as e:
        if binary:
            raise
        # an auto-discovered binary that does not answer --help like llama-server: use the
        # bundled schema and say why
        b = load_bundled()
        return replace(b, origin=f"{b.origin}; {path} unusable: {e}", by_spelling={}, by_env={}, memo=SchemaMemo())
    if cache:
        _write_cache(cache_file, schema)
    return schema


def _cached_schema(cache_file: Path, path: Path) -> Schema | None:
    """The schema cached for the binary at ``path``, or None (none, or unreadable)."""
    if not cache_file.is_file():
        return None
    try:
        return schema_from_json(json.loads(cache_file.read_text(encoding="utf-8")), "cache", str(path))
    except (OSError, ValueError, TypeError, InputError):
        return None


def _write_cache(cache_file: Path, schema: Schema) -> None:
    """Cache ``schema`` (atomically: another check may read the file meanwhile); a failure to
    write is no error."""
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(schema.to_json()), encoding="utf-8")
        tmp.replace(cache_file)
    except OSError:
        pass


_PARSE_KINDS = (
    ("int |", "int_auto_all"),
    ("int (", "int"),
    ("unsigned", "int"),
    ("float", "float"),
    ("double", "float"),
    ("enum", "enum"),
    ("ggml type", "kvtype"),
    ("comma-separated names; appended", "csv_enum"),
)


def kinds_from_args_json(path: str | os.PathLike[str]) -> Schema:
    """A reference schema from a source-read options table (the ``llama-server-args.json``
    format: name, spellings, kind, value_hint, value_parse, allowed_values, default): used only
    for its value kinds when generating a bundled schema from a binary."""
    rows = json.loads(Path(path).read_text(encoding="utf-8"))
    opts = []
    for r in rows:
        parse = r.get("value_parse") or ""
        vk = next((k for prefix, k in _PARSE_KINDS if parse.startswith(prefix)), "string") if r.get("takes_value") else None
        allowed = r.get("allowed_values")
        if allowed and any(a.startswith("<") for a in allowed):
            if vk == "enum":  # "<any string ...>": not validated at parse time
                vk = "string"
            allowed = [a for a in allowed if not a.startswith("<")]
        if r["name"] == "--tools":  # parse_csv_row, checked later at runtime (arg.cpp)
            vk, allowed = "string", None
        opts.append(Option(
            name=r["name"], spellings=tuple(r["spellings"]), negations=tuple(r.get("negated_spellings") or ()),
            kind=r["kind"], value_hint=r.get("value_hint"), value_kind=vk,
            allowed=tuple(allowed) if allowed else None,
            appending=r["name"] in APPENDING,
        ))
    return Schema(tuple(opts), None, source="reference", origin=str(path))


def main() -> None:  # pragma: no cover - maintenance entry point
    """Regenerate a bundled schema from a binary, taking value kinds from a source-read table:
    ``python -m llamarig.flags.schema BINARY OUT.json [ARGS_JSON]``."""
    binary, out = Path(sys.argv[1]), Path(sys.argv[2])
    s = schema_from_binary(binary, reference=kinds_from_args_json(sys.argv[3]) if len(sys.argv) > 3 else None)
    if not s.build and len(sys.argv) > 4:  # a binary built from an sdist prints "build 0"
        s = replace(s, build=int(sys.argv[4]), by_spelling={}, by_env={}, memo=SchemaMemo())
    Path(out).write_text(json.dumps(s.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{out}: {len(s.options)} options, build {s.build}")


if __name__ == "__main__":  # pragma: no cover
    main()
