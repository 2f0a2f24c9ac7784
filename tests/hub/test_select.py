"""hub.select chooses files as llama-server's -hf does (common/download.cpp at build 11434)."""

from __future__ import annotations

import pytest

from llamarig.hub.ref import is_remote, parse_ref
from llamarig.hub.select import (
    RepoFile,
    best_model,
    best_sibling,
    quant_bits,
    split_info,
    split_parts,
)

FILES = [RepoFile(p) for p in (
    "README.md",
    "Qwen3-8B-Q8_0.gguf",
    "Qwen3-8B-Q4_K_M.gguf",
    "Qwen3-8B-IQ4_NL.gguf",
    "BF16/Qwen3-8B-BF16-00002-of-00002.gguf",
    "BF16/Qwen3-8B-BF16-00001-of-00002.gguf",
    "mmproj-F16.gguf",
    "mmproj-BF16.gguf",
    "imatrix.gguf",
)]


def test_default_tag_is_q4_k_m_then_q8_0() -> None:
    assert best_model(FILES, "").path == "Qwen3-8B-Q4_K_M.gguf"  # type: ignore[union-attr]
    assert best_model([f for f in FILES if "Q4_K_M" not in f.path], "").path == "Qwen3-8B-Q8_0.gguf"  # type: ignore[union-attr]


def test_tag_is_case_insensitive_and_takes_the_first_split_part() -> None:
    primary = best_model(FILES, "bf16")
    assert primary is not None and primary.path == "BF16/Qwen3-8B-BF16-00001-of-00002.gguf"
    assert [f.path for f in split_parts(FILES, primary)] == [
        "BF16/Qwen3-8B-BF16-00001-of-00002.gguf", "BF16/Qwen3-8B-BF16-00002-of-00002.gguf"]
    assert best_model(FILES, "Q5_K_M") is None


def test_mmproj_closest_bits() -> None:
    # F16 and BF16 are both 16 bits from a Q8_0 model's 8: the first listed wins on a tie
    assert best_sibling(FILES, "Qwen3-8B-Q8_0.gguf").path == "mmproj-F16.gguf"  # type: ignore[union-attr]
    # a projector in a sub-folder the model is not in is not a sibling
    assert best_sibling([RepoFile("x/mmproj-F16.gguf")], "Qwen3-8B-Q8_0.gguf") is None


def test_split_info_and_bits() -> None:
    si = split_info("BF16/Qwen3-8B-BF16-00001-of-00002.gguf")
    assert si is not None and (si.tag, si.index, si.count) == ("BF16", 1, 2)
    assert quant_bits("Qwen3-8B-Q4_K_M.gguf") == 4 and quant_bits("x-F16.gguf") == 16


@pytest.mark.parametrize(("text", "remote"), [
    ("hf:a/b", True), ("a/b:Q4_K_M", True), ("ms:a/b:Q8_0", True), ("https://x/y.gguf", True),
    ("models/x", False), ("models/x.gguf", False), ("qwen3.6-27b:iq4_nl", False), ("./a/b:Q4", False),
])
def test_is_remote(text: str, remote: bool) -> None:
    assert is_remote(text) is remote


def test_parse_ref() -> None:
    r = parse_ref("hf:unsloth/Qwen3-8B-GGUF@main:q4_k_m")
    assert (r.hub, r.repo, r.revision, r.quant, r.hf_repo_arg) == ("hf", "unsloth/Qwen3-8B-GGUF", "main", "Q4_K_M",
                                                                 "unsloth/Qwen3-8B-GGUF:Q4_K_M")
    r = parse_ref("hf:unsloth/Qwen3-8B-GGUF/BF16/Qwen3-8B-BF16-00001-of-00002.gguf")
    assert r.file == "BF16/Qwen3-8B-BF16-00001-of-00002.gguf" and r.quant == ""
