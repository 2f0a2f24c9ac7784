"""Which CPU buffer type llama.cpp gives each host-resident weight, and how big it is.

The CPU backend offers "extra" buffer types ahead of the plain CPU one
(ggml/src/ggml-cpu/ggml-cpu.cpp:42-71, in this order): ``AMX`` (built with AMX_INT8 and
AVX512-VNNI), ``KLEIDIAI`` (Arm, off by default) and ``CPU_REPACK`` (GGML_CPU_REPACK, on by
default). llama.cpp gives a weight the first buffer type in its list whose device supports the
weight's op (src/llama-model-loader.cpp:1067-1078 select_weight_buft, with a 512-row dummy
activation, lines 927-1064). The list for host weights is (src/llama-model.cpp:1080-1139
make_cpu_buft_list): the first GPU's pinned host buffer unless ``--no-host``, then the extra
buffer types unless ``--no-repack`` (common/common.cpp:1663 use_extra_bufts), then CPU. So with
a GPU in the build and no ``--no-host``, host weights never reach AMX or CPU_REPACK; with mmap
the pinned host choice is replaced by the plain CPU buffer (llama-model-loader.cpp:1270-1278).

- ``AMX`` takes MUL_MAT weights of q4_0, q4_1, q8_0, q4_K, q5_K, q6_K, iq4_xs or f16 whose rows
  (ne[1]) are a multiple of 32 and whose ne[0] is a multiple of the type's block (32; 256 for
  the K-quants and iq4_xs; 16 for f16) (ggml-cpu/amx/amx.cpp:143-190). Its size per tensor is
  ggml-cpu/amx/mmq.cpp:2267-2287 ggml_backend_amx_get_alloc_size: q8_0 adds 4 B per block
  (compensation), q4_K/q5_K 4 B per block, iq4_xs 2 B per block (get_row_size, lines 245-260).
- ``CPU_REPACK`` takes 2-D MUL_MAT and 3-D MUL_MAT_ID weights that
  ggml_repack_get_optimal_repack_type (ggml-cpu/repack.cpp:4925-5141) has a layout for: on x86
  q4_0, q4_K, iq4_nl and mxfp4 with AVX2 and q2_K with AVX-512 (rows a multiple of 8); on Arm
  q4_0, q4_K, q5_K, q6_K, iq4_nl, mxfp4, q8_0 and q1_0 with dot-product or i8mm (rows a
  multiple of 4 or 8). Same size as the tensor.
- Every buffer pads each tensor to 32 B (TENSOR_ALIGNMENT, ggml/src/ggml-impl.h:44;
  ggml-backend.cpp:57-89). Extra-buffer weights are copied out of the file, so they sit outside
  the ``CPU_Mapped`` range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llamarig.gguf.ggml_types import TYPE_SIZES
from llamarig.hardware.cpu import CpuFeatures

#: TENSOR_ALIGNMENT (ggml/src/ggml-impl.h:44)
ALIGN = 32

#: AMX: types with kernels, and the ne[0] alignment supports_op asks for (amx.cpp:163-185)
AMX_ALIGN = {"q4_0": 32, "q4_1": 32, "q8_0": 32, "q4_k": 256, "q5_k": 256, "q6_k": 256,
             "iq4_xs": 256, "f16": 16}
#: extra bytes per block of the AMX packed layout (mmq.cpp get_row_size, lines 245-260)
AMX_EXTRA_PER_BLOCK = {"q8_0": 4, "q4_k": 4, "q5_k": 4, "iq4_xs": 2}
#: the quantized types that run AMX tile kernels for batches of more than one row
#: (mmq.cpp:2342-2500: f16 uses AVX-512 tinygemm only; qtype_has_amx_kernels, amx/common.h)
AMX_TILE_TYPES = frozenset({"q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k", "iq4_xs"})

#: the input layer is read with GET_ROWS, never a matmul (llama-model.cpp: tok_embd)
_INPUT_RE = re.compile(r"^(token_embd|token_types|position_embd|pos_embd|per_layer_token_embd)")
#: 2-D/3-D weights used by ops other than MUL_MAT(_ID) (ssm_conv1d: SSM_CONV, ssm_a: SSM_SCAN)
_NOT_MATMUL_RE = re.compile(r"\.(ssm_conv1d|ssm_a|ssm_d|attn_sinks|ssm_dt)(\.|$)|\.bias$")


def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _op(name: str, shape: tuple[int, ...]) -> str | None:
    """MUL_MAT / MUL_MAT_ID for matrices, None for anything the extra buffers never take."""
    if _INPUT_RE.match(name) or _NOT_MATMUL_RE.search(name) or len(shape) < 2:
        return None
    if len(shape) == 3 and "_exps" in name:
        return "MUL_MAT_ID"
    return "MUL_MAT"


def _repack_ok(ggml_type: str, shape: tuple[int, ...], cpu: CpuFeatures) -> bool:
    """ggml_repack_get_optimal_repack_type (repack.cpp:4974-5141) is not null."""
    ne1 = shape[1]
    t = ggml_type
    if cpu.x86:
        if t in ("q4_0", "q4_k", "iq4_nl", "mxfp4") and cpu.has("AVX2"):
            return ne1 % 8 == 0
        if t == "q2_k" and cpu.has("AVX512"):
            return ne1 % 8 == 0
        return False
    if not (cpu.arm and cpu.has("NEON")):
        return False
    i8mm, dot = cpu.has("MATMUL_INT8"), cpu.has("DOTPROD")
    if t == "q4_0":
        if cpu.has("SVE") and i8mm and cpu.sve_cnt == 32 and ne1 % 8 == 0:
            return True
        return (i8mm or dot) and ne1 % 4 == 0
    if t in ("q4_k", "q5_k", "q6_k"):
        return (i8mm or dot) and ne1 % 8 == 0
    if t in ("iq4_nl", "mxfp4"):
        return dot and ne1 % 4 == 0
    if t in ("q8_0", "q1_0"):
        return (i8mm or dot) and ne1 % 4 == 0
    return False


def _amx_ok(ggml_type: str, shape: tuple[int, ...]) -> bool:
    align = AMX_ALIGN.get(ggml_type)
    return align is not None and shape[1] % 32 == 0 and shape[0] % align == 0


def amx_alloc_bytes(ggml_type: str, shape: tuple[int, ...], n_bytes: int) -> int:
    """ggml_backend_amx_get_alloc_size: N rows of get_row_size(K) (mmq.cpp:2267-2287)."""
    extra = AMX_EXTRA_PER_BLOCK.get(ggml_type)
    if extra is None:
        return n_bytes
    block = TYPE_SIZES[ggml_type][0]
    return n_bytes + shape[1] * (shape[0] // block) * extra


@dataclass(frozen=True)
class BufferChoice:
    buffer: str  # "AMX" | "CPU_REPACK" | "" (the default host buffer: CPU_Mapped/CPU/CUDA_Host)
    bytes: int  # what the tensor takes in that buffer, padded (0 for the default buffer)


def host_weight_buffer(name: str, ggml_type: str, shape: tuple[int, ...], n_bytes: int,
                       cpu: CpuFeatures, *, extra_bufts: bool) -> BufferChoice:
    """The buffer type llama.cpp gives a host-resident weight. ``extra_bufts``: the extra buffer
    types are in the list at all (no GPU host buffer ahead of them, and not --no-repack)."""
    if not extra_bufts:
        return BufferChoice("", 0)
    op = _op(name, shape)
    if op is None:
        return BufferChoice("", 0)
    t = ggml_type.lower()
    if op == "MUL_MAT" and cpu.amx and _amx_ok(t, shape):
        return BufferChoice("AMX", _pad(amx_alloc_bytes(t, shape, n_bytes)))
    if cpu.repack and _repack_ok(t, shape, cpu):
        n_dims = len(shape)
        if (op == "MUL_MAT" and n_dims == 2) or (op == "MUL_MAT_ID" and n_dims == 3):
            return BufferChoice("CPU_REPACK", _pad(n_bytes))
    return BufferChoice("", 0)


def extra_bufts_in_list(*, repack: bool, no_host: bool, has_gpu_host_buffer: bool) -> bool:
    """The extra buffer types are reachable for host weights (make_cpu_buft_list)."""
    return repack and (no_host or not has_gpu_host_buffer)
