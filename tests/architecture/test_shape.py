"""The shape of the code (issue 30): short functions, few complex ones, one class per name, typed
public results, mypy --strict. Offenders in areas being split on other branches are listed in
tests/architecture/transitional.py until they land; the functions kept long on purpose are listed
with a reason in docs/architecture.md ("Long functions")."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys
import typing
from collections import defaultdict
from pathlib import Path

import pytest
from tests.architecture import transitional as T

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "llamarig"
#: the longest a function may be, in lines (its def to its last line)
MAX_LINES = 100
#: how many functions docs/architecture.md may keep long, each with its reason
MAX_DOCUMENTED = 5
#: ruff's C901 with max-complexity 10: how many functions may exceed it in all of src/
MAX_COMPLEX = 25
#: result types that carry a JSON document as written, with the reason (not transitional)
RAW_DOCUMENTS = {
    "llamarig.catalogue.models:CatalogueModel": "data/models.json's entry as written, every field with its "
                                                "source: build_spec reads it field by field into a ModelSpec",
}


def _rel(p: Path) -> str:
    return p.relative_to(SRC).as_posix()


def _functions() -> list[tuple[str, int]]:
    """("path:name", lines) of every function and method in src/llamarig."""
    out = []
    for p in sorted(SRC.rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((f"{_rel(p)}:{n.name}", (n.end_lineno or n.lineno) - n.lineno + 1))
    return out


def documented_long() -> dict[str, str]:
    """docs/architecture.md's "Long functions" table: `path:function` -> reason."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    m = re.search(r"^## Long functions\n(.*?)(?=^## |\Z)", doc, re.M | re.S)
    assert m, 'docs/architecture.md has no "## Long functions" section'
    rows = re.findall(r"^\| `([^`]+:[^`]+)` \| (.+?) \|$", m.group(1), re.M)
    return {k: v.strip() for k, v in rows}


def test_no_function_over_100_lines() -> None:
    documented = documented_long()
    assert len(documented) <= MAX_DOCUMENTED, documented
    assert all(len(r) > 20 for r in documented.values()), "each long function needs its reason"
    long_ = {name for name, n in _functions() if n > MAX_LINES}
    bad = sorted(long_ - set(documented) - T.LONG_FUNCTIONS)
    assert not bad, f"functions over {MAX_LINES} lines (split them): {bad}"
    stale = sorted((set(documented) | T.LONG_FUNCTIONS) - long_)
    assert not stale, f"listed as long but no longer are (drop them from the list): {stale}"


def _c901() -> set[str]:
    r = subprocess.run([sys.executable, "-m", "ruff", "check", str(SRC), "--select", "C901", "--config",
                        "lint.mccabe.max-complexity=10", "--output-format", "json", "--no-cache"],
                       capture_output=True, text=True, cwd=ROOT)
    out = set()
    for x in json.loads(r.stdout or "[]"):
        m = re.search(r"`([^`]+)`", x["message"])
        assert m, x
        out.add(f"{_rel(Path(x['filename']))}:{m.group(1)}")
    return out


def test_complexity_under_the_limit() -> None:
    """ruff C901 (max-complexity 10): fewer than MAX_COMPLEX offenders in src/, the transitional
    ones included; and none outside the transitional list but the MAX_COMPLEX - 1 it allows."""
    found = _c901()
    stale = sorted(T.COMPLEX_FUNCTIONS - found)
    assert not stale, f"no longer too complex (drop them from transitional.py): {stale}"
    outside = sorted(found - T.COMPLEX_FUNCTIONS)
    assert len(outside) < MAX_COMPLEX, f"{len(outside)} functions over complexity 10 (split them): {outside}"


def test_no_duplicate_top_level_class_names() -> None:
    where: dict[str, set[str]] = defaultdict(set)
    for p in sorted(SRC.rglob("*.py")):
        for n in ast.parse(p.read_text(), str(p)).body:
            if isinstance(n, ast.ClassDef):
                where[n.name].add(_rel(p))
    dup = {k: v for k, v in where.items() if len(v) > 1}
    bad = {k: sorted(v) for k, v in dup.items() if not v <= T.DUPLICATE_CLASSES.get(k, set())}
    assert not bad, f"class names defined in more than one module (rename one): {bad}"
    stale = sorted(k for k in T.DUPLICATE_CLASSES if k not in dup)
    assert not stale, f"no longer duplicated (drop them from transitional.py): {stale}"


def _namespace() -> dict[str, typing.Any]:
    """Every module-level name of llamarig's modules: what annotations written under
    TYPE_CHECKING resolve against."""
    import importlib
    import pkgutil

    import llamarig

    ns: dict[str, typing.Any] = {}
    for mod in pkgutil.walk_packages(llamarig.__path__, "llamarig."):
        if ".cli" in mod.name or mod.name.endswith("__main__"):
            continue
        try:
            m = importlib.import_module(mod.name)
        except ImportError:  # an optional dependency (redis, modelscope)
            continue
        ns.update({k: v for k, v in vars(m).items() if isinstance(v, type) or typing.get_origin(v) is not None})
    return ns


def _hints(obj: typing.Any, ns: dict[str, typing.Any]) -> dict[str, typing.Any]:
    module = sys.modules[obj.__module__]
    return typing.get_type_hints(obj, globalns={**ns, **vars(module)})


def _result_types() -> set[type]:
    """The dataclasses llamarig.api returns, and every dataclass reachable from their fields."""
    import llamarig.api as api

    ns = _namespace()
    todo: list[typing.Any] = []
    for name in dir(api):
        fn = getattr(api, name)
        if callable(fn) and getattr(fn, "__module__", "") == "llamarig.api":
            todo.append(_hints(fn, ns).get("return"))
    seen: set[type] = set()
    while todo:
        t = todo.pop()
        todo.extend(typing.get_args(t))
        if isinstance(t, type) and dataclasses.is_dataclass(t) and t not in seen:
            seen.add(t)
            todo.extend(_hints(t, ns).values())
    return seen


def _has_any(t: typing.Any) -> bool:
    return t is typing.Any or any(_has_any(a) for a in typing.get_args(t))


def test_no_any_in_public_result_types() -> None:
    types = _result_types()
    assert len(types) > 10, types  # Plan, DevicePlan, Line, SpeedReport, CheckReport, Finding, ...
    found = {}
    ns = _namespace()
    for t in types:
        bad = [f for f, h in _hints(t, ns).items() if _has_any(h)]
        if bad:
            found[f"{t.__module__}:{t.__qualname__}"] = bad
    new = {k: v for k, v in found.items() if k not in T.ANY_IN_RESULTS and k not in RAW_DOCUMENTS}
    assert not new, f"public result types with Any fields (type them): {new}"
    stale = sorted((T.ANY_IN_RESULTS | set(RAW_DOCUMENTS)) - set(found))
    assert not stale, f"typed now (drop them from transitional.py): {stale}"


def test_mypy_is_strict_on_src() -> None:
    """pyproject's [tool.mypy] is strict; per-module overrides only relax third-party imports."""
    text = (ROOT / "pyproject.toml").read_text()
    m = re.search(r"^\[tool\.mypy\]\n(.*?)(?=^\[(?!\[tool\.mypy)|\Z)", text, re.M | re.S)
    assert m and re.search(r"^strict = true$", m.group(1), re.M), "[tool.mypy] strict = true"
    for block in re.findall(r"^\[\[tool\.mypy\.overrides\]\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S):
        modules = re.findall(r'"([^"]+)"', re.search(r"^module = \[(.*?)\]", block, re.M | re.S).group(1))
        assert not [x for x in modules if x.startswith("llamarig")], "no overrides for llamarig's own modules"
        keys = {k for k in re.findall(r"^(\w+) =", block, re.M) if k != "module"}
        assert keys <= {"ignore_missing_imports"}, keys


@pytest.mark.slow
def test_mypy_strict_passes() -> None:
    r = subprocess.run([sys.executable, "-m", "mypy"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:]
