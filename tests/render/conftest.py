from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

BASE = {"n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512}
SHAPES = {
    "llama": dict(BASE, n_layer=4),
    "qwen35": dict(BASE, n_layer=4, ssm_state_size=64, ssm_group_count=2, ssm_time_step_rank=8),
}


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private launch state directory; what was launched into it is stopped at teardown."""
    from tests.conftest import stop_launched

    d = tmp_path / "state"
    monkeypatch.setenv("LLAMARIG_STATE_DIR", str(d))
    yield d
    stop_launched(d)


@pytest.fixture
def with_bin(server_bin: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMARIG_SERVER_BIN", str(server_bin))
    return server_bin


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """cli(*argv) -> (exit code, stdout, stderr) through llamarig's real entry point."""
    from llamarig.cli.main import main

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            main(list(argv))
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
