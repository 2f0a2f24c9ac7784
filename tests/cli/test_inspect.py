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


def _foobar(tmp_path: Path) -> Path:
    import numpy as np
    from gguf import GGUFWriter

    p = tmp_path / "foobar.gguf"
    w = GGUFWriter(str(p), "foobar")
    w.add_name("[bold]x[/bold]")  # text from the file is never rich markup
    w.add_uint32("foobar.block_count", 2)
    w.add_uint32("foobar.embedding_length", 64)
    w.add_uint32("foobar.attention.head_count", 4)
    w.add_tensor("blk.0.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return p


def test_unknown_arch_warns_and_prints_no_none(tmp_path: Path) -> None:
    p = _foobar(tmp_path)
    r = run("inspect", str(p))
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "None" not in out
    assert "64 / ? / ?" in out
    assert "is not one llamarig models" in out and "generic guesses" in out
    assert "[bold]x[/bold]" in out
    d = json.loads(run("inspect", str(p), "--json").stdout)
    assert d["n_ff"] is None and d["n_vocab"] is None and d["n_ctx_train"] is None
    assert any("is not one llamarig models" in w for w in d["warnings"])
    assert d["source"] == "file"


def test_directory_is_one_line_exit_2(tmp_path: Path) -> None:
    r = run("inspect", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr == f"llamarig: error: {tmp_path}: is a directory, not a GGUF file\n"


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    r = run("inspect", str(tmp_path / "missing.gguf"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"llamarig: error: {tmp_path / 'missing.gguf'}: no such file\n"


def test_header_without_weights_is_rejected(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    p = tmp_path / "empty.gguf"
    w = GGUFWriter(str(p), "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run("inspect", str(p))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "has no tensors" in r.stderr


def test_catalogue_id(tmp_path: Path) -> None:
    r = run("inspect", "qwen3.6-27b:iq4_nl")
    assert r.returncode == 0, r.stderr
    assert "catalogue entry (no file read)" in " ".join(r.stdout.split())
    d = json.loads(run("inspect", "qwen3.6-27b:iq4_nl", "--json").stdout)
    assert d["source"] == "catalogue" and d["files"] == []
    assert d["architecture"] == "qwen35" and d["n_layer"] == 64
    assert {ly["kind"] for ly in d["layers"]} == {"recurrent", "attention"}


def test_unknown_catalogue_id_suggests(tmp_path: Path) -> None:
    r = run("inspect", "qwen3.6-27")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "no such file, and not a catalogue id" in r.stderr and "qwen3.6-27b" in r.stderr
    r = run("inspect", "qwen3.6-27b:nosuchquant")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "qwen3.6-27b:iq4_nl" in r.stderr
