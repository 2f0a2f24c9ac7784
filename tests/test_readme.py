"""The README's promises: the same two commands in both languages, CI runs the test command,
and the main command works as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commands(readme: str) -> list[str]:
    text = (ROOT / readme).read_text()
    return [b.strip() for b in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)][:2]


def test_two_commands_same_in_both_languages() -> None:
    en = commands("README.md")
    zh = commands("README.zh-CN.md")
    assert len(en) == 2 and en == zh
    assert en[1] == "./scripts/test"


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands("README.md")[1] in ci.splitlines()


def test_main_command_runs() -> None:
    main = commands("README.md")[0]
    # the part after the install: run it with this interpreter (the package is installed)
    steps = [s.split() for s in main.split("&&")]
    assert steps[0] == ["python3", "-m", "venv", ".venv"]  # PEP 668: no pip into the system Python
    argv = steps[-1]
    assert argv[0] == ".venv/bin/llamarig"
    r = subprocess.run([sys.executable, "-m", "llamarig", *argv[1:]], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr  # 1 = honest "does not fit"
    assert "Traceback" not in r.stderr
    assert r.stdout.strip()
    # the answer first: the verdict and the free memory on the first line, ~45 lines in all
    lines = r.stdout.splitlines()
    assert lines[0].startswith(("fits:", "does not fit:")) and "GiB" in lines[0]
    assert len(lines) <= 45, len(lines)


def test_readme_sample_matches_the_output() -> None:
    """The first line the README shows is what the command prints (both languages)."""
    main = commands("README.md")[0].split("&&")[-1].split()[1:]
    for readme, lang in (("README.md", "en"), ("README.zh-CN.md", "zh")):
        r = subprocess.run([sys.executable, "-m", "llamarig", "--lang", lang, *main], capture_output=True,
                           text=True, timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        first = r.stdout.splitlines()[0]
        m = re.search(r"^```\n(.+)$", (ROOT / readme).read_text(), re.M)  # the plain fenced sample
        assert m is not None, readme
        shown = m.group(1).split("…")[0].rstrip("; ；")
        assert len(shown) > 30 and first.startswith(shown), (first, shown)
