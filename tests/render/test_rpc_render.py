"""render of an RPC deployment: the coordinator's file names its rpc-servers, and --format
systemd writes one unit per rpc-server beside it (render/rpc.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from llamarig.app.check import check
from llamarig.flags.schema import load_bundled

from .conftest import SHAPES

RPC = "192.168.1.20:50052,192.168.1.21:50052"
DESCRIBED = ["--rpc-device", "192.168.1.20:50052=rtx3090", "--rpc-device", "192.168.1.21:50052=64G"]


def test_systemd_writes_a_unit_per_rpc_server(tmp_path: Path, synth_model, with_bin: Path, cli):
    model = synth_model("llama", **SHAPES["llama"])
    out = tmp_path / "coord.service"
    code, _, err = cli("render", "-f", "systemd", "-o", str(out), "--name", "coord", *DESCRIBED, str(model),
                       "-c", "4096", "-np", "1", "--cache-ram", "0", "--rpc", RPC, "-ngl", "99")
    assert code == 0, err
    coord = out.read_text()
    assert "RPC deployment: start these rpc-servers first" in coord
    units = {p.name: p.read_text() for p in tmp_path.glob("coord-rpc-*.service")}
    assert sorted(units) == ["coord-rpc-192-168-1-20-50052.service", "coord-rpc-192-168-1-21-50052.service"]
    gpu, cpu = units["coord-rpc-192-168-1-20-50052.service"], units["coord-rpc-192-168-1-21-50052.service"]
    assert "--host 192.168.1.20 --port 50052 --device CUDA0" in gpu and "Restart=always" in gpu
    assert "--host 192.168.1.21 --port 50052 --device CPU" in cpu
    # the units' commands pass check's rpc-server rules, except the one warning they must carry
    for text in units.values():
        rules = {f.rule for f in check(text, schema=load_bundled()).findings if f.rule.startswith("rpc-")}
        assert rules == {"rpc-open"}
    if shutil.which("systemd-analyze"):
        for name in units:
            r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / name)], capture_output=True, text=True)
            assert "ExecStart" not in r.stderr, r.stderr


def test_loopback_rpc_servers_are_required_by_the_coordinator(synth_model, with_bin: Path, cli):
    model = synth_model("llama", **SHAPES["llama"])
    code, out, err = cli("render", "-f", "systemd", "--name", "c", str(model), "-c", "2048",
                         "--rpc", "127.0.0.1:50052")
    assert code == 0, err
    coord, _sep, unit = out.partition("# ---- c-rpc-127-0-0-1-50052.service")
    assert "Requires=c-rpc-127-0-0-1-50052.service" in coord
    assert "--host 127.0.0.1 --port 50052" in unit and "no authentication" not in unit


def test_bash_names_the_commands(synth_model, with_bin: Path, cli):
    model = synth_model("llama", **SHAPES["llama"])
    code, out, err = cli("render", *DESCRIBED, str(model), "-c", "2048", "--rpc", RPC)
    assert code == 0, err
    assert "#   on 192.168.1.20: " in out and "ggml-rpc-server --host 192.168.1.20 --port 50052 --device CUDA0" in out
    assert "rpc-server has no authentication" in out


@pytest.mark.parametrize("bad", ["box.invalid:50052"])
def test_an_endpoint_that_does_not_resolve_is_refused(bad, synth_model, with_bin: Path, cli):
    code, _, err = cli("render", str(synth_model("llama", **SHAPES["llama"])), "-c", "2048", "--rpc", bad)
    assert code == 2 and "IPv4 address" in err
