"""mmproj (clip / mtmd vision projector) memory: weights and the worst-case compute buffer.

llama-server sizes the projector's compute buffer once, at load, by reserving the graph of one
dummy image (tools/mtmd/clip.cpp, vendored tree llama.cpp-11434):

- ``get_dummy_batch`` (clip.cpp:3700-3708) builds an image of ``hparams.warmup_image_size``
  square and logs "warmup with image size = S x S";
- ``warmup`` (clip.cpp:3737-3775) reserves it with flash attention on (``-fa auto``/``on``)
  or off (``-fa off``); ``reserve_compute_meta`` (clip.cpp:3805-3825) logs
  "<buft> compute buffer size = X MiB" from ``ggml_backend_sched_get_buffer_size``;
- the weights are every loaded tensor's ``ggml_nbytes`` (clip.cpp:2180-2181), logged as
  "load_hparams: model size: X MiB" (clip.cpp:2125); the server adds weights + compute as
  "[mtmd] estimated worst-case memory usage of mmproj is X MiB" (server-context.cpp:1164-1181).

Warmup size. For the Qwen-VL family (qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger,
ling3vl) clip.cpp:1668-1679 sets ``n_merge`` = clip.vision.spatial_merge_size (default 2) and
``set_warmup_n_tokens(46*46)``; clip-model.h:210-218 turns that into
``warmup_image_size = t * patch_size * n_merge`` with t = 46, or t = floor(sqrt(N)) when
``--image-max-tokens N`` is below 46*46. The header's image_size does not enter. Other projector
types default to ``warmup_image_size = image_size`` (clip.cpp:1373) and are modelled only
approximately here.

Compute. The buffer is ggml-alloc's peak over the graph (tools/mtmd/models/qwen3vl.cpp).
With N patches (= (t * n_merge)^2), S the warmup side, E/H/F the vision width/heads/FFN width:

- inputs are allocated first and stay put (ggml-alloc.c:723-761): the image ``inp_raw``
  (I = S*S*3*4 bytes, clip.cpp:584-589) and the M-RoPE ``positions`` (P = 4*N int32,
  qwen3vl.cpp ``num_position_ids``); ``positions`` lives until the last layer's RoPE, so from
  layer 2 on everything else sits above I + P unless it fits in the hole the freed image leaves;
- patch embedding (qwen2vl.cpp:3-16, ggml.c:4762-4783): each Conv2D is an im2col of
  N*patch^2*3 elements, F16 (F32 when the kernel is BF16), then a matmul of N*E f32:
  phase A = I + P + C + 4NE (exact on every measured shape);
- attention with flash attention off (clip.cpp:789-800): the KQ matrix 4*H*N^2 on top of the
  layer's live set: residual, fused QKV (3), RoPE'd Q and K, contiguous V = 7 * 4NE;
- attention with flash attention on (clip.cpp:775-787): residual, QKV (3), Q, K, and the F16
  casts of K and V (1/2 each), plus allocator slack measured at 1/2: 6.5 * 4NE;
- FFN (clip.cpp:616-704): residual and the normed input (2 * 4NE) below the up projection 4NF.

Each live set is packed first-fit into the image's hole; what does not fit stacks on I + P.
Calibrated on the CPU backend against the real llama-server (tests/plan/test_mmproj_server.py);
every multi-layer shape measured there is within 2 % (FA off within 0.1 %); a single-layer tower
with flash attention is the worst case, 6.3 % under. Deepstack layers (Qwen3-VL, not Qwen3.5/3.6) are not
modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llamarig.catalogue.models import MMProjInfo
from llamarig.units import MiB

if TYPE_CHECKING:
    from llamarig.gguf.spec import ModelSpec

#: projector types whose warmup follows clip.cpp:1668-1679 (46*46 merged tokens)
QWEN_VL_FAMILY = frozenset({"qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "ling3vl"})
#: clip.cpp:1679 set_warmup_n_tokens(46*46)
QWEN_VL_WARMUP_TOKENS = 46 * 46


@dataclass(frozen=True)
class MMProjShape:
    """What the planner needs from an mmproj header (and the server flags that change it)."""

    weights_bytes: int  # sum of ggml_nbytes over the file's tensors
    n_embd: int
    n_head: int
    n_ff: int
    n_layer: int
    patch_size: int
    image_size: int
    projector_type: str | None = "qwen3vl_merger"
    n_merge: int = 2  # clip.vision.spatial_merge_size
    patch_kernel_type: str = "f32"  # ggml type of v.patch_embd.weight
    image_max_tokens: int | None = None  # --image-max-tokens


@dataclass(frozen=True)
class MMProjEstimate:
    weights_bytes: int
    compute_bytes: int
    warmup_image_size: int
    n_patches: int
    formula: str
    method: str


def warmup_geometry(s: MMProjShape) -> tuple[int, int]:
    """(warmup image side in pixels, number of patches) as clip.cpp computes them."""
    if s.projector_type in QWEN_VL_FAMILY:
        t = math.isqrt(QWEN_VL_WARMUP_TOKENS)
        if s.image_max_tokens and 0 < s.image_max_tokens < QWEN_VL_WARMUP_TOKENS:
            t = max(1, math.isqrt(s.image_max_tokens))  # clip-model.h:214-216
        side = t * s.patch_size * s.n_merge
    else:
        side = s.image_size  # clip.cpp:1373 default warmup_image_size
    per_side = side // s.patch_size
    return side, per_side * per_side


def _stack(hole: int, items: list[int]) -> int:
    """Bytes of ``items`` (in allocation order) that do not fit first-fit in a hole."""
    free = hole
    over = 0
    for x in items:
        if x <= free:
            free -= x
        else:
            over += x
    return over


def estimate_mmproj(s: MMProjShape, flash_attn: bool) -> MMProjEstimate:
    """Weights and worst-case compute bytes of one mmproj on the device it runs on."""
    side, n = warmup_geometry(s)
    e, h, f = s.n_embd, s.n_head, s.n_ff
    img = side * side * 3 * 4  # inp_raw, f32
    pos = 4 * n * 4 if s.projector_type in QWEN_VL_FAMILY else 0  # M-RoPE positions, i32
    col_t = 4 if s.patch_kernel_type == "bf16" else 2  # ggml.c:4772
    im2col = n * s.patch_size * s.patch_size * 3 * col_t
    ne4, nf4 = 4 * n * e, 4 * n * f
    kq = 4 * h * n * n
    phase_a = img + pos + im2col + ne4
    pinned = s.n_layer >= 2  # positions still live while layer 1 attends

    def on_top(items: list[int], top: int, pinned: bool = pinned) -> int:
        over = _stack(img if pinned else img + pos, items)
        if over == 0 and not pinned:
            return sum(items) + top  # hole merges with the tail once positions are freed
        return img + pos + over + top

    if flash_attn:
        # with flash attention the single-layer case packs like the deeper ones (measured)
        attn = on_top([3 * ne4, ne4, ne4, ne4, ne4 // 2], 0, True)
        ffn = on_top([ne4, ne4], nf4)
        compute = max(phase_a, attn, ffn)
        formula = (f"max(patch embd {phase_a / MiB:.2f}, attention(FA on) {attn / MiB:.2f}, "
                   f"FFN {ffn / MiB:.2f}) MiB at {n} patches ({side}x{side} warmup image)")
    else:
        attn = on_top([ne4, 3 * ne4, ne4, ne4, ne4], kq)
        ffn = on_top([ne4, ne4], nf4)
        compute = max(phase_a, attn, ffn)
        formula = (f"max(patch embd {phase_a / MiB:.2f}, KQ 4*{h}*{n}^2 + live {(attn - kq) / MiB:.2f}, "
                   f"FFN {ffn / MiB:.2f}) MiB at {n} patches ({side}x{side} warmup image)")
    method = ("modelled from clip.cpp warmup + ggml-alloc (calibrated on the CPU backend, "
              "within 2 % of the real llama-server for multi-layer towers)")
    if s.projector_type not in QWEN_VL_FAMILY:
        method = f"approximate: projector '{s.projector_type}' uses the Qwen-VL graph model, not calibrated"
    return MMProjEstimate(s.weights_bytes, compute, side, n, formula, method)


def shape_from_spec(spec: ModelSpec, image_max_tokens: int | None = None) -> MMProjShape:
    """MMProjShape from a llamarig.gguf ModelSpec of an mmproj file."""
    pj = spec.projector
    if pj is None:  # callers check is_mmproj first
        raise ValueError(f"{spec.path}: not an mmproj (no projector metadata)")
    md = getattr(spec, "metadata", {}) or {}
    kernel = next((t.ggml_type for t in spec.tensors if t.name == "v.patch_embd.weight"), "f32")
    return MMProjShape(
        weights_bytes=spec.weights_bytes, n_embd=pj.n_embd or 1024, n_head=pj.n_head or 16,
        n_ff=pj.n_ff or 4 * (pj.n_embd or 1024), n_layer=pj.n_layer or 1,
        patch_size=pj.patch_size or 14, image_size=pj.image_size or 448,
        projector_type=pj.projector_type, n_merge=int(md.get("clip.vision.spatial_merge_size", 2) or 2),
        patch_kernel_type=str(kernel), image_max_tokens=image_max_tokens,
    )


def mmproj_info_from_spec(spec: ModelSpec, label: str, image_max_tokens: int | None = None) -> MMProjInfo:
    """A plan.catalogue.MMProjInfo (weights, compute FA on / off) for an mmproj ModelSpec."""
    s = shape_from_spec(spec, image_max_tokens)
    on, off = estimate_mmproj(s, True), estimate_mmproj(s, False)
    return MMProjInfo(
        label=label, weights_bytes=s.weights_bytes, compute_fa_on=on.compute_bytes,
        compute_fa_off=off.compute_bytes,
        source=f"{on.method}; FA on: {on.formula}; FA off: {off.formula}",
    )
