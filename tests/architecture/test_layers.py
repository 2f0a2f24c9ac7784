"""The package's layers point one way (docs/architecture.md): every import in src/llamarig,
module-level or inside a function, goes to the same layer or a lower one; no cycle between
top-level packages; production code never imports llamarig.testing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "llamarig"

#: lowest first; a package may import its own layer and those below (docs/architecture.md)
LAYERS: list[set[str]] = [
    {"units", "errors", "extras", "paths", "procs", "logformat", "serverpool", "binary", "i18n", "text", "diagnostics", "data",
     "locale", "__init__", "__main__"},
    {"gguf", "hardware", "hub"},
    {"catalogue", "detect"},
    {"flags"},
    {"plan"},
    {"render", "launch"},
    {"bench", "tune", "gateway", "top", "web"},
    {"app"},
    {"testing"},
    {"api"},
    {"cli"},
]
#: the public API (llamarig/__init__.py) re-exports from every layer; __main__ starts the CLI
EXEMPT = {"__init__", "__main__"}


def _top(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "llamarig":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _package_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.name != "__init__.py" else "__init__"


def edges() -> list[tuple[str, str, str, int]]:
    """(from package, to package, file, line) for every internal import."""
    out = []
    for f in sorted(SRC.rglob("*.py")):
        src_pkg = _package_of(f)
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            mods: list[str] = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods = [node.module]
                if node.module == "llamarig":
                    mods = [f"llamarig.{a.name}" if not a.name.startswith("__") else "llamarig" for a in node.names]
            for m in mods:
                dst = _top(m)
                if dst is not None and dst != src_pkg:
                    out.append((src_pkg, dst, str(f.relative_to(SRC)), node.lineno))
    return out


def _layer(pkg: str) -> int:
    for i, layer in enumerate(LAYERS):
        if pkg in layer:
            return i
    raise AssertionError(f"package llamarig.{pkg} is in no layer of LAYERS (docs/architecture.md)")


def test_every_package_has_a_layer() -> None:
    for p in SRC.iterdir():
        if p.name.startswith((".", "_")) and p.name not in ("__init__.py", "__main__.py"):
            continue
        if p.is_dir() and not (p / "__init__.py").exists():
            continue  # data/
        if p.suffix in (".py", "") and p.name != "py.typed":
            _layer(p.name.removesuffix(".py"))


def test_no_upward_import() -> None:
    bad = [f"{f}:{ln}: llamarig.{a} -> llamarig.{b}" for a, b, f, ln in edges()
           if a not in EXEMPT and _layer(b) > _layer(a)]
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_production_never_imports_testing() -> None:
    bad = [f"{f}:{ln}" for a, b, f, ln in edges() if b == "testing" and a != "testing"]
    assert not bad, bad


def test_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in edges():
        if a not in EXEMPT:
            graph.setdefault(a, set()).add(b)
    seen: set[str] = set()
    stack: list[str] = []

    def visit(n: str) -> None:
        if n in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
        if n in seen:
            return
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            visit(m)
        stack.pop()
        seen.add(n)

    for n in sorted(graph):
        visit(n)


def _imports(path: Path) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
            if node.module == "llamarig.cli":
                out += [(f"llamarig.cli.{a.name}", node.lineno) for a in node.names]
    return out


def test_no_command_module_imports_another() -> None:
    """A command's module (cli/*_cmd.py) parses options, calls the library (llamarig.app, the
    use cases) and prints; what two commands share lives in the library or in cli/options.py,
    never in another command's module."""
    bad = []
    for f in sorted((SRC / "cli").glob("*_cmd.py")):
        for mod, line in _imports(f):
            if mod.startswith("llamarig.cli.") and mod.split(".")[2].endswith("_cmd") and mod.split(".")[2] != f.stem:
                bad.append(f"cli/{f.name}:{line}: imports {mod}")
    assert not bad, "command modules importing each other:\n" + "\n".join(bad)


#: a library module that points its reader to the CLI's code (an import, a module path, a file)
_NAMES_CLI = re.compile(r"llamarig\.cli\b|\bcli/\w+\.py")


def test_library_never_names_the_cli() -> None:
    """Library code (everything outside cli/) neither imports the CLI nor sends its reader there:
    the use cases live in the library, so that is where a reader is pointed."""
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC)
        if rel.parts[0] == "cli" or rel.name == "__main__.py":
            continue
        text = f.read_text()
        bad += [f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in _NAMES_CLI.finditer(text)]
    assert not bad, "library modules naming the CLI:\n" + "\n".join(bad)


#: the one module that asks the NVIDIA driver (NVML through nvidia-ml-py, else nvidia-smi)
TELEMETRY = Path("hardware/telemetry.py")
#: calls that find or run a program
_RUNS = {"which", "run", "Popen", "check_output", "check_call", "call", "create_subprocess_exec"}


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def test_gpu_telemetry_has_one_home() -> None:
    """NVML (``pynvml``) is imported and ``nvidia-smi`` is named in a call (which, run) only in
    hardware/telemetry.py: bench, top and detect all read GPUs through it."""
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC)
        if rel == TELEMETRY:
            continue
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad += [f"{rel}:{node.lineno}: imports {n}" for n in names if n.split(".")[0] == "pynvml"]
            elif isinstance(node, ast.Call) and _callee(node) in _RUNS and any(
                    isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.startswith("nvidia-smi")
                    for a in node.args for c in ast.walk(a)):
                bad.append(f"{rel}:{node.lineno}: calls with 'nvidia-smi'")
    assert not bad, "GPU telemetry outside hardware/telemetry.py:\n" + "\n".join(bad)
