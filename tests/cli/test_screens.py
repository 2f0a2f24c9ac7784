"""Issue 33: every screen llamarig shows, as a user reads it. scripts/screens runs every command
(each --help, the field reports' inputs, the docs' offline examples, the first errors) in English
and Chinese at 80 and 120 columns, the captures in a real terminal (tmux); each run fails on a
line wider than the terminal, and a Chinese one on an English word outside the allowlist or a
Chinese sentence ending in ASCII punctuation. Run it alone with ``pytest -m screens`` or
``scripts/screens`` (``-k NAME``, ``-- ARGS`` for a command of your own)."""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> Any:
    loader = SourceFileLoader("screens", str(ROOT / "scripts" / "screens"))
    spec = importlib.util.spec_from_loader("screens", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["screens"] = mod  # the worker processes' results are unpickled by this name
    loader.exec_module(mod)
    return mod


screens = _load()

pytestmark = pytest.mark.screens
SCREENS = screens.all_screens()
CASES = [(s, lang, w) for s in SCREENS for lang in screens.LANGS for w in screens.WIDTHS]


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str, int], Any]:
    return {(r.screen.name, r.lang, r.width): r for r in screens.run_all(SCREENS, screens.LANGS, screens.WIDTHS)}


@pytest.mark.parametrize(("screen", "lang", "width"), CASES,
                         ids=[f"{s.name}-{lang}-{w}" for s, lang, w in CASES])
def test_screen(runs: dict[tuple[str, str, int], Any], screen: Any, lang: str, width: int) -> None:
    r = runs[(screen.name, lang, width)]
    assert not r.problems, (f"llamarig {' '.join(screen.args)} [{lang}, {width} columns]:\n  "
                            + "\n  ".join(r.problems) + "\n\n" + r.text)


def test_captures_are_these_runs(runs: dict[tuple[str, str, int], Any]) -> None:
    """docs/captures is what the capture screens show now (scripts/captures rewrites them)."""
    import shutil

    if not shutil.which("tmux"):
        pytest.skip("the captures are made in tmux")
    differ = screens.captures_differ([r for r in runs.values() if r.screen.capture], write=False)
    assert not differ, "run scripts/captures: " + ", ".join(differ)


def test_every_command_has_a_help_screen() -> None:
    names = {s.args[0] for s in SCREENS if s.name.startswith("help-")}
    assert {"plan", "check", "explain", "logs", "bench", "models", "gpus", "tune", "top", "gateway", "render",
            "launch", "stop", "inspect", "quality"} <= names


@pytest.mark.parametrize(("line", "lang", "found"), [
    ("放得下：CUDA0 (RTX 3090) 22.67 GiB", "zh", False),
    ("提示：pipeline parallelism on: 3 devices", "zh", True),  # English prose in Chinese
    ("（默认 disabled）", "zh", True),
    ("最优命令（all layers on the GPU）", "zh", True),
    ("  --ctx-size 65000 `-c 65000` 'srv  load_model: loading'", "zh", False),  # flags, code, quoted log
    ("n_ctx_slot = 95232 token，qwen3.6-27b:iq4_nl，/data/models/x.gguf", "zh", False),
    ("这条命令被截断.", "zh", True),  # a Chinese sentence ending in ASCII punctuation
    ("x" * 81, "en", True),  # wider than 80
    ("/a/very/long/path/" + "x" * 90, "en", False),  # a path alone on its line
    ("中" * 41, "zh", True),  # 82 cells
    ("--format preset 时为模型在路由中的名字", "zh", False),  # a flag's value
    ("每个预填充 ubatch 多 65 ms", "zh", True),  # the glossary's 物理批
    ("速度（llamarig 速度模型，校准：built-in）", "zh", True),  # a hyphenated English word is prose
    ("第 12 行 gap-after-backslash；llama-server 的 ggml-backend", "zh", False),  # a rule id, names
])
def test_the_checker(line: str, lang: str, found: bool) -> None:
    assert bool(screens.problems(line, 80, lang)) == found, screens.problems(line, 80, lang)
