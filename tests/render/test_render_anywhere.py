"""render where a pip install runs it: without a llama-server binary (the bundled schema, as check
and explain), with absolute paths everywhere (ExecStart= too), relative paths taken from the
script, and `render --fix` making exactly `check --fix`'s repairs (the 32 GB card field report's
unit: `--cache-reuse 256` with `--mmproj`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from llamarig.app.check import check, fix
from llamarig.render.common import comment_text

from .conftest import SHAPES

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
UNIT_004 = Path(__file__).resolve().parents[1] / "flags" / "fixtures" / "seed004.service"


@pytest.fixture
def no_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without llama-server: no $LLAMARIG_SERVER_BIN, an empty build cache, a PATH
    without it."""
    monkeypatch.delenv("LLAMARIG_SERVER_BIN", raising=False)
    monkeypatch.setenv("LLAMARIG_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr("llamarig.binary.CACHE_ROOT", tmp_path / "empty-cache")
    monkeypatch.setenv("PATH", os.defpath)
    assert shutil.which("llama-server") is None


def test_render_without_a_binary(no_binary: None, synth_model, cli, tmp_path: Path) -> None:
    model = synth_model("llama", **SHAPES["llama"])
    for fmt in ("bash", "systemd", "llama-swap", "preset", "compose"):
        code, out, err = cli("render", "-f", fmt, str(model), "-c", "2048")
        assert code == 0, (fmt, err)
        assert "the bundled schema of build 11434" in comment_text(out), fmt
    code, out, _err = cli("render", "-f", "systemd", str(model), "-c", "2048")
    # the unit names the program and says what to fill in: systemd does not search the user's PATH
    assert "ExecStart=llama-server" in out and "write the absolute path of llama-server there" in comment_text(out)
    # a flag the build does not have is still refused (checked against the bundled schema)
    code, _out, err = cli("render", str(model), "-c", "2048", "--bogus-flag", "1")
    assert code == 1 and "[unknown-flag]" in err
    # the same for a script
    script = tmp_path / "run.sh"
    script.write_text(f"llama-server -m {model} -c 2048\n")
    code, out, err = cli("render", "-f", "systemd", "--from-script", str(script))
    assert code == 0, err
    assert "ExecStart=llama-server" in out


def test_exec_start_is_absolute(synth_model, with_bin: Path, cli, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    model = synth_model("llama", **SHAPES["llama"])
    code, out, err = cli("render", "-f", "systemd", str(model), "-c", "2048")
    assert code == 0, err
    assert f"ExecStart={with_bin}" in out
    # a script that runs a bare `llama-server`: the file PATH finds, written absolute
    monkeypatch.setenv("PATH", f"{with_bin.parent}{os.pathsep}{os.defpath}")
    script = tmp_path / "run.sh"
    script.write_text(f"llama-server -m {model} -c 2048\n")
    code, out, err = cli("render", "-f", "systemd", "--from-script", str(script))
    assert code == 0, err
    assert f"ExecStart={with_bin.resolve()}" in out or f"ExecStart={with_bin}" in out


def test_render_fix_is_check_fix(with_bin: Path, cli, tmp_path: Path) -> None:
    """The 32 GB card field report's unit: check --fix drops `--cache-reuse 256` (it does nothing
    with --mmproj); render --fix kept it because it repaired only errors."""
    text = UNIT_004.read_text(encoding="utf-8")
    fixed = fix(check(text, kind="systemd")).text
    assert "--cache-reuse" not in check(fixed, kind="systemd").parsed.invocations[0].argv
    code, out, err = cli("render", "-f", "systemd", "--fix", "--force", "--from-script", str(UNIT_004))
    assert code == 0, err
    assert "--cache-reuse" not in check(out, kind="systemd").parsed.invocations[0].argv
    assert "repaired with `llamarig check --fix`" in comment_text(out)
    # what the repaired command runs is check --fix's command, word for word
    ran = check(out, kind="systemd").parsed.invocations[0].argv
    want = check(fixed, kind="systemd").parsed.invocations[0].argv
    assert [w for w in ran[1:] if not w.startswith("/")] == [w for w in want[1:] if not w.startswith("/")]


def test_render_of_a_script_names_the_logs_command(with_bin: Path, cli) -> None:
    """A render of a script says, in its header, how its server's log tells what really ran
    (report 004's unit: `llamarig logs LOG --script FILE`); a render of tokens does not."""
    script = SEEDS / "004_execstart.sh"
    code, out, err = cli("render", "--force", "--from-script", str(script))
    assert code == 0, err
    header = comment_text(out)
    assert f"`llamarig logs LOG --script {script}`" in header and "docs/logs.md" in header
    code, out, err = cli("render", "--force", "--model-path", "/m/q.gguf", "qwen3.6-27b:iq4_nl", "-c", "8192")
    assert code == 0, err
    assert "llamarig logs" not in comment_text(out)
