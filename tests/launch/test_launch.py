"""launch / stop / the rendered bash launcher against the real llama-server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from tests.render.conftest import SHAPES

from llamarig.launch import process as L
from llamarig.testing.server import free_port

pytestmark = pytest.mark.server


@pytest.mark.parametrize("arch", ["llama", "qwen35"])
def test_launch_verifies_and_stop_stops_only_its_own(arch: str, synth_model, llama_server, with_bin: Path,
                                                     state_dir: Path, cli) -> None:
    model = synth_model(arch, **SHAPES[arch])
    other = llama_server(model, "-c", "512", "-np", "1")  # a second server the test started itself
    port = free_port()
    code, out, err = cli("launch", "--detach", "--json", "--port", str(port), str(model),
                         "-c", "2048", "-np", "2", "-t", "2", "-ctk", "q8_0", "-ctv", "q8_0")
    assert code == 0, err
    res = json.loads(out)
    rows = {(r["device"], r["component"]): r for r in res["verification"]}
    assert res["verified"], res["verification"]
    weights = [r for (dev, comp), r in rows.items() if dev == "host" and comp.startswith("weights ")]
    assert weights and all(r["ok"] and abs(r["diff_mib"]) <= 0.011 for r in weights), weights
    for comp in ("kv",) + (("recurrent",) if arch == "qwen35" else ()):
        r = rows[("host", comp)]
        assert r["ok"] and abs(r["diff_mib"]) <= 0.011, r
    st = json.loads((state_dir / f"launch-{port}.json").read_text())
    assert st["pid"] == res["pid"] and "-lv" in st["argv"] and st["start_ticks"] is not None
    # a second launch on the same port is refused (port in use)
    code, _, err = cli("launch", "-d", "--port", str(port), str(model), "-c", "512")
    assert code == 3 and "in use" in err
    code, out, _ = cli("stop", "--port", str(port))
    assert code == 0 and f"pid {res['pid']}" in out
    assert not L.pid_alive(res["pid"])
    assert other.proc.poll() is None  # untouched
    assert other.get("/health")["status"] == "ok"
    code, _, err = cli("stop", "--port", str(port))
    assert code == 2 and "no launch state" in err


def test_stop_refuses_a_reused_pid(state_dir: Path, llama_server, synth_model, server_bin: Path, cli) -> None:
    srv = llama_server(synth_model("llama", **SHAPES["llama"]), "-c", "256", "-np", "1")
    st = L.LaunchState(srv.proc.pid, 12345, (str(server_bin), "-m", "other"), str(server_bin), "127.0.0.1",
                       srv.port, "/dev/null", 0.0)
    L.write_state(st)
    code, out, _ = cli("stop", "--port", str(srv.port))
    assert code == 0 and "not stopping anything" in out
    assert srv.proc.poll() is None
    assert not L.state_path(srv.port).exists()


def test_launch_bad_input(state_dir: Path, synth_model, llama_server, with_bin: Path, cli) -> None:
    model = synth_model("llama", **SHAPES["llama"])
    code, _, err = cli("launch", "-d", "--server-bin", "/nonexistent/llama-server", str(model))
    assert code == 3 and "not an executable" in err
    code, _, err = cli("launch", "-d", str(model) + ".missing", "-c", "512")
    assert code == 2 and "not found" in err
    code, _, err = cli("launch", "-d", "--ram", "1M", str(model), "-c", "512")
    assert code == 1 and "does not fit" in err and "--force" in err
    # a flag the server rejects: refused by `llamarig check` before anything starts
    port = free_port()
    code, _, err = cli("launch", "-d", "--port", str(port), str(model), "-c", "512", "--no-such-flag")
    assert code == 1 and "llamarig: error: [unknown-flag] `--no-such-flag`" in err and "--force" in err
    assert not L.state_path(port).exists() and not L.port_in_use("127.0.0.1", port)
    # with --force it is launched: the server exits; last log lines and the likely cause from check
    code, _, err = cli("launch", "-d", "--force", "--port", str(port), str(model), "-c", "512", "--no-such-flag")
    assert code == 3 and "exited with code" in err and "likely cause" in err
    assert "check [unknown-flag]" in err and "--force: launch anyway" in err
    assert not L.state_path(port).exists()
    # a llamarig option after the model: one line, nothing started (it used to reach llama-server)
    code, _, err = cli("launch", "-d", "--port", str(port), str(model), "-c", "512", "--ram", "1M")
    assert code == 2 and "put llamarig options before the model" in err and len(err.strip().splitlines()) == 1
    assert not L.state_path(port).exists()


def test_rendered_bash_starts_and_stops(tmp_path: Path, synth_model, llama_server, with_bin: Path, cli,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model = synth_model("llama", **SHAPES["llama"])
    other = llama_server(model, "-c", "256", "-np", "1")
    port = free_port()
    script = tmp_path / "srv.sh"
    # rendered in the model's directory with a relative model path ...
    monkeypatch.chdir(model.parent)
    code, _, err = cli("render", "-o", str(script), "--name", "srv", model.name, "-c", "512", "-np", "1",
                       "-t", "2", "--port", str(port))
    assert code == 0, err
    assert f"-m {model}" in script.read_text()
    env = dict(os.environ, LLAMARIG_RUN_DIR=str(tmp_path / "run"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        # ... and started from another directory: the absolute path still finds it
        r = subprocess.run([str(script), "start"], env=env, capture_output=True, text=True, timeout=200,
                           cwd=elsewhere)
        assert r.returncode == 0, r.stdout + r.stderr
        pid = int((tmp_path / "run" / "srv.pid").read_text())
        assert L.health(f"http://127.0.0.1:{port}") == 200
        r = subprocess.run([str(script), "status"], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and str(pid) in r.stdout
    finally:
        r = subprocess.run([str(script), "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "stopped" in r.stdout, r.stdout + r.stderr
    assert not L.pid_alive(pid)
    assert not (tmp_path / "run" / "srv.pid").exists()
    assert other.proc.poll() is None


def test_foreground_launch_stops_its_server_on_sigterm(synth_model, with_bin: Path, state_dir: Path) -> None:
    import signal
    import sys
    import time

    model = synth_model("llama", **SHAPES["llama"])
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "llamarig", "launch", "--port", str(port), str(model), "-c", "512",
                          "-np", "1", "-t", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not L.state_path(port).exists() or L.health(f"http://127.0.0.1:{port}") != 200:
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.2)
        pid = json.loads(L.state_path(port).read_text())["pid"]
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert "stopped llama-server pid" in err and not L.pid_alive(pid)
    assert not L.state_path(port).exists()


def test_launch_verifies_the_mtp_draft_context(synth_model, with_bin: Path, state_dir: Path, cli,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    model = synth_model("qwen35", **SHAPES["qwen35"], nextn_layers=1)
    port = free_port()
    monkeypatch.chdir(model.parent)  # a relative model path: launched (and recorded) as absolute
    code, out, err = cli("launch", "-d", "--json", "--port", str(port), model.name, "-c", "2048", "-np", "1",
                         "-t", "2", "--spec-type", "draft-mtp", "--spec-draft-n-max", "2")
    try:
        assert code == 0, err
        res = json.loads(out)
        assert res["argv"][res["argv"].index("-m") + 1] == str(model)
        rows = {(r["device"], r["component"]): r for r in res["verification"]}
        assert rows[("host", "draft")]["actual_mib"] > 0 and rows[("host", "draft")]["ok"], rows
        assert res["verified"], res["verification"]
    finally:
        cli("stop", "--port", str(port))


def test_stop_with_stale_or_ambiguous_state(state_dir: Path, server_bin: Path, cli) -> None:
    p = subprocess.Popen(["true"])  # a pid that has exited
    p.wait()
    for port in (1111, 2222):
        L.write_state(L.LaunchState(p.pid, None, (str(server_bin),), str(server_bin), "127.0.0.1", port, "/dev/null", 0.0))
    code, _, err = cli("stop")
    assert code == 2 and "1111, 2222" in err
    code, out, _ = cli("stop", "--port", "1111")
    assert code == 0 and "not stopping anything" in out and "not running" in out
    code, out, _ = cli("stop")  # one left: no --port needed
    assert code == 0 and not L.list_states()
    (state_dir / "launch-3333.json").write_text("[1, 2]")
    code, _, err = cli("stop", "--port", "3333")
    assert code == 2 and "not a llamarig launch state" in err
