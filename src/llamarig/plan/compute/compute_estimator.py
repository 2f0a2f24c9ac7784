"""Compute buffers and the output (logits) buffer: a thin adapter over plan/compute/buffers.py (the
replay of llama.cpp's graphs through ggml-backend's scheduler on every device, the calibrated
phase model where the replay does not cover the setup, pipeline parallelism), which decides
every figure; this module only says which device gets which buffer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llamarig.diagnostics import info
from llamarig.gguf.ggml_types import TYPE_SIZES
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.compute.buffers import (
    ComputeEstimate,
    DeviceCompute,
    PipelineParallel,
    estimate_compute,
    host_inputs,
    host_pipeline_extra,
    pipeline_extra,
    pipeline_parallel,
    replayed_buffers,
)
from llamarig.plan.config import ServerConfig
from llamarig.plan.estimator import HOST, Contribution, Entry, PlanLayout, entry, mib
from llamarig.units import MiB

#: the CUDA compute capability taken for a GPU the catalogue has none for (Ada, 8.9: the kernel
#: choice of every card since Turing for prompt batches, llamarig.plan.compute.cuda_fattn)
DEFAULT_CUDA_CC = 890

#: a diagnostic code: whether llama.cpp runs the GPUs as a pipeline, and why (not)
PIPELINE_PARALLEL = "pipeline-parallel"


@dataclass(frozen=True)
class CudaTarget:
    """Everything on one CUDA GPU (the qwen35 replays then go through ggml-backend's scheduler
    and give the GPU's and the host's compute buffers): its compute capability, and what the
    formula says when the catalogue has none."""

    cc: int | None
    note: str


def cuda_target(lay: PlanLayout) -> CudaTarget:
    cfg, gpus, placement = lay.cfg, lay.gpus, lay.placement
    one_cuda = (lay.n_dev == 1 and gpus[0].backend == "CUDA" and lay.kv_on_gpu and placement.output_dev == 0
                and all(d == 0 for d in placement.layer_dev)
                and not (cfg.override_tensor or cfg.cpu_moe or cfg.n_cpu_moe or cfg.n_cpu_ffn))
    if not one_cuda:
        return CudaTarget(None, "")
    cc = gpus[0].compute_capability
    note = "" if cc else (f" (compute capability not in the catalogue: taken as {DEFAULT_CUDA_CC // 100}."
                          f"{DEFAULT_CUDA_CC % 100 // 10})")
    return CudaTarget(cc or DEFAULT_CUDA_CC, note)


def n_outputs_max(lay: PlanLayout) -> int:
    """The most logits rows a batch asks for: every slot, and the draft tokens of a draft-* type."""
    cfg, ctx = lay.cfg, lay.ctx
    n_draft = cfg.spec_draft_n_max if any(t.startswith("draft-") for t in cfg.spec_types) else 0
    return min(ctx.n_batch, ctx.n_parallel * (1 + n_draft))


def replayed_entries(rb: DeviceCompute, names: tuple[str, ...], comp: str, what: str,
                     always: tuple[int, ...] | list[int] = (), device: Callable[[int], int] = lambda i: i
                     ) -> list[Entry]:
    """A context's replayed compute buffers as plan lines: each device's (when it has one, or
    holds layers: ``always``) and the CPU backend's; ``device`` maps the context's device index to
    the plan's (a draft model's own devices)."""
    out = [entry(device(i), comp, rb.devices[i], _("{what}{formula}: {size} on {device}").format(
               what=what, formula=rb.formula, size=mib(rb.devices[i]), device=name), rb.method)
           for i, name in enumerate(names) if rb.devices[i] or i in always]
    out.append(entry(HOST, comp, rb.host, _("{what}{formula}: {size} on the CPU backend (graph inputs, the token "
                                            "embeddings' rows, layers kept on the CPU)").format(
        what=what, formula=rb.formula, size=mib(rb.host)), rb.method))
    return out


def mtp_placement(lay: PlanLayout) -> tuple[ServerConfig, M.Placement]:
    """The settings and layer placement the MTP context is made with: this plan's, but in one of
    --fit's dry runs the user's own (the MTP context's params are copied before fit changes the
    main model's, common/common.cpp:1244-1258, and fit measures it again only when the context
    changes, common/fit.cpp:205-258)."""
    if not lay.dry_run or lay.base_cfg is lay.cfg:
        return lay.cfg, lay.placement
    base = lay.base_cfg
    return base, M.place_layers(lay.spec, base, lay.gpu_names, lay.free)


def replay(lay: PlanLayout, n_out: int, cache_types: tuple[str, str], mtp: bool = False) -> DeviceCompute | None:
    """The target context's (``mtp``: the MTP context's, placed by :func:`mtp_placement`)
    compute buffers replayed through ggml-backend's scheduler on every device, None where the
    replay does not cover the setup."""
    spec = lay.spec
    cfg, placement = mtp_placement(lay) if mtp else (lay.cfg, lay.placement)
    return replayed_buffers(spec, lay.ctx, n_out, placement=placement, gpus=lay.gpus,
                            overrides=M.tensor_overrides(spec, cfg, placement.devices),
                            n_copies=_pipeline(lay, cfg, placement).n_copies,
                            full_offload=cfg.n_gpu_layers < 0 or cfg.n_gpu_layers > spec.n_layer,
                            cache_types=cache_types, mtp=mtp, split_mode=cfg.split_mode, kv_on_cpu=cfg.no_kv_offload,
                            dry_run=lay.dry_run, op_offload=cfg.op_offload)


def _pipeline(lay: PlanLayout, cfg: ServerConfig | None = None, placement: M.Placement | None = None
              ) -> PipelineParallel:
    """Several GPUs, everything offloaded, layer split: the scheduler keeps 4 copies of each
    stage's inputs (llama-context.cpp:431-457, GGML_SCHED_MAX_COPIES; plan/compute/buffers.py).
    ``cfg``, ``placement``: the context's when not the plan's (:func:`mtp_placement`)."""
    cfg = cfg or lay.cfg
    placement = placement or lay.placement
    return pipeline_parallel(
        n_devices=lay.n_dev, n_gpu_layers=placement.n_gpu_layers, n_layer_all=len(lay.spec.layers),
        split_mode=cfg.split_mode, offload_kqv=not cfg.no_kv_offload,
        tensor_overrides=bool(cfg.override_tensor or cfg.cpu_moe or cfg.n_cpu_moe or cfg.n_cpu_ffn),
        backends=tuple(g.backend for g in lay.gpus))


def _offload_copies(lay: PlanLayout, first_gpu: int) -> list[Entry]:
    """Op offload: matmuls whose weights stay in host memory run on the GPU for prompt batches
    (ggml-cuda.cu get_op_batch_size >= 32; ggml-backend sched copies the weight into the GPU's
    compute buffer). About two such copies are alive at once."""
    host_mats = M.host_matrix_bytes(lay.spec, lay.cfg, lay.placement) if lay.cfg.op_offload else []
    if not host_mats or min(lay.ctx.n_ctx, lay.ctx.n_ubatch) < 32:
        return []
    top = sorted(host_mats, reverse=True)[:2]
    return [entry(first_gpu, "compute", sum(top),
                  _("op offload: 2 largest host-resident weight matrices copied in for prompt batches ({sizes})").format(
                      sizes=" + ".join(mib(x) for x in top)), "modelled")]


def _gpu_entries(lay: PlanLayout, est: ComputeEstimate, method: str, note: str, gpu_with_layers: list[int],
                 pp: PipelineParallel, n_out: int) -> list[Entry]:
    spec, ctx, placement = lay.spec, lay.ctx, lay.placement
    out: list[Entry] = []
    for i in gpu_with_layers:
        out.append(entry(i, "compute", est.bytes, est.formula + note, method))
        x = pipeline_extra(spec, ctx, n_out, pp, first=(i == gpu_with_layers[0]), output=(placement.output_dev == i))
        if x.bytes:
            out.append(entry(i, "compute", x.bytes, x.formula, "modelled"))
    hx = host_pipeline_extra(spec, ctx, n_out, pp)
    if hx.bytes:
        out.append(entry(HOST, "compute", hx.bytes, hx.formula, "modelled"))
    out += _offload_copies(lay, gpu_with_layers[0])
    # the host-side compute buffer (the graph inputs, get_rows of the CPU embeddings)
    if est.host_bytes is not None:
        out.append(entry(HOST, "compute", est.host_bytes, _("the same replay's CPU (CUDA_Host) compute buffer: graph "
                                                            "inputs and the token embeddings' get_rows: {size}").format(
            size=f"{est.host_bytes / MiB:.2f} MiB"), method))
    else:
        cfg = lay.cfg
        hi = host_inputs(spec, ctx, n_out, (cfg.cache_type_k, cfg.cache_type_v))
        out.append(entry(HOST, "compute", hi.bytes, hi.formula, "modelled"))
    return out


def _modelled(lay: PlanLayout, n_out: int, gpu_with_layers: list[int], pp: PipelineParallel) -> list[Entry]:
    """Where the replay does not cover the setup: the phase model (or one CUDA GPU's qwen35
    replay), its pipeline copies and host inputs."""
    cfg, gpus = lay.cfg, lay.gpus
    cuda_q = None
    if any(g.backend == "CUDA" for g in gpus) and (TYPE_SIZES[cfg.cache_type_k][0] > 1
                                                  or TYPE_SIZES[cfg.cache_type_v][0] > 1):
        cuda_q = (cfg.cache_type_k, cfg.cache_type_v)
    target = cuda_target(lay)
    est = estimate_compute(lay.spec, lay.ctx, n_out, cuda_quant_kv=cuda_q,
                           cache_types=(cfg.cache_type_k, cfg.cache_type_v), cuda_cc=target.cc)
    scheduled = est.host_bytes is not None
    method = (est.method if not target.note else "modelled") if scheduled else "modelled"
    if gpu_with_layers:
        return _gpu_entries(lay, est, method, target.note, gpu_with_layers, pp, n_out)
    return [entry(HOST, "compute", est.bytes, est.formula, est.method)]


def estimate_compute_buffers(lay: PlanLayout) -> Contribution:
    """The compute buffer of every device with layers (or the host's, CPU only): replayed
    through ggml-backend's scheduler where the replay covers the setup (RPC servers, CUDA GPUs,
    the CPU alone), else the phase model with the pipeline's extra copies and the host's inputs;
    and the logits buffer."""
    spec, cfg, ctx = lay.spec, lay.cfg, lay.ctx
    n_out = n_outputs_max(lay)
    gpu_with_layers = [i for i in range(lay.n_dev) if lay.layers_on(i) or lay.placement.output_dev == i]
    pp = _pipeline(lay)
    diags = (info(PIPELINE_PARALLEL, pp.reason),) if lay.n_dev > 1 else ()
    rb = replay(lay, n_out, (cfg.cache_type_k, cfg.cache_type_v))
    if rb is not None:
        entries = replayed_entries(rb, lay.gpu_names, "compute", "", gpu_with_layers)
    else:
        entries = _modelled(lay, n_out, gpu_with_layers, pp)
    out_b = M.output_buffer_bytes(spec, ctx.n_parallel)
    entries.append(entry(HOST, "output", out_b, _("logits {formula}").format(
        formula=f"n_vocab {spec.n_vocab if spec.n_vocab is not None else '?'} x n_seq_max {ctx.n_parallel} x 4 B")))
    return Contribution(tuple(entries), diags)
