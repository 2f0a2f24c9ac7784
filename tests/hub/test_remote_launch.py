"""The real llama-server's -hf against the local hub: `llamarig launch hf:OWNER/REPO:QUANT` plans
from the header, llama-server downloads the same file itself (HF_ENDPOINT), and every logged
buffer matches the plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llamarig.testing.hub import LocalHub
from llamarig.testing.server import free_port

pytestmark = pytest.mark.server


def test_launch_hf_reference(hub: LocalHub, with_bin: Path, state_dir: Path, tmp_path: Path, cli: Any,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "llama-cache"))  # llama-server's downloads
    port = free_port()
    code, out, err = cli("launch", "--detach", "--json", "--port", str(port), "hf:acme/Tiny-GGUF:Q8_0",
                         "-c", "2048", "-np", "1", "-t", "2")
    try:
        assert code == 0, err
        res = json.loads(out)
        assert res["verified"], res["verification"]
        weights = [r for r in res["verification"] if r["device"] == "host" and r["component"].startswith("weights ")]
        assert weights and all(r["ok"] and abs(r["diff_mib"]) <= 0.011 for r in weights), weights
        # llama-server chose the file the plan read: the one it downloaded
        got = [r[1] for r in hub.log.requests if r[0] == "GET" and "/resolve/" in r[1] and not r[2]]
        assert got and all(p.endswith("/Tiny-Q8_0.gguf") for p in got), hub.log.requests
        assert any(r[1].endswith("/refs") for r in hub.log.requests)  # llama-server's own listing
    finally:
        cli("stop", "--port", str(port))
