"""CUDA flash attention's allocation size at the pinned build 11434.

The CUDA buffer type sizes a FLASH_ATTN_EXT node with ``ggml_cuda_flash_attn_ext_get_alloc_size``
(ggml/src/ggml-cuda/ggml-cuda.cu:903-907, fattn.cu:725-760): when the kernel chosen for the node
needs f16 K / V and the cache is not f16, the f16 copies of K and V are part of the node's own
allocation (fattn-common.cuh:54-85: the output padded to 128 B, + nelements(K) x 2, padded to
128, + nelements(V) x 2 unless V is a view of K). So the conversion lives inside ggml-alloc's
compute buffer, not in ggml's CUDA memory pool, and how much it adds depends on what else is
alive next to the node (:func:`llamarig.plan.compute.ggml_graph.allocate`).

The kernel is ``ggml_cuda_get_best_fattn_kernel`` (fattn.cu:541-719), decided by the device's
compute capability, the head size, the K/V types and the number of query rows; the vector
kernel only exists for the K/V type pairs compiled in (GGML_CUDA_FA_QUANTS, default
``q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16``, ggml/CMakeLists.txt:207-208; f32 K/V use the f16
instance), other pairs fall back to f16 copies (fattn.cu:495-513).
"""

from __future__ import annotations

from llamarig.gguf.ggml_types import CUDA_FA_KV_TYPES, CUDA_FA_VEC_PAIRS, TYPE_SIZES, row_size
from llamarig.plan.compute.ggml_graph import Tensor

#: ggml/CMakeLists.txt:208 (GGML_CUDA_FA_QUANTS, GGML_CUDA_FA_ALL_QUANTS off)
DEFAULT_FA_QUANTS = CUDA_FA_VEC_PAIRS
#: fattn.cu:525-538 ggml_cuda_fattn_kv_type_supported
KV_TYPES = CUDA_FA_KV_TYPES
#: ggml-cuda/common.cuh:52-56
CC_VOLTA, CC_TURING, CC_ADA = 700, 750, 890
#: fattn-common.cuh FATTN_KQ_STRIDE
FATTN_KQ_STRIDE = 256


def _quantized(t: str) -> bool:
    return TYPE_SIZES[t][0] > 1


def _gqa_opt(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, gqa: int) -> bool:
    """Whether the GQA-optimised kernels apply: a mask, the cells a multiple of
    FATTN_KQ_STRIDE and every non-quantized operand's strides 16 B aligned (fattn.cu:553-565)."""
    if gqa < 2 or mask is None or k.ne[1] % FATTN_KQ_STRIDE:
        return False
    return not any(any(t.nb[i] % 16 for i in (1, 2, 3)) for t in (q, k, v, mask) if not _quantized(t.type))


def _head_sizes_ok(dk: int, dv: int, gqa: int, gqa_opt: bool) -> bool:
    """The head sizes a kernel is compiled for (fattn.cu:567-606)."""
    if dk in (40, 64, 72, 80, 96, 112, 128, 256):
        return dv == dk
    if dk == 192:
        return dv == 128 and gqa_opt and gqa % 8 == 0
    if dk == 320:
        return dv == 256 and gqa_opt and gqa % 32 == 0
    if dk in (512, 576):
        return dv == 512 and gqa_opt
    return False


def _turing_kernel(cc: int, q: Tensor, k: Tensor, gqa: int, gqa_opt: bool, quant: bool, can_vec: bool) -> str:
    """Turing and newer (fattn.cu:660-700): the vector kernel for one or two query rows, else
    the tensor-core kernel."""
    n_q = q.ne[1]
    if can_vec:
        if not quant:
            if (cc >= CC_ADA and n_q == 1 and q.ne[3] == 1
                    and not (gqa > 4 and (q.ne[0] >= 256 or k.ne[1] >= 8192))):
                return "VEC"
        elif (cc >= CC_ADA and n_q <= 2) or n_q == 1:
            return "VEC"
        if not gqa_opt and n_q == 1:
            return "VEC"
    return "MMA_F16"


def _older_kernel(cc: int, q: Tensor, gqa: int, gqa_opt: bool, quant: bool, can_vec: bool) -> str:
    """Volta and older (fattn.cu:701-719)."""
    n_q = q.ne[1]
    ncols2_max = 32 if q.ne[0] == 320 else (16 if q.ne[0] in (576, 192) else 8)
    eff = 1
    while gqa % (2 * eff) == 0 and eff < ncols2_max:
        eff *= 2
    if cc >= CC_VOLTA and q.ne[0] not in (40, 72):
        if can_vec and n_q * eff <= 2:
            return "VEC"
        return "TILE" if n_q * eff <= 16 else "MMA_F16"
    if can_vec and ((not quant and n_q == 1 and not gqa_opt) or (quant and n_q <= 2)):
        return "VEC"
    return "TILE"


def best_kernel(cc: int, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> str:
    """fattn.cu:541-719 for an NVIDIA device of compute capability ``cc`` (x 100 + y x 10:
    900 for 9.0), without ALiBi (max_bias 0). ``"MMA_F16"``, ``"TILE"``, ``"VEC"`` or
    ``"NONE"``. The sparse decode gather (MMA for one query row, GQA > 4, head size < 256 and
    fewer than 8192 cells) is taken as not chosen: its heuristic reads the device."""
    gqa = q.ne[2] // max(1, k.ne[2])
    gqa_opt = _gqa_opt(q, k, v, mask, gqa)
    if not _head_sizes_ok(k.ne[0], v.ne[0], gqa, gqa_opt):
        return "NONE"
    if k.type not in KV_TYPES or v.type not in KV_TYPES or (mask is not None and mask.ne[2] != 1):
        return "NONE"
    quant = _quantized(k.type) or _quantized(v.type)
    can_vec = q.ne[0] <= 256 and q.ne[0] % 64 == 0 and q.ne[0] != 192 and k.ne[1] % FATTN_KQ_STRIDE == 0
    if cc >= CC_TURING and q.ne[0] not in (40, 72):
        return _turing_kernel(cc, q, k, gqa, gqa_opt, quant, can_vec)
    return _older_kernel(cc, q, gqa, gqa_opt, quant, can_vec)


def _norm(t: str) -> str:
    return "f16" if t == "f32" else t


def f16_copies(cc: int, node: Tensor, fa_quants: frozenset[tuple[str, str]] = DEFAULT_FA_QUANTS) -> tuple[bool, bool]:
    """Whether the node converts K, V to f16 (fattn.cu:725-760)."""
    q, k, v = node.src[0], node.src[1], node.src[2]
    mask = node.src[3] if len(node.src) > 3 else None
    kern = best_kernel(cc, q, k, v, mask)
    if kern in ("TILE", "MMA_F16"):
        return True, True
    if kern == "VEC":
        fallback = not (q.ne[0] in (64, 128, 256) and (_norm(k.type), _norm(v.type)) in fa_quants)
        return k.type == "f32" or fallback, v.type == "f32" or fallback
    return False, False


def _pad(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def alloc_size(cc: int, node: Tensor) -> int:
    """ggml_cuda_flash_attn_ext_get_alloc_size for a node ggml-alloc sizes (data not yet set,
    so the padding counts from 0): the output, then the f16 K and V copies it needs."""
    end = node.nbytes
    need_k, need_v = f16_copies(cc, node)
    k, v = node.src[1], node.src[2]
    nel_k = k.ne[0] * k.ne[1] * k.ne[2] * k.ne[3]
    nel_v = v.ne[0] * v.ne[1] * v.ne[2] * v.ne[3]
    v_is_k = v.view_src is not None and (v.view_src is k or (v.view_src is k.view_src and v.view_offs == k.view_offs))
    if need_k and k.type != "f16":
        end = _pad(end, 128) + nel_k * 2
    if need_v and v.type != "f16" and not v_is_k:
        end = _pad(end, 128) + nel_v * 2
    return end


#: MATRIX_ROW_PADDING (ggml-cuda/common.cuh): quantized rows are padded to 512 elements
MATRIX_ROW_PADDING = 512


def cuda_alloc_size(cc: int, t: Tensor) -> int:
    """ggml_backend_cuda_buffer_type_get_alloc_size (ggml-cuda.cu:903-925): a quantized tensor's
    last row padded to MATRIX_ROW_PADDING elements (a weight copied in for an offloaded op), a
    FLASH_ATTN_EXT node with its f16 K/V copies (:func:`alloc_size`), anything else its bytes."""
    if t.op == "FLASH_ATTN_EXT":
        return alloc_size(cc, t)
    size = t.nbytes
    if _quantized(t.type) and t.ne[0] % MATRIX_ROW_PADDING:
        size += row_size(t.type, MATRIX_ROW_PADDING - t.ne[0] % MATRIX_ROW_PADDING)
    return size
