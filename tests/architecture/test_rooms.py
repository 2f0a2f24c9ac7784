"""plan/ is a house of rooms by concern (docs/architecture.md, "The rooms of plan/"): each room a
subpackage holding its engine and its estimator, the pipeline and what every room shares at the
top, and no module name twice, so a name says which room it is in."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

PLAN = Path(__file__).resolve().parents[2] / "src" / "llamarig" / "plan"

#: the rooms (issue 39): a new concern gets its own room here and in docs/architecture.md
ROOMS = {"kv", "weights", "compute", "draft", "mmproj", "fit", "speed", "calibration", "optimise"}


def _modules() -> list[Path]:
    return [p for p in PLAN.rglob("*.py") if p.name != "__init__.py"]


def test_plan_has_its_rooms() -> None:
    rooms = {p.name for p in PLAN.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == ROOMS, f"plan/'s subpackages {sorted(rooms)} are not the rooms {sorted(ROOMS)}"


def test_no_module_name_twice() -> None:
    twice = sorted(n for n, k in Counter(p.stem for p in _modules()).items() if k > 1)
    assert not twice, f"module names used twice under plan/: {twice}"


def test_each_estimator_lives_in_its_room() -> None:
    stray = sorted(str(p.relative_to(PLAN)) for p in _modules()
                   if p.stem.endswith("_estimator") and p.parent.name not in ROOMS)
    assert not stray, f"an estimator outside the rooms: {stray}"
    assert not (PLAN / "estimators").exists(), "plan/estimators/ is gone: estimators live in their rooms"


def test_every_room_says_what_it_holds() -> None:
    for room in ROOMS:
        doc = (PLAN / room / "__init__.py").read_text(encoding="utf-8").strip()
        assert doc.startswith('"""'), f"plan/{room}/__init__.py has no docstring saying what it holds"
