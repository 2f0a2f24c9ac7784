"""`llamarig inspect` as a user runs it: a subprocess, its output and its exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llamarig.cli.main", *args], capture_output=True,
                          text=True, timeout=60)


REQUIRED = {"architecture", "n_layer", "n_ctx_train", "n_embd", "layers", "swa_window", "n_expert",
            "n_expert_used", "nextn_layers", "weights_bytes", "file_bytes", "tensor_count"}


def test_json_keys_and_shape(synth_model) -> None:
    p = synth_model("qwen3", n_layer=3, n_head=8, n_head_kv=4, head_dim=8)
    r = run("inspect", str(p), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d.keys() >= REQUIRED
    assert d["architecture"] == "qwen3"
    assert d["n_layer"] == 3 and len(d["layers"]) == 3
    assert {ly["kind"] for ly in d["layers"]} == {"attention"}
    assert [(ly["n_head"], ly["n_head_kv"], ly["head_dim_k"], ly["head_dim_v"]) for ly in d["layers"]] == [(8, 4, 8, 8)] * 3
    assert d["file_bytes"] == p.stat().st_size
    assert "tensors" not in d
    d2 = json.loads(run("inspect", str(p), "--json", "--tensors").stdout)
    assert len(d2["tensors"]) == d["tensor_count"]
    assert sum(t["bytes"] for t in d2["tensors"]) == d["weights_bytes"]


def test_human_output(synth_model) -> None:
    r = run("inspect", str(synth_model("llama")))
    assert r.returncode == 0
    assert "architecture" in r.stdout and "llama" in r.stdout


@pytest.mark.parametrize("content", [b"", b"hello world, not a model", b"GGUF\x03\x00\x00\x00"])
def test_bad_files_exit_2_one_line(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    r = run("inspect", str(p))
    assert r.returncode == 2
    assert r.stderr.startswith("llamarig: error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr


def test_missing_file(tmp_path: Path) -> None:
    r = run("inspect", str(tmp_path / "missing.gguf"))
    assert r.returncode == 2 and "no such file" in r.stderr
