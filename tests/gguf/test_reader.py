"""The header reader and ModelSpec on good and bad input (no server needed)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from llamarig.errors import GGUFError, LlamarigError
from llamarig.gguf import load_spec, read_header
from llamarig.gguf.reader import ArrayInfo
from llamarig.testing.synth import write_model


@pytest.fixture(scope="module")
def llama_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("r") / "llama.gguf", "llama")


def test_header_matches_gguf_package(llama_file: Path) -> None:
    from gguf import GGUFReader

    ours = read_header(llama_file)
    theirs = GGUFReader(str(llama_file))
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors, strict=True):
        assert a.n_bytes == int(b.n_bytes)
        assert a.shape == tuple(int(x) for x in b.shape)
        assert a.offset == int(b.data_offset)
    assert ours.metadata["llama.block_count"] == 2
    assert ours.metadata["general.architecture"] == "llama"


def test_large_arrays_are_skipped_not_decoded(tmp_path: Path) -> None:
    p = tmp_path / "big.gguf"
    w = GGUFWriter(str(p), "llama")
    w.add_token_list([f"t{i}" for i in range(20000)])
    w.add_array("llama.small", [1, 2, 3])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    h = read_header(p)
    assert h.metadata["tokenizer.ggml.tokens"] == ArrayInfo("str", 20000)
    assert h.metadata["llama.small"] == [1, 2, 3]


def _bad(tmp_path: Path, data: bytes) -> str:
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    with pytest.raises(GGUFError) as ei:
        load_spec(p)
    msg = str(ei.value)
    assert "\n" not in msg and str(p) in msg
    return msg


def _hdr(version: int = 3, n_tensors: int = 0, n_kv: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="no such file"):
        load_spec(tmp_path / "nope.gguf")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(GGUFError):
        load_spec(tmp_path)


def test_not_gguf(tmp_path: Path) -> None:
    assert "not a GGUF file" in _bad(tmp_path, b"PK\x03\x04" + b"\0" * 100)
    assert "not a GGUF file" in _bad(tmp_path, b"GG")


def test_unsupported_version(tmp_path: Path) -> None:
    assert "unsupported GGUF version 7" in _bad(tmp_path, _hdr(version=7) + b"\0" * 16)
    assert "big-endian" in _bad(tmp_path, b"GGUF" + struct.pack(">IQQ", 3, 0, 0) + b"\0" * 8)


def test_absurd_counts(tmp_path: Path) -> None:
    assert "truncated" in _bad(tmp_path, _hdr(n_kv=2**62) + b"\0" * 16)
    assert "truncated" in _bad(tmp_path, _hdr(n_tensors=2**40) + b"\0" * 16)


def test_absurd_string_length(tmp_path: Path) -> None:
    data = _hdr(n_kv=1) + struct.pack("<Q", 2**62) + b"key" + b"\0" * 16
    assert "truncated" in _bad(tmp_path, data)


def test_absurd_array_length(tmp_path: Path) -> None:
    key = b"general.architecture"
    body = struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, 2**60)
    assert "truncated" in _bad(tmp_path, _hdr(n_kv=1) + body + b"\0" * 64)
    body = struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 6, 2**50)
    assert "truncated" in _bad(tmp_path, _hdr(n_kv=1) + body + b"\0" * 64)


def test_truncated_everywhere(llama_file: Path, tmp_path: Path) -> None:
    data = llama_file.read_bytes()
    h = read_header(llama_file)
    # every cut inside the header, and some inside the tensor data
    cuts = list(range(0, h.data_offset, 97)) + [h.data_offset + 10, len(data) - 1]
    for cut in cuts:
        p = tmp_path / f"cut{cut}.gguf"
        p.write_bytes(data[:cut])
        with pytest.raises(GGUFError):
            load_spec(p)


def test_fuzz_header_mutations(llama_file: Path, tmp_path: Path) -> None:
    """Random byte flips in the header: a valid spec or a clean GGUFError, never anything else."""
    data = bytearray(llama_file.read_bytes())
    end = read_header(llama_file).data_offset
    rng = random.Random(1234)
    p = tmp_path / "fuzz.gguf"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(400):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(4, end)
            mutated[pos] = rng.choice([0, 0xFF, rng.randrange(256), mutated[pos] ^ (1 << rng.randrange(8))])
        p.write_bytes(mutated)
        try:
            spec = load_spec(p)
            spec.to_json()
            outcomes["ok"] += 1
        except LlamarigError as e:
            assert "\n" not in str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0 and outcomes["ok"] > 0


def _write_part(path: Path, no: int, count: int, tensors: dict[str, np.ndarray], arch_keys: bool) -> None:
    w = GGUFWriter(str(path), "llama")
    w.add_uint16("split.no", no)
    w.add_uint16("split.count", count)
    if arch_keys:
        w.add_uint32("llama.block_count", 1)
        w.add_uint32("llama.embedding_length", 32)
        w.add_uint32("llama.attention.head_count", 4)
        w.add_uint32("llama.context_length", 2048)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_split_files(tmp_path: Path) -> None:
    a = np.zeros((32, 64), dtype=np.float16)
    b = np.zeros((32, 32), dtype=np.float32)
    p1 = tmp_path / "m-00001-of-00002.gguf"
    p2 = tmp_path / "m-00002-of-00002.gguf"
    _write_part(p1, 0, 2, {"token_embd.weight": a}, True)
    _write_part(p2, 1, 2, {"blk.0.attn_q.weight": b}, False)
    spec = load_spec(p1)
    assert spec.tensor_count == 2
    assert spec.weights_bytes == a.nbytes + b.nbytes
    assert spec.file_bytes == p1.stat().st_size + p2.stat().st_size
    assert spec.files == (str(p1), str(p2))
    assert spec.layers[0].head_dim_k == 8
    p2.unlink()
    with pytest.raises(GGUFError, match="split part missing"):
        load_spec(p1)


def test_mtp_sidecar_flag(tmp_path: Path) -> None:
    side = load_spec(write_model(tmp_path / "mtp.gguf", "qwen35", nextn_layers=1, mtp_only=True))
    full = load_spec(write_model(tmp_path / "full.gguf", "qwen35", nextn_layers=1))
    assert side.mtp_sidecar and not full.mtp_sidecar
    assert side.to_json()["mtp_sidecar"] is True


def test_swa_default_periods_follow_llama_cpp(tmp_path: Path) -> None:
    # gemma3: period 6 -> layers 0-4 SWA, 5 full (src/models/gemma3.cpp load_swa_pattern(ml, 6))
    spec = load_spec(write_model(tmp_path / "g.gguf", "gemma3", n_layer=7, swa_window=64))
    assert [ly.kind for ly in spec.layers] == ["swa"] * 5 + ["attention"] + ["swa"]
