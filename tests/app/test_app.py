"""The application layer (llamarig.app) is the CLI's: the library's check gives what `llamarig
check --json` prints on every corpus file, render and plan give the same speed for the same
command, launch passes its environment to the server without touching this process's."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

import llamarig
from llamarig.catalogue.gpus import parse_gpu_arg
from llamarig.render.common import comment_text
from llamarig.testing.synth import write_model

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "flags" / "fixtures"
#: every launch file of the test corpus: the seeds' scripts and units, and one of each reader's
CORPUS = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".sh", ".service", ".yml", ".yaml",
                                                                                ".ini", ".conf", ""))


def test_corpus_is_not_empty() -> None:
    assert len(CORPUS) >= 15


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_check_text_equals_check_json(path: Path, cli) -> None:
    code, out, err = cli("check", "--bundled", "--cores", "6", "--json", str(path))
    lib = llamarig.check_text(path.read_text(encoding="utf-8", errors="replace"), cores=6, origin=path)
    if [f.rule for f in lib] == ["no-invocation"]:  # no server command at all: bad input, one line
        assert code == 2 and "no llama-server command found" in err and not out
        return
    assert code in (0, 1), err
    assert [f.to_json() for f in lib] == json.loads(out)["findings"]


def test_check_report_is_the_cli_document(cli) -> None:
    path = FIXTURES / "seed000_original.sh"
    code, out, _err = cli("check", "--bundled", "--cores", "6", "--json", str(path))
    rep = llamarig.check(path.read_text(), cores=6, origin=path, base_dir=path.parent)
    assert isinstance(rep, llamarig.CheckReport)
    assert rep.to_json() == json.loads(out) and (code == 1) == bool(rep.errors)


#: render's comments carry plan's headline decode line (llamarig.plan.optimise.verdict.decode_headline)
_SPEED = re.compile(r"decode (?P<decode>[\d.]+) tok/s at depth 0, [\d.]+ at depth \d+ \(modelled; physical limit "
                    r"(?P<limit>[\d.]+)\); prefill (?P<prefill>\d+) tok/s")


@pytest.fixture(scope="module")
def offload_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """73 MiB of weights: on a 1.4 GiB card --fit keeps 4 of 5 layers on the GPU (the compute
    replay's figure, with op offload of the host layer's ubatch), so the settings llama-server runs
    differ from the ones written (tests that speed follows --fit's)."""
    return write_model(tmp_path_factory.mktemp("app") / "offload.gguf", "llama", n_layer=4, n_embd=1024,
                       n_head=8, n_head_kv=4, head_dim=128, n_ff=2048)


@pytest.mark.parametrize("gpu", [None, "rtx3090:1.4"])
def test_render_and_plan_give_the_same_speed(gpu: str | None, offload_model: Path, cli, with_bin: Path) -> None:
    gpu_args = ["--gpu", gpu] if gpu else []
    code, out, err = cli("plan", str(offload_model), *gpu_args, "-c", "4096", "--calibration", "builtin", "--json")
    assert code == 0, err
    plan = json.loads(out)
    if gpu:  # --fit moved layers: the speed is for what llama-server runs
        assert any("--fit would place 4 of 5 layers" in n for n in plan["notes"]), plan["notes"]
    code, script, err = cli("render", *gpu_args, str(offload_model), "-c", "4096")
    assert code == 0, err
    m = _SPEED.search(comment_text(script))
    assert m, script
    # the CLI's plan is the library's (its JSON rounds to 0.01), whose figures render prints
    hw = llamarig.machine([parse_gpu_arg(gpu)] if gpu else [])
    p = llamarig.plan_command(llamarig.deployment(str(offload_model), ["-c", "4096"], hardware=hw), calibration="builtin")
    assert p.to_json() == plan
    assert m["decode"] == f"{p.speed.decode_tok_s:.1f}"
    assert m["limit"] == f"{p.speed.decode_limit_tok_s:.0f}"
    assert m["prefill"] == f"{p.speed.prefill.tok_s:.0f}"


def test_plan_command_equals_the_cli(offload_model: Path, cli) -> None:
    code, out, _err = cli("plan", str(offload_model), "--gpu", "rtx3090:1.4", "-c", "4096", "--calibration",
                          "builtin", "--json")
    d = llamarig.deployment(str(offload_model), ["-c", "4096"], hardware=llamarig.machine([parse_gpu_arg("rtx3090:1.4")]))
    p = llamarig.plan_command(d, calibration="builtin")
    assert p.to_json() == json.loads(out)
    assert p.effective_cfg is not None and p.effective_cfg.n_gpu_layers == 4


def test_a_missing_model_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(llamarig.ModelNotFoundError):
        llamarig.plan_command(llamarig.deployment(str(tmp_path / "nope.gguf"), ["-c", "4096"]))


def test_resolve_then_render_as_a_library(offload_model: Path, with_bin: Path) -> None:
    res = llamarig.resolve_command([str(offload_model), "-c", "4096", "--port", "8123"])
    assert res.binary == str(with_bin) and res.plan is not None and res.speed is res.plan.speed
    unit = llamarig.render_command(res, "systemd")
    assert "ExecStart=" in unit and "--port 8123" in unit


@pytest.mark.server
def test_launch_passes_the_environment_to_the_server(synth_model, with_bin: Path, tmp_path: Path) -> None:
    """The command's environment (a script's export) and ``env`` reach llama-server; this
    process's own environment is not changed (launch used to rewrite os.environ)."""
    model = synth_model("llama")
    script = tmp_path / "start.sh"
    script.write_text(f"export LLAMARIG_TEST_FROM_SCRIPT=1\n{with_bin} -m {model} -c 512 --port 0\n")
    res = llamarig.resolve_command(from_script=str(script))
    assert ("LLAMARIG_TEST_FROM_SCRIPT", "1") in res.env
    before = dict(os.environ)
    lr = llamarig.launch_command(res, port=_free_port(), env={"LLAMARIG_TEST_EXTRA": "2"}, timeout_s=120)
    try:
        environ = Path(f"/proc/{lr.state.pid}/environ").read_bytes().split(b"\0")
        assert b"LLAMARIG_TEST_FROM_SCRIPT=1" in environ and b"LLAMARIG_TEST_EXTRA=2" in environ
        assert dict(os.environ) == before
    finally:
        llamarig.stop_server(state_file=lr.state_file)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
