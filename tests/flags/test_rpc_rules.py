"""check's RPC rules (llamarig.flags.rules.rpc): llama-server's --rpc and the rpc-servers a script
starts, each held against what the pinned binaries do."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llamarig.app.check import check
from llamarig.errors import ServerError
from llamarig.flags.schema import load_bundled
from llamarig.launch.rpc import rpc_server_binary
from llamarig.testing.rpc import rpc_argument

SCRIPT = """\
#!/bin/bash
ggml-rpc-server -H 0.0.0.0 -p 50052 -c &
/opt/llama/bin/rpc-server --host localhost --port 50053 &
rpc-server -p 70000 -t 0 --verbose &
llama-server -m model.gguf --rpc 192.168.1.20:50052,192.168.1.20:50052,10.0.0.3 -ngl 99
"""


def _rules(text: str) -> list[tuple[int, str, str]]:
    rep = check(text, schema=load_bundled())
    return [(f.line, f.rule, str(f.severity)) for f in rep.findings if f.rule.startswith("rpc-")]


def test_rules_on_a_script():
    got = _rules(SCRIPT)
    assert (2, "rpc-open", "warning") in got and (2, "rpc-cache", "info") in got
    assert (3, "rpc-host-invalid", "error") in got
    assert (4, "rpc-bad-value", "error") in got and (4, "rpc-unknown-arg", "error") in got
    assert sum(1 for x in got if x[:2] == (4, "rpc-bad-value")) == 2  # the port and the threads
    for rule, sev in (("rpc-endpoint-invalid", "error"), ("rpc-endpoint-repeated", "warning"),
                      ("rpc-same-build", "info"), ("rpc-cache-ram", "info")):
        assert (5, rule, sev) in got


def test_a_unit_and_loopback_are_quiet():
    unit = """\
[Service]
ExecStart=/usr/local/bin/ggml-rpc-server \\
    --host 127.0.0.1 --port 50052 --device CUDA0
"""
    assert _rules(unit) == []
    assert _rules("llama-server -m m.gguf --rpc 10.0.0.2:50052 --cache-ram 0\n") == [(1, "rpc-same-build", "info")]
    # a LAN address is still a warning (no authentication), not an error
    assert _rules("ggml-rpc-server --host 10.0.0.2 --port 50052\n") == [(1, "rpc-open", "warning")]


# ------------------------------------------------------------------ what the binaries do

@pytest.fixture(scope="module")
def rpc_bin(server_bin: Path) -> Path:
    b = rpc_server_binary(server_bin)
    if not b.exists():
        pytest.skip(f"no {b.name} beside {server_bin}")
    return b


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.server
def test_rpc_server_exits_0_on_an_unknown_argument_and_on_a_name_as_host(rpc_bin: Path):
    r = _run([str(rpc_bin), "--verbose"])
    assert r.returncode == 0 and "unknown argument: --verbose" in r.stderr  # rpc-unknown-arg
    r = _run([str(rpc_bin), "--host", "localhost", "--port", "1"])
    assert r.returncode == 0 and "Invalid host address: localhost" in r.stderr  # rpc-host-invalid
    assert "Never expose the RPC server" in r.stderr  # any host but 127.0.0.1 warns (rpc-open)
    r = _run([str(rpc_bin), "-p", "70000"])
    assert r.returncode == 1 and "Invalid parameters" in r.stderr  # rpc-bad-value


@pytest.mark.server
def test_llama_server_aborts_on_an_endpoint_without_port(server_bin: Path, synth_model):
    r = _run([str(server_bin), "-m", str(synth_model("llama")), "--rpc", "127.0.0.1", "--port", "1"])
    assert r.returncode != 0 and "Failed to parse endpoint: 127.0.0.1" in r.stdout + r.stderr


@pytest.mark.server
def test_a_repeated_endpoint_is_one_device(rpc_servers, llama_server, synth_model):
    """rpc-endpoint-repeated, and the planner's reading of it: one device, planned as one."""
    (rig,) = rpc_servers(1)
    srv = llama_server(synth_model("llama"), "-lv", "4", "--rpc", rpc_argument([rig, rig]), "-ngl", "99")
    devices = [ln for ln in srv.log.splitlines() if "using device RPC" in ln]
    assert len(devices) == 1, devices
    from llamarig.plan.inputs import build_plan
    from llamarig.testing.plans import deployment_of

    p = build_plan(deployment_of(str(synth_model("llama")), ["--rpc", rpc_argument([rig, rig]), "-ngl", "99"],
                                 rpc_devices=[f"{rig.endpoint}=8G"]))
    assert [d.name for d in p.devices] == [f"RPC0[{rig.endpoint}]"]


def test_launch_names_an_unreachable_rpc_server():
    from llamarig.launch.process import likely_causes

    causes = likely_causes(["llama-server", "--rpc", "10.0.0.9:50052"], "Failed to connect to 10.0.0.9:50052\n")
    assert any("not running or not reachable" in c for c in causes)
    assert ServerError  # the error class launch raises with them
