"""``llamarig launch`` of an RPC deployment on this machine: the rpc-servers of the command's
loopback ``--rpc`` endpoints start first, then llama-server; every device's buffers are verified
against the plan; ``llamarig stop`` stops all of them by pid."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.render.conftest import SHAPES

from llamarig.launch import process as L
from llamarig.testing.server import free_port

pytestmark = pytest.mark.server


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return not L.pid_alive(pid)


def test_launch_starts_the_rpc_servers_verifies_every_device_and_stop_stops_all(
        synth_model, with_bin: Path, state_dir: Path, cli) -> None:
    model = synth_model("llama", **SHAPES["llama"])
    port, p1, p2 = free_port(), free_port(), free_port()
    rpc = f"127.0.0.1:{p1},127.0.0.1:{p2}"
    code, out, err = cli("launch", "--detach", "--json", "--port", str(port), str(model),
                         "-c", "2048", "-np", "1", "-t", "1", "--rpc", rpc, "-ngl", "99")
    try:
        assert code == 0, err
        res = json.loads(out)
        assert [r["endpoint"] for r in res["rpc_servers"]] == [f"127.0.0.1:{p1}", f"127.0.0.1:{p2}"]
        rows = {(r["device"], r["component"]): r for r in res["verification"]}
        for p in (p1, p2):  # each rpc-server's device holds weights and KV, as planned to the byte
            for comp in ("weights", "kv"):
                r = rows[(f"RPC0[127.0.0.1:{p}]", comp)]
                assert r["actual_mib"] and r["ok"] and abs(r["diff_mib"]) <= 0.011, r
        st = json.loads((state_dir / f"launch-{port}.json").read_text())
        assert [r["port"] for r in st["rpc"]] == [p1, p2]
        pids = [res["pid"]] + [r["pid"] for r in res["rpc_servers"]]
        assert all(not _gone(p) for p in pids)
    finally:
        code, out, _ = cli("stop", "--port", str(port))
    assert code == 0 and "rpc-server" in out
    assert all(_gone(p) for p in pids)
    assert not (state_dir / f"launch-{port}.json").exists()


def test_a_failed_server_takes_its_rpc_servers_down(synth_model, with_bin: Path, state_dir: Path, cli) -> None:
    """llama-server exits at start (a flag it rejects, launched with --force): the rpc-servers
    launch started for it are stopped too, and nothing is left in the state directory."""
    model = synth_model("llama", **SHAPES["llama"])
    port, p1 = free_port(), free_port()
    code, _, err = cli("launch", "-d", "--force", "--port", str(port), str(model), "-c", "512",
                       "--rpc", f"127.0.0.1:{p1}", "--no-such-flag")
    assert code == 3 and "exited with code" in err
    assert not L.port_in_use("127.0.0.1", p1)
    assert not (state_dir / f"launch-{port}.json").exists()
