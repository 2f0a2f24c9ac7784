"""Shared fixtures: the real llama-server (built from source by scripts/get-llama-server),
synthetic GGUF models, and a factory that starts/stops servers on free loopback ports."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamarig.testing.server import RunningServer, start_server
from llamarig.testing.synth import write_model

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"


def _build_bin_dir() -> Path:
    env = os.environ.get("LLAMARIG_SERVER_BIN")
    if env:
        return Path(env).parent
    out = subprocess.run(
        [str(ROOT / "scripts" / "get-llama-server")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own tune calibration (~/.local/state/llamarig) must not change test results."""
    monkeypatch.setenv("LLAMARIG_STATE_DIR", str(tmp_path_factory.mktemp("state")))
    monkeypatch.delenv("LLAMARIG_CALIBRATION", raising=False)


@pytest.fixture(scope="session")
def llama_bin_dir() -> Path:
    """Directory holding llama-server and llama-fit-params of the pinned build."""
    return _build_bin_dir()


@pytest.fixture(scope="session")
def server_bin(llama_bin_dir: Path) -> Path:
    return llama_bin_dir / "llama-server"


@pytest.fixture(scope="session")
def fit_params_bin(llama_bin_dir: Path) -> Path:
    return llama_bin_dir / "llama-fit-params"


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("synth")


@pytest.fixture(scope="session")
def synth_model(synth_dir: Path):
    """``synth_model(arch, **shape)`` -> path of a cached synthetic GGUF."""
    cache: dict[tuple, Path] = {}

    def make(arch: str, **shape: object) -> Path:
        key = (arch, tuple(sorted(shape.items())))
        if key not in cache:
            name = arch + "".join(f"-{k}{v}" for k, v in sorted(shape.items())) + ".gguf"
            cache[key] = write_model(synth_dir / name, arch, **shape)
        return cache[key]

    return make


@pytest.fixture
def llama_server(server_bin: Path, tmp_path: Path) -> Iterator:
    """``llama_server(model, *args)`` starts a real llama-server; all are stopped at teardown."""
    started: list[RunningServer] = []

    def start(model: Path | None, *args: str, **kw: object) -> RunningServer:
        srv = start_server(server_bin, model, list(args), log_dir=tmp_path, **kw)  # type: ignore[arg-type]
        started.append(srv)
        return srv

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def seeds_dir() -> Path:
    return ROOT / "tests" / "fixtures" / "seeds"
