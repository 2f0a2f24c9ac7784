"""Combinations: options that are fine alone but change or undo each other (cache reuse with an
mmproj, KV types with flash attention, batch sizes, slots and the context, threads with full
offload, the MTP draft's KV types), and options restated at their default. One function per rule
family; each cites the llama.cpp source its verdict comes from."""

from __future__ import annotations

import math

from llamarig.flags.argv import fa_mode, int_of, kv_unified, last_int
from llamarig.flags.findings import Finding, Fix, Severity, finding
from llamarig.flags.rules.context import Subject
from llamarig.gguf.ggml_types import CUDA_FA_KV_TYPES, CUDA_FA_VEC_PAIRS, KV_CACHE_TYPES, TYPE_SIZES
from llamarig.i18n import _

#: the quantized KV cache types (ggml_is_quantized: blocks of more than one value)
_QUANTIZED_KV = frozenset(t for t in KV_CACHE_TYPES if TYPE_SIZES[t][0] > 1)

def cache_reuse(s: Subject) -> list[Finding]:
    """cache-reuse-mmproj, cache-reuse-ge-ctx, cache-reuse-large."""
    r, k = s.reading, s.k
    c_use, n_ctx = last_int(r, "--ctx-size")
    out: list[Finding] = []
    # --cache-reuse: forced to 0 with an mmproj (tools/server/server-context.cpp) and useless
    # when >= the context (reuses only chunks of at least N tokens)
    cr = r.last("--cache-reuse")
    cr_n = int_of(cr.value) if cr else None
    mm = r.last("--mmproj")
    if cr and cr_n and cr_n > 0:
        if mm is not None:
            out.append(finding("cache-reuse-mmproj", Severity.WARNING, cr.line, cr.spelling,
                               _("`{given}` does nothing: with `--mmproj` loaded the server logs \"cache_reuse "
                                 "is not supported by multimodal, it will be disabled\" "
                                 "(server-context.cpp)").format(given=f"{cr.spelling} {cr.value}"),
                               _("remove it (or run a text-only instance without --mmproj)"), k, cr.passed,
                               Fix("drop"), cr.index))
        if n_ctx and cr_n >= n_ctx:
            out.append(finding("cache-reuse-ge-ctx", Severity.INFO if mm is not None else Severity.WARNING, cr.line, cr.spelling,
                               _("`{given}` >= context {n_ctx}: it reuses only identical runs of at least that "
                                 "many tokens, i.e. never; it is a minimum chunk size, not something to match "
                                 "to -c").format(given=f"{cr.spelling} {cr_n}", n_ctx=n_ctx),
                               _("use `{fixed}`").format(fixed=f"{cr.spelling} 256"), k,
                               cr.passed, None if mm is not None else Fix("set-value", ("256",)), cr.index))
        elif n_ctx and cr_n > 4096 and mm is None:
            out.append(finding("cache-reuse-large", Severity.INFO, cr.line, cr.spelling,
                               _("`{given}`: only chunks of >= {n} identical tokens are reused by KV shifting; "
                                 "typical values are 64-512").format(given=f"{cr.spelling} {cr_n}", n=cr_n),
                               None, k, cr.passed))
    return out


def cache_idle_slots(s: Subject) -> list[Finding]:
    """cache-idle-slots-no-ram."""
    r, k = s.reading, s.k
    out: list[Finding] = []
    # --cache-idle-slots needs --cache-ram != 0 (server-context.cpp)
    idle = r.last("--cache-idle-slots")
    cram = r.last("--cache-ram")
    if idle is not None and idle.positive and cram is not None and int_of(cram.value) == 0:
        out.append(finding("cache-idle-slots-no-ram", Severity.WARNING, idle.line, idle.spelling,
                           _("`--cache-idle-slots` needs the prompt cache, but `--cache-ram 0` disables it: "
                             "the server logs \"--cache-idle-slots requires --cache-ram, disabling\""),
                           _("give --cache-ram a size in MiB (default 8192)"), k, idle.passed))
    return out


def kv_types_flash_attention(s: Subject) -> list[Finding]:
    """quantized-v-fa-off, kv-type-no-cuda-fa, kv-pair-no-vec-kernel."""
    r, k = s.reading, s.k
    out: list[Finding] = []
    # KV types vs flash attention (src/llama-context.cpp; ggml/src/ggml-cuda/fattn.cu)
    tk_u, tv_u = r.last("--cache-type-k"), r.last("--cache-type-v")
    tk = tk_u.value if tk_u else "f16"
    tv = tv_u.value if tv_u else "f16"
    fa = fa_mode(r)
    if tv in _QUANTIZED_KV and fa == "off":
        fu = r.last("--flash-attn")
        out.append(finding("quantized-v-fa-off", Severity.ERROR, fu.line if fu else (tv_u.line if tv_u else 0),
                           fu.spelling if fu else "--flash-attn",
                           _("quantized V cache ({type}) needs flash attention, but it is off: \"quantized V "
                             "cache requires flash_attn to be enabled\" and the model fails to load "
                             "(src/llama-context.cpp)").format(type=tv),
                           _("use `-fa on` (or an f16 V cache)"), k, fu.passed if fu else True,
                           Fix("set-value", ("on",)), fu.index if fu else None))
    if tk in KV_CACHE_TYPES and tv in KV_CACHE_TYPES and fa != "off":
        if tk not in CUDA_FA_KV_TYPES or tv not in CUDA_FA_KV_TYPES:
            u = tv_u if tv not in CUDA_FA_KV_TYPES else tk_u
            bad = tv if tv not in CUDA_FA_KV_TYPES else tk
            out.append(finding("kv-type-no-cuda-fa", Severity.WARNING, u.line if u else 0, u.spelling if u else None,
                               _("on CUDA the flash-attention kernels do not support {type} K/V "
                                 "(ggml-cuda/fattn.cu): with V quantized FA is forced on, so attention runs on "
                                 "the CPU every step (very slow, not an error)").format(type=bad),
                               _("use q8_0 or q4_0 for K and V on CUDA"), k, u.passed if u else True,
                               Fix("set-value", ("q4_0",)), u.index if u else None))
        elif (tk, tv) not in CUDA_FA_VEC_PAIRS and (tk != "f16" or tv != "f16") and (tk_u or tv_u):
            u = tv_u or tk_u
            out.append(finding("kv-pair-no-vec-kernel", Severity.INFO, u.line if u else 0, u.spelling if u else None,
                               _("K={k}, V={v}: a default CUDA build compiles the decode FA kernel only for "
                                 "q4_0-q4_0, q8_0-q8_0, f16-f16, bf16-bf16 (GGML_CUDA_FA_QUANTS); other pairs "
                                 "are converted to f16 during decode (slow)").format(k=tk, v=tv),
                               _("use the same type for K and V (q8_0/q8_0 or q4_0/q4_0)"), k,
                               u.passed if u else True))
    return out


#: the slots of `-np auto` (tools/server/server.cpp:168-171: "n_parallel is set to auto, using
#: n_parallel = 4")
AUTO_SLOTS = 4


def batch_sizes(s: Subject) -> list[Finding]:
    """ubatch-gt-batch, batch-gt-ctx, batch-below-slots."""
    r, k = s.reading, s.k
    n_ctx = last_int(r, "--ctx-size")[1]
    out: list[Finding] = []
    # -ub > -b is clamped (src/llama-context.cpp: n_ubatch = min(n_batch, n_ubatch))
    b_u, ub_u = r.last("--batch-size"), r.last("--ubatch-size")
    b = int_of(b_u.value) if b_u else 2048
    ub = int_of(ub_u.value) if ub_u else 512
    if ub_u and b is not None and ub is not None and ub > b:
        out.append(finding("ubatch-gt-batch", Severity.WARNING, ub_u.line, ub_u.spelling,
                           _("`-ub {ub}` > `-b {b}`: the physical batch is silently clamped to {b} "
                             "(src/llama-context.cpp)").format(ub=ub, b=b),
                           _("use `-ub {b}` or raise -b").format(b=b), k, ub_u.passed,
                           Fix("set-value", (str(b),)), ub_u.index))
    if b_u and b and n_ctx and b > n_ctx:
        out.append(finding("batch-gt-ctx", Severity.INFO, b_u.line, b_u.spelling,
                           _("`-b {b}` > context {n_ctx}: n_batch = min(n_ctx, -b) = {n_ctx} "
                             "(src/llama-context.cpp)").format(b=b, n_ctx=n_ctx), None, k, b_u.passed))
    # one decode's outputs are capped by n_batch and must hold one per slot: below the slot
    # count the server aborts at start (checked with the pinned binary: -b 2 and -b 3 abort with
    # -np auto, -b 4 does not, nor does -b 2 -np 1); embeddings/pooling output one per sequence
    np_u, n_par = last_int(r, "--parallel")
    slots = n_par if np_u is not None and n_par is not None and n_par > 0 else AUTO_SLOTS
    embedding = r.has("--embedding") or r.has("--pooling") or r.has("--rerank")
    if b_u and b is not None and 0 < b < slots and not embedding and "$" not in (b_u.value or ""):
        why = f"`-np {n_par}`" if np_u is not None and n_par else _("`-np` auto = {n} slots").format(n=AUTO_SLOTS)
        shown = f"`{b_u.spelling} {b_u.value}`"
        if b_u.value != str(b):
            shown += _(" (read as {n}: std::stoi)").format(n=b)
        out.append(finding("batch-below-slots", Severity.ERROR, b_u.line, b_u.spelling,
                           _("{given} is below the number of slots ({why}): the server aborts at start with "
                             "GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) (src/llama-context.cpp:2275), "
                             "since one decode can output at most n_batch tokens and needs one per slot").format(
                               given=shown, why=why),
                           _("use `-b 2048` (the default)"), k, b_u.passed,
                           Fix("set-value", ("2048",)), b_u.index))
    return out


def ctx_padding(s: Subject) -> list[Finding]:
    """ctx-padded."""
    r, k = s.reading, s.k
    c_use, n_ctx = last_int(r, "--ctx-size")
    out: list[Finding] = []
    # context padding (src/llama-context.cpp: GGML_PAD(n_ctx, 256))
    if c_use and n_ctx and n_ctx > 0 and n_ctx % 256:
        padded = math.ceil(n_ctx / 256) * 256
        out.append(finding("ctx-padded", Severity.INFO, c_use.line, c_use.spelling,
                           _("`-c {n_ctx}` is rounded up to {padded} (a multiple of 256)").format(
                               n_ctx=n_ctx, padded=padded), None, k, c_use.passed))
    return out


def slot_context(s: Subject) -> list[Finding]:
    """per-slot-ctx."""
    r, k = s.reading, s.k
    ctx = s.ctx
    c_use, n_ctx = last_int(r, "--ctx-size")
    np_use, n_par = last_int(r, "--parallel")
    unified = kv_unified(r)  # auto slots -> unified (server.cpp)
    out: list[Finding] = []
    # slots partition the pool unless unified (server.cpp, llama-context.cpp)
    if n_par and n_par > 1 and n_ctx and not unified:
        per = math.ceil(n_ctx / n_par / 256) * 256
        need = ctx.need_ctx or 16384
        basis = (_("the workload needs {n} (--need-ctx)").format(n=need) if ctx.need_ctx
                 else _("below 16384, too small for agent prompts (pass --need-ctx N for your workload)"))
        sev = Severity.WARNING if per < need else Severity.INFO
        out.append(finding("per-slot-ctx", sev, np_use.line if np_use else 0, "--parallel",
                           _("`-np {n_par}` without `--kv-unified` splits `-c {n_ctx}` into {n_par} slots of "
                             "{per} tokens each (GGML_PAD(n_ctx/n_parallel, 256)); a request longer than that "
                             "fails or is truncated").format(n_par=n_par, n_ctx=n_ctx, per=per)
                           + (_("; ") + basis if sev == Severity.WARNING else ""),
                           _("add `--kv-unified` to share one pool, or raise -c") if sev == Severity.WARNING else None,
                           k, np_use.passed if np_use else True))
    if ctx.need_ctx and n_ctx and (unified or not n_par or n_par == 1) and n_ctx < ctx.need_ctx and c_use:
        out.append(finding("per-slot-ctx", Severity.WARNING, c_use.line, c_use.spelling,
                           _("`-c {n_ctx}` is below the {need} tokens the workload needs (--need-ctx)").format(
                               n_ctx=n_ctx, need=ctx.need_ctx),
                           _("use `-c {need}` or more").format(need=ctx.need_ctx), k, c_use.passed))
    return out


def split_tensor_flash_attention(s: Subject) -> list[Finding]:
    """split-tensor-fa-off."""
    r, k = s.reading, s.k
    fa = fa_mode(r)
    out: list[Finding] = []
    # --split-mode tensor needs flash attention (src/llama-context.cpp)
    sm = r.last("--split-mode")
    if sm and sm.value == "tensor" and fa == "off":
        out.append(finding("split-tensor-fa-off", Severity.ERROR, sm.line, sm.spelling,
                           _("`-sm tensor` requires flash attention: \"SPLIT_MODE_TENSOR requires flash_attn "
                             "to be enabled\", the context is not created (src/llama-context.cpp)"),
                           _("use `-fa on` (or `-sm layer`)"), k, sm.passed))
    return out


def threads_above_cores(s: Subject) -> list[Finding]:
    """threads-above-cores."""
    r, k = s.reading, s.k
    ctx = s.ctx
    out: list[Finding] = []
    # -t above physical cores with everything offloaded (common/common.cpp picks physical cores)
    t_u = r.last("--threads")
    ngl = r.last("--gpu-layers")
    full = ngl is not None and (ngl.value == "all" or (int_of(ngl.value) or 0) >= 99)
    if t_u and ctx.physical_cores and full:
        t = int_of(t_u.value)
        if t and t > ctx.physical_cores:
            n = ctx.physical_cores
            if ctx.cores_source == "this machine":
                basis = _("this machine: {n} physical cores, the machine running `llamarig check`; for the "
                          "machine the server runs on pass `--cores N`").format(n=n)
            elif ctx.cores_source == "--cores":
                basis = _("--cores {n}: the target machine has {n} physical cores").format(n=n)
            else:
                basis = _("{source}: {n} physical cores").format(source=ctx.cores_source, n=n)
            out.append(finding("threads-above-cores", Severity.WARNING, t_u.line, t_u.spelling,
                               _("`-t {t}` is more than the physical cores ({basis}) with every layer on the "
                                 "GPU: extra threads only contend (the default, -1, already uses the physical "
                                 "cores: common/common.cpp cpu_get_num_math)").format(t=t, basis=basis),
                               _("use `-t {n}` or leave -t out").format(n=n), k, t_u.passed,
                               Fix("set-value", (str(n),)), t_u.index))
    return out


def mtp_draft_kv_types(s: Subject) -> list[Finding]:
    """mtp-draft-kv-f16."""
    r, k = s.reading, s.k
    tk_u, tv_u = r.last("--cache-type-k"), r.last("--cache-type-v")
    tk = tk_u.value if tk_u else "f16"
    tv = tv_u.value if tv_u else "f16"
    out: list[Finding] = []
    # MTP draft types are not inherited (common/speculative.cpp)
    st = [v for u in r.all("--spec-type") for v in (u.value or "").split(",")]
    if "draft-mtp" in st and (tk_u or tv_u) and not (r.has("--spec-draft-type-k") or r.has("--spec-draft-type-v")):
        u = r.all("--spec-type")[-1]
        out.append(finding("mtp-draft-kv-f16", Severity.INFO, u.line, u.spelling,
                           _("the MTP draft context keeps its own KV types (-ctkd/-ctvd, default f16); "
                             "`-ctk {k} -ctv {v}` does not apply to it (common/speculative.cpp)").format(k=tk, v=tv),
                           _("add `-ctkd {k} -ctvd {v}` to shrink it").format(k=tk, v=tv), k, u.passed))
    return out


def default_values(s: Subject) -> list[Finding]:
    """default-value."""
    r, k = s.reading, s.k
    out: list[Finding] = []
    # redundant defaults
    for name, default_vals in (("--cont-batching", None), ("--predict", ("-1",))):
        u = r.last(name)
        if u is None:
            continue
        if (default_vals is None and u.positive) or (default_vals and u.value in default_vals):
            out.append(finding("default-value", Severity.INFO, u.line, u.spelling,
                               _("`{given}` is already the default").format(
                                   given=" ".join([u.spelling] + [v.text for v in u.values])),
                               None, k, u.passed))
    return out
