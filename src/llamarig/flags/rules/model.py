"""Rules that need the model: its GGUF header (``-m``, or ``check --model``), read by
llamarig.flags.model into ``Context.model_spec``. A GGUF that is there but cannot be read is
itself a finding (model-unreadable); without a model the other rules here stay silent."""

from __future__ import annotations

import math

from llamarig.flags.argv import int_of, kv_unified, last_int
from llamarig.flags.findings import Finding, Fix, Severity, finding
from llamarig.flags.rules.context import Subject
from llamarig.hardware.cpu_buffers import AMX_TILE_TYPES, host_weight_buffer
from llamarig.hardware.telemetry import nvidia_smi
from llamarig.i18n import _


def model_unreadable(s: Subject) -> list[Finding]:
    """model-unreadable: the GGUF file given is there but its header cannot be read (truncated,
    not a GGUF...), so the rules that need the model are skipped."""
    ctx, r = s.ctx, s.reading
    if ctx.model_error is None:
        return []
    path = ctx.model_path or _("the model")
    err = ctx.model_error.removeprefix(f"{path}: ")
    u = r.last("--model")
    return [finding("model-unreadable", Severity.WARNING, u.line if u else s.inv.line, u.spelling if u else None,
                    _("`{path}` cannot be read as a GGUF ({err}): the checks that need the model (MTP layers, "
                      "training context, AMX, cache shifting) are skipped").format(path=path, err=err),
                    _("point -m at a complete GGUF file (a download may have stopped early)"), s.k,
                    u.passed if u else True)]


def mtp_without_nextn(s: Subject) -> list[Finding]:
    """mtp-without-nextn."""
    r, k, spec = s.reading, s.k, s.ctx.model_spec
    if spec is None:
        return []
    st = [v for u in r.all("--spec-type") for v in (u.value or "").split(",")]
    if "draft-mtp" in st and not r.has("--spec-draft-model") and getattr(spec, "nextn_layers", 0) == 0:
        u = r.all("--spec-type")[-1]
        return [finding("mtp-without-nextn", Severity.ERROR, u.line, u.spelling,
                        _("`--spec-type draft-mtp` but {path} has no MTP (nextn) layers: \"context type MTP "
                          "requested but model doesn't contain MTP layers\", the server fails to load "
                          "(src/llama-context.cpp, server-context.cpp)").format(path=spec.path),
                        _("remove `--spec-type draft-mtp` or use a GGUF with nextn layers"), k, u.passed,
                        Fix("drop"), u.index)]
    return []


def slot_ctx_above_train(s: Subject) -> list[Finding]:
    """slot-ctx-above-train."""
    r, k, spec = s.reading, s.k, s.ctx.model_spec
    if spec is None:
        return []
    c_use, n_ctx = last_int(r, "--ctx-size")
    n_par = last_int(r, "--parallel")[1]
    unified = kv_unified(r)
    train = getattr(spec, "n_ctx_train", None)
    if n_ctx and train:
        per = n_ctx if unified or not n_par else math.ceil(n_ctx / n_par / 256) * 256
        per = math.ceil(per / 256) * 256
        if per > train:
            return [finding("slot-ctx-above-train", Severity.WARNING, c_use.line if c_use else 0, "--ctx-size",
                            _("per-slot context {per} > the model's training context {train}: each slot is "
                              "capped at n_ctx_train (\"the slot context exceeds the training context of the "
                              "model - capping\", server-context.cpp) while KV is still allocated for the "
                              "whole -c").format(per=per, train=train),
                            _("use `-c {n}` or add RoPE scaling on purpose").format(
                                n=train * (n_par or 1) if not unified else train), k, c_use.passed if c_use else True)]
    return []


def amx_tile_crash(s: Subject) -> list[Finding]:
    """amx-tile-crash: on a CPU with AMX, a native llama-server build puts quantized matrices
    into the AMX buffer when they stay on the CPU (no GPU, -ngl 0, -dev none, --no-host); their
    AMX tile kernels crashed in warm-up on an AMX Xeon (docs/plan.md "CPU buffer types")."""
    r, k, spec = s.reading, s.k, s.ctx.model_spec
    if spec is None:
        return []
    repack = r.last("--repack")
    if repack is not None and not repack.positive:
        return []
    ngl = r.last("--gpu-layers")
    dev = r.last("--device")
    by_flags = (ngl is not None and int_of(ngl.value) == 0) or (dev is not None and (dev.value or "").lower() == "none") \
        or r.has("--no-host")
    # without a flag that keeps the weights on the CPU, this machine decides: no GPU here (no
    # nvidia-smi) and no target GPU given (`check --gpu`)
    no_gpu_here = not by_flags and not s.ctx.gpus and nvidia_smi() is None
    if not (by_flags or no_gpu_here):
        return []
    cpu = s.cpu()
    if cpu is None or not cpu.amx:
        return []
    types = sorted({t.ggml_type.lower() for t in getattr(spec, "tensors", ())
                    if t.ggml_type.lower() in AMX_TILE_TYPES
                    and host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu, extra_bufts=True).buffer == "AMX"})
    if not types:
        return []
    u = r.last("--model")
    where = _("this machine (the one running `llamarig check`; CPU features from {source})").format(
        source=cpu.source)
    why = "" if by_flags else _("; it has no GPU (no nvidia-smi) and none was given with --gpu, so the weights "
                                "stay on the CPU")
    return [finding("amx-tile-crash", Severity.WARNING, u.line if u else 0, u.spelling if u else None,
                    _("the CPU of {where} has AMX{why}: a native llama-server build puts the model's {types} "
                      "matrices into the AMX buffer, whose tile kernels crashed with SIGSEGV in warm-up on an "
                      "AMX Xeon (ggml-cpu/amx/mmq.cpp; https://github.com/ggml-org/llama.cpp/issues/20824)").format(
                        where=where, why=why, types=", ".join(types)),
                    _("if llama-server crashes at start, add `--no-repack` (keeps the weights out of AMX)"), k,
                    u.passed if u else True)]


def cache_reuse_no_shift(s: Subject) -> list[Finding]:
    """cache-reuse-no-shift."""
    r, k, spec = s.reading, s.k, s.ctx.model_spec
    if spec is None:
        return []
    cr = r.last("--cache-reuse")
    if cr and (int_of(cr.value) or 0) > 0 and not r.has("--mmproj"):
        arch = getattr(spec, "architecture", "")
        if arch in ("qwen35", "qwen35moe", "qwen2vl", "qwen3vl", "qwen3vlmoe") or getattr(spec, "swa_window", None):
            return [finding("cache-reuse-no-shift", Severity.WARNING, cr.line, cr.spelling,
                            _("`{flag}` is disabled for {arch}: its memory cannot be shifted (M-RoPE/IMRoPE or "
                              "sliding-window cache; server-context.cpp, llama-kv-cache.cpp)").format(
                                flag=cr.spelling, arch=arch),
                            _("remove it"), k, cr.passed, Fix("drop"), cr.index)]
    return []
