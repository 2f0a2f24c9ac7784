"""The public API (llamarig/__init__.py): every name in __all__ resolves, is documented in
docs/architecture.md, and `llamarig.plan_model` gives the plan the CLI prints."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import llamarig

ROOT = Path(__file__).resolve().parent.parent


INIT = ROOT / "src" / "llamarig" / "__init__.py"
BEGIN = "    # generated from _EXPORTS by `python tests/test_exports.py`: do not edit\n"
END = "    # end of the generated imports\n"


def typing_imports() -> str:
    """The TYPE_CHECKING imports of llamarig/__init__.py, from its one table (``X as X``: an
    explicit re-export, so mypy --strict sees every public name with its type)."""
    from llamarig import _EXPORTS

    def kind(name: str) -> tuple[int, str]:  # ruff's isort order: CONSTANTS, Classes, functions
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    return "".join(f"    from {module} import {name} as {name}\n"
                   for module in sorted(_EXPORTS) for name in sorted(_EXPORTS[module], key=kind))


def _with_imports(text: str) -> str:
    head, rest = text.split(BEGIN, 1)
    return head + BEGIN + typing_imports() + END + rest.split(END, 1)[1]


def test_typing_imports_follow_the_table() -> None:
    text = INIT.read_text()
    assert text == _with_imports(text), "run `python tests/test_exports.py` to write them again"


def test_exported_members() -> None:
    from llamarig import _EXPORTS, _LAZY

    names = [n for names in _EXPORTS.values() for n in names]
    assert len(names) == len(set(names)) == len(_LAZY), "a name given by two modules"
    assert set(llamarig.__all__) == {*names, "__version__"}
    import types

    for module, given in _EXPORTS.items():
        for name in given:
            value = getattr(llamarig, name)
            assert value is getattr(importlib.import_module(module), name), name
            # a name that is also a subpackage (llamarig.plan, llamarig.hardware) would be the
            # module once that subpackage is imported
            assert not isinstance(value, types.ModuleType), name
    public = {n for n in dir(llamarig) if not n.startswith("_")}
    assert public <= set(llamarig.__all__) | {"annotations", "import_module", "TYPE_CHECKING", "Any"}


def test_every_export_is_documented() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [n for n in llamarig.__all__ if f"`{n}`" not in doc and not n.startswith("__")]
    assert not missing, missing


def test_py_typed_is_shipped() -> None:
    assert (ROOT / "src" / "llamarig" / "py.typed").exists()


def test_library_plan_equals_cli_plan() -> None:
    d = llamarig.deployment("qwen3.6-27b:iq4_nl", ["-c", "105000"], hardware=llamarig.machine([llamarig.gpu("rtx3090")]))
    p = llamarig.plan_model(d)
    out = subprocess.run([sys.executable, "-m", "llamarig", "plan", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090",
                          "-c", "105000", "--json"], capture_output=True, text=True, check=True).stdout
    cli = json.loads(out)
    lib = p.to_json()
    lib.pop("speed", None)
    cli.pop("speed", None)
    assert lib == cli
    assert isinstance(p, llamarig.Plan) and p.fits


def test_import_is_light() -> None:
    """`import llamarig` loads neither the planner nor gguf/numpy/rich."""
    code = "import sys, llamarig; print(sorted(m for m in ('numpy', 'rich', 'gguf', 'llamarig.plan') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


if __name__ == "__main__":  # python tests/test_exports.py: write the TYPE_CHECKING imports again
    INIT.write_text(_with_imports(INIT.read_text()))
