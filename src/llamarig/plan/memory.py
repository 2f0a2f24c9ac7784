"""Memory per device, exactly as llama.cpp (build 11434) allocates it: pure functions over a
ModelSpec and a ServerConfig.

Sources in the vendored tree (paths relative to it):
- context size, slots, batches: src/llama-context.cpp:240-307, tools/server/server.cpp:160-186
- attention KV: src/llama-kv-cache.cpp:65-303 (row sizes: ggml_row_size, one table in
  llamarig.gguf.ggml_types)
- SWA: src/llama-kv-cache-iswa.cpp:34-101
- recurrent state: src/llama-memory-recurrent.cpp:20-143 (size), 784-1010 (state_write)
- which memory per arch: src/llama-model.cpp create_memory (2390-2890)
- layer placement: src/llama-model.cpp:1558-1610 (splits, i_gpu_start, dev_output)
- MTP draft context: common/speculative.cpp:2527-2646
- output buffer: src/llama-context.cpp:2118-2180 (output_reserve)
- checkpoints: tools/server/server-context.cpp:2513-2575, common/common.cpp:2349-2383
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from llamarig.errors import InputError
from llamarig.gguf.ggml_types import TYPE_SIZES, row_size
from llamarig.gguf.reader import TensorInfo
from llamarig.gguf.spec import LayerSpec, ModelSpec
from llamarig.hardware.cpu import CpuFeatures
from llamarig.hardware.cpu_buffers import host_weight_buffer
from llamarig.i18n import _
from llamarig.plan.config import ServerConfig
from llamarig.plan.specmemo import per_spec

#: llm_arch_supports_rs_rollback (src/llama-arch.cpp:1162-1180)
RS_ROLLBACK_ARCHS = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
    "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3",
})
#: LLM_FFN_EXPS_REGEX (common/common.h): the expert tensors --cpu-moe / --n-cpu-moe move
FFN_EXPS_RE = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
FFN_DENSE_RE = r"\.ffn_(up|down|gate)\."  # common/common.h LLM_FFN_DENSE_REGEX (-ncffn)


def pad(x: int, n: int) -> int:
    """GGML_PAD: round x up to a multiple of n."""
    return (x + n - 1) // n * n


# ============================================================================ context


@dataclass(frozen=True)
class ContextLayout:
    """What llama_context and llama-server derive from -c/-np/-kvu/-b/-ub (all resolved)."""

    n_ctx: int  # total KV cells per non-SWA layer (padded to 256)
    n_ctx_seq: int  # cells one sequence can use
    n_ctx_slot: int  # usable per slot: min(n_ctx_seq, --kv-unified-per-slot, n_ctx_train)
    n_parallel: int  # slots = n_seq_max
    kv_unified: bool
    n_stream: int  # 1 if unified else n_parallel
    n_batch: int
    n_ubatch: int
    flash_attn: bool
    n_rs_seq: int  # recurrent rollback snapshot rows per sequence
    n_ctx_requested: int  # -c as given (0 = default)
    n_ctx_source: str  # how n_ctx was chosen, for the formula column
    swa_cells: int | None  # cells per SWA layer (all streams), None if no SWA layers


def _requested_ctx(cfg: ServerConfig, n_ctx_train: int, n_par: int, n_stream: int) -> tuple[int, str]:
    """(total context before padding, how it was chosen) from -c, --kv-unified-per-slot, --fit."""
    c = cfg.n_ctx
    if c == 0 and cfg.kv_unified_per_slot > 0 and "n_ctx" not in cfg.set_flags:
        # server.cpp:176-186 (not with an explicit -c 0, which sets fit_params_min_ctx to
        # UINT32_MAX, common/arg.cpp:1645-1648)
        return n_par * cfg.kv_unified_per_slot, f"-np {n_par} x --kv-unified-per-slot {cfg.kv_unified_per_slot}"
    if c != 0:
        return c, f"-c {c}"
    if cfg.fit and cfg.split_mode != "tensor":
        # common/fit.cpp:264-276: --fit starts from n_ctx_train x n_streams (and lowers it
        # only if that does not fit, and never below an explicit -c 0). Under -sm tensor fit
        # gives up at once (fit.cpp:196-198) and llama_context uses n_ctx_train.
        return n_ctx_train * n_stream, (f"n_ctx_train {n_ctx_train} x {n_stream} stream(s) (--fit default"
                                        + ("; -c 0 keeps it)" if "n_ctx" in cfg.set_flags else "; it may lower this)"))
    return n_ctx_train, f"n_ctx_train {n_ctx_train}"  # llama-context.cpp:135: n_ctx 0 -> n_ctx_train


def _swa_cells(spec: ModelSpec, cfg: ServerConfig, n_ctx_seq: int, n_par: int, unified: bool, n_ubatch: int,
               n_stream: int) -> int | None:
    """Cells per SWA layer (all streams), None without SWA layers."""
    if not any(ly.kind == "swa" for ly in spec.layers):
        return None
    if cfg.swa_full:
        return n_ctx_seq * n_stream
    n_swa = spec.swa_window or 0
    return pad(min(n_ctx_seq, n_swa * (n_par if unified else 1) + n_ubatch), 256) * n_stream


def resolve_context(spec: ModelSpec, cfg: ServerConfig) -> ContextLayout:
    n_ctx_train = spec.n_ctx_train or 4096
    # tools/server/server.cpp:168-173: -np unset -> 4 slots and unified KV, whatever -kvu says
    if cfg.n_parallel < 0:
        n_par, unified = 4, True
    else:
        n_par, unified = cfg.n_parallel, bool(cfg.kv_unified)
    n_stream = 1 if unified else n_par
    c, source = _requested_ctx(cfg, n_ctx_train, n_par, n_stream)
    n_ctx = pad(c, 256)  # llama-context.cpp:290
    if unified:
        n_ctx_seq = n_ctx
    else:
        n_ctx_seq = pad(n_ctx // n_par, 256)
        if n_ctx_seq == 0:
            raise InputError(_("n_ctx_seq == 0: -c is too small for -np"))
        n_ctx = n_ctx_seq * n_par  # may round up (llama-context.cpp:298-305)
    slot = min(n_ctx_seq, n_ctx_train)
    if cfg.kv_unified_per_slot > 0:
        slot = min(slot, cfg.kv_unified_per_slot)
    # llama-context.cpp:248-250
    n_batch = min(n_ctx, cfg.n_batch) if cfg.n_batch else n_ctx
    n_ubatch = min(n_batch, cfg.n_ubatch if cfg.n_ubatch else n_batch)
    if cfg.embeddings and n_batch > n_ubatch:
        n_batch = n_ubatch  # server.cpp:160-166
    # common.cpp:1693, llama-context.cpp:107-112
    n_rs_seq = cfg.spec_draft_n_max if cfg.rollback_spec and spec.architecture in RS_ROLLBACK_ARCHS else 0
    swa_cells = _swa_cells(spec, cfg, n_ctx_seq, n_par, unified, n_ubatch, n_stream)
    return ContextLayout(
        n_ctx=n_ctx, n_ctx_seq=n_ctx_seq, n_ctx_slot=slot, n_parallel=n_par, kv_unified=unified,
        n_stream=n_stream, n_batch=n_batch, n_ubatch=n_ubatch,
        flash_attn=cfg.flash_attn_enabled, n_rs_seq=n_rs_seq, n_ctx_requested=cfg.n_ctx,
        n_ctx_source=source, swa_cells=swa_cells,
    )


# ============================================================================ KV cache


@dataclass(frozen=True)
class LayerKV:
    layer: int
    kind: str  # attention | swa | nextn
    cells: int
    k_bytes: int
    v_bytes: int

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes


def v_row_width(spec: ModelSpec, layer: LayerSpec, flash_attn: bool) -> int:
    """V row width: with FA off V is stored transposed and padded to the widest layer when widths
    differ (llama-kv-cache.cpp:157-160, 210; llama-hparams.cpp n_embd_v_gqa_max over all layers)."""
    if flash_attn:
        return layer.n_embd_v_gqa
    return max((ly.n_embd_v_gqa for ly in spec.layers), default=layer.n_embd_v_gqa)


def kv_bytes_per_cell(layer: LayerSpec, type_k: str, type_v: str, v_width: int | None = None) -> int:
    """One cell (token) of one layer: row_size(K) + row_size(V)."""
    return row_size(type_k, layer.n_embd_k_gqa) + row_size(type_v, v_width if v_width is not None else layer.n_embd_v_gqa)


def check_kv_types(spec: ModelSpec, cfg: ServerConfig) -> None:
    """llama-context.cpp:3854-3874: with FA not off, quantized K/V need head dims divisible by the
    block size."""
    for t, which in ((cfg.cache_type_k, "K"), (cfg.cache_type_v, "V")):
        block = TYPE_SIZES[t][0]
        if block == 1:
            continue
        for ly in spec.layers:
            if ly.kind == "recurrent":
                continue
            dim = ly.head_dim_k if which == "K" else ly.head_dim_v
            if dim % block:
                raise InputError(
                    _("{which} cache type {t} with block size {block} does not divide the head dim {dim} of "
                      "layer {index}: llama-server refuses this model with -ct{lower} {t}").format(which=which, t=t, block=block, dim=dim, index=ly.index, lower=which.lower())
                )


def kv_layers(spec: ModelSpec, ctx: ContextLayout, type_k: str, type_v: str) -> list[LayerKV]:
    """KV of the target context: every non-recurrent main layer (MTP layers are filtered out,
    llama-model.cpp:2812-2819)."""
    out = []
    for ly in spec.layers:
        if ly.nextn or ly.kind == "recurrent":
            continue
        if ly.n_head_kv == 0:
            continue  # hparams.has_kv(il) is false
        cells = ctx.swa_cells if ly.kind == "swa" and ctx.swa_cells else ctx.n_ctx
        vw = v_row_width(spec, ly, ctx.flash_attn)
        out.append(LayerKV(ly.index, ly.kind, cells, row_size(type_k, ly.n_embd_k_gqa) * cells,
                           row_size(type_v, vw) * cells))
    return out


def kv_bytes_per_token(spec: ModelSpec, type_k: str, type_v: str, flash_attn: bool = True) -> int:
    """Bytes per cell summed over the full-attention (non-SWA, non-recurrent) main layers."""
    total = 0
    for ly in spec.layers:
        if ly.nextn or ly.kind != "attention" or ly.n_head_kv == 0:
            continue
        total += kv_bytes_per_cell(ly, type_k, type_v, v_row_width(spec, ly, flash_attn))
    return total


def mtp_kv_layers(spec: ModelSpec, ctx: ContextLayout, cfg: ServerConfig) -> list[LayerKV]:
    """The MTP draft context's KV: only the nextn layers, at the target's n_ctx, with -ctkd/-ctvd
    (common/speculative.cpp:2527-2646; llama-model.cpp:2668-2675)."""
    if not cfg.mtp or not spec.nextn_layers:
        return []
    out = []
    for ly in spec.layers:
        if not ly.nextn:
            continue
        vw = ly.n_embd_v_gqa if ctx.flash_attn else max(x.n_embd_v_gqa for x in spec.layers)
        out.append(LayerKV(ly.index, "nextn", ctx.n_ctx,
                           row_size(cfg.cache_type_k_draft, ly.n_embd_k_gqa) * ctx.n_ctx,
                           row_size(cfg.cache_type_v_draft, vw) * ctx.n_ctx))
    return out


# ============================================================================ recurrent state


def recurrent_layer_count(spec: ModelSpec) -> int:
    return sum(1 for ly in spec.layers if ly.kind == "recurrent" and not ly.nextn)


def recurrent_bytes_per_seq(spec: ModelSpec) -> int:
    """One sequence's state: 4 B (f32) x (n_embd_r + n_embd_s) per recurrent layer
    (llama-memory-recurrent.cpp:101-104; n_embd_r/n_embd_s from llama-hparams.cpp)."""
    r = spec.recurrent
    if r is None:
        return 0
    return 4 * (r.n_embd_r + r.n_embd_s) * recurrent_layer_count(spec)


def recurrent_rows(ctx: ContextLayout) -> int:
    """Rows of each R/S tensor: max(1, n_seq_max) x (1 + n_rs_seq) (memory-recurrent.cpp:101)."""
    return max(1, ctx.n_parallel) * (1 + ctx.n_rs_seq)


def recurrent_bytes(spec: ModelSpec, ctx: ContextLayout) -> int:
    return recurrent_bytes_per_seq(spec) * recurrent_rows(ctx)


def recurrent_checkpoint_bytes(spec: ModelSpec) -> int:
    """Size of one sequence's recurrent state as llama_state_seq_get_size(PARTIAL_ONLY) writes it
    (a hybrid model's context checkpoint): the f32 state plus a small serialization header:
    io_magic u32 + seq_id i32 (llama-context.cpp:3194-3200), cell_count u32, one cell's pos i32 +
    n_seq_id u32 (state_write_meta), s_trans u32 + n_layer u32 (state_write_data), and per
    recurrent layer a type i32 + row size u64 for R and again for S
    (llama-memory-recurrent.cpp:784-1010). For Qwen3.6-27B: 149.625 MiB + 1180 B = 149.626 MiB.
    """
    n_rec = recurrent_layer_count(spec)
    if not n_rec or spec.recurrent is None:
        return 0
    header = 4 + 4 + 4 + (4 + 4) + 4 + 4 + n_rec * 2 * (4 + 8)
    return recurrent_bytes_per_seq(spec) + header


def kv_state_bytes(layers: Sequence[LayerKV], n_cells: int, n_stream: int) -> int:
    """llama_kv_cache::state_write for one sequence holding ``n_cells`` cells
    (src/llama-kv-cache.cpp:2071-2340): n_stream u32; per stream a cell_count u32 (the sequence
    lives in one stream); per cell pos i32 + n_seq_id u32 + one seq_id i32; v_trans, n_layer,
    n_rot_k, n_rot_v u32; per layer K type i32 + row size u64 + rows, V likewise (12 B of header
    either way), plus the context's io_magic + seq_id (llama-context.cpp:3194-3200)."""
    if not layers or n_cells <= 0:
        return 0
    per_cell = sum(x.bytes // x.cells for x in layers)
    header = 4 + 4 + 4 + 4 * n_stream + 16 + len(layers) * 2 * 12
    return header + n_cells * (12 + per_cell)


def swa_checkpoint_bytes(spec: ModelSpec, ctx: ContextLayout, type_k: str, type_v: str,
                         n_tokens: int | None = None) -> int:
    """An iSWA model's context checkpoint (PARTIAL_ONLY): the SWA cache cells of the sequence
    that are not SWA-masked, i.e. min(n_tokens, n_swa) cells (llama-kv-cache-iswa.cpp:259-265,
    llama-hparams.h is_masked_swa)."""
    swa = [x for x in kv_layers(spec, ctx, type_k, type_v) if x.kind == "swa"]
    n = min(n_tokens if n_tokens is not None else ctx.n_ctx_slot, spec.swa_window or 0)
    return kv_state_bytes(swa, n, ctx.n_stream)


# ============================================================================ weights placement


@dataclass(frozen=True)
class Placement:
    """Which device holds each layer (index into ``devices``; -1 = CPU/host)."""

    devices: tuple[str, ...]  # GPU backend names in order (CUDA0, CUDA1, ...)
    layer_dev: tuple[int, ...]  # per layer of n_layer_all
    output_dev: int
    n_gpu_layers: int  # effective (layers + output)

    def dev_name(self, i: int) -> str:
        return "CPU" if i < 0 else self.devices[i]


def place_layers(spec: ModelSpec, cfg: ServerConfig, gpu_names: Sequence[str],
                 gpu_free: Sequence[int]) -> Placement:
    """llama-model.cpp:1558-1610: split points from -ts (or free memory), the first
    n_layer_all + 1 - ngl layers on CPU, the output layer counts as one more layer."""
    n_all = spec.n_layer
    n_dev = len(gpu_names)
    ngl = cfg.n_gpu_layers if cfg.n_gpu_layers >= 0 else n_all + 1  # llama-model.cpp:2008-2011
    if n_dev == 0:
        return Placement(tuple(), tuple([-1] * n_all), -1, 0)
    if cfg.split_mode == "none":
        # all on the main GPU
        main = min(cfg.main_gpu, n_dev - 1)
        ts = [0.0] * n_dev
        ts[main] = 1.0
    elif cfg.tensor_split and any(x > 0 for x in cfg.tensor_split):
        ts = list(cfg.tensor_split[:n_dev]) + [0.0] * max(0, n_dev - len(cfg.tensor_split))
    else:
        ts = [float(f) for f in gpu_free]
    total = sum(ts) or 1.0
    splits = []
    acc = 0.0
    for x in ts:
        acc += x
        splits.append(acc / total)
    i_gpu_start = max(n_all + 1 - ngl, 0)
    act = min(ngl, n_all + 1)

    def dev_of(il: int) -> int:
        if il < i_gpu_start or (il - i_gpu_start) >= act:
            return -1
        frac = (il - i_gpu_start) / act
        # std::upper_bound over the split points
        for d, sp in enumerate(splits):
            if sp > frac:
                return d
        return n_dev - 1

    return Placement(tuple(gpu_names), tuple(dev_of(il) for il in range(n_all)), dev_of(n_all), act)


_BLK_RE = re.compile(r"^blk\.(\d+)\.")
_INPUT_RE = re.compile(r"^(token_embd|token_types|position_embd|per_layer_token_embd)")
#: a tensor's layer (:func:`_layers`): blk.N -> N, the input layer, the output layer
_INPUT_LAYER, _OUTPUT_LAYER = -1, -2


@per_spec
def _layers(spec: ModelSpec) -> tuple[int, ...]:
    """Every tensor's layer, in ``spec.tensors``' order (llama-model.cpp:1558-1610: blk.N, the
    input layer, or the output layer); worked out once per spec object (a plan walks the tensors
    several times, and --fit and the optimiser plan one model dozens of times)."""
    out = []
    for t in spec.tensors:
        m = _BLK_RE.match(t.name)
        out.append(int(m.group(1)) if m else _INPUT_LAYER if _INPUT_RE.match(t.name) else _OUTPUT_LAYER)
    return tuple(out)


@dataclass(frozen=True)
class WeightSplit:
    per_device: tuple[int, ...]  # bytes per GPU
    host: int  # bytes on the CPU side
    skipped: int  # MTP tensors not loaded (no draft-mtp)
    host_duplicate_output: int  # tied embeddings duplicated onto the output device


def _has_overrides(cfg: ServerConfig) -> bool:
    """Whether -ot / --cpu-moe / --n-cpu-moe / --n-cpu-ffn move any tensor."""
    return bool(cfg.override_tensor or cfg.cpu_moe or cfg.n_cpu_moe or cfg.n_cpu_ffn)


def _override_dev(name: str, cfg: ServerConfig, gpu_names: Sequence[str]) -> int | None:
    """-ot / --cpu-moe / --n-cpu-moe: buffer type for a tensor (first match wins,
    llama-model-loader / common.cpp). Remembered: a plan asks for every tensor several times, and
    --fit and the optimiser replan the same model dozens of times."""
    if not _has_overrides(cfg):
        return None
    return _override_cached(name, cfg.override_tensor, cfg.cpu_moe, cfg.n_cpu_moe, cfg.n_cpu_ffn, tuple(gpu_names))


@functools.lru_cache(maxsize=1 << 16)
def _override_cached(name: str, override_tensor: tuple[tuple[str, str], ...], cpu_moe: bool, n_cpu_moe: int,
                     n_cpu_ffn: int, gpu_names: tuple[str, ...]) -> int | None:
    for pat, buft in override_tensor:
        if re.search(pat, name):
            b = buft.upper()
            if b.startswith("CPU"):
                return -1
            for i, g in enumerate(gpu_names):
                if b == g.upper():
                    return i
            raise InputError(_("-ot {pat}={buft}: unknown buffer type (devices: CPU, {gpu_names})").format(pat=pat, buft=buft, gpu_names=', '.join(gpu_names) or 'none'))
    if cpu_moe and re.search(FFN_EXPS_RE, name):
        return -1
    if n_cpu_moe:
        m = _BLK_RE.match(name)
        if m and int(m.group(1)) < n_cpu_moe and re.search(FFN_EXPS_RE, name):
            return -1
    if n_cpu_ffn:  # llm_add_n_cpu_ffn_overrides: blk.<i> + LLM_FFN_DENSE_REGEX, i < N
        m = _BLK_RE.match(name)
        if m and int(m.group(1)) < n_cpu_ffn and re.search(FFN_DENSE_RE, name):
            return -1
    return None


def tensor_overrides(spec: ModelSpec, cfg: ServerConfig, gpu_names: Sequence[str]) -> dict[str, int]:
    """The tensors -ot / --cpu-moe / --n-cpu-moe / --n-cpu-ffn move: name -> device (-1 = CPU)."""
    if not _has_overrides(cfg):
        return {}
    out = {}
    for t in spec.tensors:
        d = _override_dev(t.name, cfg, gpu_names)
        if d is not None:
            out[t.name] = d
    return out


def cuda_alloc_bytes(t: object) -> int:
    """Bytes a weight tensor takes in a CUDA/ROCm buffer: quantized matrices get their last row
    padded to a multiple of MATRIX_ROW_PADDING = 512 elements, and every tensor is aligned to
    128 B (ggml-cuda.cu ggml_backend_cuda_buffer_type_get_alloc_size / get_alignment)."""
    n = t.n_bytes  # type: ignore[attr-defined]
    typ = t.ggml_type  # type: ignore[attr-defined]
    shape = t.shape  # type: ignore[attr-defined]
    if typ in TYPE_SIZES and TYPE_SIZES[typ][0] > 1 and shape and shape[0] % 512:
        n += row_size(typ, 512 - shape[0] % 512)
    return pad(n, 128)


@dataclass(frozen=True)
class _LayerBytes:
    """A model's weights summed by layer (blk.N, the input layer, the output layer) as they sit
    in host memory and in a CUDA buffer, once per spec object: without -ot and friends a layer's
    tensors all go where the layer goes."""

    by_layer: dict[int, tuple[int, int]]
    embd: int  # token_embd.weight (a tied output duplicates it onto the output device)
    has_output: bool


@per_spec
def _layer_bytes(spec: ModelSpec) -> _LayerBytes:
    by: dict[int, tuple[int, int]] = {}
    embd = 0
    for t, il in zip(spec.tensors, _layers(spec), strict=True):
        b, c = by.get(il, (0, 0))
        by[il] = (b + t.n_bytes, c + cuda_alloc_bytes(t))
        if t.name == "token_embd.weight":
            embd = t.n_bytes
    return _LayerBytes(by, embd, any(t.name == "output.weight" for t in spec.tensors))


def _dev_of(il: int, placement: Placement) -> int:
    if il >= 0:
        return placement.layer_dev[il] if il < len(placement.layer_dev) else -1
    return -1 if il == _INPUT_LAYER else placement.output_dev  # the input layer stays on the CPU


def _split_by_layer(spec: ModelSpec, placement: Placement, padded: Sequence[bool],
                    skip_from: int) -> tuple[list[int], int, int, int]:
    """:func:`split_weights`' sums without overrides, a layer at a time."""
    per = [0] * len(placement.devices)
    host = skipped = dup = 0
    lb = _layer_bytes(spec)
    for il, (b, cb) in lb.by_layer.items():
        if il >= skip_from:
            skipped += b  # TENSOR_SKIP unless draft-mtp (models/qwen35.cpp:38)
            continue
        if il == _INPUT_LAYER and lb.embd and not lb.has_output and placement.output_dev >= 0:
            dup = lb.embd  # tied output: a duplicate of token_embd is created on the output device
            per[placement.output_dev] += lb.embd
        dev = _dev_of(il, placement)
        if dev < 0:
            host += b
        else:
            per[dev] += cb if dev < len(padded) and padded[dev] else b
    return per, host, skipped, dup


def _split_by_tensor(spec: ModelSpec, cfg: ServerConfig, placement: Placement, padded: Sequence[bool],
                     skip_from: int) -> tuple[list[int], int, int, int]:
    """:func:`split_weights`' sums a tensor at a time (-ot and friends move single tensors)."""
    per = [0] * len(placement.devices)
    host = skipped = dup = 0
    has_output = any(t.name == "output.weight" for t in spec.tensors)
    for t, il in zip(spec.tensors, _layers(spec), strict=True):
        if il >= skip_from:
            skipped += t.n_bytes
            continue
        if il == _INPUT_LAYER and t.name == "token_embd.weight" and not has_output and placement.output_dev >= 0:
            dup = t.n_bytes
            per[placement.output_dev] += t.n_bytes
        dev = _dev_of(il, placement)
        ov = _override_dev(t.name, cfg, placement.devices)
        if ov is not None:
            dev = ov
        if dev < 0:
            host += t.n_bytes
        else:
            per[dev] += cuda_alloc_bytes(t) if dev < len(padded) and padded[dev] else t.n_bytes
    return per, host, skipped, dup


def split_weights(spec: ModelSpec, cfg: ServerConfig, placement: Placement,
                  padded: Sequence[bool] = ()) -> WeightSplit:
    """Weights per device. ``padded[i]``: device i is CUDA/ROCm (allocation padding applies)."""
    n_dev = len(placement.devices)
    skip_from = spec.n_layer_main if spec.nextn_layers and not cfg.mtp else 1 << 30
    if _has_overrides(cfg):
        per, host, skipped, dup = _split_by_tensor(spec, cfg, placement, padded, skip_from)
    else:
        per, host, skipped, dup = _split_by_layer(spec, placement, padded, skip_from)
    if cfg.split_mode in ("row", "tensor") and n_dev > 1:
        # row/tensor split: the matrices of each offloaded layer are divided by -ts
        ts = list(cfg.tensor_split[:n_dev]) if cfg.tensor_split else [1.0] * n_dev
        ts += [1.0] * (n_dev - len(ts))
        tot = sum(per)
        s = sum(ts) or 1.0
        per = [int(tot * x / s) for x in ts]
    return WeightSplit(tuple(per), host, skipped, dup)


def host_weight_buffers(spec: ModelSpec, cfg: ServerConfig, placement: Placement, cpu: CpuFeatures,
                        extra_bufts: bool) -> dict[str, tuple[int, int]]:
    """Host weights llama.cpp copies into the CPU backend's extra buffer types (AMX, CPU_REPACK),
    per buffer type: (bytes in that buffer, bytes of the same tensors in the file). The rules are
    in hardware/cpu_buffers.py, with their llama.cpp sources."""
    out: dict[str, tuple[int, int]] = {}
    for t in host_tensors(spec, cfg, placement):
        ch = host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu, extra_bufts=extra_bufts)
        if ch.buffer:
            b, f = out.get(ch.buffer, (0, 0))
            out[ch.buffer] = (b + ch.bytes, f + t.n_bytes)
    return out


def _in_extra_buffer(t: object, cpu: CpuFeatures, extra_bufts: bool) -> bool:
    return bool(host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes,  # type: ignore[attr-defined]
                                   cpu, extra_bufts=extra_bufts).buffer)


def host_tensors(spec: ModelSpec, cfg: ServerConfig, placement: Placement) -> list[TensorInfo]:
    """The tensors whose weights stay in host memory (a CPU layer's, the token embeddings, what
    -ot sends to the CPU); the MTP layers' are not loaded without --spec-type draft-mtp."""
    skip_from = spec.n_layer_main if spec.nextn_layers and not cfg.mtp else 1 << 30
    pairs = zip(spec.tensors, _layers(spec), strict=True)
    if not _has_overrides(cfg):
        on_host = {il: il < skip_from and _dev_of(il, placement) < 0 for il in _layer_bytes(spec).by_layer}
        return [t for t, il in pairs if on_host[il]]
    out = []
    for t, il in pairs:
        if il >= skip_from:
            continue
        ov = _override_dev(t.name, cfg, placement.devices)
        if (ov if ov is not None else _dev_of(il, placement)) < 0:
            out.append(t)
    return out


def mapped_host_bytes(spec: ModelSpec, cfg: ServerConfig, placement: Placement, cpu: CpuFeatures,
                      extra_bufts: bool) -> int | None:
    """With mmap, the CPU_Mapped buffer spans the file range from the first to the end of the
    last tensor kept on the CPU (llama-model.cpp load_all_data / ggml_backend_cpu_buffer_from_ptr),
    padding between tensors included. None when offsets are unknown (catalogue entries)."""
    if any(t.offset < 0 for t in spec.tensors) or len(spec.files) != 1:
        return None
    first = None
    last = 0
    for t in host_tensors(spec, cfg, placement):
        if _in_extra_buffer(t, cpu, extra_bufts):
            continue  # copied into AMX / CPU_REPACK, outside the mapping
        first = t.offset if first is None else min(first, t.offset)
        last = max(last, t.offset + t.n_bytes)
    return 0 if first is None else last - first


def host_matrix_bytes(spec: ModelSpec, cfg: ServerConfig, placement: Placement) -> list[int]:
    """Sizes of the weight matrices (2-D+, not the input embeddings) kept in host memory."""
    out = []
    for t in spec.tensors:
        m = _BLK_RE.match(t.name)
        if not m:
            continue  # input layer (get_rows is never offloaded) and output handled by placement
        il = int(m.group(1))
        if il >= spec.n_layer_main and spec.nextn_layers and not cfg.mtp:
            continue
        dev = placement.layer_dev[il] if il < len(placement.layer_dev) else -1
        ov = _override_dev(t.name, cfg, placement.devices)
        if ov is not None:
            dev = ov
        if dev >= 0 or (t.shape and len(t.shape) < 2):
            continue
        out.append(t.n_bytes)
    return out


# ============================================================================ output buffer


def output_buffer_bytes(spec: ModelSpec, n_outputs: int) -> int:
    """Initial output buffer: n_vocab x max(n_outputs, n_seq_max) f32 logits
    (llama-context.cpp:2118-2180; reserved with n_seq_max at construction, line 379)."""
    return 4 * (spec.n_vocab or 0) * n_outputs
