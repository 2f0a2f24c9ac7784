"""CUDA flash attention's allocation size at the pinned build 11434.

The CUDA buffer type sizes a FLASH_ATTN_EXT node with ``ggml_cuda_flash_attn_ext_get_alloc_size``
(ggml/src/ggml-cuda/ggml-cuda.cu:903-907, fattn.cu:725-760): when the kernel chosen for the node
needs f16 K / V and the cache is not f16, the f16 copies of K and V are part of the node's own
allocation (fattn-common.cuh:54-85: the output padded to 128 B, + nelements(K) x 2, padded to
128, + nelements(V) x 2 unless V is a view of K). So the conversion lives inside ggml-alloc's
compute buffer, not in ggml's CUDA memory pool, and how much it adds depends on what else is
alive next to the node (:func:`llamarig.plan.ggml_graph.allocate`).

The kernel is ``ggml_cuda_get_best_fattn_kernel`` (fattn.cu:541-719), decided by the device's
compute capability, the head size, the K/V types and the number of query rows; the vector
kernel only exists for the K/V type pairs compiled in (GGML_CUDA_FA_QUANTS, default
``q4_0-q4_0;q8_0-q8_0;f16-f16;bf16-bf16``, ggml/CMakeLists.txt:207-208; f32 K/V use the f16
instance), other pairs fall back to f16 copies (fattn.cu:495-513).
"""

from __future__ import annotations

from llamarig.plan.ggml_graph import TYPE_SIZE, Tensor

#: ggml/CMakeLists.txt:208 (GGML_CUDA_FA_QUANTS, GGML_CUDA_FA_ALL_QUANTS off)
DEFAULT_FA_QUANTS = frozenset({("q4_0", "q4_0"), ("q8_0", "q8_0"), ("f16", "f16"), ("bf16", "bf16")})
#: fattn.cu:525-538 ggml_cuda_fattn_kv_type_supported
KV_TYPES = frozenset({"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"})
#: ggml-cuda/common.cuh:52-56
CC_VOLTA, CC_TURING, CC_ADA = 700, 750, 890
#: fattn-common.cuh FATTN_KQ_STRIDE
FATTN_KQ_STRIDE = 256


def _quantized(t: str) -> bool:
    return t not in TYPE_SIZE


def best_kernel(cc: int, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> str:
    """fattn.cu:541-719 for an NVIDIA device of compute capability ``cc`` (x 100 + y x 10:
    900 for 9.0), without ALiBi (max_bias 0). ``"MMA_F16"``, ``"TILE"``, ``"VEC"`` or
    ``"NONE"``. The sparse decode gather (MMA for one query row, GQA > 4, head size < 256 and
    fewer than 8192 cells) is taken as not chosen: its heuristic reads the device."""
    gqa = q.ne[2] // max(1, k.ne[2])
    gqa_opt = gqa >= 2 and mask is not None and k.ne[1] % FATTN_KQ_STRIDE == 0
    for t in (q, k, v, mask):
        if t is None or _quantized(t.type):
            continue
        if any(t.nb[i] % 16 for i in (1, 2, 3)):
            gqa_opt = False
    dk, dv = k.ne[0], v.ne[0]
    if dk in (40, 64, 72, 80, 96, 112, 128, 256):
        if dv != dk:
            return "NONE"
    elif dk == 192:
        if dv != 128 or not gqa_opt or gqa % 8:
            return "NONE"
    elif dk == 320:
        if dv != 256 or not gqa_opt or gqa % 32:
            return "NONE"
    elif dk in (512, 576):
        if dv != 512 or not gqa_opt:
            return "NONE"
    else:
        return "NONE"
    if k.type not in KV_TYPES or v.type not in KV_TYPES:
        return "NONE"
    if mask is not None and mask.ne[2] != 1:
        return "NONE"
    n_q = q.ne[1]
    quant = _quantized(k.type) or _quantized(v.type)
    can_vec = q.ne[0] <= 256 and q.ne[0] % 64 == 0 and q.ne[0] != 192 and k.ne[1] % FATTN_KQ_STRIDE == 0
    if cc >= CC_TURING and q.ne[0] not in (40, 72):
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
