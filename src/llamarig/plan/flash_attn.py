"""Whether flash attention runs, and how attention runs for a K/V type pair: the one rule
llamarig has for it, from llama.cpp build 11434.

``-fa`` is ``on``, ``off`` or ``auto`` (common/arg.cpp). llama.cpp decides in three steps:

1. creating the context, ``auto`` becomes ``on`` when it must: a quantized V cache needs flash
   attention (src/llama-context.cpp:3843-3852), and so does ``-sm tensor`` (:3824-3836); with
   ``off`` either is refused (``ServerConfig`` validation says so before a plan is made);
2. the KV cache and the compute buffers are laid out for flash attention unless it is ``off``
   (``cparams.flash_attn = flash_attn_type != DISABLED``, src/llama-context.cpp:232): what
   :func:`kv_layout_fa` says, and what the memory plan uses;
3. a still-``auto`` setting is then probed per device (``resolve_fused_ops``,
   src/llama-context.cpp:509-561): where a device has no kernel for the K/V types, the FLASH_ATTN_EXT
   op lands on another device and flash attention is turned off for the graphs. Only ggml-cuda's
   kernel list is modelled (ggml/src/ggml-cuda/fattn.cu): :func:`kv_path` says which path
   attention takes on a backend, and what that costs the speed model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llamarig.gguf.ggml_types import CUDA_FA_KV_TYPES, CUDA_FA_VEC_PAIRS, TYPE_SIZES
from llamarig.i18n import _

#: the values of -fa / --flash-attn (common/arg.cpp; on/off also as enabled/true/1, disabled/false/0)
FlashAttn = Literal["on", "off", "auto"]


def kv_layout_fa(mode: FlashAttn) -> bool:
    """The KV cache and compute buffers are laid out for flash attention: unless -fa off
    (src/llama-context.cpp:232; auto is resolved per device only after, :559-561)."""
    return mode != "off"


@dataclass(frozen=True)
class KVPath:
    """How attention runs for a K/V type pair on a backend."""

    kind: str  # fast | convert | cpu | nofa
    factor: float  # multiplier on KV read time
    note: str


def kv_path(backend: str, type_k: str, type_v: str, flash_attn: FlashAttn = "auto") -> KVPath:
    """The flash-attention path llama.cpp takes (ggml/src/ggml-cuda/fattn.cu:496-538,
    llama-context.cpp:509-561, 3843-3852). Only CUDA/ROCm (ggml-cuda) have these restrictions
    modelled. ``nofa``: auto turned flash attention off (no kernel, V not quantized); ``cpu``: it
    stays on (on, or auto with a quantized V) and FLASH_ATTN_EXT runs on the CPU."""
    if backend not in ("CUDA", "ROCm"):
        return KVPath("fast", 1.0, _("{backend}: flash attention handles K {k} / V {v}").format(
            backend=backend, k=type_k, v=type_v))
    quant_v = TYPE_SIZES[type_v][0] > 1
    if type_k not in CUDA_FA_KV_TYPES or type_v not in CUDA_FA_KV_TYPES:
        if flash_attn == "off" or (flash_attn == "auto" and not quant_v):
            return KVPath("nofa", 2.0, _("K {k}: no CUDA flash-attention kernel; FA auto turns itself off and the "
                                         "non-FA path reads K/V twice (KQ and KQV) - slower at depth").format(k=type_k))
        return KVPath("cpu", 0.0, _("{k}/{v} has no CUDA flash-attention kernel: attention runs on the CPU and K/V "
                                    "cross PCIe every token (fattn.cu:525-538) - very slow").format(k=type_k, v=type_v))
    if (type_k, type_v) in CUDA_FA_VEC_PAIRS:
        return KVPath("fast", 1.0, _("K {k} / V {v}: compiled CUDA FA vector kernel").format(k=type_k, v=type_v))
    fk = TYPE_SIZES["f16"][1] / TYPE_SIZES["f16"][0]
    q = (TYPE_SIZES[type_k][1] / TYPE_SIZES[type_k][0] + TYPE_SIZES[type_v][1] / TYPE_SIZES[type_v][0]) / 2
    factor = (q + 4 * fk) / q  # read quantized, write f16, read f16 again (per element, K and V)
    return KVPath("convert", factor, _("K {k} / V {v}: no compiled FA vector kernel in default builds "
                                       "(GGML_CUDA_FA_QUANTS); K/V are converted to f16 every token "
                                       "(fattn.cu:496-512)").format(k=type_k, v=type_v))
