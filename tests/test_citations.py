"""Nothing llamarig prints, ships or documents cites a file a reader cannot open: every path into
this repository that the code, the shipped data, the catalogue, the docs or the scripts name
exists, and nothing points at notes outside it (a development machine's reference notes, a
working directory, "from memory")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: what a reader of llamarig (its output, its package, its docs) gets to read
SCANNED = [
    *sorted((ROOT / "src" / "llamarig").rglob("*.py")),
    *sorted((ROOT / "src" / "llamarig" / "data").rglob("*.json")),
    *sorted((ROOT / "src" / "llamarig" / "locale").rglob("*.po")),
    *sorted((ROOT / "docs").rglob("*.md")),
    *sorted((ROOT / "docs").rglob("*.txt")),
    *sorted(ROOT.glob("README*.md")),
    *sorted((ROOT / "scripts").iterdir()),
    *sorted((ROOT / "benchmarks").rglob("*.md")),
    *sorted((ROOT / "benchmarks").rglob("*.py")),
    ROOT / "pyproject.toml",
]

#: references to things outside the repository and not public
NOT_PUBLIC = re.compile(
    r"shared/reference|shared/seeds|/work/|memory-planners|llama-server-truth|from memory\b(?!\.)"
    r"|(?<!tests/fixtures/)\bseeds/\d{3}_", re.I)

#: a path into this repository (docs/plan.md, tests/fixtures/seeds/000_….txt, src/llamarig/…)
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:docs|tests|scripts|benchmarks|src/llamarig)/[\w./-]*\w\.(?:md|py|txt|json|sh|service|yaml|yml|png|po))")


#: paths of *other* public repositories that look like this one's, and the project each belongs
#: to, which must be named just before the path (so the reader knows where to open it)
EXTERNAL = {
    "docs/tested-gpus.md": "lilbee",
    "docs/calibration/2026-09-09-reference-machine.md": "pvaz/llamafit",
    "docs/source/en/model_doc/mistral3.md": "huggingface/transformers",
    "scripts/models/qwen3.5-27B.sh": "radixark/miles",
    "scripts/models/qwen3.5-9B.sh": "radixark/miles",
    "scripts/models/qwen36-35B-A3B.sh": "THUDM/slime",
    "docs/examples/aider-qwq-coder/llama-swap.yaml": "llama-swap",
}


def _missing(text: str) -> list[str]:
    """Repository paths the text cites that do not exist here (an external one counts when its
    project is not named within 40 characters before it)."""
    out = set()
    for m in REPO_PATH.finditer(text):
        path = m.group(1)
        if (ROOT / path).exists():
            continue
        project = EXTERNAL.get(path)
        if project is not None and project in text[max(0, m.start() - 40):m.start()]:
            continue
        out.add(path)
    return sorted(out)


def _text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError):
        return ""


@pytest.mark.parametrize("path", [p for p in SCANNED if p.is_file()], ids=lambda p: str(p.relative_to(ROOT)))
def test_cites_only_what_a_reader_can_open(path: Path) -> None:
    text = _text(path)
    bad = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
           for m in NOT_PUBLIC.finditer(text)]
    assert not bad, "non-public references:\n" + "\n".join(bad)
    missing = _missing(text)
    assert not missing, f"{path.relative_to(ROOT)} cites files that are not in the repository: {missing}"


def test_the_scan_catches_what_it_is_for() -> None:
    assert NOT_PUBLIC.search("see /work/shared/reference/memory-planners.md section 5")
    assert NOT_PUBLIC.search("n_ctx_train: unverified: from memory")
    assert NOT_PUBLIC.search("the report in seeds/004_d9cc8479c3afbc2e.txt")
    assert not NOT_PUBLIC.search("tests/fixtures/seeds/004_d9cc8479c3afbc2e.txt")
    assert not NOT_PUBLIC.search("placement from memory.place_layers")  # a module, not a recollection
    assert _missing("(docs/nowhere.md, docs/plan.md)") == ["docs/nowhere.md"]
    assert _missing("lilbee docs/tested-gpus.md") == [] and _missing("see docs/tested-gpus.md") == ["docs/tested-gpus.md"]
