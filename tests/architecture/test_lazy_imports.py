"""Lazy imports only where start-up time needs them, each marked with why (docs/architecture.md).

An ``import`` or ``from ... import`` inside a function of src/llamarig must carry a
``# lazy: <why>`` comment on its line (for a parenthesised multi-line import: on its first
line), e.g. ``import numpy as np  # lazy: numpy (0.2 s), only for the host bandwidth probe`` or
``# lazy: cycle with speed.py``. Every other import belongs at the top of its module: a function-
level import that saves nothing only hides the module's dependencies (and its cycles).

A module whose every function imports lazily for one reason says it once, in a comment line of
its own at module level: ``# lazy imports: <why>`` (llamarig/api.py: each function imports its
use case when called, so a command loads only its own path).

llamarig/cli/ is not checked: its commands are loaded lazily for start-up by design (the lazy
click group in cli/main.py imports a command's module on first use, and each command imports
the library only when it runs), so nearly every import there is lazy for the same reason.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "llamarig"
#: packages whose imports are lazy by design (see the module docstring)
EXCLUDED = {"cli"}
#: packages still being marked, with why; each is its own case below, expected to fail until done
PENDING: dict[str, str] = {
}
_MARK = re.compile(r"#\s*lazy:\s*\S")
#: a module-level comment line that covers every function-level import of its module
_MODULE_MARK = re.compile(r"^# lazy imports:[ \t]*\S", re.M)


def _marked_lines(source: str) -> set[int]:
    """Line numbers that carry a ``# lazy: <why>`` comment."""
    out: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and _MARK.search(tok.string):
            out.add(tok.start[0])
    return out


def unmarked_lazy_imports(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, import as written) for each import inside a function without a ``# lazy:``."""
    if _MODULE_MARK.search(source):
        return []
    tree = ast.parse(source, filename)
    marked = _marked_lines(source)
    lines = source.splitlines()
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function and child.lineno not in marked:
                found.append((child.lineno, lines[child.lineno - 1].strip()))
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(tree, False)
    return found


def _package(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def _packages() -> list[str]:
    return sorted({_package(p) for p in SRC.rglob("*.py")} - EXCLUDED)


def _case(pkg: str) -> object:
    if pkg in PENDING:
        return pytest.param(pkg, id=pkg, marks=pytest.mark.xfail(reason=PENDING[pkg], strict=False))
    return pytest.param(pkg, id=pkg)


@pytest.mark.parametrize("package", [_case(p) for p in _packages()])
def test_function_level_imports_say_why(package: str) -> None:
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        if _package(f) != package:
            continue
        for line, text in unmarked_lazy_imports(f.read_text(), str(f)):
            bad.append(f"{f.relative_to(SRC.parent)}:{line}: {text}")
    assert not bad, ("imports inside functions without a '# lazy: <why>' comment: move each to the top "
                     "of its module, or keep it and say why (start-up cost, a cycle):\n" + "\n".join(bad))


def test_every_package_is_checked() -> None:
    assert "cli" not in _packages()
    assert {"api", "flags", "plan", "bench", "gateway"} <= set(_packages())
    assert set(PENDING) <= set(_packages())


def test_the_check_itself() -> None:
    src = '''
import os  # module level: never lazy
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def f():
    import json
    import numpy as np  # lazy: numpy (0.2 s), only here
    from a.b import (  # lazy: cycle a <-> b
        c,
        d,
    )
    from e import (
        g,  # lazy: only on the first line counts
    )
    import yaml  # lazy:


class C:
    import re  # a class body runs at import time: not lazy

    async def m(self):
        def inner():
            import sys
        return inner
'''
    got = [text for _, text in unmarked_lazy_imports(src)]
    assert got == ["import json", "from e import (", "import yaml  # lazy:", "import sys"]


def test_a_module_can_say_why_once() -> None:
    body = "def f():\n    import json\n"
    assert unmarked_lazy_imports(body) == [(2, "import json")]
    assert unmarked_lazy_imports("# lazy imports: each function loads its own path\n\n" + body) == []
    assert unmarked_lazy_imports("# lazy imports:\n" + body) == [(3, "import json")]  # a why is needed
