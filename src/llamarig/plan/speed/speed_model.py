"""Speed model: decode and prefill tokens per second from bytes moved and FLOPs, per device.

Decode is memory-bound: producing one token reads every *active* weight once (MoE: only the
experts used), the KV cache of the full-attention layers up to the current depth (SWA layers at
most their window) and reads + writes the recurrent state. With ``-sm layer`` the devices run one
after the other, so the time is the sum over devices of bytes / (bandwidth x efficiency), plus a
fixed per-token overhead and a hop per device boundary; ``-sm row|tensor`` divides each layer's
work between the GPUs, so the slowest GPU sets the time. Layers kept in host RAM are computed by
the CPU at host bandwidth. The *limit* is the same sum at efficiency 1 without overheads.

Prefill is compute-bound: 2 FLOPs per active weight per token plus attention (4 x heads x head dim
x depth per attention layer), at the device's dense FP16 rate times an efficiency that grows with
the micro-batch (``ub / (ub + ub_half)``); weights are still read once per micro-batch, and weights
in host RAM cross PCIe once per micro-batch (ggml-backend offloads big batches to the GPU).

Speculative decoding: with per-position acceptance probability ``a`` and ``n`` drafted tokens the
expected tokens per step are ``(1 - a^(n+1)) / (1 - a)``; a step costs one target verification of
``n + 1`` tokens (``1 + verify_per_token x n`` decode steps) plus ``n`` draft passes (MTP: the
nextn layer and the output head; a draft model: its weights).

Every figure is a frozen dataclass carrying the formula it came from (docs/speed.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from llamarig.diagnostics import Diagnostic, Severity, messages, warning
from llamarig.errors import InputError
from llamarig.gguf.spec import ModelSpec
from llamarig.hardware.types import GPU, Hardware
from llamarig.i18n import _, join
from llamarig.plan import memory as M
from llamarig.plan.calibration.constants import Calibration, Efficiency, builtin, builtin_data
from llamarig.plan.config import ServerConfig
from llamarig.plan.flash_attn import kv_path
from llamarig.plan.specmemo import per_spec

GB = 1e9
_EXPS_RE = re.compile(r"_(ch)?exps\b|_exps$|\.ffn_(up|down|gate|gate_up)_exps")
_BLK_RE = re.compile(r"^blk\.(\d+)\.")



# ============================================================================ KV path rules
# how attention runs for a K/V type pair on a backend: plan/flash_attn.py (the one flash-attention rule)


#: relative quality cost of a KV type (lower = closer to f16); notes shown in the optimiser table
KV_QUALITY = {"f32": 0, "f16": 0, "bf16": 0, "q8_0": 1, "q5_1": 2, "q5_0": 2, "q4_1": 3,
              "iq4_nl": 3, "q4_0": 3}


def kv_quality_note(type_k: str, type_v: str) -> str:
    if type_k in ("f16", "bf16", "f32") and type_v in ("f16", "bf16", "f32"):
        return _("f16 KV: reference quality")
    if type_k == "q8_0" and type_v == "q8_0":
        return _("q8_0 KV: near-lossless (about +0.01-0.02 perplexity)")
    if type_k == "q8_0":
        return _("K q8_0 / V {v}: V quantization costs little; K kept at 8 bit").format(v=type_v)
    return _("K {k} / V {v}: 4-5 bit KV, measurable quality loss on long-context recall").format(k=type_k, v=type_v)


def kv_quality_short(type_k: str, type_v: str) -> str:
    """A few characters for tables: ref (f16/bf16/f32), ~ref (q8_0), V4 (8-bit K, 4-5 bit V),
    4bit (4-5 bit K); the full sentence is kv_quality_note()."""
    full = ("f16", "bf16", "f32")
    if type_k in full and type_v in full:
        return _("ref")
    if type_k == "q8_0" and type_v in (*full, "q8_0"):
        return "~" + _("ref")
    if type_k in (*full, "q8_0"):
        return "V4"
    return "4bit"


#: KV types whose CUDA read efficiency at depth rests on published figures (f16: the RTX 3090 field
#: report's log at 30.5K / 45.2K depth and llama.cpp pulls #17505 / #17891 at 32K; docs/accuracy-speed.md
#: "Decode at depth"); quantized K/V share the constant without a published figure.
KV_MEASURED_TYPES = ("f16", "bf16")
#: the lowest draft acceptance (llama-server's draft_n_accepted / draft_n) among the published
#: MTP runs data/speed_calibration.json lists (its acceptance._about): the 307K-context MTP field
#: report, 0.47-0.67 at n = 4 "by load and time of day" (tests/fixtures/seeds/004_d9cc8479c3afbc2e.txt)
LOWEST_PUBLISHED_ACCEPTANCE = 0.47


# ============================================================================ devices


@dataclass(frozen=True)
class DeviceLoad:
    """Bytes one device moves per decoded token, and its speed figures."""

    name: str  # CUDA0 / CPU
    label: str
    backend: str
    bandwidth_gbs: float
    tflops: float  # dense fp16 (GPU) or host GFLOPS / 1000 (CPU)
    eff: Efficiency
    n_layers: int
    weights_read: int  # active weight bytes per token
    weights_held: int  # all weight bytes (prefill reads these per micro-batch)
    kv_per_depth: int  # KV bytes read per token of depth (full-attention layers here)
    swa_per_cell: int  # KV bytes per cell of the SWA layers here
    recurrent_rw: int  # recurrent state bytes read + written per token
    flops_share: float  # fraction of the model's matmul FLOPs on this device
    kv_factor: float = 1.0  # KVPath factor
    kv_on_cpu: bool = False  # attention falls back to the CPU (K/V over PCIe)
    attn_flops_per_depth: float = 0.0  # decode attention FLOPs per token of depth (full-attention layers here)
    attn_flops_swa: float = 0.0  # the same per cell of the SWA layers here
    decode_tflops: float = 0.0  # the host's matmul rate at the decode threads (-t); CPU only

    def bytes_at(self, depth: int, swa_window: int | None) -> int:
        swa_cells = min(depth, swa_window) if swa_window else 0
        return self.weights_read + self.kv_per_depth * depth + self.swa_per_cell * swa_cells + self.recurrent_rw

    def seconds_at(self, depth: int, swa_window: int | None, limit: bool, cal: Calibration) -> float:
        bw = self.bandwidth_gbs * GB
        swa_cells = min(depth, swa_window) if swa_window else 0
        kv = self.kv_per_depth * depth + self.swa_per_cell * swa_cells
        if limit:
            return (self.weights_read + kv + self.recurrent_rw) / bw
        t = (self.weights_read + self.recurrent_rw) / (bw * self.eff.weights)
        if self.eff.attn_decode > 0 and self.decode_tflops > 0:
            # the host's attention for one query row is compute-bound per KV cell and query head
            # (ggml/src/ggml-cpu/ops.cpp flash_attn_ext: a dot product, an online-softmax step and
            # a V accumulation per cell, per head), not bound by the K/V bytes
            # (tune's depth ladder: the measured cost per cell can grow with depth, Efficiency.attn_cells)
            flops = (self.attn_flops_per_depth * self.eff.attn_cells(depth)
                     + self.attn_flops_swa * self.eff.attn_cells(swa_cells))
            t += flops / (self.decode_tflops * 1e12)
        if self.kv_on_cpu:
            t += kv / (cal.pcie_gbs * GB) + kv / (cal.host_bandwidth_gbs * GB * 0.5)
        else:
            t += kv * self.kv_factor / (bw * max(self.eff.kv, 1e-6))
        return t


@per_spec
def _read_weighted(spec: ModelSpec) -> ModelSpec:
    """A copy of the spec whose tensors count the bytes one decode pass reads: expert tensors
    only the experts used; MTP (nextn) layers nothing (the draft pass reads them, see
    speculative()). One copy per spec object: the optimiser asks for it with every candidate,
    and what is remembered per spec (memory's tensor layers, the replays) then holds."""
    return _read_weighted_copy(spec)


def _read_weighted_copy(spec: ModelSpec) -> ModelSpec:
    frac = spec.n_expert_used / spec.n_expert if spec.n_expert and spec.n_expert_used else 1.0
    n_main = spec.n_layer_main

    def read(t: Any) -> Any:
        m = _BLK_RE.match(t.name)
        if spec.nextn_layers and m and int(m.group(1)) >= n_main:
            return replace(t, n_bytes=0)
        if frac < 1.0 and _EXPS_RE.search(t.name):
            return replace(t, n_bytes=int(t.n_bytes * frac))
        return t

    if frac == 1.0 and not spec.nextn_layers:
        return spec
    return replace(spec, tensors=tuple(read(t) for t in spec.tensors))


def token_embd_bytes(spec: ModelSpec) -> int:
    return sum(t.n_bytes for t in spec.tensors if t.name == "token_embd.weight")


def matmul_params(spec: ModelSpec, mtp_layers: bool = False) -> float:
    """Active parameters per token in matrix products (architecture formula; the output head
    included, token embeddings excluded): attention q/k/v/o, recurrent projections, FFN or the
    used experts."""
    e = spec.n_embd or 0
    total = 0.0
    for ly in spec.layers:
        if ly.nextn and not mtp_layers:
            continue
        if ly.kind == "recurrent" and spec.recurrent is not None:
            r = spec.recurrent
            conv = r.inner_size + 2 * r.group_count * r.state_size
            total += e * (conv + r.inner_size) + r.inner_size * e
        else:
            q = ly.n_head * ly.head_dim_k
            total += e * (q + ly.n_head_kv * (ly.head_dim_k + ly.head_dim_v)) + ly.n_head * ly.head_dim_v * e
            if spec.architecture in ("qwen35", "qwen35moe"):
                total += e * q  # gated attention output
        if spec.n_expert and spec.n_ff_expert:
            total += 3 * e * spec.n_ff_expert * max(1, spec.n_expert_used)
        else:
            total += 3 * e * (spec.n_ff or 0)
    total += e * (spec.n_vocab or 0)
    return total


def device_loads(spec: ModelSpec, cfg: ServerConfig, hw: Hardware, cal: Calibration | None = None,
                 host_bandwidth_gbs: float | None = None) -> list[DeviceLoad]:
    """Per-device bytes per token for this config (placement from memory.place_layers, the same
    rule the memory plan uses: llama-model.cpp:1558-1610)."""
    cal = cal or builtin()
    gpus = hw.gpus
    names = hw.backend_names()
    placement = M.place_layers(spec, cfg, names, [g.memory_bytes for g in gpus])
    ws_read = M.split_weights(_read_weighted(spec), cfg, placement)
    ws_all = M.split_weights(spec, cfg, placement)
    n_dev = len(gpus)
    embd = token_embd_bytes(spec)
    flash = cfg.flash_attn_enabled
    kv_on_gpu = not cfg.no_kv_offload

    def layer_dev(il: int) -> int:
        return placement.layer_dev[il] if il < len(placement.layer_dev) else -1

    attn_full = [0.0] * (n_dev + 1)
    attn_swa = [0.0] * (n_dev + 1)
    kv_per = [0] * (n_dev + 1)  # index -1 -> last slot (CPU)
    swa_per = [0] * (n_dev + 1)
    rec = [0] * (n_dev + 1)
    nl = [0] * (n_dev + 1)
    rps = M.recurrent_bytes_per_seq(spec)
    n_rec = max(1, M.recurrent_layer_count(spec))
    for ly in spec.layers:
        if ly.nextn:
            continue
        d = layer_dev(ly.index)
        nl[d] += 1
        kd = d if kv_on_gpu else -1
        if ly.kind == "recurrent":
            rec[kd] += 2 * rps // n_rec
        elif ly.n_head_kv:
            cell = M.kv_bytes_per_cell(ly, cfg.cache_type_k, cfg.cache_type_v, M.v_row_width(spec, ly, flash))
            flops = 2.0 * ly.n_head * (ly.head_dim_k + ly.head_dim_v)  # QK and softmax x V, one query row
            if ly.kind == "swa":
                swa_per[kd] += cell
                attn_swa[kd] += flops
            else:
                kv_per[kd] += cell
                attn_full[kd] += flops
    params_total = sum(t.n_bytes for t in _read_weighted(spec).tensors if t.name != "token_embd.weight") or 1
    host_bw = host_bandwidth_gbs or cal.host_bandwidth_gbs
    out: list[DeviceLoad] = []
    for i, g in enumerate(gpus):
        eff = cal.for_device(g.backend, g.id)
        if eff.kv_by_type:  # this GPU reads these K/V types at their own measured rate
            eff = replace(eff, kv=eff.kv_for(cfg.cache_type_k, cfg.cache_type_v))
        path = kv_path(g.backend, cfg.cache_type_k, cfg.cache_type_v, cfg.flash_attn)
        out.append(DeviceLoad(
            name=names[i], label=g.name, backend=g.backend, bandwidth_gbs=float(g.bandwidth_gbs or 0.0),
            tflops=float(g.fp16_tflops or 0.0), eff=eff, n_layers=nl[i], weights_read=ws_read.per_device[i],
            weights_held=ws_all.per_device[i], kv_per_depth=kv_per[i], swa_per_cell=swa_per[i],
            recurrent_rw=rec[i], flops_share=ws_read.per_device[i] / params_total,
            kv_factor=path.factor if path.kind != "cpu" else 1.0, kv_on_cpu=path.kind == "cpu",
        ))
    host_read = max(0, ws_read.host - embd)
    if host_read or nl[-1] or kv_per[-1] or swa_per[-1] or rec[-1] or not gpus:
        eff = cal.for_device("CPU")
        out.append(DeviceLoad(
            name="CPU", label="host", backend="CPU", bandwidth_gbs=host_bw,
            tflops=cal.host_gflops / 1000 * host_thread_scale(cfg, hw, cal)[0],
            eff=eff, n_layers=nl[-1], weights_read=host_read, weights_held=max(0, ws_all.host - embd),
            kv_per_depth=kv_per[-1], swa_per_cell=swa_per[-1], recurrent_rw=rec[-1],
            flops_share=host_read / params_total, attn_flops_per_depth=attn_full[-1], attn_flops_swa=attn_swa[-1],
            decode_tflops=cal.host_gflops / 1000 * host_thread_scale(cfg, hw, cal, decode=True)[0],
        ))
    return out


def plan_threads(cfg: ServerConfig, hw: Hardware) -> tuple[int | None, int | None]:
    """(-t, -tb) llama-server runs with: as given, else the physical cores (common/common.cpp:294-299
    via common_cpu_get_num_math, :205-232) when the plan knows them (--detect), else None; -tb
    defaults to -t (common/common.cpp:1699-1700). A value <= 0 means every logical CPU
    (common/arg.cpp:1520-1537): the cores when known."""
    def one(v: int) -> int | None:
        return v if v > 0 else hw.cpu_cores

    t = one(cfg.threads) if cfg.threads != -1 else hw.cpu_cores
    tb = one(cfg.threads_batch) if cfg.threads_batch != -1 else t
    return t, tb


def host_thread_scale(cfg: ServerConfig, hw: Hardware, cal: Calibration, decode: bool = False) -> tuple[float, str]:
    """(factor, why) on the host's matmul rate ``host_gflops`` for this plan's batch threads: a
    calibration that records the threads it was measured with (``host_threads``, tune) is scaled
    linearly to the plan's -tb (prefill is compute-bound: each thread multiplies its own rows,
    ggml/src/ggml-cpu/ggml-cpu.c ggml_compute_forward_mul_mat), capped at the cores when known
    (more threads than cores only share them). ``decode``: for the decode threads -t (the host's
    decode attention); the weights' streaming is not scaled (memory-bound, see docs/speed.md)."""
    if cal.host_threads is None:
        return 1.0, ""
    t, tb = plan_threads(cfg, hw)
    if decode:
        tb = t  # one-token batches run on -t (src/llama-context.cpp:2612)
    if tb is None:
        return 1.0, _("host compute as calibrated at -tb {n} (this plan's thread count is unknown)").format(
            n=cal.host_threads)
    eff_tb = min(tb, hw.cpu_cores) if hw.cpu_cores else tb
    eff_cal = min(cal.host_threads, hw.cpu_cores) if hw.cpu_cores else cal.host_threads
    f = eff_tb / eff_cal
    if f == 1.0:
        return 1.0, ""
    return f, _("host compute scaled x{f:.2g} from the calibration's -tb {a} to -tb {b} (linear in threads, "
                "modelled)").format(f=f, a=cal.host_threads, b=tb)


# ============================================================================ results


@dataclass(frozen=True)
class DepthSpeed:
    depth: int
    decode_tok_s: float
    limit_tok_s: float
    bytes_per_token: int
    formula: str

    def to_json(self) -> dict[str, Any]:
        return {"depth": self.depth, "decode_tok_s": round(self.decode_tok_s, 2),
                "decode_limit_tok_s": round(self.limit_tok_s, 2), "bytes_per_token": self.bytes_per_token}


@dataclass(frozen=True)
class Speculative:
    kind: str  # mtp | draft
    n_max: int
    acceptance: float  # per-position probability a
    acceptance_source: str
    tokens_per_step: float
    draft_ms: float  # per drafted token
    verify_ms: float  # one verification step of n + 1 tokens
    decode_tok_s: float
    speedup: float
    formula: str
    ratio: float = 0.0  # llama-server's draft_n_accepted / draft_n at this n
    catchup_ms: float = 0.0  # MTP context's pass over the verified batch

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "n_max": self.n_max, "acceptance": self.acceptance,
                "acceptance_ratio": round(self.ratio, 4), "catchup_ms": round(self.catchup_ms, 3),
                "acceptance_source": self.acceptance_source,
                "tokens_per_step": round(self.tokens_per_step, 3), "draft_ms": round(self.draft_ms, 3),
                "verify_ms": round(self.verify_ms, 3), "decode_tok_s": round(self.decode_tok_s, 2),
                "speedup": round(self.speedup, 3), "formula": self.formula}


@dataclass(frozen=True)
class Prefill:
    prompt_tokens: int
    n_ubatch: int
    tok_s: float
    formula: str
    prompt_note: str = ""  # which prompt length was used and why (prompt_length())

    def to_json(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "n_ubatch": self.n_ubatch,
                "tok_s": round(self.tok_s, 1), "formula": self.formula, "prompt_note": self.prompt_note}


@dataclass(frozen=True)
class HostRange:
    """How far the host (CPU) figures of an uncalibrated plan can be off: the spread of measured /
    planned that the built-in CPU constants gave against the real llama-server
    (data/speed_calibration.json ``host_uncalibrated``, benchmarks/RESULTS.md "CPU speed model")."""

    decode_tok_s: tuple[float, float]  # at depth 0
    prefill_tok_s: tuple[float, float] | None  # None: prefill does not run on the host
    note: str
    source: str = ""  # the measurements behind the range, in full (the note names where they are)

    def to_json(self) -> dict[str, Any]:
        return {"decode_tok_s": [round(v, 2) for v in self.decode_tok_s],
                "prefill_tok_s": [round(v, 1) for v in self.prefill_tok_s] if self.prefill_tok_s else None,
                "note": self.note, "source": self.source}


#: the codes of a SpeedReport's diagnostics: the plan's -t/-tb are not the calibration's (the host
#: figures are not scaled), the KV cache is read on the CPU or converted (the path's note says which)
SPEED_HOST_THREADS = "speed-host-threads"
SPEED_KV_PATH = "speed-kv-path"


@dataclass(frozen=True)
class SpeedReport:
    decode_tok_s: float  # at depth 0, without speculative decoding
    decode_limit_tok_s: float
    by_depth: tuple[DepthSpeed, ...]
    prefill: Prefill
    speculative: Speculative | None
    devices: tuple[DeviceLoad, ...]
    kv_note: str
    formula: str
    calibration: str
    #: what the figures rest on that a reader must know, coded (SPEED_HOST_THREADS, SPEED_KV_PATH)
    diagnostics: tuple[Diagnostic, ...] = ()
    depth_note: str = ""  # how far the figures at depth can be trusted (method note)
    host_range: HostRange | None = None  # uncalibrated host figures: the range to expect

    @property
    def warnings(self) -> tuple[str, ...]:
        """The messages of the warnings among :attr:`diagnostics`, in order."""
        return messages(self.diagnostics, Severity.WARNING)

    @property
    def effective_decode_tok_s(self) -> float:
        return self.speculative.decode_tok_s if self.speculative else self.decode_tok_s

    def at_depth(self, depth: int) -> DepthSpeed:
        best = min(self.by_depth, key=lambda d: abs(d.depth - depth))
        return best

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "decode_tok_s": round(self.decode_tok_s, 2),
            "decode_limit_tok_s": round(self.decode_limit_tok_s, 2),
            "by_depth": [x.to_json() for x in self.by_depth],
            "prefill_tok_s": round(self.prefill.tok_s, 1),
            "prefill": self.prefill.to_json(),
            "speculative": self.speculative.to_json() if self.speculative else None,
            "devices": [{"name": x.name, "label": x.label, "bandwidth_gbs": x.bandwidth_gbs,
                         "layers": x.n_layers, "weights_read_per_token": x.weights_read,
                         "kv_bytes_per_depth_token": x.kv_per_depth, "recurrent_rw_per_token": x.recurrent_rw,
                         "efficiency": {"weights": x.eff.weights, "kv": x.eff.kv, "overhead_ms": x.eff.overhead_ms}}
                        for x in self.devices],
            "kv_note": self.kv_note,
            "depth_note": self.depth_note,
            "host_range": self.host_range.to_json() if self.host_range else None,
            "formula": self.formula,
            "calibration": self.calibration,
            "warnings": list(self.warnings),
            "diagnostics": [x.to_json() for x in self.diagnostics],
        }
        return d


# ============================================================================ decode


def depth_points(n_ctx: int) -> list[int]:
    """0, 8K, 32K, 64K, 128K, 256K ... up to the context (and the context itself)."""
    pts = [0, 8192, 32768, 65536, 131072, 262144, 524288, 1048576]
    out = [p for p in pts if p < n_ctx]
    if n_ctx > 0:
        out.append(n_ctx)
    return out or [0]


def _split_mode(cfg: ServerConfig, loads: Sequence[DeviceLoad]) -> str:
    gpus = [x for x in loads if x.backend != "CPU"]
    return cfg.split_mode if len(gpus) > 1 else "layer"


def decode_seconds(loads: Sequence[DeviceLoad], depth: int, swa_window: int | None, cal: Calibration,
                   split_mode: str = "layer", limit: bool = False) -> float:
    """Seconds per decoded token at ``depth``."""
    active = [x for x in loads if x.bytes_at(depth, swa_window) > 0 or x.n_layers]
    if not active:
        return 0.0
    per = [x.seconds_at(depth, swa_window, limit, cal) for x in active]
    gpu_idx = [i for i, x in enumerate(active) if x.backend != "CPU"]
    if split_mode in ("row", "tensor") and len(gpu_idx) > 1:
        t = max(per[i] for i in gpu_idx) + sum(p for i, p in enumerate(per) if i not in gpu_idx)
        if not limit:
            n_layers = sum(active[i].n_layers for i in gpu_idx) or 1
            t += n_layers * 2 * cal.hop_ms / 1000  # one all-reduce per attention and FFN block
    else:
        t = sum(per)
        if not limit:
            t += (len(active) - 1) * cal.hop_ms / 1000
    if not limit:
        t += max(x.eff.overhead_ms for x in active) / 1000
    return t


def decode_formula(loads: Sequence[DeviceLoad], split_mode: str) -> str:
    """The decode time per token as a formula (a Message: its words translate, its symbols and
    numbers stay)."""
    parts = []
    for x in loads:
        kv = _(" + KV {b} B x depth").format(b=x.kv_per_depth) if x.kv_per_depth else ""
        swa = _(" + SWA {b} B x min(depth, window)").format(b=x.swa_per_cell) if x.swa_per_cell else ""
        rec = _(" + recurrent r/w {mib:.1f} MiB").format(mib=x.recurrent_rw / 2**20) if x.recurrent_rw else ""
        attn = ""
        if x.eff.attn_decode > 0 and x.decode_tflops > 0 and (x.attn_flops_per_depth or x.attn_flops_swa):
            eff = (_("the efficiency tune measured at {n} depths, interpolated").format(n=len(x.eff.attn_decode_depths))
                   if x.eff.attn_decode_depths else f"{x.eff.attn_decode:g}")
            attn = _(" + attention {k:.1f} kFLOP x depth / ({g:.3g} GFLOPS x {eff})").format(
                k=x.attn_flops_per_depth / 1e3, g=x.decode_tflops * 1e3, eff=eff)
        parts.append(_("{name}: (weights {w:.2f} GB{rec}) / ({bw:g} GB/s x {ew:g}){kv}{swa} / ({bw:g} GB/s x {ek:g})"
                       "{attn}").format(name=x.name, w=x.weights_read / GB, rec=rec, bw=x.bandwidth_gbs,
                                        ew=x.eff.weights, kv=kv, swa=swa, ek=x.eff.kv, attn=attn))
    op = " max " if split_mode in ("row", "tensor") else " + "
    return _("t(depth) = {terms} + per-token overhead; tok/s = 1 / t; limit: same bytes at efficiency 1, no "
             "overhead").format(terms=join(op, ["[" + p + "]" for p in parts]))


# ============================================================================ prefill

#: the prompt length the prefill figure is for when the caller names none
DEFAULT_PROMPT = 8192


def prompt_length(n_ctx_slot: int, requested: int | None = None, start: int = 0) -> tuple[int, str]:
    """(prompt tokens, why) for the prefill figure. llama-server refuses a prompt that is not
    shorter than the slot's context (tools/server/server-context.cpp:3418: ``n_tokens >= n_ctx``
    -> "exceeds the available context size"), so the default 8192 tokens become
    ``n_ctx_slot - 1 - start`` when the slot holds fewer; a length the caller gives is kept, and
    the note says when it does not fit."""
    room = max(1, n_ctx_slot - 1 - start)
    if requested is None:
        if room >= DEFAULT_PROMPT:
            return DEFAULT_PROMPT, _("{n}-token prompt (the default length; the slot holds {slot} tokens)").format(
                n=DEFAULT_PROMPT, slot=n_ctx_slot)
        return room, _("{n}-token prompt: the longest a slot of {slot} tokens accepts (llama-server refuses a "
                       "prompt of n_ctx_slot tokens or more; the default is {default})").format(
            n=room, slot=n_ctx_slot, default=DEFAULT_PROMPT)
    if requested > room:
        return requested, _("{n}-token prompt as asked; it does not fit a slot of {slot} tokens (llama-server "
                            "would refuse it)").format(n=requested, slot=n_ctx_slot)
    return requested, _("{n}-token prompt as asked").format(n=requested)


def prefill(spec: ModelSpec, loads: Sequence[DeviceLoad], prompt: int, n_ubatch: int,
            cal: Calibration, start: int = 0, op_offload: bool = True) -> Prefill:
    """Prompt tokens per second for ``prompt`` new tokens processed in micro-batches, after
    ``start`` tokens already in the cache (a follow-up turn: attention covers those too);
    ``op_offload``: --op-offload (off: the CPU computes what its weights hold)."""
    prompt = max(1, prompt)
    ub = max(1, min(n_ubatch, prompt))
    params = matmul_params(spec)
    attn_layers = [ly for ly in spec.layers if not ly.nextn and ly.kind in ("attention", "swa") and ly.n_head_kv]
    avg_depth = start + prompt / 2
    attn_flops = 0.0
    for ly in attn_layers:
        d = min(avg_depth, spec.swa_window or avg_depth) if ly.kind == "swa" else avg_depth
        attn_flops += 4 * ly.n_head * (ly.head_dim_k + ly.head_dim_v) / 2 * d
    t_tok = 0.0
    gpu_present = op_offload and any(x.backend != "CPU" for x in loads)
    for x in loads:
        rate = x.tflops * 1e12 * x.eff.prefill * ub / (ub + x.eff.ubatch_half)
        if rate <= 0:
            continue
        share = x.flops_share
        if x.backend == "CPU" and gpu_present and ub >= 32:
            # op offload: batches of >= 32 tokens on host-held weights are computed by the GPU,
            # copying the weights over PCIe once per micro-batch (ggml/src/ggml-backend.cpp:1110,
            # ggml/src/ggml-cuda/ggml-cuda.cu:5754-5757, GGML_OP_OFFLOAD_MIN_BATCH default 32 at :5928)
            t_tok += x.weights_held / (cal.pcie_gbs * GB) / ub
            gpu = next(y for y in loads if y.backend != "CPU")
            rate = gpu.tflops * 1e12 * gpu.eff.prefill * ub / (ub + gpu.eff.ubatch_half)
        n_attn = x.kv_per_depth or x.swa_per_cell
        a_share = (x.n_layers / max(1, sum(y.n_layers for y in loads))) if n_attn else 0.0
        t_tok += 2 * params * share / rate
        t_tok += attn_flops * a_share / (rate * x.eff.attn_prefill)
        t_tok += x.weights_read / (x.bandwidth_gbs * GB * x.eff.weights) / ub if x.bandwidth_gbs else 0.0
    tok_s = 1 / t_tok if t_tok > 0 else 0.0
    formula = _("t/token = 2 x {params:.2f} G active params / (TFLOPS x eff x ub/(ub + ub_half)) + attention 4 x "
                "heads x head_dim x avg depth {depth:.0f} / (rate x attn eff) + weights / bandwidth / ub (ub {ub})").format(
        params=params / 1e9, depth=avg_depth, ub=ub)
    return Prefill(prompt, ub, tok_s, formula)


# ============================================================================ speculative


def tokens_per_step(a: float, n: int) -> float:
    """Expected tokens per target step: (1 - a^(n+1)) / (1 - a) (geometric acceptance)."""
    if n <= 0:
        return 1.0
    if a >= 1:
        return float(n + 1)
    return (1 - a ** (n + 1)) / (1 - a)


def acceptance_from_ratio(ratio: float, n: int) -> float:
    """Per-position acceptance a from llama.cpp's draft_n_accepted / draft_n (``ratio``) at draft
    length n: solves ratio x n = a (1 - a^n) / (1 - a) by bisection."""
    if n <= 0:
        return 0.0
    target = max(0.0, min(ratio, 0.999)) * n
    lo, hi = 0.0, 0.99999
    for _step in range(60):
        mid = (lo + hi) / 2
        if tokens_per_step(mid, n) - 1 < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def default_acceptance(spec: ModelSpec, kind: str, cal: Calibration) -> tuple[float, str]:
    key = f"{kind}:{spec.architecture}"
    if key in cal.acceptance:
        return cal.acceptance[key], f"default for {key} ({cal.source})"
    if kind in cal.acceptance:
        return cal.acceptance[kind], f"default for {kind} ({cal.source})"
    return 0.6, "generic default 0.6"


def mtp_draft_bytes(spec: ModelSpec) -> int:
    """Bytes one MTP draft token reads: the nextn layer(s) and the output head (shared)."""
    n_main = spec.n_layer_main
    b = 0
    for t in spec.tensors:
        m = _BLK_RE.match(t.name)
        if m and int(m.group(1)) >= n_main or t.name == "output.weight":
            b += t.n_bytes
    if not any(t.name == "output.weight" for t in spec.tensors):
        b += token_embd_bytes(spec)  # tied head
    return b


def mtp_layer_bytes(spec: ModelSpec) -> int:
    """Bytes of the nextn (MTP) layer(s) alone: what the MTP context's catch-up pass over a
    verified batch reads (no logits there: common/speculative.cpp, process() adds the batch with
    output false)."""
    n_main = spec.n_layer_main
    return sum(t.n_bytes for t in spec.tensors
               if (m := _BLK_RE.match(t.name)) and int(m.group(1)) >= n_main)


def ratio_from_acceptance(a: float, n: int) -> float:
    """llama-server's draft_n_accepted / draft_n at draft length n for per-position acceptance a."""
    return (tokens_per_step(a, n) - 1) / n if n > 0 else 0.0


def speculative(spec: ModelSpec, loads: Sequence[DeviceLoad], base_seconds: float, n: int,
                acceptance: float | None, cal: Calibration, draft: ModelSpec | None = None,
                acceptance_source: str | None = None) -> Speculative:
    """One speculative step as llama-server runs it at the pinned build (tools/server/server-context.cpp,
    common/speculative.cpp):

    - the drafter proposes n tokens, one pass each (draft(): the loop stops at n_max, and p_min
      defaults to 0, common/common.h:333, so every draft is n long);
    - the target verifies n + 1 tokens in one batch: the weights are read once for the batch (a
      memory-bound decode step, ``base_seconds``) plus ``verify_per_token`` decode steps of extra
      work per additional token (the batched matrix products and attention of the extra rows);
    - MTP only: the MTP context catches up on the verified batch (one pass of the nextn layer over
      n + 1 tokens, speculative.cpp process());
    - recurrent layers keep n state snapshots per sequence for rollback (n_rs_seq = n_max,
      common/common.h need_n_rs_seq), written every step.

    Tokens per step: 1 + accepted, and llama-server counts ``draft_n`` as drafted tokens
    (server-context.cpp:3266) and ``draft_n_accepted`` as accepted ones (:4330), so with full-length
    drafts tokens/step = 1 + n x draft_n_accepted / draft_n exactly (the log's 'mean len',
    server-context.cpp:702). ``acceptance`` is the per-position probability a of the geometric
    model, (1 - a^(n+1)) / (1 - a) tokens per step, which equals 1 + n x ratio for
    a = acceptance_from_ratio(ratio, n)."""
    # an MTP head in its own GGUF (-md mtp.gguf with --spec-type draft-mtp, as in the 307K-context
    # MTP field report) drafts like the built-in head: its nextn layer and its output head
    mtp_file = draft is not None and bool(draft.nextn_layers)
    kind = "draft" if draft is not None and not mtp_file else "mtp"
    if acceptance is None:
        a, src = default_acceptance(spec, kind, cal)
    else:
        a, src = acceptance, acceptance_source or "given"
    gpu = next((x for x in loads if x.backend != "CPU"), loads[0])
    bw = gpu.bandwidth_gbs * GB * gpu.eff.weights
    if draft is not None and not mtp_file:
        dbytes = draft.weights_bytes - token_embd_bytes(draft)
        catch_bytes = 0
    else:
        src_spec = draft if draft is not None else spec
        dbytes = mtp_draft_bytes(src_spec)
        catch_bytes = mtp_layer_bytes(src_spec)
    draft_s = dbytes / bw + 0.5 * gpu.eff.overhead_ms / 1000 if bw > 0 else 0.0
    catch_s = catch_bytes / bw + 0.5 * gpu.eff.overhead_ms / 1000 if bw > 0 and catch_bytes else 0.0
    # rollback snapshots of the recurrent state: n more state writes per step
    rec = sum(x.recurrent_rw for x in loads) / 2 * n
    verify_s = base_seconds * (1 + gpu.eff.verify_per_token * n) + (rec / bw if bw > 0 else 0.0)
    e = tokens_per_step(a, n)
    ratio = ratio_from_acceptance(a, n)
    step = verify_s + n * draft_s + catch_s
    tok_s = e / step if step > 0 else 0.0
    base = 1 / base_seconds if base_seconds > 0 else 0.0
    what = (_("draft model") if kind == "draft" else
            _("MTP GGUF (nextn layer + output head)") if mtp_file else _("MTP head (nextn layer + output head)"))
    catch = _(" + MTP catch-up {ms:.2f} ms").format(ms=catch_s * 1000) if catch_s else ""
    formula = _("tokens/step = 1 + n x ratio = 1 + {n} x {ratio:.3f} = {e:.2f} (ratio = llama-server's "
                "draft_n_accepted / draft_n; per-position a = {a:.2f}); step = verify {verify:.1f} ms "
                "(decode x (1 + {per:g} x n)) + n x draft {draft:.2f} ms ({what} {gb:.2f} GB){catch}; tok/s = "
                "tokens/step / step").format(n=n, ratio=ratio, e=e, a=a, verify=verify_s * 1000,
                                             per=gpu.eff.verify_per_token, draft=draft_s * 1000, what=what,
                                             gb=dbytes / GB, catch=catch)
    return Speculative(kind, n, a, src, e, draft_s * 1000, verify_s * 1000, tok_s,
                       tok_s / base if base else 0.0, formula, ratio, catch_s * 1000)


def speculative_bound(limit_seconds: float, n: int) -> float:
    """The hard ceiling of speculative decoding: every drafted token accepted (n + 1 tokens per
    step), drafting and extra verification free, the weights read at peak bandwidth. No
    configuration beats it; anything below it is a matter of efficiency and acceptance."""
    return (n + 1) / limit_seconds if limit_seconds > 0 else 0.0


# ============================================================================ entry points


def speed_report(spec: ModelSpec, cfg: ServerConfig, hw: Hardware, *, cal: Calibration | None = None,
                 n_ctx: int | None = None, host_bandwidth_gbs: float | None = None,
                 acceptance: float | None = None, draft: ModelSpec | None = None,
                 prompt_tokens: int | None = None, depths: Sequence[int] | None = None,
                 prompt_start: int = 0, acceptance_ratio: float | None = None) -> SpeedReport:
    """Decode at several depths, prefill, speculative decoding (when configured).

    ``prompt_tokens``: the prefill figure's prompt; None: 8192 tokens, or the longest prompt
    the slot accepts when it holds fewer (prompt_length()).
    ``acceptance`` is the per-position probability a; ``acceptance_ratio`` (wins when given) is
    what llama-server reports, draft_n_accepted / draft_n, read as measured at this config's
    --spec-draft-n-max."""
    cal = cal or builtin()
    warnings: list[Diagnostic] = []
    ctx = M.resolve_context(spec, cfg)
    n_ctx_eff = n_ctx or ctx.n_ctx_slot
    unknown = [g.name for g in hw.gpus if not g.bandwidth_gbs]
    if unknown:
        raise InputError(_("speed: no memory bandwidth known for {unknown} (not in the GPU catalogue); use a "
                           "catalogue name (`llamarig gpus`) to get speed figures").format(unknown=', '.join(unknown)))
    loads = device_loads(spec, cfg, hw, cal, host_bandwidth_gbs)
    sm = _split_mode(cfg, loads)
    window = spec.swa_window
    dps = list(depths) if depths is not None else depth_points(n_ctx_eff)
    rows = []
    for d in dps:
        t = decode_seconds(loads, d, window, cal, sm)
        tl = decode_seconds(loads, d, window, cal, sm, limit=True)
        b = sum(x.bytes_at(d, window) for x in loads)
        rows.append(DepthSpeed(d, 1 / t if t else 0.0, 1 / tl if tl else 0.0, b,
                               f"{b / GB:.2f} GB per token at depth {d}"))
    t0 = decode_seconds(loads, 0, window, cal, sm)
    tl0 = decode_seconds(loads, 0, window, cal, sm, limit=True)
    n_prompt, prompt_note = prompt_length(n_ctx_eff, prompt_tokens, prompt_start)
    pf = replace(prefill(spec, loads, n_prompt, ctx.n_ubatch, cal, prompt_start, cfg.op_offload),
                 prompt_note=prompt_note)
    if any(x.backend == "CPU" for x in loads):
        scale, why = host_thread_scale(cfg, hw, cal)
        if why and scale == 1.0:  # calibrated threads, but this plan's are unknown
            warnings.append(warning(SPEED_HOST_THREADS, why))
        elif why:
            pf = replace(pf, formula=pf.formula + _("; host compute x{scale:.3g} (-tb {tb} / calibrated -tb "
                                                    "{cal})").format(scale=scale, tb=plan_threads(cfg, hw)[1],
                                                                     cal=cal.host_threads))
    spec_res = None
    if any(t.startswith("draft-") for t in cfg.spec_types) and (spec.nextn_layers or draft is not None):
        n = max(1, cfg.spec_draft_n_max)
        src = None
        if acceptance_ratio is not None:
            acceptance = acceptance_from_ratio(acceptance_ratio, n)
            src = f"given: llama-server's draft_n_accepted / draft_n = {acceptance_ratio:g} at n = {n}"
        spec_res = speculative(spec, loads, t0, n, acceptance, cal, draft, src)
    depth_note = _depth_note(loads, dps, window, cal, sm, cfg.cache_type_k, cfg.cache_type_v)
    backend = loads[0].backend if loads else "CPU"
    path = kv_path(backend, cfg.cache_type_k, cfg.cache_type_v, cfg.flash_attn)
    if path.kind in ("cpu", "convert"):
        warnings.append(warning(SPEED_KV_PATH, path.note))
    note = kv_quality_note(cfg.cache_type_k, cfg.cache_type_v) + _("; ") + path.note
    return SpeedReport(
        decode_tok_s=1 / t0 if t0 else 0.0, decode_limit_tok_s=1 / tl0 if tl0 else 0.0,
        by_depth=tuple(rows), prefill=pf, speculative=spec_res, devices=tuple(loads), kv_note=note,
        formula=decode_formula(loads, sm), calibration=cal.source, diagnostics=tuple(warnings),
        depth_note=depth_note,
        host_range=_host_range(loads, cal, t0, pf, window, host_bandwidth_gbs is not None),
    )


def host_calibrated(cal: Calibration) -> bool:
    """Whether the host's figures come from a measurement of llama-server on it (tune's file):
    its CPU efficiency or host compute figure differs from the built-in one."""
    base = builtin()
    return cal.for_device("CPU") != base.for_device("CPU") or cal.host_gflops != base.host_gflops


def _host_range(loads: Sequence[DeviceLoad], cal: Calibration, t0: float, pf: Prefill, window: int | None,
                bandwidth_given: bool) -> HostRange | None:
    """The range of an uncalibrated host's figures (HostRange); None when the host holds nothing
    decode reads or a tune calibration covers it. The measured/planned ratios r of the host part
    (data/speed_calibration.json ``host_uncalibrated``) apply to the host's share of the time:
    t = t_other + t_host / r."""
    host = next((x for x in loads if x.backend == "CPU"), None)
    if host is None or host.bytes_at(0, window) <= 0 or host_calibrated(cal):
        return None
    data = builtin_data().get("host_uncalibrated") or {}
    measured_bw = bandwidth_given or cal.host_bandwidth_gbs != builtin().host_bandwidth_gbs
    key = "measured_bandwidth" if measured_bw else "builtin"
    rng = data.get(key)
    if not rng or t0 <= 0:
        return None
    cpu_only = all(x.backend == "CPU" for x in loads)
    t_host = host.seconds_at(0, window, False, cal) + (host.eff.overhead_ms / 1000 if cpu_only else 0.0)
    t_other = max(0.0, t0 - t_host)
    lo, hi = (float(v) for v in rng["decode"])
    dec = (1 / (t_other + t_host / lo), 1 / (t_other + t_host / hi))
    pre = None
    if cpu_only and pf.tok_s > 0:
        plo, phi = (float(v) for v in rng["prefill"])
        pre = (pf.tok_s * plo, pf.tok_s * phi)
    what = (_("host bandwidth measured (plan --detect), CPU efficiencies built in") if measured_bw
            else _("host bandwidth and compute built in (not measured)"))
    note = _("host figures uncalibrated ({what}): against the real llama-server, measured decode was "
             "x{dlo:.2g}-x{dhi:.2g} of the planned host part{pre}; `llamarig tune` on this machine calibrates "
             "them ({source})").format(
        what=what, dlo=lo, dhi=hi, source="benchmarks/RESULTS.md, \"CPU speed model\"",
        pre=_(", prefill x{plo:.2g}-x{phi:.2g}").format(plo=float(rng["prefill"][0]), phi=float(rng["prefill"][1]))
        if pre else "")
    return HostRange(dec, pre, note, str(data.get("source", "data/speed_calibration.json")))


def _short_source(source: str) -> str:
    """The file a calibration source names (benchmarks/evidence/...), else its first words."""
    for word in source.replace(":", " ").split():
        if word.startswith("benchmarks/") and word.endswith(".json"):
            return word
    return source[:60]


def _kv_types_measured(eff: Efficiency, type_k: str, type_v: str) -> bool:
    """Whether this device's efficiency has its own measured read rate for these (not f16) K/V
    types: a GPU evidence file's fit (--calibration), the built-in H200 entry; an entry copied
    from another GPU (source "assumed ...") measured none."""
    quant = {t.lower() for t in (type_k, type_v)} - set(KV_MEASURED_TYPES)
    return bool(quant) and quant <= {t for t, _e in eff.kv_by_type} and not eff.source.startswith("assumed")


def _depth_note(loads: Sequence[DeviceLoad], depths: Sequence[int], window: int | None, cal: Calibration,
                split_mode: str, type_k: str = "f16", type_v: str = "f16") -> str:
    """What the decode figures at depth rest on: the KV read efficiency of each device that reads
    KV, and whether published figures back it for these K/V types."""
    deepest = max(depths, default=0)
    kv_devs = [x for x in loads if (x.kv_per_depth or x.swa_per_cell) and not x.kv_on_cpu]
    if deepest <= 0 or not kv_devs:
        return ""
    base = builtin()
    measured = type_k in KV_MEASURED_TYPES and type_v in KV_MEASURED_TYPES
    groups: dict[str, list[str]] = {}  # phrase -> device names
    for x in kv_devs:
        ref = base.for_device(x.backend, next((k for k, e in base.gpus.items() if e.source == x.eff.source), None))
        if _kv_types_measured(x.eff, type_k, type_v):
            phrase = _("kv {kv:g} for K {type_k} / V {type_v}, measured on this GPU ({source})").format(
                kv=x.eff.kv, type_k=type_k, type_v=type_v, source=_short_source(x.eff.source))
        elif x.backend == "CPU" and x.eff.attn_decode_depths:
            pts = x.eff.attn_decode_depths
            phrase = _("the host's attention measured by llamarig tune at depths {first}-{last} "
                       "({n} points, interpolated)").format(first=pts[0][0], last=pts[-1][0], n=len(pts))
            if deepest > pts[-1][0]:
                phrase += _("; deeper than {last} it is extended at the last measured cost per cell, which "
                            "can grow further (docs/speed.md)").format(last=pts[-1][0])
        elif x.eff.kv != ref.kv:
            phrase = _("kv {kv:g} from {source}").format(kv=x.eff.kv, source=cal.source)
        elif x.backend == "CUDA" and measured:
            phrase = _("kv {kv:g} fitted to four published f16 decodes at 30-45K depth (RTX 3090 / 4090; "
                       "docs/accuracy-speed.md)").format(kv=x.eff.kv)
        elif x.backend == "CUDA":
            phrase = _("kv {kv:g} is fitted on f16 K/V; K {type_k} / V {type_v} is assumed to read as fast "
                       "(not measured on this GPU; on an H200 quantized K/V read 9-21 times slower per byte than "
                       "f16, docs/accuracy-speed.md)").format(kv=x.eff.kv, type_k=type_k, type_v=type_v)
        else:
            phrase = _("kv {kv:g} is assumed ({backend}: no measured point at depth)").format(kv=x.eff.kv,
                                                                                               backend=x.backend)
        groups.setdefault(phrase, []).append(x.name)
    parts = [", ".join(names) + " " + phrase for phrase, names in groups.items()]  # + keeps the Message
    return _("decode at depth: ") + _("; ").join(parts)


def gpu_time_per_layer(g: GPU, bytes_per_layer: float, cal: Calibration) -> float:
    """Seconds one layer's bytes take on a GPU (used to balance -ts)."""
    eff = cal.for_device(g.backend, g.id)
    bw = (g.bandwidth_gbs or 0) * GB * eff.weights
    return bytes_per_layer / bw if bw else float("inf")
