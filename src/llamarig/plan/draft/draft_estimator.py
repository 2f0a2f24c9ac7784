"""Speculative decoding's memory: the MTP draft context (--spec-type draft-mtp: a second
llama_context over the model's nextn layers) and a separate draft model (-md), each with its
weights, KV and compute buffer."""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.diagnostics import Diagnostic, warning
from llamarig.errors import InputError
from llamarig.gguf.spec import ModelSpec
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.compute.buffers import estimate_compute, pipeline_parallel, replayed_buffers
from llamarig.plan.compute.compute_estimator import (
    cuda_target,
    mtp_placement,
    replay,
    replayed_entries,
)
from llamarig.plan.config import ServerConfig
from llamarig.plan.estimator import HOST, Contribution, Entry, PlanLayout, entry, mib
from llamarig.plan.layout import devices, uses_mmap
from llamarig.plan.weights.weights_estimator import host_weights
from llamarig.units import MiB

#: a diagnostic code: --spec-type draft-mtp on a model without MTP layers
NO_MTP_LAYERS = "no-mtp-layers"
#: a diagnostic code: -md without a draft speculative type (the draft is loaded, then freed)
DRAFT_UNUSED = "draft-unused"


@dataclass(frozen=True)
class MTPEstimate:
    estimate: Contribution
    #: the device of the MTP context (its first nextn layer's KV), HOST on the CPU; None without MTP
    device: int | None


def estimate_mtp(lay: PlanLayout) -> MTPEstimate:
    """The MTP draft context: KV of the nextn layers, its logits and its compute buffer."""
    spec, cfg, ctx = lay.spec, lay.cfg, lay.ctx
    diags: tuple[Diagnostic, ...] = ()
    if cfg.mtp and not spec.nextn_layers and lay.inp.draft is None:
        diags = (warning(NO_MTP_LAYERS, _(
            "--spec-type draft-mtp but the model has no MTP (nextn) layers: llama-server fails with "
            "'failed to create MTP context' (llama-context.cpp:3883-3888)")),)
    mtp = M.mtp_kv_layers(spec, ctx, cfg)
    if not mtp:
        return MTPEstimate(Contribution((), diags), None)
    place = mtp_placement(lay)[1]

    def kv_device(layer: int) -> int:
        return place.layer_dev[layer] if lay.kv_on_gpu else HOST

    out: list[Entry] = []
    for dev in range(-1, lay.n_dev):
        sel = [x for x in mtp if kv_device(x.layer) == dev]
        if sel:
            b = sum(x.bytes for x in sel)
            out.append(entry(dev, "draft", b, _("MTP context KV: {n} nextn layer(s) x n_ctx {n_ctx} x (K {tk} + V {tv}) = "
                                                "{size}").format(n=len(sel), n_ctx=ctx.n_ctx, tk=cfg.cache_type_k_draft,
                                                                 tv=cfg.cache_type_v_draft, size=mib(b))))
    out.append(entry(HOST, "output", M.output_buffer_bytes(spec, ctx.n_parallel),
                     _("MTP context logits {formula}").format(formula="n_vocab x n_parallel x 4 B")))
    mdev = kv_device(mtp[0].layer)
    mb = replay(lay, ctx.n_parallel, (cfg.cache_type_k_draft, cfg.cache_type_v_draft), mtp=True)
    if mb is not None:
        out += replayed_entries(mb, lay.gpu_names, "draft", _("MTP context compute: "))
        return MTPEstimate(Contribution(tuple(out), diags), mdev)
    target = cuda_target(lay)
    dest = estimate_compute(spec, ctx, ctx.n_parallel, layers="mtp", gpu=mdev >= 0,
                            cache_types=(cfg.cache_type_k_draft, cfg.cache_type_v_draft),
                            cuda_cc=target.cc if mdev == 0 else None)
    method = dest.method if not target.note else "modelled"
    out.append(entry(mdev, "draft", dest.bytes, _("MTP context compute: ") + dest.formula + target.note, method))
    if dest.host_bytes is not None:
        out.append(entry(HOST, "draft", dest.host_bytes, _("MTP context's CPU (CUDA_Host) compute buffer (graph inputs "
                                                          "and the token embeddings' get_rows): {size}").format(
            size=f"{dest.host_bytes / MiB:.2f} MiB"), method))
    return MTPEstimate(Contribution(tuple(out), diags), mdev)


@dataclass(frozen=True)
class DraftEstimate:
    estimate: Contribution
    #: the draft model's weights on each of the main model's devices (fit.cpp counts them)
    weights_per_device: tuple[int, ...]


def _draft_cfg(cfg: ServerConfig, tensor_split: tuple[float, ...]) -> ServerConfig:
    """The draft's params: a copy of the main ones with -ngld, -devd, -otd, -cmoed, -ncmoed in
    place (common/speculative.cpp:2536-2551); a single -devd device forces -sm layer.
    ``tensor_split``: the main model's as the draft is loaded (:func:`_draft_split`)."""
    split = cfg.split_mode if len(cfg.devices_draft) != 1 else "layer"
    return ServerConfig(
        n_gpu_layers=cfg.n_gpu_layers_draft, split_mode=split, tensor_split=tensor_split,
        main_gpu=cfg.main_gpu, override_tensor=cfg.override_tensor_draft, cpu_moe=cfg.cpu_moe_draft,
        n_cpu_moe=cfg.n_cpu_moe_draft, devices=cfg.devices_draft or cfg.devices, rpc=cfg.rpc,
        repack=cfg.repack, no_host=cfg.no_host, load_mode=cfg.load_mode,
        no_kv_offload=cfg.no_kv_offload, spec_types=cfg.spec_types)


def _draft_split(lay: PlanLayout) -> tuple[float, ...]:
    """The -ts the draft model is split by. --fit writes the layers it gives each device into the
    main params' tensor_split in place (common/common.cpp:1261 passes params.tensor_split,
    common/fit.cpp:556), and the server derives the draft's params from those after fitting
    (tools/server/server-context.cpp:1208, 1242; common/speculative.cpp:2531 copies them): the
    loaded draft follows fit's split. fit itself measured the draft at the user's -ts (its params
    were copied before fitting, common/common.cpp:1244-1258), so a dry run keeps that one."""
    return (lay.base_cfg if lay.dry_run else lay.cfg).tensor_split


def _draft_kv(lay: PlanLayout, d: ModelSpec, placement: M.Placement, d_names: tuple[str, ...],
              index: dict[str, int]) -> list[Entry]:
    """The draft's KV follows its layers, n_ctx cells per layer (-ctkd/-ctvd)."""
    cfg, ctx = lay.base_cfg, lay.ctx
    out = []
    for j in range(-1, len(d_names)):
        # an MTP sidecar (the 307K-context MTP field report's (tests/fixtures/seeds/004_d9cc8479c3afbc2e.txt)
        # --model-draft mtp-*.gguf) has only its nextn blocks: only they get KV cells (build 11434's log:
        # "1 layers" for a 1-nextn sidecar)
        sel = [ly for ly in d.layers if ly.kind != "recurrent" and (ly.nextn or not d.mtp_sidecar)
               and ((placement.layer_dev[ly.index] if not cfg.no_kv_offload else -1) == j)]
        if not sel:
            continue
        b = sum(M.kv_bytes_per_cell(ly, cfg.cache_type_k_draft, cfg.cache_type_v_draft) for ly in sel) * ctx.n_ctx
        out.append(entry(index[d_names[j]] if j >= 0 else HOST, "draft", b,
                         _("draft KV: {n} layer(s) x n_ctx {n_ctx} ({flags})").format(
                             n=len(sel), n_ctx=ctx.n_ctx,
                             flags=f"-ctkd {cfg.cache_type_k_draft} / -ctvd {cfg.cache_type_v_draft}")))
    return out


def estimate_draft_model(lay: PlanLayout) -> DraftEstimate:
    """A separate draft model (-md): its own layer placement from -ngld, -devd (default: follows
    -dev), -otd/-cmoed/-ncmoed, and the user's -ts/-sm/-mg (common/speculative.cpp:2536-2551).
    Its KV follows its layers, n_ctx cells per layer (-ctkd/-ctvd)."""
    d = lay.inp.draft
    if d is None:
        return DraftEstimate(Contribution(), (0,) * lay.n_dev)
    cfg, ctx, gpu_names = lay.base_cfg, lay.ctx, lay.gpu_names
    dcfg = _draft_cfg(cfg, _draft_split(lay))
    devs = devices(lay.hw, dcfg)
    index = {n: i for i, n in enumerate(gpu_names)}
    missing = [n for n in devs.names if n not in index]
    if missing:
        raise InputError(_("-devd {devices_draft}: the draft would use {missing}, which the main model does not use "
                           "({gpu_names}); plan shows only the main model's devices (add them to -dev)").format(devices_draft=','.join(cfg.devices_draft), missing=', '.join(missing), gpu_names=', '.join(gpu_names) or 'CPU only'))
    placement = M.place_layers(d, dcfg, devs.names, devs.free)
    ws = M.split_weights(d, dcfg, placement, [g.buffer_backend in ("CUDA", "ROCm") for g in devs.gpus])
    how = (f"-ngld {dcfg.n_gpu_layers if dcfg.n_gpu_layers >= 0 else 'auto'}"
           + (f", -devd {','.join(cfg.devices_draft)}" if cfg.devices_draft else "")
           + (", -otd/-cmoed/-ncmoed" if dcfg.override_tensor or dcfg.cpu_moe or dcfg.n_cpu_moe else ""))
    on_dev = [0] * len(gpu_names)
    out: list[Entry] = []
    for j, name in enumerate(devs.names):
        on_dev[index[name]] += ws.per_device[j]
        n_l = sum(1 for x in placement.layer_dev if x == j)
        if ws.per_device[j]:
            out.append(entry(index[name], "draft", ws.per_device[j], _("draft model weights {path}: {n} layer(s) "
                                                                       "({how})").format(path=d.path, n=n_l, how=how)))
    if ws.host:
        hw_line = host_weights(d, dcfg, placement, ws.host, devs.gpus, lay.cpu, uses_mmap(dcfg),
                               _("draft model weights {path} kept on the CPU (token embeddings, {n} layer(s); "
                                 "{how})").format(path=d.path, n=sum(1 for x in placement.layer_dev if x < 0), how=how))
        out.append(entry(HOST, "draft", hw_line.bytes, hw_line.formula))
    out += _draft_kv(lay, d, placement, devs.names, index)
    # the draft model's own llama_context reserves its compute buffer like the target's (the
    # server creates it even without --spec-type; seen in build 11434's -lv 4 log: a second
    # "sched_reserve: ... compute buffer size"), on the device of its first offloaded layer
    # RPC servers, CUDA GPUs or the CPU: its graph replayed on its own devices (plan/compute/buffers.py)
    pp = pipeline_parallel(
        n_devices=len(devs.gpus), n_gpu_layers=placement.n_gpu_layers, n_layer_all=len(d.layers),
        split_mode=dcfg.split_mode, offload_kqv=not cfg.no_kv_offload,
        tensor_overrides=bool(dcfg.override_tensor or dcfg.cpu_moe or dcfg.n_cpu_moe),
        backends=tuple(g.backend for g in devs.gpus))
    rb = replayed_buffers(d, ctx, ctx.n_parallel, placement=placement, gpus=devs.gpus,
                          overrides=M.tensor_overrides(d, dcfg, placement.devices), n_copies=pp.n_copies,
                          full_offload=dcfg.n_gpu_layers < 0 or dcfg.n_gpu_layers > d.n_layer,
                          cache_types=(cfg.cache_type_k_draft, cfg.cache_type_v_draft), mtp=d.mtp_sidecar,
                          split_mode=dcfg.split_mode, kv_on_cpu=cfg.no_kv_offload, dry_run=lay.dry_run,
                          op_offload=cfg.op_offload)
    diags = _unused(cfg)
    if rb is not None:
        out += replayed_entries(rb, devs.names, "draft", _("draft model context compute: "),
                                device=lambda i: index[devs.names[i]] if i >= 0 else HOST)
        return DraftEstimate(Contribution(tuple(out), diags), tuple(on_dev))
    gpu_js = [j for j in range(len(devs.names)) if any(x == j for x in placement.layer_dev)]
    dest = estimate_compute(d, ctx, ctx.n_parallel, layers="mtp" if d.mtp_sidecar else "main",
                            gpu=bool(gpu_js) and d.mtp_sidecar,
                            cache_types=(cfg.cache_type_k_draft, cfg.cache_type_v_draft))
    out.append(entry(index[devs.names[gpu_js[0]]] if gpu_js else HOST, "draft", dest.bytes,
                     _("draft model context compute: ") + dest.formula, dest.method if not gpu_js else "modelled"))
    return DraftEstimate(Contribution(tuple(out), diags), tuple(on_dev))


def _unused(cfg: ServerConfig) -> tuple[Diagnostic, ...]:
    """-md without a draft-* --spec-type: llama-server loads the draft model and creates its
    context (what a device must hold while loading, so the plan counts it), finds no speculative
    implementation (common/speculative.cpp:2785-2787) and frees both (tools/server/
    server-context.cpp:1406-1412; seen on the RPC rig: every draft buffer freed after loading)."""
    if any(t.startswith("draft-") for t in cfg.spec_types):
        return ()
    return (warning(DRAFT_UNUSED, _(
        "-md without --spec-type: llama-server loads the draft model and its context, then frees them unused "
        "(no speculative implementation, common/speculative.cpp:2785-2787, server-context.cpp:1406-1412); the "
        "plan counts them, as loading needs the memory; add --spec-type draft-simple to decode with the draft")),)
