"""Assemble a Plan: memory per device and host RAM, each figure with its formula."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from llamarig.errors import InputError
from llamarig.gguf.spec import ModelSpec
from llamarig.hardware.cpu import DEFAULT_FEATURES, CpuFeatures
from llamarig.hardware.cpu_buffers import AMX_TILE_TYPES, extra_bufts_in_list, host_weight_buffer
from llamarig.hardware.types import GPU, Hardware
from llamarig.plan import memory as M
from llamarig.plan.compute import (
    estimate_compute,
    host_pipeline_extra,
    pipeline_extra,
    pipeline_parallel,
)
from llamarig.plan.config import ServerConfig
from llamarig.plan.fit import fit
from llamarig.plan.result import DevicePlan, HostPlan, Line, Plan, PlanInputs
from llamarig.units import GiB, MiB, fmt_bytes

#: how far a bits-per-weight file size can be off: the UD-Q4_K_XL estimate of Qwen3.8-27B was
#: 4.8 % below the published file (src/llamarig/data/models.json, its source)
ESTIMATE_SPREAD = 0.06


def head_split(n: int, ts: list[float]) -> list[int]:
    """Heads per device under -sm tensor (src/llama-model.cpp:841-863): cumulative -ts shares,
    or an even split when every share is zero, each boundary rounded down to a whole head."""
    nd = len(ts)
    scan = []
    acc = 0.0
    for x in ts:
        acc += x
        scan.append(acc)
    out = []
    low = 0
    for j in range(nd - 1):
        high = n * (j + 1) // nd if scan[-1] == 0 else int(n * scan[j] / scan[-1])
        out.append(high - low)
        low = high
    out.append(n - low)
    return out


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


def effective_inputs(inp: PlanInputs, plan: Plan) -> PlanInputs:
    """``inp`` with the settings llama-server would really run after --fit (the layers and
    experts it moved, the context it chose): what the speed model should see."""
    cfg = plan.extra.get("effective_cfg")
    return replace(inp, cfg=cfg) if isinstance(cfg, ServerConfig) else inp


def make_plan(inp: PlanInputs) -> Plan:
    """The plan for the given settings, after what --fit (on by default) would change
    (common/fit.cpp): a lower context when -c is unset, and, when -ngl, -ts (several GPUs),
    -sm row and -ot/--n-cpu-moe are not given, layers (dense) or expert tensors (MoE) moved to
    the CPU until every device keeps --fit-target MiB free."""
    cfg = inp.cfg
    plan = _make_plan(inp)
    if inp.notes:
        plan = replace(plan, notes=(*inp.notes, *plan.notes))
    if not cfg.fit:
        return plan
    if cfg.split_mode == "tensor":
        note = ("-sm tensor: --fit gives up at once ('not implemented for SPLIT_MODE_TENSOR', common/fit.cpp:183-185): "
                + ("the context is not lowered (n_ctx_train is planned) and " if cfg.n_ctx == 0 else "")
                + "no layers are moved to the CPU")
        return replace(plan, notes=(*plan.notes, note))
    fo = fit(inp, plan, lambda i, base: _make_plan(i, base_cfg=base))
    if fo is None:
        return plan
    out = fo.plan
    ngl_note = f"-ngl {fo.cfg.n_gpu_layers}:"
    kept = tuple(n for n in out.notes if not n.startswith(ngl_note) or fo.cfg is cfg)
    extra = dict(out.extra, effective_cfg=fo.cfg)
    if fo.cfg.n_ctx != cfg.n_ctx:
        extra["n_ctx_source"] = f"--fit: lowered from {plan.n_ctx}"
    return replace(out, notes=(*inp.notes, *fo.notes, *[n for n in kept if n not in inp.notes]),
                   warnings=(*out.warnings, *fo.warnings), command=plan.command, extra=extra)


#: GPU backends whose device has a pinned host buffer type (ggml_backend_dev_host_buffer_type)
_HOST_BUFFER_BACKENDS = {"CUDA": "CUDA_Host", "ROCm": "ROCm_Host", "Vulkan": "Vulkan_Host", "SYCL": "SYCL_Host"}


def _gpu_host_buffer(gpus: list[GPU]) -> str | None:
    """The pinned host buffer type make_cpu_buft_list puts first (src/llama-model.cpp:1101-1109)."""
    return next((_HOST_BUFFER_BACKENDS[g.backend] for g in gpus if g.backend in _HOST_BUFFER_BACKENDS), None)


def amx_tile_types(spec: ModelSpec, cfg: ServerConfig, placement: M.Placement, cpu: CpuFeatures,
                   host_w: Line) -> list[str]:
    """The quantized weight types the plan puts in the AMX buffer (they run AMX tile kernels)."""
    if not any(name == "AMX" and b for name, b in host_w.parts):
        return []
    found = set()
    for t in M._host_tensors(spec, cfg, placement):
        ch = host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu, extra_bufts=True)
        if ch.buffer == "AMX" and t.ggml_type.lower() in AMX_TILE_TYPES:
            found.add(t.ggml_type.lower())
    return sorted(found)


def _host_weights(spec: ModelSpec, cfg: ServerConfig, placement: M.Placement, host_bytes: int, gpus: list[GPU],
                  cpu: CpuFeatures, mmap: bool, what: str) -> Line:
    """Host-resident weights per CPU buffer type (hardware/cpu_buffers.py has the rules):
    the default buffer (CPU_Mapped with mmap, else the GPU's pinned host buffer or CPU) plus
    what llama.cpp copies into AMX / CPU_REPACK."""
    gpu_host = None if cfg.no_host else _gpu_host_buffer(gpus)
    extra = extra_bufts_in_list(repack=cfg.repack, no_host=cfg.no_host, has_gpu_host_buffer=gpu_host is not None)
    bufs = M.host_weight_buffers(spec, cfg, placement, cpu, extra)
    moved_file = sum(f for _, f in bufs.values())
    mapped = M.mapped_host_bytes(spec, cfg, placement, cpu, extra) if mmap else None
    formula = what
    if mmap and mapped is not None:
        default = mapped
        formula += ": mmap'd file range from the first to the end of the last tensor left in it"
    elif mmap:
        default = host_bytes - moved_file
    else:
        default = sum(-(-(t.n_bytes) // 32) * 32 for t in M._host_tensors(spec, cfg, placement)
                      if not host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu,
                                                extra_bufts=extra).buffer)
        formula += f", read into an allocated buffer (--load-mode {cfg.load_mode}; 32 B aligned per tensor)"
    default_name = "CPU_Mapped" if mmap else (gpu_host or "CPU")
    parts: list[tuple[str, int]] = [(default_name, default)] if default or not bufs else []
    for name in ("AMX", "CPU_REPACK"):
        if name in bufs:
            b, f = bufs[name]
            parts.append((name, b))
            why = ("q4_0/q4_1/q8_0/q4_K/q5_K/q6_K/iq4_xs/f16 matrices with rows a multiple of 32, packed for AMX "
                   "(ggml-cpu/amx/amx.cpp, mmq.cpp)" if name == "AMX" else
                   "matrices repacked into interleaved blocks (ggml-cpu/repack.cpp)")
            formula += f" + {name} {_mib(b)}: {why}, copied out of the file ({_mib(f)} there)"
    if bufs:
        formula += "; -nr/--no-repack keeps them in " + default_name
    return Line(sum(b for _, b in parts), formula, "exact", tuple(parts))


def _place_draft(inp: PlanInputs, user_cfg: ServerConfig, ctx: M.ContextLayout, gpu_names: list[str],
                 add: Callable[..., None]) -> list[int]:
    """A separate draft model (-md): its own layer placement from -ngld, -devd (default: follows
    -dev), -otd/-cmoed/-ncmoed, and the user's -ts/-sm/-mg (common/speculative.cpp:2536-2551:
    the draft's params are a copy of the main ones with those fields replaced; a single -devd
    device forces -sm layer). Its KV follows its layers, n_ctx cells per layer (-ctkd/-ctvd)."""
    d = inp.draft
    assert d is not None
    cfg = user_cfg
    split = cfg.split_mode if len(cfg.devices_draft) != 1 else "layer"
    dcfg = ServerConfig(
        n_gpu_layers=cfg.n_gpu_layers_draft, split_mode=split, tensor_split=cfg.tensor_split,
        main_gpu=cfg.main_gpu, override_tensor=cfg.override_tensor_draft, cpu_moe=cfg.cpu_moe_draft,
        n_cpu_moe=cfg.n_cpu_moe_draft, devices=cfg.devices_draft or cfg.devices, rpc=cfg.rpc,
        repack=cfg.repack, no_host=cfg.no_host, load_mode=cfg.load_mode,
        no_kv_offload=cfg.no_kv_offload, spec_types=cfg.spec_types)
    d_names, d_gpus, d_free = _devices(inp.hardware, dcfg, [])
    index = {n: i for i, n in enumerate(gpu_names)}
    missing = [n for n in d_names if n not in index]
    if missing:
        raise InputError(f"-devd {','.join(cfg.devices_draft)}: the draft would use {', '.join(missing)}, which the "
                         f"main model does not use ({', '.join(gpu_names) or 'CPU only'}); plan shows only the "
                         "main model's devices (add them to -dev)")
    placement = M.place_layers(d, dcfg, d_names, d_free)
    ws = M.split_weights(d, dcfg, placement, [g.backend in ("CUDA", "ROCm") for g in d_gpus])
    how = (f"-ngld {dcfg.n_gpu_layers if dcfg.n_gpu_layers >= 0 else 'auto'}"
           + (f", -devd {','.join(cfg.devices_draft)}" if cfg.devices_draft else "")
           + (", -otd/-cmoed/-ncmoed" if dcfg.override_tensor or dcfg.cpu_moe or dcfg.n_cpu_moe else ""))
    on_dev = [0] * len(gpu_names)
    for j, name in enumerate(d_names):
        on_dev[index[name]] += ws.per_device[j]
        n_l = sum(1 for x in placement.layer_dev if x == j)
        if ws.per_device[j]:
            add(index[name], "draft", ws.per_device[j], f"draft model weights {d.path}: {n_l} layer(s) ({how})")
    if ws.host:
        cpu = inp.hardware.cpu or DEFAULT_FEATURES
        mmap = dcfg.load_mode in ("auto", "mmap", "mmap+mlock") and not d.metadata.get("catalogue_nommap")
        hw_line = _host_weights(d, dcfg, placement, ws.host, d_gpus, cpu, mmap,
                                f"draft model weights {d.path} kept on the CPU (token embeddings, "
                                f"{sum(1 for x in placement.layer_dev if x < 0)} layer(s); {how})")
        add(-1, "draft", hw_line.bytes, hw_line.formula)
    for j in range(-1, len(d_names)):
        # an MTP sidecar (the 307K-context MTP field report's (tests/fixtures/seeds/004_d9cc8479c3afbc2e.txt) --model-draft mtp-*.gguf) has only its nextn blocks: only
        # they get KV cells (build 11434's log: "1 layers" for a 1-nextn sidecar)
        sel = [ly for ly in d.layers if ly.kind != "recurrent" and (ly.nextn or not d.mtp_sidecar)
               and ((placement.layer_dev[ly.index] if not cfg.no_kv_offload else -1) == j)]
        if not sel:
            continue
        b = sum(M.kv_bytes_per_cell(ly, cfg.cache_type_k_draft, cfg.cache_type_v_draft) for ly in sel) * ctx.n_ctx
        add(index[d_names[j]] if j >= 0 else -1, "draft", b,
            f"draft KV: {len(sel)} layer(s) x n_ctx {ctx.n_ctx} (-ctkd {cfg.cache_type_k_draft} / -ctvd {cfg.cache_type_v_draft})")
    # the draft model's own llama_context reserves its compute buffer like the target's (the
    # server creates it even without --spec-type; seen in build 11434's -lv 4 log: a second
    # "sched_reserve: ... compute buffer size"), on the device of its first offloaded layer
    gpu_js = [j for j in range(len(d_names)) if any(x == j for x in placement.layer_dev)]
    dest = estimate_compute(d, ctx, ctx.n_parallel, layers="mtp" if d.mtp_sidecar else "main",
                            gpu=bool(gpu_js) and d.mtp_sidecar)
    add(index[d_names[gpu_js[0]]] if gpu_js else -1, "draft", dest.bytes,
        "draft model context compute: " + dest.formula, "modelled")
    return on_dev


def _make_plan(inp: PlanInputs, base_cfg: ServerConfig | None = None) -> Plan:
    """One plan for exactly these settings. ``base_cfg``: the user's settings when ``inp.cfg`` is
    a --fit trial (the draft model keeps the user's -ts, fit.cpp changes only the main model)."""
    spec, cfg, hw = inp.spec, inp.cfg, inp.hardware
    # what the header reader found (unknown architecture, missing keys); a catalogue entry's
    # provenance is shown as its source, not as a warning
    warnings: list[str] = [w for w in spec.warnings if not w.startswith("catalogue entry:")]
    warnings += list(cfg.problems)
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
    cpu = hw.cpu or DEFAULT_FEATURES
    mmap = cfg.load_mode in ("auto", "mmap", "mmap+mlock") and not spec.metadata.get("catalogue_nommap")
    host_w = _host_weights(spec, cfg, placement, ws.host, gpus, cpu, mmap,
                           f"tensors kept on the CPU ({spec.n_layer - sum(layers_on)} layer(s), token embeddings)")
    host["weights"] = host_w
    if not n_dev or cfg.no_host:
        notes.append(f"CPU buffer types (AMX, CPU_REPACK) planned for {cpu.describe()}")
    if cpu.has("KLEIDIAI") and (not n_dev or cfg.no_host) and cfg.repack:
        warnings.append("a KleidiAI build (GGML_CPU_KLEIDIAI): its KLEIDIAI buffer type comes before CPU_REPACK "
                        "(ggml-cpu/ggml-cpu.cpp:58-62) and is not modelled; host weights may differ")
    tiles = amx_tile_types(spec, cfg, placement, cpu, host_w)
    if tiles:
        warnings.append(
            f"{', '.join(tiles)} matrices go to the AMX buffer and run llama.cpp's AMX tile kernels for "
            "prompts of more than one token (ggml-cpu/amx/mmq.cpp ggml_backend_amx_mul_mat); that path crashed "
            "with SIGSEGV in warm-up on an AMX Xeon for llamarig's synthetic q8_0/q4_0 models and in "
            "https://github.com/ggml-org/llama.cpp/issues/20824 (f16 takes AVX-512 kernels and did not). "
            "If llama-server crashes there, --no-repack keeps these weights out of AMX")
    if ws.host and n_dev and not cfg.no_host and cfg.repack and _gpu_host_buffer(gpus) and any(
            host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu, extra_bufts=True).buffer
            for t in M._host_tensors(spec, cfg, placement)):
        notes.append("host weights stay in the GPU's host buffer, not CPU_REPACK/AMX: with a GPU, llama.cpp puts "
                     "the pinned host buffer ahead of the CPU's extra buffer types (src/llama-model.cpp:1101-1128); "
                     "--no-host lets the CPU repack them for faster CPU matmuls")
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
    # several GPUs, everything offloaded, layer split: the scheduler keeps 4 copies of each
    # stage's inputs (llama-context.cpp:431-457, GGML_SCHED_MAX_COPIES; plan/compute.py)
    pp = pipeline_parallel(
        n_devices=n_dev, n_gpu_layers=placement.n_gpu_layers, n_layer_all=len(spec.layers),
        split_mode=cfg.split_mode, offload_kqv=not cfg.no_kv_offload,
        tensor_overrides=bool(cfg.override_tensor or cfg.cpu_moe or cfg.n_cpu_moe or cfg.n_cpu_ffn),
        backends=tuple(g.backend for g in gpus))
    if n_dev > 1:
        notes.append(pp.reason)
    if gpu_with_layers:
        for i in gpu_with_layers:
            add(i, "compute", est.bytes, est.formula, "modelled")
            x = pipeline_extra(spec, ctx, n_outputs_max, pp, first=(i == gpu_with_layers[0]),
                               output=(placement.output_dev == i))
            if x.bytes:
                add(i, "compute", x.bytes, x.formula, "modelled")
        hx = host_pipeline_extra(spec, ctx, n_outputs_max, pp)
        if hx.bytes:
            add(-1, "compute", hx.bytes, hx.formula, "modelled")
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
    add(-1, "output", out_b, f"logits n_vocab {spec.n_vocab if spec.n_vocab is not None else '?'} x n_seq_max {ctx.n_parallel} x 4 B")

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
        mdev = placement.layer_dev[mtp[0].layer] if kv_on_gpu else -1
        dest = estimate_compute(spec, ctx, ctx.n_parallel, layers="mtp", gpu=mdev >= 0)
        add(mdev, "draft", dest.bytes, "MTP context compute: " + dest.formula, "modelled",
            target=host if mdev < 0 else None)
    draft_w = [0] * n_dev
    if inp.draft is not None:
        draft_w = _place_draft(inp, base_cfg or cfg, ctx, gpu_names, add)

    # ---------------------------------------------------------------- mmproj
    if inp.mmproj is not None:
        mm = inp.mmproj
        dev = first_local if cfg.mmproj_offload else -1
        mm_compute = mm.compute_fa_on if ctx.flash_attn else mm.compute_fa_off
        tgt = host if dev < 0 else None
        add(dev, "mmproj", mm.weights_bytes, f"mmproj weights ({mm.label})", "given", target=tgt)
        add(dev, "mmproj", mm_compute, f"mmproj worst-case compute, flash attention {'on' if ctx.flash_attn else 'off'} ({mm.source})",
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
        # -sm tensor wraps the GPUs in one meta device and splits every tensor along its head axis
        # (src/llama-model.cpp:831-866): device j gets heads [high(j-1), high(j)) with
        # high(j) = n * scan(ts)[j] / scan(ts)[-1], or n * (j+1) / n_dev when -ts is unset or all
        # zero (an even split, whatever the VRAM), rounded down to whole heads
        ts = list(cfg.tensor_split[:n_dev]) + [0.0] * max(0, n_dev - len(cfg.tensor_split))
        rec = spec.recurrent
        heads = {"kv": max((ly.n_head_kv for ly in spec.layers if ly.kind != "recurrent"), default=1),
                 "recurrent": rec.time_step_rank if rec is not None and rec.time_step_rank else 1}
        for comp in ("kv", "recurrent"):
            total = sum(lines[i][comp].bytes for i in range(n_dev) if comp in lines[i])
            if not total:
                continue
            shares = head_split(heads[comp], ts)
            how = "-ts" if any(ts) else "an even split (-ts unset)"
            for i in range(n_dev):
                b = total * shares[i] // heads[comp]
                lines[i][comp] = Line(b, f"{shares[i]} of {heads[comp]} heads of {_mib(total)} (-sm tensor splits by "
                                         f"heads, {how}; llama-model.cpp:831-866)", "exact")
        for i in range(n_dev):
            if "weights" in lines[i]:
                w = lines[i]["weights"]
                lines[i]["weights"] = Line(w.bytes, f"a share of every offloaded matrix (-sm tensor splits each tensor "
                                                    f"across the GPUs by -ts, evenly when unset){w.formula[w.formula.find(' ('):] if ' (' in w.formula else ''}",
                                           w.method, w.parts)

    # ---------------------------------------------------------------- estimated file sizes
    size_source = str(spec.metadata.get("size_source", ""))
    if spec.metadata.get("catalogue") and not size_source.startswith("estimated"):
        # a published file size, spread over the tensors by parameter count (catalogue.build_spec)
        for tgt in [*lines, host]:
            wline = tgt.get("weights")
            if wline is not None and wline.bytes:
                how = ("tensor bytes from their catalogue types, which add up to the published file size"
                       if "tensor bytes from their types" in size_source else
                       "the published file size spread over the tensors by parameter count")
                tgt["weights"] = Line(wline.bytes, wline.formula + f" (catalogue: {how})", "modelled", wline.parts)
    if size_source.startswith("estimated"):
        # a catalogue size from bits per weight, not a published byte count: +-ESTIMATE_SPREAD
        for tgt in [*lines, host]:
            wline = tgt.get("weights")
            if wline is not None:
                tgt["weights"] = Line(wline.bytes, wline.formula + f" (file size {size_source}; +-{ESTIMATE_SPREAD:.0%})",
                                      "estimated", wline.parts, ESTIMATE_SPREAD)

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
    fs = host_plan.free_at_start
    if fs is not None and fs < 0:
        warnings.append(f"host RAM: needs {fmt_bytes(host_plan.start_total)} at start of {fmt_bytes(ram or 0)}: "
                        f"short by {fmt_bytes(-fs)}")
    elif host_plan.free is not None and host_plan.free < 0:
        ck = host_plan.lines.get("checkpoints")
        warnings.append(f"host RAM fits at start ({fmt_bytes(host_plan.start_total)} of {fmt_bytes(ram or 0)}) but can "
                        f"grow to {fmt_bytes(host_plan.total)} over long sessions"
                        + (f" ({ck.formula.split(';')[0]})" if ck else "")
                        + ": lower --ctx-checkpoints or --cache-ram to bound it")
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
    for pat, buft in cfg.override_tensor:
        # llama.cpp applies the first pattern that std::regex_search finds in a tensor's name
        # (src/llama-model-loader.cpp tensor_buft_overrides); one that finds none does nothing
        rx = re.compile(pat)
        if not any(rx.search(t.name) for t in spec.tensors):
            example = next((t.name for t in spec.tensors if t.name.startswith("blk.0.")), "blk.0.attn_q.weight")
            warnings.append(f"-ot {pat}={buft} matches no tensor of {spec.path}: it has no effect (tensor names look "
                            f"like {example}; `llamarig inspect` lists them)")
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
        notes=tuple(notes), extra={"n_ctx_source": ctx.n_ctx_source, "cpu": cpu.to_json(),
                                   # mb.model per device as fit.cpp sums it (draft model included)
                                   "fit_model_bytes": [ws.per_device[i] + draft_w[i] for i in range(n_dev)]},
    )
