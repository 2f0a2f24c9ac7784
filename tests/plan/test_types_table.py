"""The literal ggml type table (src/llamarig/gguf/ggml_types.py) equals the gguf package's."""

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from llamarig.gguf.ggml_types import KV_CACHE_TYPES, TYPE_NAMES, TYPE_SIZES, row_size


def test_table_matches_gguf() -> None:
    ref = {t.name.lower(): GGML_QUANT_SIZES[t] for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}
    assert {k: v for k, v in TYPE_SIZES.items() if k in ref} == ref
    ids = {int(t): t.name.lower() for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}
    assert {k: v for k, v in TYPE_NAMES.items() if k in ids} == ids


def test_kv_row_sizes() -> None:
    sizes = {t: row_size(t, 1024) for t in KV_CACHE_TYPES}
    assert sizes == {"f32": 4096, "f16": 2048, "bf16": 2048, "q8_0": 1088, "q4_0": 576,
                     "q4_1": 640, "iq4_nl": 576, "q5_0": 704, "q5_1": 768}
