"""ggml tensor types: the one table of block sizes llamarig uses.

Sizes mirror ``gguf.constants.GGML_QUANT_SIZES`` (gguf 0.19.0, itself mirrored from
ggml/src/ggml-common.h) as a literal table, so that importing it does not import the ``gguf``
package (~0.4 s of numpy start-up); tests/plan/test_types_table.py checks it against gguf.
row_size follows ggml_row_size (ggml/src/ggml.c): ``row_size(type, ne) = type_size * ne / block_size``.
"""

from __future__ import annotations

from typing import Literal, get_args

#: name -> (ggml type id, block elements, bytes per block)
_TYPES: dict[str, tuple[int, int, int]] = {
    "f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q4_1": (3, 32, 20),
    "q5_0": (6, 32, 22), "q5_1": (7, 32, 24), "q8_0": (8, 32, 34), "q8_1": (9, 32, 40),
    "q2_k": (10, 256, 84), "q3_k": (11, 256, 110), "q4_k": (12, 256, 144), "q5_k": (13, 256, 176),
    "q6_k": (14, 256, 210), "q8_k": (15, 256, 292), "iq2_xxs": (16, 256, 66), "iq2_xs": (17, 256, 74),
    "iq3_xxs": (18, 256, 98), "iq1_s": (19, 256, 50), "iq4_nl": (20, 32, 18), "iq3_s": (21, 256, 110),
    "iq2_s": (22, 256, 82), "iq4_xs": (23, 256, 136), "i8": (24, 1, 1), "i16": (25, 1, 2),
    "i32": (26, 1, 4), "i64": (27, 1, 8), "f64": (28, 1, 8), "iq1_m": (29, 256, 56),
    "bf16": (30, 1, 2), "tq1_0": (34, 256, 54), "tq2_0": (35, 256, 66), "mxfp4": (39, 32, 17),
    "nvfp4": (40, 64, 36), "q1_0": (41, 128, 18),
}

#: name ("q4_0") -> (block elements, bytes per block)
TYPE_SIZES: dict[str, tuple[int, int]] = {n: (b, s) for n, (_, b, s) in _TYPES.items()}
#: ggml type id -> name
TYPE_NAMES: dict[int, str] = {i: n for n, (i, _, _) in _TYPES.items()}

#: KV cache types llama-server accepts for -ctk/-ctv/-ctkd/-ctvd
#: (common/arg.cpp kv_cache_types: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1).
CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
KV_CACHE_TYPES: tuple[CacheType, ...] = get_args(CacheType)
#: KV cache types the CUDA flash-attention kernels handle, for K and for V, in any combination
#: (ggml/src/ggml-cuda/fattn.cu:525-538 ggml_cuda_fattn_kv_type_supported, build 11434): iq4_nl
#: is not among them.
CUDA_FA_KV_TYPES = frozenset({"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})
#: K-V pairs the CUDA decode (vec) flash-attention kernel is compiled for by default
#: (ggml/CMakeLists.txt:207-209 GGML_CUDA_FA_QUANTS "q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16");
#: other supported pairs are converted to f16 every token (fattn.cu:496-512, slow).
CUDA_FA_VEC_PAIRS = frozenset({("q4_0", "q4_0"), ("q8_0", "q8_0"), ("f16", "f16"), ("bf16", "bf16")})


def type_name(type_id: int) -> str | None:
    return TYPE_NAMES.get(type_id)


def row_size(type_name_: str, n_elements: int) -> int:
    """Bytes of ``n_elements`` consecutive values of a ggml type (ggml_row_size)."""
    block, size = TYPE_SIZES[type_name_.lower()]
    if n_elements % block:
        raise ValueError(f"{n_elements} elements is not a multiple of {type_name_}'s block of {block}")
    return size * n_elements // block


def tensor_bytes(type_name_: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor: rows of ne0 elements (ggml_nbytes for contiguous tensors)."""
    if not shape:
        return 0
    rows = 1
    for d in shape[1:]:
        rows *= d
    return row_size(type_name_, shape[0]) * rows
