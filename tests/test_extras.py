"""The lean install: pyproject's core dependencies, its extras, llamarig.extras and the imports in
src/llamarig agree, and a command whose extra is missing says in one line what to install.

Every third-party import is one of: a core dependency; inside ``with needed("X"):`` with X an
extra that brings it; inside ``try: ... except ImportError`` (the code goes on without it) with an
extra that brings it; or for type checking only. A missing module is simulated in a subprocess
(``sys.modules[name] = None`` makes its import raise ImportError, Python's own way to block one),
not by uninstalling it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llamarig.errors import ExitCode
from llamarig.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "llamarig"
#: extras that only gather the others
GATHERING = {"all", "dev"}
#: what `pip install .` must leave out (tests/test_extras.py, README: the lean install)
OPTIONAL_MODULES = sorted({m for e in EXTRAS.values() for m in e.modules} | {"hiredis"})


def _pyproject() -> dict[str, object]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    data: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data


def _dist(req: str) -> str:
    """The normalised distribution name of a requirement (PEP 503)."""
    name = re.match(r"[A-Za-z0-9._-]+", req.strip())
    assert name, req
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    core = {_dist(r) for r in project["dependencies"]}
    extras = {k: {_dist(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return core, extras


#: import name -> distribution, where they differ (for a package that is not installed here)
IMPORT_NAMES = {"yaml": "PyYAML", "pynvml": "nvidia-ml-py", "modelscope_hub": "modelscope-hub"}


def _dists_of(module: str) -> set[str]:
    """The distributions that provide a top-level module (as installed, else IMPORT_NAMES)."""
    found = importlib.metadata.packages_distributions().get(module) or [IMPORT_NAMES.get(module, module)]
    return {_dist(d) for d in found}


def _third_party(module: str) -> bool:
    return module not in sys.stdlib_module_names and module not in ("llamarig", "__future__", "tomllib", "_typeshed")


def _imports(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(top-level module, line, guard) for every import: guard is ``needed:X``, ``optional``
    (inside try/except ImportError), ``typing`` (if TYPE_CHECKING) or ``""``."""
    out: list[tuple[str, int, str]] = []

    def guard_of(node: ast.AST, guard: str) -> str:
        if isinstance(node, ast.With):
            for item in node.items:
                c = item.context_expr
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "needed":
                    arg = c.args[0]
                    assert isinstance(arg, ast.Constant)
                    return f"needed:{arg.value}"
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            return guard or "optional"
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return "typing"
        return guard

    def walk(node: ast.AST, guard: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((a.name.split(".")[0], child.lineno, guard) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module.split(".")[0], child.lineno, guard))
            walk(child, guard_of(child, guard))

    walk(tree, "")
    return out


def test_every_import_is_declared_where_it_belongs() -> None:
    core, extras = _declared()
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        for module, line, guard in _imports(ast.parse(f.read_text(), str(f))):
            if not _third_party(module) or guard == "typing":
                continue
            dists, where = _dists_of(module), f"{f.relative_to(ROOT)}:{line}: {module}"
            if guard.startswith("needed:"):
                extra = guard.removeprefix("needed:")
                if not dists & extras.get(extra, set()) or module not in EXTRAS[extra].modules:
                    bad.append(f"{where} is in needed({extra!r}) but that extra does not bring it")
            elif guard == "optional":
                if not any(dists & deps for deps in extras.values()) and not dists & core:
                    bad.append(f"{where} is optional but no extra brings it")
            elif not dists & core:
                bad.append(f"{where} is not a core dependency: guard it with llamarig.extras.needed")
    assert not bad, "\n".join(bad)


def test_extras_table_matches_pyproject() -> None:
    _, extras = _declared()
    assert set(EXTRAS) == set(extras) - GATHERING
    for name, extra in EXTRAS.items():
        for module in extra.modules:
            assert _dists_of(module) & extras[name], f"[{name}] does not bring {module}"
    union = set().union(*(extras[n] for n in EXTRAS))
    assert extras["all"] == union
    assert extras["dev"] >= union


def test_core_is_lean() -> None:
    core, _ = _declared()
    assert core == {"rich", "click", "pyyaml", "numpy"}


# ------------------------------------------------------------------------- without the extras

BLOCKED = ("import sys\n"
           "for m in sys.argv.pop(1).split(','):\n"
           "    sys.modules[m] = None  # its import raises ImportError\n"
           "sys.argv[0] = 'llamarig'\n"
           "from llamarig.cli.main import main\n"
           "sys.exit(main())\n")


def _run(cwd: Path, blocked: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED, ",".join(blocked), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=_env())


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANG", "LC_", "LLAMARIG_LANG"))}
    return {**env, "LANG": "C.UTF-8", "LLAMARIG_SERVER_BIN": "/nonexistent/llama-server"}


@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from llamarig.testing.synth import write_model

    d = tmp_path_factory.mktemp("lean")
    write_model(str(d / "tiny.gguf"), "qwen3")
    (d / "start.sh").write_text("llama-server -m tiny.gguf -c 4096 -ngl 99\n")
    (d / "server.log").write_text("main: build = 11434\n")
    return d


@pytest.mark.parametrize("args", [
    ["--help"], ["inspect", "tiny.gguf"], ["plan", "tiny.gguf", "-c", "4096"], ["check", "start.sh"],
    ["explain", "start.sh"], ["logs", "server.log"], ["models"], ["gpus"],
    ["plan", "qwen3.6-27b:iq4_nl", "--mmproj", "f16", "--gpu", "rtx3090", "-c", "105000"],
    ["gateway", "--help"], ["bench", "--help"], ["top", "--help"], ["tune", "--help"],
], ids=lambda a: " ".join(a))
def test_the_core_runs_without_any_extra(here: Path, args: list[str]) -> None:
    r = _run(here, OPTIONAL_MODULES, *args)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_the_core_use_cases_import_without_any_extra() -> None:
    """launch, stop, tune and quality talk to llama-server through the standard library (the
    servers they start need a binary, so here their modules are imported, as the CLI does)."""
    code = ("import sys\n"
            f"for m in {OPTIONAL_MODULES!r}:\n"
            "    sys.modules[m] = None\n"
            "import llamarig.app.launch, llamarig.app.tune, llamarig.tune.quality, llamarig.launch.process\n"
            "import llamarig.api, llamarig.app.logs, llamarig.detect\n"
            "llamarig.detect.detect()  # NVML missing: nvidia-smi, else no GPU\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize(("extra", "blocked", "args"), [
    ("gateway", ["aiohttp"], ["gateway", "--backend", "http://127.0.0.1:9", "--port", "0"]),
    ("gateway", ["httptools"], ["gateway", "--backend", "http://127.0.0.1:9", "--port", "0"]),
    ("bench", ["aiohttp"], ["bench", "--url", "http://127.0.0.1:9"]),
    ("bench", ["aiohttp"], ["top", "--url", "http://127.0.0.1:9", "--once"]),
    ("hub", ["huggingface_hub"], ["plan", "hf:unsloth/Qwen3-8B-GGUF:Q4_K_M"]),
    ("hub", ["httpx2"], ["inspect", "hf:unsloth/Qwen3-8B-GGUF:Q4_K_M"]),
    ("ledger", ["redis"], ["gateway", "--backend", "http://127.0.0.1:9", "--port", "0",
                           "--ledger", "redis://127.0.0.1:9/0"]),
], ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_a_missing_extra_is_one_line_naming_it(here: Path, extra: str, blocked: list[str],
                                               args: list[str]) -> None:
    r = _run(here, blocked, *args)
    assert r.returncode == ExitCode.ENVIRONMENT, (r.stdout, r.stderr)
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert f"pip install 'llamarig[{extra}]'" in line and blocked[0] in line, line


def test_a_broken_package_is_not_called_missing() -> None:
    """An ImportError of a module the extra does not bring passes through as it is."""
    from llamarig.extras import needed

    with pytest.raises(ImportError, match="no_such_module_here"), needed("gateway"):
        import no_such_module_here  # noqa: F401
