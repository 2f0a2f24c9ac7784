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
- CUDA with flash attention and a quantized KV cache: the f16 copies of one layer's K and V
  that the prompt batch's kernel needs; at build 11434 they are part of the FLASH_ATTN_EXT
  node's own allocation in the compute buffer (the CUDA buffer type's get_alloc_size,
  ggml-cuda.cu:903-907, fattn.cu:725-760; :mod:`llamarig.plan.compute.cuda_fattn`), added whole here
  (an upper bound: what overlaps depends on the graph).

The per-token coefficients were fitted to the real llama-server's ``sched_reserve: CPU compute
buffer size`` lines over n_embd, n_ff, n_head, n_head_kv, experts and n_ubatch
(tests/plan/test_against_server.py checks them within 5 %). This figure is *modelled*.

qwen35 / qwen35moe (gated delta net + attention) and their MTP draft context are not modelled
this way: :mod:`llamarig.plan.qwen35_graph` rebuilds llama.cpp's graph and replays ggml-alloc,
which gives the CPU backend's figure exactly (the phase model was 5-62 % off there). With every
layer and the output on one CUDA GPU the replay goes through ggml-backend's scheduler too
(:func:`llamarig.plan.compute.ggml_graph.schedule`) and gives both the GPU's and the pinned host
(CUDA_Host) compute buffer; on the H200 evidence (benchmarks/evidence/h200-*.json) both come out
to the logged 0.01 MiB in every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llamarig.gguf.spec import ModelSpec
from llamarig.hardware.types import GPU
from llamarig.i18n import _, join
from llamarig.plan.compute import graphs
from llamarig.plan.compute.ggml_sched import CUDA_ALIGNMENT, Backend, cuda_backend
from llamarig.plan.compute.graphs import GraphParams, Layout
from llamarig.plan.compute.replay import Setup, buffers
from llamarig.plan.compute.replay import graph_params as replay_params
from llamarig.plan.memory import ContextLayout, Placement
from llamarig.units import MiB

#: the architectures whose trunk estimate_compute replays on one backend (the phase model was
#: 5-62 % off for them); replayed_buffers replays every architecture of plan.graphs
QWEN35 = frozenset({"qwen35", "qwen35moe"})

F32 = 4
#: fitted constants (floats per token), see the module docstring
C_FFN = 10
C_ATTN_NOFA = -250


@dataclass(frozen=True)
class ComputeEstimate:
    bytes: int
    formula: str
    #: "exact" where the buffer is ggml-alloc replayed on llama.cpp's own graph
    #: (:mod:`llamarig.plan.qwen35_graph`), "modelled" for the calibrated phases below
    method: str = "modelled"
    #: a scheduled replay on one CUDA GPU (``cuda_cc``): the pinned host (CUDA_Host) compute
    #: buffer next to ``bytes`` (the GPU's); None elsewhere
    host_bytes: int | None = None


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


#: MTP draft context on a GPU: floats per token alive at the FFN peak beyond 3 n_ff + 2 n_embd,
#: fitted on the one published figure at -ub 2048 (520.06 MiB, Qwen3.8-27B, RTX 3090;
#: tests/plan/published_logs.yaml hilbertraum-391-*), so those rows are in-sample
C_MTP_GPU_FFN = 4096


def _mtp_gpu(spec: ModelSpec, ctx: ContextLayout, n_t: int, n_out: int, masks: int, base: int) -> ComputeEstimate:
    """The MTP draft context's compute buffer on a GPU (the graph of src/models/qwen35.cpp:499-640:
    one nextn block, then the shared head). ggml-alloc frees the KQ mask after the block's
    attention, so the buffer is the largest of three phases, not their sum: attention (the mask
    alive), the FFN (up, gate and their product alive at once, 3 n_ff per token) and the output
    (logits of n_outputs_max = n_parallel rows, common/speculative.cpp:2561). Published figures
    agree: 520.06 MiB at -ub 2048 for -c 8192 and -c 32768 alike (the FFN phase, the mask is
    dead), 648.03 MiB at -ub 1024 -c 262144 (the attention phase: a 512 MiB mask)."""
    e = spec.n_embd or 0
    ff = spec.n_expert_used * (spec.n_ff_expert or 0) if spec.n_expert else (spec.n_ff or 0)
    ffn_t = 3 * ff + 2 * e + C_MTP_GPU_FFN
    ffn = ffn_t * n_t * F32
    if ctx.flash_attn:
        att_t = attn_fa_floats_per_token(spec)
        att = masks + att_t * n_t * F32
        att_name = _("KQ mask {size} ({shape}) + {rest}").format(
            size=f"{masks / MiB:.2f} MiB", shape=f"f16 n_kv {base} x {n_t}", rest=f"{att_t} f32/token x {n_t}")
    else:
        ly = max((x for x in spec.layers if x.kind != "recurrent"), key=lambda x: x.n_head)
        att = masks + base * n_t * ly.n_head * F32 + attn_fa_floats_per_token(spec) * n_t * F32
        att_name = _("KQ mask {size} + KQ {shape} x {heads} heads x 4 B").format(
            size=f"{masks / MiB:.2f} MiB", shape=f"n_kv {base} x {n_t}", heads=ly.n_head)
    logits = (spec.n_vocab or 0) * n_out * F32
    out = logits + 2 * e * n_out * F32
    phases = [(ffn, _("FFN phase {size} ({formula})").format(
                  size=f"{ffn / MiB:.2f} MiB", formula=f"(3 n_ff {ff} + 2 n_embd {e} + {C_MTP_GPU_FFN}) f32/token x {n_t}")),
              (att, _("attention phase {size} ({formula})").format(size=f"{att / MiB:.2f} MiB", formula=att_name)),
              (out, _("output phase {size} (logits {formula})").format(
                  size=f"{out / MiB:.2f} MiB", formula=f"n_vocab {spec.n_vocab} x {n_out} x 4 B"))]
    peak, name = max(phases, key=lambda p: p[0])
    others = join(_("; "), [n for b, n in phases if n != name])
    return ComputeEstimate(int(peak), _("largest phase: {name} (the mask is freed after the attention; {others})").format(
        name=name, others=others))


def _replay_what(spec: ModelSpec, p: GraphParams, mtp: bool) -> str:
    what = (_("{arch} MTP draft graph ({shape})") if mtp else _("{arch} prompt graph ({shape})"))
    shape = join(_(", "), [
        _("{n} sequence(s) x {tokens} tokens").format(n=p.n_seqs, tokens=p.n_tokens // p.n_seqs),
        _("{n} KV cells x {streams} stream(s)").format(n=p.n_kv, streams=p.n_stream)
        + (_(" + {n} SWA cells").format(n=p.n_kv_swa) if p.n_kv_swa else ""),
        _("{n} output(s)").format(n=p.n_outputs), f"K {p.type_k} / V {p.type_v}",
        *([] if mtp else [f"n_rs_seq {p.n_rs_seq}",
                          _("flash attention on") if p.flash_attn else _("flash attention off")])])
    return what.format(arch=spec.architecture, shape=shape)


def _replay_cuda(spec: ModelSpec, p: GraphParams, mtp: bool, cuda_cc: int) -> ComputeEstimate:
    """Every layer, the output layer and the KV cache on one CUDA GPU: the scheduled replay's
    GPU buffer, with the pinned host (CUDA_Host) buffer beside it."""
    setup = Setup(Layout.single(spec.n_layer, 0, 1), (cuda_backend("CUDA0", cuda_cc), Backend("CUDA_Host")))
    dev, host = buffers(spec, p, setup, mtp)
    # MoE graphs: CUDA's graph_optimize adds allocation dependencies for its fused MoE ops
    # (ggml-cuda.cu:4604-4700), which keep tensors alive longer; not replayed, so modelled
    moe = bool(spec.n_expert)
    return ComputeEstimate(
        dev, _("ggml-backend's scheduler and ggml-alloc replayed on the {graph} for one CUDA GPU (compute capability "
               "{cc}; inputs and the token embeddings' get_rows on the CPU, their copies and flash attention's f16 K/V "
               "copies in the GPU buffer): {size}").format(
            graph=_replay_what(spec, p, mtp), cc=f"{cuda_cc // 100}.{cuda_cc % 100 // 10}", size=f"{dev / MiB:.2f} MiB")
             + (_("; the allocation dependencies CUDA adds for its fused MoE ops (ggml-cuda.cu:4604-4700) are not "
                  "replayed") if moe else ""),
        "modelled" if moe else "exact", host)


def _replay_single(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, *, layers: str, gpu: bool,
                   cache_types: tuple[str, str], cuda_quant_kv: tuple[str, str] | None,
                   cuda_cc: int | None) -> ComputeEstimate | None:
    """qwen35 / qwen35moe (and their MTP draft context) on one backend: the graph replayed
    through ggml-alloc; None for what is not replayed here (other architectures, a fused
    attn_qkv)."""
    mtp = layers == "mtp"
    if not (graphs.supports_mtp(spec) if mtp else spec.architecture in QWEN35 and graphs.supports(spec)):
        return None
    p = replay_params(spec, ctx, n_outputs_max, cache_types[0], cache_types[1])
    if cuda_cc is not None:
        return _replay_cuda(spec, p, mtp, cuda_cc)
    b = buffers(spec, p, Setup.cpu_only(spec.n_layer), mtp)[0]
    formula = f"ggml-alloc replayed on the {_replay_what(spec, p, mtp)}: {b / MiB:.2f} MiB"
    if mtp:
        # on a GPU the same graph and allocator: the published Vulkan (520.06 MiB) and CUDA
        # (648.03 MiB) MTP figures of docs/accuracy.md come out within 0.01 MiB, with nothing
        # fitted; still "modelled" there, as no GPU server is checked live
        return ComputeEstimate(b, formula, "modelled" if gpu else "exact")
    conv = 0
    if ctx.flash_attn and cuda_quant_kv:
        ly = next(x for x in spec.layers if x.kind != "recurrent")
        conv = (ctx.n_ctx_seq if not ctx.kv_unified else ctx.n_ctx) * ly.n_head_kv * (ly.head_dim_k + ly.head_dim_v) * 2
        formula += (f" + f16 K/V copies for CUDA flash attention {conv / MiB:.2f} MiB (in the FA node's allocation, "
                    "fattn.cu:725-760; added whole: an upper bound)")
    return ComputeEstimate(b + conv, formula, "modelled" if conv else "exact")


@dataclass(frozen=True)
class _Phase:
    """The calibrated phase model's pieces for one context."""

    n_t: int
    n_out: int
    base: int
    swa: int | None
    masks: int
    has_attn: bool


def _phase_inputs(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, layers: str) -> _Phase:
    n_t = min(ctx.n_ctx, ctx.n_ubatch)
    has_attn = any(ly.kind != "recurrent" for ly in spec.layers)
    base = ctx.n_ctx_seq if has_attn else 0
    swa = (ctx.swa_cells // max(1, ctx.n_stream)) if ctx.swa_cells and layers != "mtp" else None
    return _Phase(n_t, min(n_t, max(1, n_outputs_max)), base, swa, _masks(ctx, n_t, base, swa, ctx.flash_attn), has_attn)


def _peak_phase(spec: ModelSpec, ctx: ContextLayout, ph: _Phase, layers: str) -> tuple[int, str]:
    """The largest per-layer phase: FFN / MoE, attention with flash attention, the gated delta
    net, attention without flash attention (see the module docstring)."""
    e, n_t = spec.n_embd or 0, ph.n_t
    ffn = ffn_floats_per_token(spec)
    if layers == "mtp":
        ffn = 2 * e + 2 * ((spec.n_ff or 0) if not spec.n_expert else spec.n_expert_used * (spec.n_ff_expert or 0)) + 25
    phase, name = ffn * n_t * F32, _("FFN {formula}").format(formula=f"{ffn} f32/token x {n_t}")
    if ctx.flash_attn and ph.has_attn and layers == "main":
        att_fa = attn_fa_floats_per_token(spec)
        if att_fa > ffn:
            phase, name = att_fa * n_t * F32, _("attention {formula}").format(formula=f"{att_fa} f32/token x {n_t}")
    if spec.recurrent is not None and layers == "main" and any(ly.kind == "recurrent" for ly in spec.layers):
        rec, rec_name = _delta_net_phase(spec, ctx, n_t)
        if rec > phase:
            phase, name = rec, rec_name
    if not ctx.flash_attn and ph.has_attn:
        att, att_name = _attn_nofa_phase(spec, ph)
        if att > phase:
            phase, name = att, att_name
    return phase, name


def _delta_net_phase(spec: ModelSpec, ctx: ContextLayout, n_t: int) -> tuple[int, str]:
    r = spec.recurrent
    assert r is not None
    conv = r.inner_size + 2 * r.group_count * r.state_size
    per_tok = 3 * conv + (2 * r.inner_size) // 5
    n_seq = max(1, ctx.n_parallel)
    copies = n_seq * (2 + ctx.n_rs_seq)  # state in/out, plus rollback snapshot writes
    return (per_tok * n_t * F32 + copies * r.n_embd_s * F32,
            _("gated delta net {per} ({per_formula}) x {n_t} + {copies} state copies ({copies_formula}) x {state}").format(
                per=f"{per_tok} f32/token", per_formula=f"3 x conv_dim {conv} + 0.4 x inner {r.inner_size}", n_t=n_t,
                copies=copies, copies_formula=f"n_seq {n_seq} x (2 + n_rs_seq {ctx.n_rs_seq})",
                state=f"n_embd_s {r.n_embd_s} x 4 B"))


def _attn_nofa_phase(spec: ModelSpec, ph: _Phase) -> tuple[int, str]:
    e = spec.n_embd or 0
    att_layers = [ly for ly in spec.layers if ly.kind != "recurrent" and not ly.nextn] or list(spec.layers)
    ly = max(att_layers, key=lambda x: x.n_head)
    q = ly.n_head * ly.head_dim_k
    per_tok = max(0, 4 * e + 3 * q + ly.n_head_kv * (ly.head_dim_k + ly.head_dim_v) + C_ATTN_NOFA)
    return (ph.base * ph.n_t * ly.n_head * F32 + per_tok * ph.n_t * F32,
            _("KQ {shape} x {heads} heads x 4 B + {rest}").format(shape=f"n_kv {ph.base} x {ph.n_t}", heads=ly.n_head,
                                                                  rest=f"{per_tok} f32/token"))


def _phase_model(spec: ModelSpec, ctx: ContextLayout, ph: _Phase, layers: str,
                 cuda_quant_kv: tuple[str, str] | None) -> ComputeEstimate:
    """Masks + the peak phase (+ CUDA flash attention's f16 K/V copies) + logits, or the output
    phase when that is larger."""
    e = spec.n_embd or 0
    fa = ctx.flash_attn
    phase, phase_name = _peak_phase(spec, ctx, ph, layers)
    conv = 0
    if fa and cuda_quant_kv and ph.has_attn:
        ly = next(x for x in spec.layers if x.kind != "recurrent")
        conv = ph.base * ly.n_head_kv * (ly.head_dim_k + ly.head_dim_v) * 2
    logits = (spec.n_vocab or 0) * ph.n_out * F32
    layer_total = ph.masks + phase + conv
    # the output phase (after the last layer: the masks and the layer temporaries are dead): the
    # logits [n_vocab, n_out] f32 next to two [n_embd, n_out] f32 (the last residual and the
    # output norm). Published figures that reserved n_out = n_ubatch outputs (llama.cpp before
    # PR #23861) are this phase exactly: gpt-oss-20b 201088 x 512 x 4 B + 2 x 2880 x 512 x 4 B =
    # 404.00 MiB (PR #17609), Qwen3.8-27B 505 MiB at -ub 512 (GenerelSchwerz/llama.cpp PR #62).
    out_phase = logits + 2 * e * ph.n_out * F32
    formula = (_("KQ mask(s) {size} ({shape}) + peak phase {phase} ({name})").format(
                   size=f"{ph.masks / MiB:.2f} MiB", phase=f"{phase / MiB:.2f} MiB", name=phase_name,
                   shape=f"{'f16' if fa else 'f32'} n_kv {ph.base}{f' + SWA {ph.swa}' if ph.swa else ''} x n_ubatch {ph.n_t}")
               + (_(" + f16 K/V copies for CUDA flash attention {size} (part of the FA node's allocation in the "
                    "compute buffer, fattn.cu:725-760; added whole: an upper bound)").format(size=f"{conv / MiB:.2f} MiB")
                  if conv else ""))
    if out_phase > layer_total:
        return ComputeEstimate(int(out_phase),
                               f"output phase {out_phase / MiB:.2f} MiB: logits {logits / MiB:.2f} MiB (n_vocab "
                               f"{spec.n_vocab} x {ph.n_out} outputs x 4 B) + 2 x n_embd {e} x {ph.n_out} x 4 B (larger "
                               "than the layers' peak: " + formula + ")")
    # small logits stay additive: the CPU calibration above was fitted with them added
    return ComputeEstimate(int(layer_total + logits),
                           formula + _(" + logits {size} (n_vocab x {n} outputs)").format(
                               size=f"{logits / MiB:.2f} MiB", n=ph.n_out))


def estimate_compute(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, *,
                     cuda_quant_kv: tuple[str, str] | None = None,
                     layers: str = "main", gpu: bool = False,
                     cache_types: tuple[str, str] = ("f16", "f16"), replay: bool = True,
                     cuda_cc: int | None = None) -> ComputeEstimate:
    """Compute buffer of a context whose layers all sit on one backend.

    ``layers='mtp'`` models the MTP draft context (one nextn block: fewer live tensors); with
    ``gpu`` the GPU allocation of that context (:func:`_mtp_gpu`). qwen35 / qwen35moe trunks are
    not modelled but replayed: their graph and ggml-alloc (:mod:`llamarig.plan.compute.replay`) give
    llama.cpp's own figure; ``cache_types`` (K, V) decide the f16 casts and Hadamard rotations of
    their attention layers. ``replay=False`` keeps the phase model for them (figures published by
    other builds, whose graphs differ: scripts/accuracy.py). ``cuda_cc``: the whole context (every
    layer, the output layer, the KV cache) sits on one CUDA GPU of that compute capability (900
    for 9.0): the qwen35 replays then run through ggml-backend's scheduler and give the GPU's
    buffer and the pinned host one (``host_bytes``). Several devices, and the other
    architectures plan replays: :func:`replayed_buffers`.
    """
    if replay:
        r = _replay_single(spec, ctx, n_outputs_max, layers=layers, gpu=gpu, cache_types=cache_types,
                           cuda_quant_kv=cuda_quant_kv, cuda_cc=cuda_cc)
        if r is not None:
            return r
    ph = _phase_inputs(spec, ctx, n_outputs_max, layers)
    if layers == "mtp" and gpu and ph.has_attn:
        return _mtp_gpu(spec, ctx, ph.n_t, ph.n_out, ph.masks, ph.base)
    return _phase_model(spec, ctx, ph, layers, cuda_quant_kv)


# ============================================================================ the host compute buffer

#: llm_arch_supports_mixed_batch (src/llama-arch.cpp:1182-1194): the architectures without the
#: mixed-batch input branch of build_inp_embd
NO_MIXED_BATCH = frozenset({"cogvlm", "deepseek4", "graniteswitch", "eagle3", "dflash", "gemma4-assistant"})


def host_inputs(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int,
                cache_types: tuple[str, str] = ("f16", "f16")) -> ComputeEstimate:
    """The CPU backend's compute buffer (``CUDA_Host compute buffer size`` with a CUDA GPU) when
    the layers run on the GPU: ggml-backend's scheduler puts every graph input on the CPU
    (ggml-backend.cpp:1084-1089) and the token embeddings' get_rows with them (the embeddings stay
    in host memory; GET_ROWS is never offloaded, ggml-cuda.cu:5739-5758). A tensor the GPU reads
    gets a dependency view that ggml-alloc never releases (ggml-backend.cpp:1660-1666), so these
    stay alive together: the token ids, the embeddings input, the get_rows output and, for
    architectures with the mixed-batch branch (llama-graph.cpp:2469-2486), its token ids, slots
    and a copy of its embeddings input (the input itself is freed after the copy and its get_rows
    reuses the place); the KQ mask(s), positions, K/V row indices, output ids, the Hadamard
    rotations of a quantized cache (llama-kv-cache.cpp:321-357) and the recurrent state's row
    copy ids. The qwen35 replay through the scheduler gives this exactly (the H200 evidence); for
    other architectures it is this sum (their own extra inputs are not counted)."""
    n_t = min(ctx.n_ctx, ctx.n_ubatch)
    n_out = min(n_t, max(1, n_outputs_max))
    e = spec.n_embd or 0
    mixed = spec.architecture not in NO_MIXED_BATCH
    act = (4 if mixed else 2) * e * n_t * F32
    small = n_t * 4 + (n_t * 4 + n_t * 8 if mixed else 0) + n_t * 4 + n_out * 4
    has_attn = any(ly.kind != "recurrent" for ly in spec.layers)
    masks = _mask_bytes(ctx, n_t, spec) if has_attn else 0
    rot = 0
    if has_attn:
        att = [ly for ly in spec.layers if ly.kind != "recurrent"]
        v_gqa = max(ly.n_embd_v_gqa for ly in att)
        caches = 2 if ctx.swa_cells else 1
        small += caches * (n_t * 8 + (n_t * 8 if ctx.flash_attn else n_t * v_gqa * 8))
        hdk = max(ly.head_dim_k for ly in att)
        if hdk and hdk % 64 == 0:
            if cache_types[0] not in ("f32", "f16", "bf16"):
                n_rot = 64
                while hdk % (2 * n_rot) == 0:
                    n_rot *= 2
                rot += n_rot * n_rot * F32
            if cache_types[1] not in ("f32", "f16", "bf16"):
                rot += 64 * 64 * F32
    if spec.recurrent is not None:
        small += max(1, ctx.n_parallel) * 4
    total = act + masks + small + rot
    return ComputeEstimate(
        total,
        _("graph inputs and the token embeddings' get_rows, kept on the CPU: {inputs} ({what}) + KQ mask(s) {masks} + "
          "Hadamard rotations {rot} + ids/positions {small} = {total}").format(
            inputs=f"{4 if mixed else 2} x n_embd {e} x {n_t} x 4 B",
            what=_("tokens and mixed-batch embeddings") if mixed else _("embeddings input and get_rows"),
            masks=f"{masks / MiB:.2f} MiB", rot=f"{rot / MiB:.2f} MiB", small=f"{small / MiB:.2f} MiB",
            total=f"{total / MiB:.2f} MiB"))


# ============================================================================ pipeline parallelism
#
# With several GPUs and a layer split, llama.cpp runs the scheduler with GGML_SCHED_MAX_COPIES
# (= 4, ggml/CMakeLists.txt:188, ggml/src/ggml-backend.cpp:911-912) copies of every graph input,
# so that the host can upload micro-batch k+1 while the GPUs still read micro-batch k
# (ggml/src/ggml-backend.cpp:2028 ``sched->n_copies = parallel ? GGML_SCHED_MAX_COPIES : 1``).
# What is multiplied is *not* the whole compute buffer, only the inputs:
#
# - every tensor a split reads from another backend (the "split inputs": on the first GPU the
#   token embeddings that the CPU's get_rows produced (GET_ROWS is never
#   offloaded, ggml-cuda.cu:5739-5742), on the next GPUs the residual stream of the
#   previous one, and on every GPU the KQ mask(s), the positions and, where the output layer is,
#   the output ids) gets n_copies duplicates on the reading backend, each flagged input + output
#   so that ggml-alloc never frees or reuses it (ggml-backend.cpp:1515-1533), and they are added
#   as leafs, i.e. allocated before anything else and alive through the whole graph
#   (ggml-backend.cpp:1703-1733);
# - every graph input leaf (tokens, input embeddings, positions, masks, output ids; all assigned
#   to the last backend, the CPU, ggml-backend.cpp:1084-1089) gets n_copies duplicates in the CPU
#   backend's (pinned host) compute buffer, also never freed (ggml-backend.cpp:1547-1585).
#
# Without pipeline parallelism a split input is one ordinary tensor that dies after its last use,
# which the single-backend model above already contains for the masks (alive until the last
# layer) and, within the per-token terms of one layer, for the residual stream.
#
# Conditions (src/llama-context.cpp:431-457): more than one model device, -ngl above n_layer_all
# (every layer and the output layer offloaded; -ngl unset = all, src/llama-model.cpp:2008-2011),
# --split-mode layer, the KV cache offloaded (no -nkvo), no tensor overrides (-ot, --n-cpu-moe,
# --cpu-moe), and async compute + events on every non-CPU device (CUDA/ROCm/Metal/Vulkan/SYCL/RPC
# report both; ggml-cuda.cu:5220-5231 turns events off only when built with
# GGML_CUDA_NO_PEER_COPY; OpenCL, WebGPU, CANN report async = false). If the enlarged buffer cannot
# be allocated, llama.cpp retries once without it (llama-context.cpp:678-683).

#: ggml/CMakeLists.txt:188 (GGML_SCHED_MAX_COPIES, default 4)
GGML_SCHED_MAX_COPIES = 4
#: backends whose device props report async compute and events (see above)
PP_CAPABLE_BACKENDS = frozenset({"CUDA", "ROCm", "Metal", "Vulkan", "SYCL", "RPC"})
PP_METHOD = ("modelled from llama.cpp source (llama-context.cpp:431-457, ggml-backend.cpp:1515-1533, "
             "1703-1733, 2028); not measured on several GPUs")


@dataclass(frozen=True)
class PipelineParallel:
    """Whether llama.cpp enables pipeline parallelism, and why (not)."""

    enabled: bool
    n_copies: int
    reason: str


def pipeline_parallel(*, n_devices: int, n_gpu_layers: int, n_layer_all: int, split_mode: str,
                      offload_kqv: bool = True, tensor_overrides: bool = False,
                      backends: tuple[str, ...] | list[str] = ()) -> PipelineParallel:
    """llama-context.cpp:431-457. ``n_gpu_layers``: the effective -ngl (layers + output layer, so
    n_layer_all + 1 when everything is offloaded); ``backends``: the model devices' backends."""
    why: list[str] = []
    if n_devices <= 1:
        why.append(_("{n} model device(s)").format(n=n_devices))
    if n_gpu_layers <= n_layer_all:
        why.append(_("-ngl {ngl} <= n_layer {n} (not every layer and the output layer offloaded)").format(
            ngl=n_gpu_layers, n=n_layer_all))
    if split_mode != "layer":
        why.append(f"-sm {split_mode}")
    if not offload_kqv:
        why.append("-nkvo")
    if tensor_overrides:
        why.append(_("tensor overrides (-ot/--n-cpu-moe/--cpu-moe)"))
    bad = sorted({b for b in backends if b != "CPU" and b not in PP_CAPABLE_BACKENDS})
    if bad:
        why.append(_("backend(s) without async compute + events: {names}").format(names=", ".join(bad)))
    if why:
        return PipelineParallel(False, 1, _("pipeline parallelism off: {why} (llama-context.cpp:431-457)").format(
            why=join(_("; "), why)))
    return PipelineParallel(True, GGML_SCHED_MAX_COPIES, _(
        "pipeline parallelism on: {n} devices, all {layers} layers + output offloaded, -sm layer, KV offloaded, no "
        "tensor overrides -> sched n_copies = GGML_SCHED_MAX_COPIES {copies} (llama-context.cpp:431-457, "
        "ggml-backend.cpp:2028)").format(n=n_devices, layers=n_layer_all, copies=GGML_SCHED_MAX_COPIES))


def _mask_bytes(ctx: ContextLayout, n_t: int, spec: ModelSpec) -> int:
    has_attn = any(ly.kind != "recurrent" for ly in spec.layers)
    base = ctx.n_ctx_seq if has_attn else 0
    swa = (ctx.swa_cells // max(1, ctx.n_stream)) if ctx.swa_cells else None
    return _masks(ctx, n_t, base, swa, ctx.flash_attn)


#: where the first GPU's premium under a layer split came from, and why the pinned build has none
F32_MASK_CAST_NOTE = (
    "every GPU copies the same inputs: at this build the KQ mask is reserved in f16 when flash attention "
    "is on (src/llama-graph.cpp:38-40, llama.cpp PR #23764); older builds reserved it in f32, copied "
    "that to the first GPU n_copies times and cast it to f16 there, which made the first GPU's buffer "
    "the largest (PR #15860: 985 vs 548 MiB on three RTX 4090s; pre_23764_mask=True models them)")


def pipeline_split_inputs(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, *,
                          first: bool, output: bool, pre_23764_mask: bool = False) -> tuple[int, str]:
    """Bytes of one copy of the split inputs of one GPU stage, and their list: the activations
    entering the stage ([n_embd, n_ubatch] f32: the CPU's token embeddings on the first GPU, the
    previous GPU's residual stream on the others), the KQ mask(s), the positions
    (build_inp_pos, llama-graph.cpp:2540-2548) and, on the stage with the output layer, the output
    ids (build_inp_out_ids, llama-graph.cpp:2569-2586).

    ``pre_23764_mask``: the graph of llama.cpp before PR #23764, where the mask input was f32 and
    ``ggml_cast`` to f16 for flash attention. The scheduler puts the cast on the first GPU (the
    first consumer's backend, ggml-backend.cpp:1266-1288 "expand gpu down"), so that GPU copies
    the f32 input and the others copy the f16 cast."""
    n_t = min(ctx.n_ctx, ctx.n_ubatch)
    n_out = min(n_t, max(1, n_outputs_max))
    act = (spec.n_embd or 0) * n_t * F32
    masks = _mask_bytes(ctx, n_t, spec)
    if pre_23764_mask and first and ctx.flash_attn:
        masks *= 2  # the f32 input, not the f16 cast
    pos = n_t * 4
    out_ids = n_out * 4 if output else 0
    what = ((_("token embeddings from the CPU {act} + KQ mask(s) {masks} + positions {pos} B") if first else
             _("residual stream from the previous GPU {act} + KQ mask(s) {masks} + positions {pos} B")).format(
                act=f"n_embd {spec.n_embd} x {n_t} x 4 B = {act / MiB:.2f} MiB", masks=f"{masks / MiB:.2f} MiB", pos=pos)
            + (_(" + output ids {n} B").format(n=out_ids) if out_ids else ""))
    return act + masks + pos + out_ids, what


def pipeline_extra(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, pp: PipelineParallel, *,
                   first: bool, output: bool, pre_23764_mask: bool = False) -> ComputeEstimate:
    """What pipeline parallelism adds to one GPU's compute buffer on top of
    :func:`estimate_compute`: n_copies permanent copies of the stage's split inputs, less the one
    mask copy the single-backend model already counts. ``pre_23764_mask`` (see
    :func:`pipeline_split_inputs`): on the first GPU the f16 mask counted by
    :func:`estimate_compute` is the cast, a tensor of its own that lives until the last GPU has
    copied it, so nothing is subtracted there."""
    if not pp.enabled or pp.n_copies <= 1:
        return ComputeEstimate(0, "")
    n_t = min(ctx.n_ctx, ctx.n_ubatch)
    one, what = pipeline_split_inputs(spec, ctx, n_outputs_max, first=first, output=output,
                                      pre_23764_mask=pre_23764_mask)
    cast = pre_23764_mask and first and ctx.flash_attn
    masks = 0 if cast else _mask_bytes(ctx, n_t, spec)
    extra = pp.n_copies * one - masks
    why = (", the f32 mask input and the f16 cast kept until the last GPU copied it (before PR #23764)" if cast
           else f", less the one mask already counted; {F32_MASK_CAST_NOTE}" if first and ctx.flash_attn
           else ", less the one mask already counted")
    return ComputeEstimate(
        extra,
        f"pipeline parallelism: {pp.n_copies} never-freed copies of this GPU's split inputs "
        f"({what}) = {pp.n_copies} x {one / MiB:.2f} MiB{why} "
        f"= {extra / MiB:.2f} MiB [{PP_METHOD}]")


def host_pipeline_extra(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int,
                        pp: PipelineParallel) -> ComputeEstimate:
    """What pipeline parallelism adds to the CPU backend's (pinned host) compute buffer:
    n_copies - 1 more copies of the graph input leaves (ggml-backend.cpp:1547-1585): tokens and
    input embeddings (build_inp_embd, llama-graph.cpp:2413-2428), the mixed-batch token/slot/embd
    inputs of the architectures that have them (llama-graph.cpp:2469-2486), positions, masks
    and output ids."""
    if not pp.enabled or pp.n_copies <= 1:
        return ComputeEstimate(0, "")
    n_t = min(ctx.n_ctx, ctx.n_ubatch)
    n_out = min(n_t, max(1, n_outputs_max))
    e = spec.n_embd or 0
    # tokens i32 + embd f32, mixed tokens i32 + slots i64 + embd f32 (n_tok_rows <= n_ubatch),
    # positions i32, output ids i32
    per_copy = (4 * n_t + e * n_t * F32) + (4 * n_t + 8 * n_t + e * n_t * F32) + 4 * n_t + 4 * n_out \
        + _mask_bytes(ctx, n_t, spec)
    extra = (pp.n_copies - 1) * per_copy
    return ComputeEstimate(
        extra,
        _("pipeline parallelism: {n} more never-freed copies of the graph inputs ({inputs} embeddings inputs + KQ "
          "mask(s) + tokens/positions/ids) = {n} x {size} [{method}]").format(
            n=pp.n_copies - 1, inputs=f"2 x n_embd {e} x {n_t} x 4 B", size=f"{per_copy / MiB:.2f} MiB",
            method=PP_METHOD))


# ============================================================================ several devices, replayed
#
# With RPC servers and CUDA GPUs, llama.cpp's graph is replayed through ggml-backend's scheduler
# (plan/compute/ggml_sched.py) over the model's devices and the CPU: which device runs each node, the
# splits, the copies a device reads from another one (the previous device's activations, the
# graph inputs kept on the CPU), pipeline parallelism's n_copies never-freed copies, the output
# layer's device, the norms llama.cpp pins to their layer's device, and one ggml-alloc allocator
# per device. Each device's compute buffer is then its own high-water mark, not one figure for
# all of them plus estimated copies.

#: the devices whose compute buffers are replayed: a CUDA GPU, and a device behind an rpc-server
#: (its buffer type answers alignment, size and alloc size from the server's buffer type,
#: ggml-rpc.cpp:820-921): the server's CPU device, or a CUDA GPU there
REPLAYED_BACKENDS = frozenset({"RPC", "CUDA"})
#: the compute capability taken for a CUDA GPU the catalogue has none for (Ada, 8.9)
DEFAULT_CUDA_CC = 890


@dataclass(frozen=True)
class DeviceCompute:
    """One context's compute buffers from the scheduled replay: one per device (the plan's
    device order) and the CPU backend's (``CPU``, or ``CUDA_Host`` beside a CUDA GPU)."""

    devices: tuple[int, ...]
    host: int
    #: "exact" where the replay was checked against the real server to the log's rounding (RPC
    #: servers and the CPU: the multi-device grid; one CUDA GPU holding a qwen35 model: the H200
    #: evidence), else "modelled"
    method: str
    #: what was replayed (the graph, the devices, the input copies)
    formula: str
    n_copies: int


def _backend(i: int, g: GPU, default_cc: int) -> Backend:
    """A device's backend as the scheduler sees it: a CUDA GPU (its buffer type's alignment and
    sizes, op offload); a device behind an rpc-server sizes tensors with the remote buffer type
    (ggml-rpc.cpp:820-921: alignment and get_alloc_size are the server's) but takes no op over
    (the RPC backend has no offload_op, ggml-rpc.cpp:2264); an rpc-server's CPU device is a CPU."""
    if g.backend == "CUDA":
        return cuda_backend(f"CUDA{i}", g.compute_capability or default_cc)
    if g.buffer_backend == "CUDA":
        return Backend(g.name, CUDA_ALIGNMENT, None, g.compute_capability or default_cc)
    return Backend(g.name)


def _backends(gpus: Sequence[GPU], default_cc: int) -> tuple[Backend, ...]:
    host = "CUDA_Host" if any(g.backend == "CUDA" for g in gpus) else "CPU"
    return (*(_backend(i, g, default_cc) for i, g in enumerate(gpus)), Backend(host))


def _whole_on_one_gpu(spec: ModelSpec, gpus: Sequence[GPU], placement: Placement, overrides: Mapping[str, int]) -> bool:
    """Every layer, the output layer and every weight on the one device (a qwen35 / qwen35moe
    model so placed on one CUDA GPU was the first replay through the scheduler: the H200 evidence)."""
    return (len(gpus) == 1 and not overrides and placement.output_dev == 0 and all(d == 0 for d in placement.layer_dev)
            and spec.architecture in QWEN35)


def _replay_method(spec: ModelSpec, gpus: Sequence[GPU], placement: Placement, overrides: Mapping[str, int]) -> str:
    if all(g.backend == "RPC" and g.buffer_backend in ("RPC", "CPU") for g in gpus):
        return "exact"
    exact = (spec.architecture == "qwen35" and gpus[0].compute_capability is not None
             and _whole_on_one_gpu(spec, gpus, placement, overrides))
    return "exact" if exact else "modelled"


def replayed_buffers(spec: ModelSpec, ctx: ContextLayout, n_outputs_max: int, *, placement: Placement,
                     gpus: Sequence[GPU], overrides: Mapping[str, int], n_copies: int, full_offload: bool,
                     cache_types: tuple[str, str], mtp: bool = False, split_mode: str = "layer",
                     kv_on_cpu: bool = False, dry_run: bool = False, op_offload: bool = True) -> DeviceCompute | None:
    """Every device's compute buffer and the host's for the target context (``mtp``: the MTP
    draft context), when the replay covers the setup: an architecture of
    :mod:`llamarig.plan.compute.graphs`, every device an RPC server or a CUDA GPU (or none: the CPU
    alone), a layer split and the KV cache with its layers. ``placement``: the planner's layer
    placement (-1 = CPU); ``overrides``: tensor name -> device (-1 = CPU) from -ot, --cpu-moe,
    --n-cpu-moe, --n-cpu-ffn; ``n_copies``: the scheduler's input copies (4 with pipeline
    parallelism, :func:`pipeline_parallel`); ``full_offload``: -ngl above n_layer_all (llama.cpp
    then pins every layer's norms to the layer's device); ``dry_run``: what one of --fit's dry runs
    measures (the prompt graph alone, nothing pinned: :func:`llamarig.plan.compute.replay.buffers`);
    ``op_offload``: --op-offload (a CUDA GPU takes over an op whose weight stays in host memory,
    ggml-backend.cpp:1100-1118; --no-op-offload keeps it on the CPU). None when not covered."""
    if not (graphs.supports_mtp(spec) if mtp else graphs.supports(spec)):
        return None
    if (any(g.backend not in REPLAYED_BACKENDS or g.buffer_backend not in ("RPC", "CPU", "CUDA") for g in gpus)
            or split_mode not in ("layer", "none") or kv_on_cpu):
        return None
    if (spec.n_expert and any(g.buffer_backend == "CUDA" for g in gpus)
            and not _whole_on_one_gpu(spec, gpus, placement, overrides)):
        # CUDA's graph_optimize keeps MoE tensors alive for its fused ops (ggml-cuda.cu:4604-4700), not
        # replayed: with experts copied in from host memory that is a second copy alive (-50 % on the
        # Qwen3-30B-A3B --n-cpu-moe row of docs/accuracy.md); the phase model keeps those
        return None
    n_dev = len(gpus)

    def be(d: int) -> int:
        return n_dev if d < 0 else d

    lay = Layout(tuple(be(d) for d in placement.layer_dev), be(placement.output_dev), n_dev,
                 tuple(sorted((name, be(d)) for name, d in overrides.items())), kv_on_cpu, full_offload,
                 pinned=not dry_run)
    setup = Setup(lay, _backends(gpus, DEFAULT_CUDA_CC), n_copies, op_offload)
    p = replay_params(spec, ctx, n_outputs_max, cache_types[0], cache_types[1])
    sizes = buffers(spec, p, setup, mtp, dry_run=dry_run)
    names = ", ".join(b.name for b in setup.backends)
    host_weights = any(d < 0 for d in placement.layer_dev) or any(d < 0 for d in overrides.values())
    offload = op_offload and host_weights and any(g.backend == "CUDA" for g in gpus)
    formula = (_("ggml-backend's scheduler and ggml-alloc replayed on the {graph} over {names}").format(
                   graph=_replay_what(spec, p, mtp), names=names)
               + (_(", {n} copies of every split input and graph input (pipeline parallelism)").format(n=n_copies)
                  if n_copies > 1 else "")
               + (_("; op offload: ops whose weights stay in host memory run on the GPU for batches of 32 rows or "
                    "more and copy the weight into its compute buffer (ggml-backend.cpp:1100-1118, "
                    "ggml-cuda.cu:5754-5758)") if offload else ""))
    return DeviceCompute(sizes[:-1], sizes[-1], _replay_method(spec, gpus, placement, overrides), formula, n_copies)
