"""The multi-device rig: rpc-servers on loopback under a real llama-server --rpc."""

from __future__ import annotations

import os
import re

import pytest

from llamarig.testing.rpc import rpc_argument

pytestmark = pytest.mark.server


def test_two_rpc_devices_take_the_model(rpc_servers, llama_server, synth_model):
    """llama-server splits the layers over both rpc-servers and logs a buffer for each, named by
    its endpoint (ggml-rpc's buffer type name: RPC<i>[HOST:PORT])."""
    rigs = rpc_servers(2)
    srv = llama_server(synth_model("llama"), "-lv", "4", "--rpc", rpc_argument(rigs), "-c", "2048", "-ngl", "99")
    assert srv.post("/completion", {"prompt": "hello", "n_predict": 2})["tokens_predicted"] == 2
    log = srv.log
    for r in rigs:
        assert re.search(rf"RPC\d+\[{re.escape(r.endpoint)}\] model buffer size", log), r.endpoint
        assert re.search(rf"RPC\d+\[{re.escape(r.endpoint)}\] compute buffer size", log), r.endpoint


def test_rpc_servers_are_stopped_by_pid(rpc_servers):
    rigs = rpc_servers(2)
    pids = [r.pid for r in rigs]
    assert all(r.proc.poll() is None for r in rigs)
    for r in rigs:
        r.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
