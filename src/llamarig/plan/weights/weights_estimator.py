"""Model weights: per device as llama.cpp places the tensors (-ngl/-ts/-sm/-ot), and on the host
per CPU buffer type (hardware/cpu_buffers.py has the rules: CPU_Mapped, the GPU's pinned host
buffer, AMX, CPU_REPACK)."""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.diagnostics import Diagnostic, info, warning
from llamarig.gguf.spec import ModelSpec
from llamarig.hardware.cpu import CpuFeatures
from llamarig.hardware.cpu_buffers import AMX_TILE_TYPES, extra_bufts_in_list, host_weight_buffer
from llamarig.hardware.types import GPU
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.config import ServerConfig
from llamarig.plan.estimator import HOST, Contribution, Entry, PlanLayout, entry, mib
from llamarig.plan.result import Line
from llamarig.units import fmt_bytes

#: diagnostic codes
CPU_BUFFERS_ASSUMED = "cpu-buffers-assumed"
KLEIDIAI_NOT_MODELLED = "kleidiai-not-modelled"
AMX_TILE_KERNELS = "amx-tile-kernels"
HOST_BUFFER_FIRST = "gpu-host-buffer-first"
MTP_WEIGHTS_SKIPPED = "mtp-weights-skipped"

#: GPU backends whose device has a pinned host buffer type (ggml_backend_dev_host_buffer_type)
_HOST_BUFFER_BACKENDS = {"CUDA": "CUDA_Host", "ROCm": "ROCm_Host", "Vulkan": "Vulkan_Host", "SYCL": "SYCL_Host"}


def gpu_host_buffer(gpus: tuple[GPU, ...]) -> str | None:
    """The pinned host buffer type make_cpu_buft_list puts first (src/llama-model.cpp:1101-1109)."""
    return next((_HOST_BUFFER_BACKENDS[g.backend] for g in gpus if g.backend in _HOST_BUFFER_BACKENDS), None)


def amx_tile_types(spec: ModelSpec, cfg: ServerConfig, placement: M.Placement, cpu: CpuFeatures,
                   host_w: Line) -> list[str]:
    """The quantized weight types the plan puts in the AMX buffer (they run AMX tile kernels)."""
    if not any(name == "AMX" and b for name, b in host_w.parts):
        return []
    found = set()
    for t in M.host_tensors(spec, cfg, placement):
        ch = host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu, extra_bufts=True)
        if ch.buffer == "AMX" and t.ggml_type.lower() in AMX_TILE_TYPES:
            found.add(t.ggml_type.lower())
    return sorted(found)


def _default_buffer(spec: ModelSpec, cfg: ServerConfig, placement: M.Placement, host_bytes: int, cpu: CpuFeatures,
                    mmap: bool, extra: bool, moved_file: int, what: str) -> tuple[int, str]:
    """Bytes of the host weights in the default buffer, and the formula so far."""
    mapped = M.mapped_host_bytes(spec, cfg, placement, cpu, extra) if mmap else None
    if mmap and mapped is not None:
        return mapped, what + _(": mmap'd file range from the first to the end of the last tensor left in it")
    if mmap:
        return host_bytes - moved_file, what
    default = sum(-(-(t.n_bytes) // 32) * 32 for t in M.host_tensors(spec, cfg, placement)
                  if not host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu,
                                            extra_bufts=extra).buffer)
    return default, what + _(", read into an allocated buffer (--load-mode {mode}; 32 B aligned per tensor)").format(
        mode=cfg.load_mode)


def host_weights(spec: ModelSpec, cfg: ServerConfig, placement: M.Placement, host_bytes: int,
                 gpus: tuple[GPU, ...], cpu: CpuFeatures, mmap: bool, what: str) -> Line:
    """Host-resident weights per CPU buffer type (hardware/cpu_buffers.py has the rules):
    the default buffer (CPU_Mapped with mmap, else the GPU's pinned host buffer or CPU) plus
    what llama.cpp copies into AMX / CPU_REPACK."""
    gpu_host = None if cfg.no_host else gpu_host_buffer(gpus)
    extra = extra_bufts_in_list(repack=cfg.repack, no_host=cfg.no_host, has_gpu_host_buffer=gpu_host is not None)
    bufs = M.host_weight_buffers(spec, cfg, placement, cpu, extra)
    moved_file = sum(f for _, f in bufs.values())
    default, formula = _default_buffer(spec, cfg, placement, host_bytes, cpu, mmap, extra, moved_file, what)
    default_name = "CPU_Mapped" if mmap else (gpu_host or "CPU")
    parts: list[tuple[str, int]] = [(default_name, default)] if default or not bufs else []
    for name in ("AMX", "CPU_REPACK"):
        if name in bufs:
            b, f = bufs[name]
            parts.append((name, b))
            why = (_("q4_0/q4_1/q8_0/q4_K/q5_K/q6_K/iq4_xs/f16 matrices with rows a multiple of 32, packed for AMX "
                     "(ggml-cpu/amx/amx.cpp, mmq.cpp)") if name == "AMX" else
                   _("matrices repacked into interleaved blocks (ggml-cpu/repack.cpp)"))
            formula += _(" + {name} {size}: {why}, copied out of the file ({file} there)").format(
                name=name, size=mib(b), why=why, file=mib(f))
    if bufs:
        formula += _("; -nr/--no-repack keeps them in {buffer}").format(buffer=default_name)
    return Line(sum(b for _, b in parts), formula, "exact", tuple(parts))


@dataclass(frozen=True)
class WeightsEstimate:
    """The weights' figures, and what later estimators read of them: the split per device
    (fit.cpp sums it) and the host line (its AMX part)."""

    estimate: Contribution
    split: M.WeightSplit
    host: Line


def _device_entries(lay: PlanLayout, ws: M.WeightSplit) -> list[Entry]:
    out = []
    for i, g in enumerate(lay.gpus):
        out_note = _(" + output layer") if lay.placement.output_dev == i else ""
        padded = g.buffer_backend in ("CUDA", "ROCm")
        out.append(entry(i, "weights", ws.per_device[i], (
            _("tensors of {n} layer(s){output} on {device} (-ngl/-ts/-sm/-ot placement; quantized rows padded to "
              "512 elements, 128 B alignment)") if padded else
            _("tensors of {n} layer(s){output} on {device} (-ngl/-ts/-sm/-ot placement)")).format(
                n=lay.layers_on(i), output=out_note, device=lay.gpu_names[i])))
    return out


def _buffer_diagnostics(lay: PlanLayout, ws: M.WeightSplit, host_w: Line) -> list[Diagnostic]:
    spec, cfg, cpu, n_dev = lay.spec, lay.cfg, lay.cpu, lay.n_dev
    out: list[Diagnostic] = []
    if not n_dev or cfg.no_host:
        out.append(info(CPU_BUFFERS_ASSUMED, _("CPU buffer types (AMX, CPU_REPACK) planned for {cpu}").format(
            cpu=cpu.describe())))
    if cpu.has("KLEIDIAI") and (not n_dev or cfg.no_host) and cfg.repack:
        out.append(warning(KLEIDIAI_NOT_MODELLED, _(
            "a KleidiAI build (GGML_CPU_KLEIDIAI): its KLEIDIAI buffer type comes before CPU_REPACK "
            "(ggml-cpu/ggml-cpu.cpp:58-62) and is not modelled; host weights may differ")))
    tiles = amx_tile_types(spec, cfg, lay.placement, cpu, host_w)
    if tiles:
        out.append(warning(AMX_TILE_KERNELS, _(
            "{types} matrices go to the AMX buffer and run llama.cpp's AMX tile kernels for prompts of more "
            "than one token (ggml-cpu/amx/mmq.cpp ggml_backend_amx_mul_mat); that path crashed with SIGSEGV in "
            "warm-up on an AMX Xeon for llamarig's synthetic q8_0/q4_0 models and in "
            "https://github.com/ggml-org/llama.cpp/issues/20824 (f16 takes AVX-512 kernels and did not). If "
            "llama-server crashes there, --no-repack keeps these weights out of AMX").format(types=", ".join(tiles))))
    if ws.host and n_dev and not cfg.no_host and cfg.repack and gpu_host_buffer(lay.gpus) and any(
            host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu, extra_bufts=True).buffer
            for t in M.host_tensors(spec, cfg, lay.placement)):
        out.append(info(HOST_BUFFER_FIRST, _(
            "host weights stay in the GPU's host buffer, not CPU_REPACK/AMX: with a GPU, llama.cpp "
            "puts the pinned host buffer ahead of the CPU's extra buffer types "
            "(src/llama-model.cpp:1101-1128); --no-host lets the CPU repack them for faster CPU matmuls")))
    if ws.skipped:
        out.append(info(MTP_WEIGHTS_SKIPPED, _(
            "{size} of MTP (nextn) weights are not loaded without --spec-type draft-mtp").format(
            size=fmt_bytes(ws.skipped))))
    return out


def estimate_weights(lay: PlanLayout) -> WeightsEstimate:
    spec, cfg = lay.spec, lay.cfg
    ws = M.split_weights(spec, cfg, lay.placement, [g.buffer_backend in ("CUDA", "ROCm") for g in lay.gpus])
    on_gpus = sum(lay.layers_on(i) for i in range(lay.n_dev))
    host_w = host_weights(spec, cfg, lay.placement, ws.host, lay.gpus, lay.cpu, lay.mmap,
                          _("tensors kept on the CPU ({n} layer(s), token embeddings)").format(n=spec.n_layer - on_gpus))
    est = Contribution((*_device_entries(lay, ws), Entry(HOST, "weights", host_w)),
                   tuple(_buffer_diagnostics(lay, ws, host_w)))
    return WeightsEstimate(est, ws, host_w)
