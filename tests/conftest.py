"""Shared fixtures: the real llama-server (built from source by scripts/get-llama-server),
synthetic GGUF models, and a factory that starts/stops servers on free loopback ports."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamarig import i18n
from llamarig.testing.rpc import RpcServer, rpc_server_binary, start_rpc_servers
from llamarig.testing.server import RunningServer, start_server
from llamarig.testing.synth import write_model

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

#: every process the tests start inherits this variable, so the end of the session can find
#: (and stop) any that outlived its test, whichever fixture or subprocess started it
RUN_TAG = uuid.uuid4().hex
os.environ["LLAMARIG_TEST_RUN"] = RUN_TAG
#: the CPU features `--detect` and check report during the tests: those of the portable test
#: build, whatever CPU this run gets (a native-build test reads /proc/cpuinfo itself)
os.environ["LLAMARIG_CPU_FEATURES"] = "neon" if os.uname().machine in ("aarch64", "arm64") else "avx2"
#: English output unless a test asks for Chinese: the CI machine's locale must not change results
for _var in ("LLAMARIG_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
    os.environ.pop(_var, None)
os.environ["LANG"] = "C.UTF-8"
#: no test reaches the internet: a model reference (hf:, ms:, -hf in a script) goes to a closed
#: loopback port unless a test's local hub (tests/hub/conftest.py) sets its own endpoint. Set
#: before huggingface_hub is imported: it reads HF_ENDPOINT once, for its own requests too.
for _var in ("HF_ENDPOINT", "MODELSCOPE_ENDPOINT", "MODEL_ENDPOINT"):
    os.environ[_var] = "http://127.0.0.1:9"
for _var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MODELSCOPE_API_TOKEN", "HF_HUB_OFFLINE"):
    os.environ.pop(_var, None)


def tagged_processes() -> list[tuple[int, str]]:
    """(pid, command line) of live processes started during this test session."""
    needle = f"LLAMARIG_TEST_RUN={RUN_TAG}".encode()
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        pid = int(d.name)
        if pid == os.getpid():
            continue
        try:
            if needle not in (d / "environ").read_bytes().split(b"\0"):
                continue
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out.append((pid, cmd))
    return out


def stop_launched(state_dir: Path) -> None:
    """Stop every server `llamarig launch` recorded in ``state_dir`` (by pid, start time and argv)."""
    from llamarig.launch import process as L

    for f in sorted(state_dir.glob("launch-*.json")) if state_dir.is_dir() else ():
        with contextlib.suppress(Exception):
            L.stop(state_file=f, timeout_s=10)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No process outlives the run: a server (llama-server, gateway, fake backend) a test left
    running fails the run; every leftover is killed by pid either way."""
    left = tagged_processes()
    servers = [(p, c) for p, c in left if "llama-server" in c or "rpc-server" in c or "llamarig" in c]
    for pid, _ in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if servers:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = "processes started by the tests were still running at the end (killed now):\n" + "\n".join(
            f"  pid {p}: {c[:200]}" for p, c in servers)
        if tr is not None:
            tr.write_line(msg, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _build_bin_dir() -> Path:
    """The portable build (scripts/get-llama-server --recipe portable): a fixed instruction set
    and no AMX, so a server test means the same on every CPU CI may get."""
    env = os.environ.get("LLAMARIG_SERVER_BIN")
    if env:
        return Path(env).parent
    out = subprocess.run(
        [str(ROOT / "scripts" / "get-llama-server"), "--recipe", "portable"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture(autouse=True)
def _private_header_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Remote GGUF headers (llamarig.hub) are cached per test, never in ~/.cache/llamarig."""
    monkeypatch.setenv("LLAMARIG_HEADER_CACHE", str(tmp_path_factory.mktemp("headers")))


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A developer's own tune calibration (~/.local/state/llamarig) must not change test results.
    Servers a test launched into it are stopped at teardown, also when the test failed."""
    d = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("LLAMARIG_STATE_DIR", str(d))
    monkeypatch.delenv("LLAMARIG_CALIBRATION", raising=False)
    yield
    stop_launched(d)


@pytest.fixture(scope="session")
def llama_bin_dir() -> Path:
    """Directory holding llama-server and llama-fit-params of the pinned build."""
    return _build_bin_dir()


@pytest.fixture(scope="session")
def server_bin(llama_bin_dir: Path) -> Path:
    return llama_bin_dir / "llama-server"


@pytest.fixture(scope="session")
def native_server_bin() -> Path:
    """A native build (-march=native), set by scripts/test as $LLAMARIG_NATIVE_SERVER_BIN when this
    CPU has buffer types or kernels the portable build lacks (AVX-512, AMX, Arm dot-product/i8mm)."""
    env = os.environ.get("LLAMARIG_NATIVE_SERVER_BIN")
    if not env:
        pytest.skip("no native build: this CPU's buffer types are those of the portable build "
                    "(scripts/get-llama-server --native-differs)")
    return Path(env)


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


def _server_factory(binary: Path, tmp_path: Path, started: list[RunningServer]):
    def start(model: Path | None, *args: str, **kw: object) -> RunningServer:
        srv = start_server(binary, model, list(args), log_dir=tmp_path, **kw)  # type: ignore[arg-type]
        started.append(srv)
        return srv

    return start


@pytest.fixture
def native_llama_server(native_server_bin: Path, tmp_path: Path) -> Iterator:
    """Like ``llama_server``, with the native build."""
    started: list[RunningServer] = []
    yield _server_factory(native_server_bin, tmp_path, started)
    for s in started:
        with contextlib.suppress(Exception):
            s.stop()


@pytest.fixture
def llama_server(server_bin: Path, tmp_path: Path) -> Iterator:
    """``llama_server(model, *args)`` starts a real llama-server; all are stopped at teardown."""
    started: list[RunningServer] = []
    yield _server_factory(server_bin, tmp_path, started)
    for s in started:
        with contextlib.suppress(Exception):  # one failing stop must not leave the others running
            s.stop()


@pytest.fixture
def rpc_servers(server_bin: Path, tmp_path: Path) -> Iterator:
    """``rpc_servers(n, **kw)`` starts n real rpc-servers on loopback ports (the multi-device rig:
    llamarig.launch.rpc); every one is stopped by pid at teardown, also when the test failed."""
    binary = rpc_server_binary(server_bin)
    if not binary.exists():
        pytest.skip(f"no {binary.name} beside {server_bin} (scripts/get-llama-server builds it)")
    started: list[RpcServer] = []

    def start(n: int, **kw: object) -> list[RpcServer]:
        servers = start_rpc_servers(binary, n, log_dir=tmp_path, **kw)
        started.extend(servers)
        return servers

    yield start
    for s in started:
        with contextlib.suppress(Exception):
            s.stop()


@pytest.fixture(scope="session")
def seeds_dir() -> Path:
    return ROOT / "tests" / "fixtures" / "seeds"


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private launch state directory; what was launched into it is stopped at teardown."""
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


def _locale(monkeypatch: pytest.MonkeyPatch, lang: str) -> Iterator[None]:
    """The locale says ``lang`` (LANG), no --lang nor LLAMARIG_LANG/LC_*; the process language
    is chosen from it and forgotten after the test."""
    for var in ("LLAMARIG_LANG", "LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LANG", lang)
    i18n.set_language(None)
    yield
    i18n.set_language(None)


@pytest.fixture
def chinese_locale(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The locale says Chinese (what a user in China has: LANG=zh_CN.UTF-8)."""
    yield from _locale(monkeypatch, "zh_CN.UTF-8")


@pytest.fixture
def english_locale(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The locale says nothing but C.UTF-8: English."""
    yield from _locale(monkeypatch, "C.UTF-8")
