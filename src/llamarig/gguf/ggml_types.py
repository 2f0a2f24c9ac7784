"""ggml tensor types: the one table of block sizes llamarig uses.

Sizes come from the ``gguf`` package (GGML_QUANT_SIZES, mirrored from
ggml/src/ggml-common.h); row_size follows ggml_row_size (ggml/src/ggml.c):
``row_size(type, ne) = type_size * ne / block_size``.
"""

from __future__ import annotations

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

#: name ("q4_0") -> (block elements, bytes per block)
TYPE_SIZES: dict[str, tuple[int, int]] = {
    t.name.lower(): GGML_QUANT_SIZES[t] for t in GGMLQuantizationType if t in GGML_QUANT_SIZES
}
#: ggml type id -> name
TYPE_NAMES: dict[int, str] = {
    int(t): t.name.lower() for t in GGMLQuantizationType if t in GGML_QUANT_SIZES
}

#: KV cache types llama-server accepts for -ctk/-ctv/-ctkd/-ctvd
#: (common/arg.cpp kv_cache_types: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1).
KV_CACHE_TYPES: tuple[str, ...] = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


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
