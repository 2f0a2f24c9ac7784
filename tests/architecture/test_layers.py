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
    """A command's module (cli/*_cmd.py) parses options, calls llamarig.api and prints; what two
    commands share lives in the library or in cli/options.py, never in another command's module."""
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


#: what a command module (cli/*_cmd.py) may import from the library beyond ``llamarig.api``:
#: the CLI's own helpers, the error tree, the message catalogue, and what formats or reads a
#: value for a person (units, text layout, how a process ended, bench's document writers, a
#: remote reference's spelling); from any other module only value types (dataclasses, enums,
#: errors) and constants (ALL_CAPS)
DOOR_MODULES = ("llamarig.api", "llamarig.cli.", "llamarig.errors", "llamarig.i18n", "llamarig.units",
                "llamarig.text", "llamarig.procs", "llamarig.bench.report", "llamarig.bench.html",
                "llamarig.hub.ref")

#: functions that write a value for a person or read what a person types, kept beside their
#: data: "module:name" (a command module may import them; they compute nothing)
DOOR_FORMATTERS = {
    "llamarig.app.check:dump_json",  # check --json's layout (one list item per line when long)
    "llamarig.app.runs:log_hint",  # the sentence pointing from check to `llamarig logs`
    "llamarig.hub.resolve:describe",  # one line: what reading a remote header cost
    "llamarig.flags.schema:bundled_provenance",  # check --help's rows of the bundled schemas
    "llamarig.tune.quality:parse_types",  # reading quality's --types (q8_0,q4_0/q8_0)
    "llamarig.flags.argv:default_schema",  # plan's option splitter: how many words a server flag takes
}

#: TEMPORARY: use-case imports of command modules that other branches are reworking, "cli/FILE":
#: {"module:name"}; each names the api function it becomes. The test fails on an entry that no
#: longer offends, so the list only shrinks.
DOOR_ALLOWANCES: dict[str, set[str]] = {
    # the gateway's branch: `api.gateway_config` already does what gateway_cmd.py:45-51 repeats
    # (load_config / build_config / with_overrides); serving becomes `api.serve_gateway`;
    # dataclass_dict (--check --json) a `GatewayConfig.to_json()`; the reasons' labels and
    # problem texts a typed `GatewayStatus` the API returns (`api.gateway_status`)
    "cli/gateway_cmd.py": {"llamarig.gateway.config:build_config", "llamarig.gateway.config:dataclass_dict",
                           "llamarig.gateway.config:load_config", "llamarig.gateway.config:with_overrides",
                           "llamarig.gateway.server:serve", "llamarig.gateway.reasons:source_label",
                           "llamarig.gateway.reasons:problem_text", "llamarig.gateway.reasons:label"},
    # top's branch: `--once` becomes `api.top_snapshot` (it repeats it); the live view an
    # `api.top_watch(url, ...)` iterator of Snapshots in place of the Collector
    "cli/top_cmd.py": {"llamarig.top.collect:once", "llamarig.top.collect:Collector"},
    # check's branch (api.check is being reworked there): reading the input and choosing the
    # flag schema go into `api.check` (a path; bundled=, build=); explain's FastLLM translation
    # (cli/check_cmd.py _explain_translations) into `api.explain_report` (a typed
    # `ExplainReport.other_engines`)
    "cli/check_cmd.py": {"llamarig.app.check:get_schema", "llamarig.app.check:read_input",
                         "llamarig.flags.engines.fastllm:translation_of"},
    # launch: this machine's rpc-server memory goes into `api.resolve_command` (a loopback_rpc
    # flag in place of the number; its signature is being reworked on check's branch too)
    "cli/render_cmd.py": {"llamarig.launch.rpc:host_memory"},
}


def _door_imports(path: Path) -> list[tuple[str, str, int]]:
    """(module, name, line) of every library import of a command module outside TYPE_CHECKING;
    name '*' for ``import llamarig.x`` (a whole module)."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" for n in ast.walk(node)}
    out: list[tuple[str, str, int]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, "*", node.lineno) for a in node.names if a.name.startswith("llamarig.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("llamarig"):
            out += [(node.module, a.name, node.lineno) for a in node.names]
    return out


def _door_ok(module: str, name: str) -> bool:
    import dataclasses
    import enum
    import importlib
    import inspect

    if module == "llamarig" and name == "api":
        return True
    if module.startswith(DOOR_MODULES) or module + "." in DOOR_MODULES or f"{module}:{name}" in DOOR_FORMATTERS:
        return True
    obj = getattr(importlib.import_module(module), name, None)
    if inspect.isclass(obj):  # a value type (a dataclass, an enum, an error), not a class that works
        return dataclasses.is_dataclass(obj) or issubclass(obj, (enum.Enum, BaseException, tuple))
    return name.isupper() and not callable(obj) and not inspect.ismodule(obj)


def test_the_api_is_the_only_door() -> None:
    """A command module (cli/*_cmd.py) parses options, calls one ``llamarig.api`` function and
    formats its typed result: it imports no use case (``llamarig.app.*`` functions, the
    optimiser, the bench runner, the gateway server, ...) and no library module whole; types
    and constants to format are fine (docs/architecture.md, "The API is the only door")."""
    bad, stale = [], []
    for f in sorted((SRC / "cli").glob("*_cmd.py")):
        rel = f"cli/{f.name}"
        allowed = DOOR_ALLOWANCES.get(rel, set())
        used = set()
        for module, name, line in _door_imports(f):
            if _door_ok(module, name):
                continue
            if f"{module}:{name}" in allowed:
                used.add(f"{module}:{name}")
                continue
            bad.append(f"{rel}:{line}: from {module} import {name}")
        stale += [f"{rel}: {x}" for x in sorted(allowed - used)]
    assert not bad, "command modules past the API (call a llamarig.api function instead):\n" + "\n".join(bad)
    assert not stale, "DOOR_ALLOWANCES entries that no longer offend (remove them):\n" + "\n".join(stale)
