"""The public API (llamarig/__init__.py): every name in __all__ resolves, is documented in
docs/architecture.md, and `llamarig.plan_model` gives the plan the CLI prints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import llamarig

ROOT = Path(__file__).resolve().parent.parent


def test_exported_members() -> None:
    from llamarig import _LAZY

    assert set(_LAZY) | {"GGUFError", "InputError", "LlamarigError", "ModelNotFoundError", "ServerError",
                         "UnknownNameError", "__version__"} == set(llamarig.__all__)
    import types

    for name in llamarig.__all__:
        assert getattr(llamarig, name) is not None, name
        # a name that is also a subpackage (llamarig.plan, llamarig.hardware) would be the module
        # once that subpackage is imported
        assert not isinstance(getattr(llamarig, name), types.ModuleType), name
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
