"""What ModelSpec accepts, rejects and warns about, checked against llama.cpp's loader rules."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from llamarig.errors import GGUFError
from llamarig.gguf import load_spec
from llamarig.gguf.spec import GENERIC_ATTENTION_ARCHS, MODELLED_ARCHS
from llamarig.testing.synth import ARCHITECTURES, write_model

UNKNOWN = "is not one llamarig models"


def write_header(path: Path, arch: str, keys: dict[str, int], tensors: bool = True) -> Path:
    """A GGUF with only the given ``{arch}.*`` integer keys and (optionally) one tensor."""
    w = GGUFWriter(str(path), arch)
    for k, v in keys.items():
        w.add_uint32(f"{arch}.{k}", v)
    if tensors:
        w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


FULL = {"block_count": 2, "context_length": 128, "embedding_length": 64, "attention.head_count": 4}


def test_unknown_architecture_warns(tmp_path: Path) -> None:
    spec = load_spec(write_header(tmp_path / "f.gguf", "foobar", FULL))
    assert spec.architecture == "foobar" and spec.n_layer == 2
    assert [w for w in spec.warnings if UNKNOWN in w and "generic guesses" in w]


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_synthetic_architectures_are_modelled(tmp_path: Path, arch: str) -> None:
    spec = load_spec(write_model(tmp_path / f"{arch}.gguf", arch))
    assert not [w for w in spec.warnings if UNKNOWN in w]


def test_known_set_is_what_spec_handles() -> None:
    from llamarig.gguf import spec as S

    assert S.RECURRENT_ARCHS | S.HYBRID_ARCHS | set(S.SWA_DEFAULT_PERIOD) <= MODELLED_ARCHS
    assert {"llama", "qwen3", "qwen3moe", "clip"} <= MODELLED_ARCHS
    assert not GENERIC_ATTENTION_ARCHS & (S.RECURRENT_ARCHS | S.HYBRID_ARCHS | set(S.SWA_DEFAULT_PERIOD))
    assert "bert" not in MODELLED_ARCHS  # an encoder: no KV cache, not a generic decoder


def test_missing_block_count_is_an_error(tmp_path: Path) -> None:
    keys = {k: v for k, v in FULL.items() if k != "block_count"}
    with pytest.raises(GGUFError, match=r"no llama\.block_count") as ei:
        load_spec(write_header(tmp_path / "m.gguf", "llama", keys))
    assert "\n" not in str(ei.value)


def test_zero_block_count_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="block_count = 0"):
        load_spec(write_header(tmp_path / "z.gguf", "llama", dict(FULL, block_count=0)))


def test_no_tensors_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="has no tensors"):
        load_spec(write_header(tmp_path / "h.gguf", "llama", FULL, tensors=False))
    with pytest.raises(GGUFError, match="has no tensors"):
        load_spec(write_header(tmp_path / "a.gguf", "llama", {}, tensors=False))


def test_missing_required_keys_warn(tmp_path: Path) -> None:
    spec = load_spec(write_header(tmp_path / "k.gguf", "llama", {"block_count": 1}))
    text = " | ".join(spec.warnings)
    assert "no llama.context_length" in text and "no llama.embedding_length" in text


@pytest.mark.server
def test_llama_cpp_rejects_what_we_reject(server_bin: Path, tmp_path: Path) -> None:
    """The real loader refuses a file without block_count: the rule we apply is llama.cpp's."""
    keys = {k: v for k, v in FULL.items() if k != "block_count"}
    p = write_header(tmp_path / "nobc.gguf", "llama", keys)
    r = subprocess.run([str(server_bin), "-m", str(p), "--host", "127.0.0.1", "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "key not found in model: llama.block_count" in r.stdout + r.stderr
