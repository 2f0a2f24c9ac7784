"""Assemble a Plan: memory per device and host RAM, each figure with its formula."""

from __future__ import annotations

from dataclasses import dataclass, replace

from llamarig.errors import InputError
from llamarig.gguf.spec import ModelSpec
from llamarig.hardware.catalogue import GPU, Hardware
from llamarig.plan import memory as M
from llamarig.plan.catalogue import MMProjInfo
from llamarig.plan.compute import estimate_compute
from llamarig.plan.config import ServerConfig
from llamarig.plan.result import DevicePlan, HostPlan, Line, Plan
from llamarig.units import GiB, fmt_bytes

MiB = 1 << 20


@dataclass(frozen=True)
class PlanInputs:
    spec: ModelSpec
    cfg: ServerConfig
    hardware: Hardware
    mmproj: MMProjInfo | None = None
    draft: ModelSpec | None = None
    overhead_bytes: int | None = None  # per-GPU driver/context overhead override


def _devices(hw: Hardware, cfg: ServerConfig, notes: list[str]) -> tuple[list[str], list[GPU], list[int]]:
    """Devices in llama.cpp's order: RPC servers first (src/llama.cpp:275), then the local GPUs,
    filtered by -dev (names as --list-devices prints them, or 'none')."""
    names = hw.backend_names()
    gpus = list(hw.gpus)
    if cfg.devices:
        wanted = [d.upper() for d in cfg.devices]
        if wanted == ["NONE"]:
            names, gpus = [], []
        else:
            unknown = [d for d in cfg.devices if d.upper() not in {n.upper() for n in names}]
            if unknown:
                raise InputError(f"-dev {','.join(cfg.devices)}: unknown device(s) {', '.join(unknown)} "
                                 f"(the given GPUs are {', '.join(names) or 'none'})")
            # the model's device list follows the order of -dev (common/arg.cpp parse_device_list)
            pos = {n.upper(): i for i, n in enumerate(names)}
            keep = [pos[w] for w in wanted]
            names, gpus = [names[i] for i in keep], [gpus[i] for i in keep]
    if cfg.split_mode == "none" and gpus:
        # single-GPU mode keeps only the main GPU (src/llama.cpp:288-301)
        if cfg.main_gpu >= len(gpus):
            raise InputError(f"-mg {cfg.main_gpu}: invalid main GPU (devices: {', '.join(names)})")
        names, gpus = [names[cfg.main_gpu]], [gpus[cfg.main_gpu]]
    free = [g.memory_bytes for g in gpus]
    if cfg.rpc:
        guess = (sum(free) // len(free)) if free else 24 * GiB
        rpc = [GPU(id="rpc", name=f"RPC server {h}", backend="RPC", memory_bytes=0, bandwidth_gbs=None,
                   fp16_tflops=None, overhead_bytes=0, source="--rpc") for h in cfg.rpc]
        names = [f"RPC{i}[{h}]" for i, h in enumerate(cfg.rpc)] + names
        gpus = rpc + gpus
        free = [guess] * len(rpc) + free
        notes.append(f"--rpc: the RPC servers' memory is unknown here; the default split assumes "
                     f"{fmt_bytes(guess)} each (give -ts to fix it)")
    return names, gpus, free


def _mib(n: int) -> str:
    return f"{n / MiB:.2f} MiB"


def make_plan(inp: PlanInputs) -> Plan:
    """The plan for the given settings; when -c is unset and --fit is on, the context --fit
    would choose (common/fit.cpp:264-456: start at n_ctx_train x streams, then interpolate
    linearly down to --fit-ctx until every device keeps --fit-target MiB free)."""
    plan = _make_plan(inp)
    cfg = inp.cfg
    if not (cfg.fit and cfg.n_ctx == 0 and "n_ctx" not in cfg.set_flags and plan.devices
            and cfg.kv_unified_per_slot == 0 and cfg.split_mode != "tensor"):
        return plan
    n_streams = 1 if plan.kv_unified else plan.n_parallel
    margins = list(cfg.fit_target_mib) or [1024]
    margins = [m * MiB for m in margins] + [margins[-1] * MiB] * (len(plan.devices) - len(margins))

    def used(p: Plan) -> int:
        return sum(d.total - d.get("other") - d.get("mmproj") for d in p.devices)

    sum_free = sum((d.capacity or 0) - d.get("other") for d in plan.devices)
    target = sum_free - sum(margins[: len(plan.devices)]) - sum(d.get("mmproj") for d in plan.devices)
    if any(d.capacity is None for d in plan.devices) or used(plan) <= target:
        return plan
    n_max = plan.n_ctx
    n_min = cfg.fit_ctx * n_streams
    if n_max <= n_min:
        return plan
    nd = len(plan.devices)
    if nd > 1:
        per_layer = sum(d.get("weights") for d in plan.devices) // max(1, inp.spec.n_layer)
        target -= (nd + 1) * per_layer // (6 if inp.spec.n_expert else 2)
    p_min = _make_plan(replace(inp, cfg=cfg.with_(n_ctx=n_min)))
    if target <= used(p_min):
        out = p_min
        n_ctx = n_min
    else:
        n_ctx = n_min + (n_max - n_min) * (target - used(p_min)) // (used(plan) - used(p_min))
        align = 256 * n_streams
        n_ctx = max(n_ctx - n_ctx % align, n_min)
        out = _make_plan(replace(inp, cfg=cfg.with_(n_ctx=n_ctx)))
    note = (f"--fit (on by default, -c unset): context lowered from {n_max} to {n_ctx} so that each device "
            f"keeps --fit-target {cfg.fit_target_mib[0]} MiB free (common/fit.cpp linear interpolation)")
    extra = dict(out.extra, n_ctx_source=f"--fit: lowered from {n_max}")
    return replace(out, notes=(note, *out.notes), extra=extra)


def _make_plan(inp: PlanInputs) -> Plan:
    spec, cfg, hw = inp.spec, inp.cfg, inp.hardware
    warnings: list[str] = list(cfg.problems)
    notes: list[str] = []
    M.check_kv_types(spec, cfg)
    ctx = M.resolve_context(spec, cfg)
    gpu_names, gpus, split_weights_free = _devices(hw, cfg, notes)
    placement = M.place_layers(spec, cfg, gpu_names, split_weights_free)
    n_dev = len(gpus)
    # the mmproj and a draft model go to the first local GPU (RPC servers are listed first)
    first_local = next((i for i, g in enumerate(gpus) if g.backend != "RPC"), 0 if n_dev else -1)
    kv_on_gpu = not cfg.no_kv_offload

    # ---------------------------------------------------------------- per-device accumulators
    lines: list[dict[str, Line]] = [{} for _ in range(n_dev)]
    host: dict[str, Line] = {}

    def add(dev: int, comp: str, b: int, formula: str, method: str = "exact", target: dict | None = None) -> None:
        tgt = target if target is not None else (host if dev < 0 else lines[dev])
        if b == 0 and comp in tgt:
            return
        if comp in tgt:
            old = tgt[comp]
            tgt[comp] = Line(old.bytes + b, old.formula + " + " + formula,
                             old.method if old.method == method else "modelled")
        else:
            tgt[comp] = Line(b, formula, method)

    # ---------------------------------------------------------------- weights
    ws = M.split_weights(spec, cfg, placement, [g.backend in ("CUDA", "ROCm") for g in gpus])
    layers_on = [sum(1 for d in placement.layer_dev if d == i) for i in range(n_dev)]
    for i in range(n_dev):
        out_note = " + output layer" if placement.output_dev == i else ""
        add(i, "weights", ws.per_device[i],
            f"tensors of {layers_on[i]} layer(s){out_note} on {gpu_names[i]} (-ngl/-ts/-sm/-ot placement"
            + ("; quantized rows padded to 512 elements, 128 B alignment" if gpus[i].backend in ("CUDA", "ROCm") else "")
            + ")")
    mapped = M.mapped_host_bytes(spec, cfg, placement)
    mmap = cfg.load_mode in ("auto", "mmap", "mmap+mlock") and not spec.metadata.get("catalogue_nommap")
    host_w = ws.host
    host_formula = f"tensors kept on the CPU ({spec.n_layer - sum(layers_on)} layer(s), token embeddings)"
    repacked = M.repacked_host_bytes(spec, cfg, placement)
    if mmap and mapped is not None and host_w:
        host_w = mapped + repacked
        host_formula += ": mmap'd file range from the first to the end of the last CPU tensor"
    if repacked:
        host_formula += (f" (+ {_mib(repacked)} of q4_0/q4_K/iq4_nl/mxfp4 matrices repacked into resident "
                         "CPU_REPACK buffers on x86 AVX2; -nr turns this off)")
    add(-1, "weights", host_w, host_formula)
    if ws.skipped:
        notes.append(f"{fmt_bytes(ws.skipped)} of MTP (nextn) weights are not loaded without --spec-type draft-mtp")

    # ---------------------------------------------------------------- KV cache
    kvl = M.kv_layers(spec, ctx, cfg.cache_type_k, cfg.cache_type_v)
    per_tok = M.kv_bytes_per_token(spec, cfg.cache_type_k, cfg.cache_type_v, ctx.flash_attn)
    for dev in range(-1, n_dev):
        sel = [x for x in kvl if (placement.layer_dev[x.layer] if kv_on_gpu else -1) == dev]
        if not sel:
            continue
        full = [x for x in sel if x.kind == "attention"]
        swa = [x for x in sel if x.kind == "swa"]
        if full:
            b = sum(x.bytes for x in full)
            per = sum(x.bytes for x in full) // full[0].cells
            add(dev, "kv", b, f"{len(full)} attention layer(s) x {full[0].cells} cells x "
                f"{per // len(full)} B/cell (K {cfg.cache_type_k} + V {cfg.cache_type_v}) = {_mib(b)}")
        if swa:
            b = sum(x.bytes for x in swa)
            add(dev, "kv", b, f"{len(swa)} SWA layer(s) x {swa[0].cells} cells "
                f"(pad256(min(n_ctx_seq, n_swa {spec.swa_window} x {'n_seq' if ctx.kv_unified else '1'} + n_ubatch {ctx.n_ubatch})) x {ctx.n_stream} stream(s)) = {_mib(b)}")

    # ---------------------------------------------------------------- recurrent state
    rps = M.recurrent_bytes_per_seq(spec)
    if rps:
        rows = M.recurrent_rows(ctx)
        per_layer = rps // max(1, M.recurrent_layer_count(spec))
        for dev in range(-1, n_dev):
            n = sum(1 for ly in spec.layers if ly.kind == "recurrent" and not ly.nextn
                    and (placement.layer_dev[ly.index] if kv_on_gpu else -1) == dev)
            if n:
                r = spec.recurrent
                assert r is not None
                add(dev, "recurrent", per_layer * n * rows,
                    f"{n} recurrent layer(s) x 4 B x (n_embd_r {r.n_embd_r} + n_embd_s {r.n_embd_s}) x "
                    f"{rows} rows (max(1, n_seq {ctx.n_parallel}) x (1 + n_rs_seq {ctx.n_rs_seq}))")

    # ---------------------------------------------------------------- compute + output
    n_draft = cfg.spec_draft_n_max if any(t.startswith("draft-") for t in cfg.spec_types) else 0
    n_outputs_max = min(ctx.n_batch, ctx.n_parallel * (1 + n_draft))
    cuda_q = None
    if any(g.backend == "CUDA" for g in gpus) and (M.TYPE_SIZES[cfg.cache_type_k][0] > 1 or M.TYPE_SIZES[cfg.cache_type_v][0] > 1):
        cuda_q = (cfg.cache_type_k, cfg.cache_type_v)
    est = estimate_compute(spec, ctx, n_outputs_max, cuda_quant_kv=cuda_q)
    gpu_with_layers = [i for i in range(n_dev) if layers_on[i] or placement.output_dev == i]
    if gpu_with_layers:
        for i in gpu_with_layers:
            add(i, "compute", est.bytes, est.formula, "modelled")
        # op offload: matmuls whose weights stay in host memory run on the GPU for prompt
        # batches (ggml-cuda.cu get_op_batch_size >= 32; ggml-backend sched copies the weight into
        # the GPU's compute buffer). About two such copies are alive at once.
        host_mats = M.host_matrix_bytes(spec, cfg, placement)
        if host_mats and min(ctx.n_ctx, ctx.n_ubatch) >= 32:
            top = sorted(host_mats, reverse=True)[:2]
            add(gpu_with_layers[0], "compute", sum(top),
                f"op offload: 2 largest host-resident weight matrices copied in for prompt batches "
                f"({' + '.join(_mib(x) for x in top)})", "modelled")
        # the host-side compute buffer (inputs, get_rows of the CPU embeddings)
        host_c = (spec.n_embd or 0) * min(ctx.n_ctx, ctx.n_ubatch) * 4 * 2
        add(-1, "compute", host_c, "pinned host staging: 2 x n_embd x n_ubatch x 4 B", "modelled")
    else:
        add(-1, "compute", est.bytes, est.formula, "modelled")
    out_b = M.output_buffer_bytes(spec, ctx.n_parallel)
    add(-1, "output", out_b, f"logits n_vocab {spec.n_vocab} x n_seq_max {ctx.n_parallel} x 4 B")

    # ---------------------------------------------------------------- MTP draft context / draft model
    mtp = M.mtp_kv_layers(spec, ctx, cfg)
    if cfg.mtp and not spec.nextn_layers and inp.draft is None:
        warnings.append("--spec-type draft-mtp but the model has no MTP (nextn) layers: llama-server "
                        "fails with 'failed to create MTP context' (llama-context.cpp:3883-3888)")
    if mtp:
        for dev in range(-1, n_dev):
            sel = [x for x in mtp if (placement.layer_dev[x.layer] if kv_on_gpu else -1) == dev]
            if sel:
                b = sum(x.bytes for x in sel)
                tgt = None if dev >= 0 else host
                add(dev, "draft", b, f"MTP context KV: {len(sel)} nextn layer(s) x n_ctx {ctx.n_ctx} x "
                    f"(K {cfg.cache_type_k_draft} + V {cfg.cache_type_v_draft}) = {_mib(b)}", target=tgt)
        add(-1, "output", M.output_buffer_bytes(spec, ctx.n_parallel),
            "MTP context logits n_vocab x n_parallel x 4 B")
        dest = estimate_compute(spec, ctx, ctx.n_parallel, layers="mtp")
        mdev = placement.layer_dev[mtp[0].layer] if kv_on_gpu else -1
        add(mdev, "draft", dest.bytes, "MTP context compute: " + dest.formula, "modelled",
            target=host if mdev < 0 else None)
    if inp.draft is not None:
        d = inp.draft
        dev = first_local
        add(dev, "draft", d.weights_bytes, f"draft model weights {d.path}")
        dctx = ctx
        d_layers = [ly for ly in d.layers if ly.kind != "recurrent"]
        b = sum(M.kv_bytes_per_cell(ly, cfg.cache_type_k_draft, cfg.cache_type_v_draft) for ly in d_layers) * dctx.n_ctx
        add(dev, "draft", b, f"draft KV: {len(d_layers)} layer(s) x n_ctx {dctx.n_ctx} (-ctkd {cfg.cache_type_k_draft} / -ctvd {cfg.cache_type_v_draft})")

    # ---------------------------------------------------------------- mmproj
    if inp.mmproj is not None:
        mm = inp.mmproj
        dev = first_local if cfg.mmproj_offload else -1
        comp = mm.compute_fa_on if ctx.flash_attn else mm.compute_fa_off
        tgt = host if dev < 0 else None
        add(dev, "mmproj", mm.weights_bytes, f"mmproj weights ({mm.label})", "given", target=tgt)
        add(dev, "mmproj", comp, f"mmproj worst-case compute, flash attention {'on' if ctx.flash_attn else 'off'} ({mm.source})",
            "modelled", target=tgt)

    # ---------------------------------------------------------------- other: driver / context
    for i, g in enumerate(gpus):
        ov = inp.overhead_bytes if inp.overhead_bytes is not None else g.overhead_bytes
        if ov:
            add(i, "other", ov, f"{g.backend} driver/context overhead (catalogue default; --overhead to change)", "given")

    # ---------------------------------------------------------------- host RAM extras
    ckpt = 0
    ckpt_formula = ""
    if cfg.ctx_checkpoints > 0:
        if rps:
            ckpt = M.recurrent_checkpoint_bytes(spec)
            ckpt_formula = "recurrent state of one sequence + 1180 B header"
        elif ctx.swa_cells:
            ckpt = M.swa_checkpoint_bytes(spec, ctx, cfg.cache_type_k, cfg.cache_type_v)
            ckpt_formula = (f"the unmasked SWA cells of one sequence (n_swa {spec.swa_window}) x SWA layers' "
                            "K+V rows + state header")
        if ckpt and mtp:
            # the MTP draft context is a plain KV cache: PARTIAL_ONLY is ignored and the whole
            # sequence's nextn-layer KV is saved (llama-kv-cache.cpp:2071; server-context.cpp:2567)
            per_tok_mtp = sum(x.bytes // x.cells for x in mtp)
            ckpt += M.kv_state_bytes(mtp, ctx.n_ctx_slot, ctx.n_stream)
            ckpt_formula += f" + MTP context KV of the slot (up to {ctx.n_ctx_slot} tokens x {per_tok_mtp} B)"
    if ckpt:
        n_ck = cfg.ctx_checkpoints * ctx.n_parallel
        add(-1, "checkpoints", ckpt * n_ck,
            f"--ctx-checkpoints {cfg.ctx_checkpoints} x {ctx.n_parallel} slot(s) x {_mib(ckpt)} ({ckpt_formula}); worst case",
            "exact")
    if cfg.cache_ram_mib != 0:
        if cfg.cache_ram_mib < 0:
            warnings.append("--cache-ram -1: the prompt cache in host RAM has no byte limit")
        else:
            add(-1, "cache_ram", cfg.cache_ram_mib * MiB,
                f"--cache-ram {cfg.cache_ram_mib} MiB prompt cache (upper bound, filled over time)", "given")

    # ---------------------------------------------------------------- tensor parallelism
    if cfg.split_mode == "tensor" and n_dev > 1:
        # -sm tensor wraps the GPUs in one meta device and splits weights, KV and state by -ts
        # (src/llama.cpp:157-218); modelled as proportional shares
        ts = list(cfg.tensor_split[:n_dev]) if cfg.tensor_split else [float(x) for x in split_weights_free]
        ts += [ts[-1]] * (n_dev - len(ts))
        tot_ts = sum(ts) or 1.0
        for comp in ("kv", "recurrent"):
            total = sum(lines[i][comp].bytes for i in range(n_dev) if comp in lines[i])
            if not total:
                continue
            for i in range(n_dev):
                share = int(total * ts[i] / tot_ts)
                lines[i][comp] = Line(share, f"{ts[i] / tot_ts:.0%} of {_mib(total)} (-sm tensor splits it by -ts)", "modelled")

    # ---------------------------------------------------------------- devices
    dev_plans = []
    for i, g in enumerate(gpus):
        dev_plans.append(DevicePlan(gpu_names[i], g.name, g.memory_bytes or None, lines[i]))
    ram = hw.ram_bytes
    unified = [g for g in gpus if g.unified_memory]
    if unified and unified[0].system_memory_bytes:
        # Apple silicon: GPU buffers live in the same RAM; what the GPU uses is not free for the host
        system = ram or unified[0].system_memory_bytes
        ram = system - sum(dp.total for dp in dev_plans if any(g.unified_memory for g in gpus if g.name == dp.label))
        notes.append(f"unified memory: host capacity = {fmt_bytes(system)} system RAM minus what the GPU uses; "
                     "the GPU may use up to Metal's recommendedMaxWorkingSetSize (its capacity here)")
    host_plan = HostPlan(ram, host, mmap)

    # ---------------------------------------------------------------- warnings
    for dp in dev_plans:
        free = dp.free
        if free is None or dp.capacity == 0:
            continue
        if free < 0:
            warnings.append(f"{dp.name} ({dp.label}): needs {fmt_bytes(dp.total)} of {fmt_bytes(dp.capacity or 0)}: "
                            f"short by {fmt_bytes(-free)}")
        elif free < GiB:
            warnings.append(f"less than 1 GiB free on {dp.name} ({fmt_bytes(free)}): expect spill or OOM "
                            "(llama.cpp's --fit keeps 1024 MiB free by default)")
    if host_plan.free is not None and host_plan.free < 0:
        warnings.append(f"host RAM: needs {fmt_bytes(host_plan.total)} of {fmt_bytes(ram or 0)}: short by {fmt_bytes(-host_plan.free)}")
    if ctx.n_ctx_seq > (spec.n_ctx_train or ctx.n_ctx_seq):
        warnings.append(f"n_ctx_seq {ctx.n_ctx_seq} > n_ctx_train {spec.n_ctx_train}: each slot is capped at "
                        f"{spec.n_ctx_train} tokens (server-context.cpp:1365-1368); the rest of the pool serves other slots")
    if cfg.n_parallel < 0:
        notes.append("-np not set: llama-server uses 4 slots sharing one unified KV pool (server.cpp:168-173)")
    if not cfg.kv_unified and cfg.n_parallel > 1 and ctx.n_ctx_seq < ctx.n_ctx:
        notes.append(f"without -kvu each of the {ctx.n_parallel} slots gets only {ctx.n_ctx_seq} tokens of the {ctx.n_ctx}")
    if ctx.n_ctx != M.pad(cfg.n_ctx, 256) and cfg.n_ctx:
        notes.append(f"n_ctx {cfg.n_ctx} -> {ctx.n_ctx} (padded to 256{'' if ctx.kv_unified else ' and split per slot'})")
    if n_dev and any(g.backend == "CUDA" for g in gpus) and "iq4_nl" in (cfg.cache_type_k, cfg.cache_type_v) and cfg.flash_attn != "off":
        warnings.append("iq4_nl KV has no CUDA flash-attention kernel: attention runs on the CPU (very slow); "
                        "use q4_0 (same size) instead (ggml-cuda/fattn.cu)")
    if n_dev and placement.n_gpu_layers < spec.n_layer + 1:
        notes.append(f"-ngl {cfg.n_gpu_layers}: {spec.n_layer + 1 - placement.n_gpu_layers} layer(s) stay on the CPU")

    if cfg.tensor_split and len(cfg.tensor_split) != n_dev and n_dev:
        warnings.append(f"-ts has {len(cfg.tensor_split)} value(s) for {n_dev} device(s): llama.cpp uses the "
                        "first values in device order (missing ones count as 0)")
    if (cfg.n_cpu_moe or cfg.cpu_moe) and not spec.n_expert:
        warnings.append("--n-cpu-moe/--cpu-moe on a dense model: there are no expert tensors to move")
    if cfg.tensor_split and not n_dev:
        notes.append("-ts has no effect without GPUs")

    argv = ["llama-server"] + cfg.argv(cfg.model or spec.path)
    return Plan(
        model=spec.path, architecture=spec.architecture, n_ctx=ctx.n_ctx, n_ctx_seq=ctx.n_ctx_seq,
        n_ctx_slot=ctx.n_ctx_slot, n_parallel=ctx.n_parallel, kv_unified=ctx.kv_unified,
        n_batch=ctx.n_batch, n_ubatch=ctx.n_ubatch, flash_attn=ctx.flash_attn,
        cache_type_k=cfg.cache_type_k, cache_type_v=cfg.cache_type_v, kv_bytes_per_token=per_tok,
        recurrent_bytes_per_seq=rps, checkpoint_bytes=ckpt, n_rs_seq=ctx.n_rs_seq,
        devices=tuple(dev_plans), host=host_plan, command=tuple(argv), warnings=tuple(warnings),
        notes=tuple(notes), extra={"n_ctx_source": ctx.n_ctx_source},
    )
