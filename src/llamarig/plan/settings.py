"""What the settings mean beyond the memory figures: the context each slot gets, padding, layers
left on the CPU, and flags that do nothing here (-ts, -ot, --n-cpu-moe)."""

from __future__ import annotations

import re

from llamarig.diagnostics import Diagnostic, info, warning
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.estimator import PlanLayout
from llamarig.plan.flash_attn import kv_path

#: diagnostic codes
CTX_OVER_TRAIN = "ctx-over-train"
SLOTS_AUTO = "slots-auto"
PER_SLOT_CTX = "per-slot-ctx"
CTX_PADDED = "ctx-padded"
IQ4_NL_CUDA_ATTENTION = "iq4_nl-cuda-attention"
#: layers left on the CPU by -ngl (the --fit adapter drops it when --fit chose the layers)
CPU_LAYERS = "cpu-layers"
TS_COUNT = "ts-count"
OT_NO_MATCH = "ot-no-match"
CPU_MOE_DENSE = "cpu-moe-dense"
TS_NO_GPUS = "ts-no-gpus"


def _context(lay: PlanLayout) -> list[Diagnostic]:
    spec, cfg, ctx = lay.spec, lay.cfg, lay.ctx
    out: list[Diagnostic] = []
    if ctx.n_ctx_seq > (spec.n_ctx_train or ctx.n_ctx_seq):
        out.append(warning(CTX_OVER_TRAIN, _(
            "n_ctx_seq {seq} > n_ctx_train {train}: each slot is capped at {train} tokens "
            "(server-context.cpp:1365-1368); the rest of the pool serves other slots").format(
            seq=ctx.n_ctx_seq, train=spec.n_ctx_train)))
    if cfg.n_parallel < 0:
        out.append(info(SLOTS_AUTO, _(
            "-np not set: llama-server uses 4 slots sharing one unified KV pool (server.cpp:168-173)")))
    if not cfg.kv_unified and cfg.n_parallel > 1 and ctx.n_ctx_seq < ctx.n_ctx:
        out.append(info(PER_SLOT_CTX, _("without -kvu each of the {n} slots gets only {seq} tokens of the {ctx}").format(
            n=ctx.n_parallel, seq=ctx.n_ctx_seq, ctx=ctx.n_ctx)))
    if ctx.n_ctx != M.pad(cfg.n_ctx, 256) and cfg.n_ctx:
        out.append(info(CTX_PADDED, f"n_ctx {cfg.n_ctx} -> {ctx.n_ctx} " + (
            _("(padded to 256)") if ctx.kv_unified else _("(padded to 256 and split per slot)"))))
    return out


def _placement(lay: PlanLayout) -> list[Diagnostic]:
    spec, cfg, n_dev = lay.spec, lay.cfg, lay.n_dev
    out: list[Diagnostic] = []
    if n_dev and any(g.backend == "CUDA" for g in lay.gpus) and "iq4_nl" in (cfg.cache_type_k, cfg.cache_type_v) \
            and kv_path("CUDA", cfg.cache_type_k, cfg.cache_type_v, cfg.flash_attn).kind == "cpu":
        out.append(warning(IQ4_NL_CUDA_ATTENTION, _(
            "iq4_nl KV has no CUDA flash-attention kernel: attention runs on the CPU (very slow); "
            "use q4_0 (same size) instead (ggml-cuda/fattn.cu)")))
    if n_dev and lay.placement.n_gpu_layers < spec.n_layer + 1:
        out.append(info(CPU_LAYERS, f"-ngl {cfg.n_gpu_layers}: " + _("{n} layer(s) stay on the CPU").format(
            n=spec.n_layer + 1 - lay.placement.n_gpu_layers)))
    return out


def _no_effect(lay: PlanLayout) -> list[Diagnostic]:
    spec, cfg, n_dev = lay.spec, lay.cfg, lay.n_dev
    out: list[Diagnostic] = []
    if cfg.tensor_split and len(cfg.tensor_split) != n_dev and n_dev:
        out.append(warning(TS_COUNT, _(
            "-ts has {n} value(s) for {devices} device(s): llama.cpp uses the first values in device "
            "order (missing ones count as 0)").format(n=len(cfg.tensor_split), devices=n_dev)))
    for pat, buft in cfg.override_tensor:
        # llama.cpp applies the first pattern that std::regex_search finds in a tensor's name
        # (src/llama-model-loader.cpp tensor_buft_overrides); one that finds none does nothing
        rx = re.compile(pat)
        if not any(rx.search(t.name) for t in spec.tensors):
            example = next((t.name for t in spec.tensors if t.name.startswith("blk.0.")), "blk.0.attn_q.weight")
            out.append(warning(OT_NO_MATCH, _(
                "-ot {override} matches no tensor of {path}: it has no effect (tensor names look like "
                "{example}; `llamarig inspect` lists them)").format(
                override=f"{pat}={buft}", path=spec.path, example=example)))
    if (cfg.n_cpu_moe or cfg.cpu_moe) and not spec.n_expert:
        out.append(warning(CPU_MOE_DENSE, _("--n-cpu-moe/--cpu-moe on a dense model: there are no expert tensors to move")))
    if cfg.tensor_split and not n_dev:
        out.append(info(TS_NO_GPUS, _("-ts has no effect without GPUs")))
    return out


def settings_diagnostics(lay: PlanLayout) -> tuple[Diagnostic, ...]:
    return (*_context(lay), *_placement(lay), *_no_effect(lay))
