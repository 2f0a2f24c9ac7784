"""Compute (scheduler) buffers: a calibrated model of ggml-alloc's peak for llama.cpp's
worst-case graph.

llama.cpp reserves the prompt graph with n_tokens = min(n_ctx, n_ubatch), n_seqs = n_seq_max and
n_outputs = min(n_ubatch, n_outputs_max) (src/llama-context.cpp:620-746; the server sets
n_outputs_max = min(n_batch, n_parallel x (1 + draft n_max)), tools/server/server-context.cpp:42-54).
ggml-alloc reuses the memory of dead tensors, so the buffer is the largest set of tensors alive
at one time. What stays alive: the KQ mask input(s) (src/llama-graph.cpp build_attn_inp_kq_mask:
f16 with flash attention, f32 without, shape [n_kv, n_tokens/n_stream, 1, n_stream]; one per
cache for iSWA models). On top of that, the peak phase:

- FFN / MoE phase: (3 n_embd + 3 n_ff + min(2 n_embd, n_ff) + 10) f32 per token (MoE: n_ff ->
  n_expert_used x n_ff_expert);
- attention phase with flash attention: (5 n_embd + 2 n_head*d_k + 10) f32 per token;
- gated-delta-net phase (hybrid models): (3 conv_dim + 0.4 inner_size) f32 per token plus n_seq_max x
  (2 + n_rs_seq) copies of the per-sequence SSM state;
- attention without flash attention: KQ [n_kv, n_tokens, n_head] f32 (softmax runs in place)
  plus (4 n_embd + 3 n_head*d_k + n_kv_head*(d_k + d_v) - 250) f32 per token;
- CUDA with flash attention and a quantized KV cache: K and V of one layer converted to f16
  for prompt batches (ggml-cuda/fattn.cu need_f16_K/V).

The per-token coefficients were fitted to the real llama-server's ``sched_reserve: CPU compute
buffer size`` lines over n_embd, n_ff, n_head, n_head_kv, experts and n_ubatch
(tests/plan/test_against_server.py checks them within 5 %). This figure is *modelled*.
"""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.gguf.spec import ModelSpec
from llamarig.plan.memory import ContextLayout

F32 = 4
MiB = 1 << 20
#: fitted constants (floats per token), see the module docstring
C_FFN = 10
C_ATTN_NOFA = -250


@dataclass(frozen=True)
class ComputeEstimate:
    bytes: int
    formula: str


def _masks(ctx: ContextLayout, n_t: int, base_cells: int, swa_cells: int | None, fa: bool) -> int:
    per_stream_t = n_t // ctx.n_stream if not ctx.kv_unified else n_t
    streams = 1 if ctx.kv_unified else ctx.n_stream
    elt = 2 if fa else 4
    total = base_cells * per_stream_t * streams * elt
    if swa_cells:
        total += swa_cells * per_stream_t * streams * elt
    return total


def ffn_floats_per_token(spec: ModelSpec) -> int:
    e = spec.n_embd or 0
    if spec.n_expert and spec.n_ff_expert:
        ff = spec.n_expert_used * spec.n_ff_expert
    else:
        ff = spec.n_ff or 0
    return 3 * e + 3 * ff + min(2 * e, ff) + C_FFN


def attn_fa_floats_per_token(spec: ModelSpec) -> int:
    e = spec.n_embd or 0
    q = max((ly.n_head * ly.head_dim_k for ly in spec.layers if ly.kind != "recurrent"), default=0)
    return 5 * e + 2 * q + C_FFN


def estimate_compute(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, *,
                     cuda_quant_kv: tuple[str, str] | None = None,
                     layers: str = "main") -> ComputeEstimate:
    """Compute buffer of a context whose layers all sit on one backend.

    ``layers='mtp'`` models the MTP draft context (one nextn block: fewer live tensors).
    """
    n_t = min(ctx.n_ctx, ctx.n_ubatch)
    n_out = min(n_t, max(1, n_outputs_max))
    fa = ctx.flash_attn
    has_attn = any(ly.kind != "recurrent" for ly in spec.layers)
    base = ctx.n_ctx_seq if has_attn else 0
    swa = (ctx.swa_cells // max(1, ctx.n_stream)) if ctx.swa_cells else None
    if layers == "mtp":
        swa = None
    masks = _masks(ctx, n_t, base, swa, fa)
    e = spec.n_embd or 0
    ffn = ffn_floats_per_token(spec)
    if layers == "mtp":
        ffn = 2 * e + 2 * ((spec.n_ff or 0) if not spec.n_expert else spec.n_expert_used * (spec.n_ff_expert or 0)) + 25
    phase = ffn * n_t * F32
    phase_name = f"FFN {ffn} f32/token x {n_t}"
    if fa and has_attn and layers == "main":
        att_fa = attn_fa_floats_per_token(spec)
        if att_fa > ffn:
            phase = att_fa * n_t * F32
            phase_name = f"attention {att_fa} f32/token x {n_t}"
    if spec.recurrent is not None and layers == "main" and any(ly.kind == "recurrent" for ly in spec.layers):
        r = spec.recurrent
        conv = r.inner_size + 2 * r.group_count * r.state_size
        per_tok = 3 * conv + (2 * r.inner_size) // 5
        n_seq = max(1, ctx.n_parallel)
        copies = n_seq * (2 + ctx.n_rs_seq)  # state in/out, plus rollback snapshot writes
        rec = per_tok * n_t * F32 + copies * r.n_embd_s * F32
        if rec > phase:
            phase = rec
            phase_name = (f"gated delta net {per_tok} f32/token (3 x conv_dim {conv} + 0.4 x inner {r.inner_size}) "
                          f"x {n_t} + {copies} state copies (n_seq {n_seq} x (2 + n_rs_seq {ctx.n_rs_seq})) x n_embd_s {r.n_embd_s} x 4 B")
    if not fa and has_attn:
        att_layers = [ly for ly in spec.layers if ly.kind != "recurrent" and not ly.nextn] or list(spec.layers)
        ly = max(att_layers, key=lambda x: x.n_head)
        q = ly.n_head * ly.head_dim_k
        per_tok = max(0, 4 * e + 3 * q + ly.n_head_kv * (ly.head_dim_k + ly.head_dim_v) + C_ATTN_NOFA)
        att = base * n_t * ly.n_head * F32 + per_tok * n_t * F32
        if att > phase:
            phase = att
            phase_name = f"KQ n_kv {base} x {n_t} x {ly.n_head} heads x 4 B + {per_tok} f32/token"
    conv = 0
    if fa and cuda_quant_kv and has_attn:
        ly = next(x for x in spec.layers if x.kind != "recurrent")
        conv = base * ly.n_head_kv * (ly.head_dim_k + ly.head_dim_v) * 2
    logits = (spec.n_vocab or 0) * n_out * F32
    total = masks + phase + conv + logits
    formula = (f"KQ mask{'s' if swa else ''} {masks / MiB:.2f} MiB ({'f16' if fa else 'f32'} n_kv {base}"
               f"{f' + SWA {swa}' if swa else ''} x n_ubatch {n_t}) + peak phase {phase / MiB:.2f} MiB ({phase_name})"
               + (f" + f16 K/V conversion {conv / MiB:.2f} MiB (CUDA memory pool on the first prompt, not in the compute buffer line)" if conv else "")
               + f" + logits {logits / MiB:.2f} MiB (n_vocab x {n_out} outputs)")
    return ComputeEstimate(int(total), formula)
