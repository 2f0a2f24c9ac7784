"""Facts about flags that the help text does not carry: folklore flags (what people type, what
they meant, how to get it in this build), KV type spellings, environment variables llama.cpp
still reads. Each entry names where the fact comes from."""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.i18n import N_, Message


@dataclass(frozen=True)
class Folklore:
    """An option that does not exist in llama-server, with the real way to get its intent.

    ``takes_value``: whether the folklore flag is usually written with a value (so the next
    word is its value, not a stray argument). ``replace``: the real flags to use instead
    (``{v}`` is the value given), or () to drop it.
    """

    intent: str
    real: str
    takes_value: bool = True
    replace: tuple[str, ...] = ()
    zh: str = ""

    def advice(self) -> Message:
        """The intent and the real way (English; the Chinese ``zh`` when there is one, through
        llamarig.i18n.localize)."""
        return Message.given(f"intent: {self.intent}. Real way: {self.real}", zh=self.zh)


# Flags seen in users' scripts (the field reports in tests/fixtures/seeds, guides, other tools),
# checked against common/arg.cpp of build 11434 (none of these spellings is registered by
# add_opt) and by running the real binary (tests/flags/test_corpus.py). The one table of
# folklore advice: plan/config.py takes what to write instead from here.
FOLKLORE: dict[str, Folklore] = {
    "--max-slots": Folklore("number of concurrent slots", "use `-np/--parallel N`",
                            replace=("--parallel", "{v}"), zh="并发槽位数：用 `-np/--parallel N`"),
    "--slot-reclaim-timeout": Folklore(
        "free idle slots after a timeout",
        "no such timer exists; idle slots are saved to host RAM by `--cache-idle-slots` (needs "
        "`--cache-ram`), `--sleep-idle-seconds N` unloads the model after N idle seconds",
        zh="没有这种定时回收；空闲槽位由 `--cache-idle-slots`（需 `--cache-ram`）存入内存，"
           "`--sleep-idle-seconds N` 空闲 N 秒后卸载模型"),
    "--memory-usage": Folklore(
        "a memory mode", "no such mode; memory is set by -c, -ctk/-ctv, -np, -ngl and --fit; "
        "`-lv 4` prints the buffer sizes and `--log-jsonl` the memory breakdown",
        zh="没有“内存模式”；显存由 -c、-ctk/-ctv、-np、-ngl、--fit 决定"),
    "--low-vram": Folklore("save VRAM", "removed long ago; use `-nkvo`, fewer `-ngl`, `--fit on`, "
                           "`-cmoe/-ncmoe` or `-ot`", zh="早已删除；用 -nkvo、减少 -ngl、--fit on、-ncmoe 或 -ot"),
    "--no-penalty-off": Folklore("disable repetition penalties",
                                 "`--repeat-penalty 1.0` (1.0 = off, the default)", takes_value=False,
                                 zh="关闭重复惩罚：`--repeat-penalty 1.0`（默认即关闭）"),
    "--prompt-cache-full": Folklore(
        "cache full prompts", "the server caches prompts by default (`--cache-prompt`), "
        "`--cache-ram N` sizes the host-RAM prompt cache; `--prompt-cache-all` is llama-completion only",
        takes_value=False, zh="服务器默认缓存提示（--cache-prompt），--cache-ram N 设置内存缓存大小"),
    "--no-check-tensors": Folklore("skip tensor validation",
                                   "`--check-tensors` is off by default: just leave it out",
                                   takes_value=False, zh="--check-tensors 默认关闭，删掉即可"),
    "--max-batch-size": Folklore("batch size", "`-b/--batch-size N` (logical) and "
                                 "`-ub/--ubatch-size N` (physical)", replace=("--batch-size", "{v}"),
                                 zh="批大小：`-b/--batch-size N`，物理批 `-ub/--ubatch-size N`"),
    "--mlock": Folklore("lock the model in RAM", "`--load-mode mlock` (or `mmap+mlock`)",
                        takes_value=False, replace=("--load-mode", "mlock"),
                        zh="锁定内存：`--load-mode mlock`"),
    "--no-mmap": Folklore("load without mmap", "`--load-mode none`", takes_value=False,
                          replace=("--load-mode", "none"), zh="不用 mmap：`--load-mode none`"),
    "--direct-io": Folklore("direct I/O loading", "`--load-mode dio`", takes_value=False,
                            replace=("--load-mode", "dio"), zh="直接 I/O：`--load-mode dio`"),
    "-dio": Folklore("direct I/O loading", "`--load-mode dio`", takes_value=False,
                     replace=("--load-mode", "dio"), zh="直接 I/O：`--load-mode dio`"),
    "--mmap": Folklore("memory-map the model", "`--load-mode mmap` (`auto`, the default, already mmaps "
                       "where the device allows)", takes_value=False, replace=("--load-mode", "mmap"),
                       zh="内存映射：`--load-mode mmap`（默认 auto 已在可行时使用 mmap）"),
    "--no-direct-io": Folklore("no direct I/O", "the default `--load-mode auto` does not use direct I/O: "
                               "leave it out", takes_value=False, zh="默认 `--load-mode auto` 不用直接 I/O，删掉即可"),
    "-ndio": Folklore("no direct I/O", "the default `--load-mode auto` does not use direct I/O: leave it out",
                      takes_value=False, zh="默认 `--load-mode auto` 不用直接 I/O，删掉即可"),
    "--memory-f32": Folklore("f32 KV cache", "`-ctk f32 -ctv f32`", takes_value=False,
                             zh="f32 KV 缓存：`-ctk f32 -ctv f32`"),
    "--gpu-memory-utilization": Folklore(
        "a VRAM fraction (vLLM)", "llama-server has no fraction; `--fit on --fit-target MiB` "
        "leaves MiB free per device", zh="vLLM 参数；llama-server 用 `--fit on --fit-target MiB`"),
    "--tensor-parallel-size": Folklore("tensor parallelism (vLLM)",
                                       "`-sm tensor` (needs flash attention) or `-sm layer`",
                                       zh="vLLM 的张量并行；llama-server 用 `-sm tensor`（需开启 Flash Attention）或 `-sm layer`"),
    "--max-model-len": Folklore("context length (vLLM)", "`-c/--ctx-size N`", replace=("--ctx-size", "{v}"),
                                zh="vLLM 的上下文长度；llama-server 用 `-c/--ctx-size N`"),
    "--max-seq-len": Folklore("context length", "`-c/--ctx-size N`", replace=("--ctx-size", "{v}"),
                              zh="上下文长度：`-c/--ctx-size N`"),
    "--num-workers": Folklore("workers", "`-np/--parallel N` (slots), `-t/-tb` (threads), `--threads-http`",
                              zh="槽位用 `-np/--parallel N`，线程用 `-t/-tb`，HTTP 线程用 `--threads-http`"),
    "--cache-split": Folklore("spread the KV cache over GPUs",
                              "KV follows the layer split (`-sm`, `-ts`); `-nkvo` keeps KV in RAM",
                              zh="KV 跟着层的切分走（`-sm`、`-ts`）；`-nkvo` 把 KV 放在内存"),
    "--fast-communication": Folklore("faster multi-GPU transfers", "no equivalent; see `-sm`, `-ts`, `-mg`",
                                     takes_value=False, zh="没有对应参数；多卡看 `-sm`、`-ts`、`-mg`"),
    "--cache-mode": Folklore("KV placement (FastLLM)", "`-nkvo` keeps KV in RAM; default is on the GPU",
                             zh="FastLLM 的 KV 放置；llama-server 默认放显存，`-nkvo` 放内存"),
    "--quantization": Folklore("weight quantization (vLLM/FastLLM)",
                               "choose a quantized GGUF file; llama-server cannot requantize at load",
                               zh="选一个已量化的 GGUF 文件；llama-server 加载时不能重新量化"),
    "--ctx-size-draft": Folklore("draft context size", "no such flag: the draft/MTP context always "
                                 "gets the target's n_ctx (common/speculative.cpp)",
                                 zh="没有这个参数：草稿/MTP 上下文总是用主模型的 n_ctx（common/speculative.cpp）"),
    "-cd": Folklore("draft context size", "no such flag: the draft/MTP context gets the target's n_ctx",
                    zh="没有这个参数：草稿/MTP 上下文用主模型的 n_ctx"),
    "--mtp": Folklore("MTP speculative decoding", "`--spec-type draft-mtp` (--mtp is llama-download only)",
                      takes_value=False, replace=("--spec-type", "draft-mtp"),
                      zh="MTP 投机解码：`--spec-type draft-mtp`（--mtp 只属于 llama-download）"),
    "--n-gpu-layers-draft": Folklore("draft GPU layers", "`-ngld/--spec-draft-ngl N`",
                                     replace=("--spec-draft-ngl", "{v}"), zh="草稿模型上 GPU 的层数：`-ngld/--spec-draft-ngl N`"),
    "--log_disable": Folklore("disable logging", "`--log-disable`", takes_value=False, zh="关闭日志：`--log-disable`"),
    "--embeddings-only": Folklore("embeddings", "`--embedding`", takes_value=False, zh="只做嵌入：`--embedding`"),
    "--kv-cache-type": Folklore("KV cache type", "`-ctk TYPE -ctv TYPE`", zh="KV 缓存类型：`-ctk TYPE -ctv TYPE`"),
}

#: KV cache types people write that llama-server rejects -> the closest accepted type
#: (accepted: common/arg.cpp kv_cache_types).
KV_TYPE_FIXES: dict[str, str] = {
    "q2_k": "q4_0", "q3_k": "q4_0", "q4_k": "q4_0", "q4_k_m": "q4_0", "q4_k_s": "q4_0",
    "q5_k": "q5_0", "q5_k_m": "q5_0", "q6_k": "q8_0", "q8": "q8_0", "q4": "q4_0", "fp16": "f16",
    "float16": "f16", "fp32": "f32", "fp8": "q8_0", "int8": "q8_0", "int4": "q4_0", "iq4_xs": "iq4_nl",
    "turbo3": "q4_0", "turbo4": "q4_0", "tq4_0": "q4_0",
}

#: llama.cpp environment variables still read by build 11434 besides LLAMA_ARG_* (getenv calls in
#: src/, common/, tools/server/, tools/mtmd/).
LIVE_LLAMA_ENV = frozenset({
    "LLAMA_ATTN_ROT_DISABLE", "LLAMA_BATCH_DEBUG", "LLAMA_GRAPH_INPUT_DEBUG", "LLAMA_GRAPH_RESULT_DEBUG",
    "LLAMA_GRAPH_REUSE_DISABLE", "LLAMA_KV_CACHE_DEBUG", "LLAMA_MEDIA_MARKER", "LLAMA_SERVER_SLOTS_DEBUG",
    "LLAMA_SERVER_SLOTS_N_DIFF", "LLAMA_TRACE", "LLAMA_CACHE", "LLAMA_API_KEY", "LLAMA_LOG_COLORS",
    "LLAMA_LOG_VERBOSITY", "LLAMA_LOG_PREFIX", "LLAMA_LOG_TIMESTAMPS", "LLAMA_SERVER_CHILD_MODE",
    "LLAMA_SERVER_ROUTER_PORT", "LLAMA_DSV4_COMPRESS_DEBUG", "LLAMA_APP_CMD",
})
#: ggml environment variables read at run time in build 11434 (ggml/src getenv calls); backend
#: families are matched by prefix.
LIVE_GGML_ENV = frozenset({
    "GGML_BACKEND_PATH", "GGML_CUDA_ALLREDUCE", "GGML_CUDA_CUBLAS_COMPUTE_TYPE", "GGML_CUDA_DEVICES",
    "GGML_CUDA_DISABLE_FUSION", "GGML_CUDA_DISABLE_GRAPHS", "GGML_CUDA_ENABLE_UNIFIED_MEMORY",
    "GGML_CUDA_GRAPH_OPT", "GGML_CUDA_MMQ_PREC", "GGML_CUDA_NO_PINNED", "GGML_CUDA_P2P", "GGML_CUDA_PDL",
    "GGML_CUDA_REGISTER_HOST", "GGML_CPU_DISABLE_FUSION", "GGML_CPU_TILED_MM", "GGML_CPU_TILED_MM_FORCE",
    "GGML_SCHED_DEBUG", "GGML_SCHED_DEBUG_REALLOC", "GGML_NO_BACKTRACE", "GGML_OP_OFFLOAD_MIN_BATCH",
    "GGML_TOTAL_THREADS", "GGML_RPC_DEBUG", "GGML_RPC_NO_RDMA", "GGML_DISABLE_VULKAN", "GGML_META_DEBUG",
})
LIVE_GGML_PREFIXES = ("GGML_VK_", "GGML_METAL_", "GGML_OPENCL_", "GGML_HEXAGON_", "GGML_SYCL_",
                      "GGML_CANN_", "GGML_KLEIDIAI_", "GGML_ZENDNN_", "GGML_RDMA_", "GGML_ET_", "GGML_VULKAN_")
#: names people set that llama.cpp no longer (or never) reads at run time, with what to do
#: (catalogue messages: translated where they are shown)
DEAD_ENV: dict[str, str] = {
    "LLAMA_SET_ROWS": N_("SET_ROWS is always used now; the variable is not read anywhere (the only "
                         "mention left is a comment in ggml-zdnn.cpp)"),
    "GGML_CUDA_FORCE_MMQ": N_("a CMake option (-DGGML_CUDA_FORCE_MMQ=ON), not an environment variable"),
    "GGML_CUDA_FORCE_CUBLAS": N_("a CMake option (-DGGML_CUDA_FORCE_CUBLAS=ON), not an environment variable"),
    "GGML_CUDA_FA_ALL_QUANTS": N_("a CMake option (-DGGML_CUDA_FA_ALL_QUANTS=ON), not an environment variable"),
    "LLAMA_CUBLAS": N_("a build option of old Makefiles, not read at run time"),
    "LLAMA_CUDA": N_("a build option of old Makefiles, not read at run time"),
    "GGML_CUDA": N_("a CMake option, not read at run time"),
    "LLAMA_ARG_MLOCK": N_("--mlock was replaced by --load-mode (env LLAMA_ARG_LOAD_MODE)"),
    "LLAMA_ARG_NO_MMAP": N_("--no-mmap was replaced by --load-mode (env LLAMA_ARG_LOAD_MODE)"),
}

#: hosts that only listen locally
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

#: options whose value llama-server parses as JSON, and where: while reading the arguments
#: (a bad value is "error while handling argument") or when the server starts (it exits)
JSON_OPTIONS: dict[str, tuple[str, bool]] = {
    "--chat-template-kwargs": ("common/arg.cpp:3547 json::parse", True),
    "--json-schema": ("common/arg.cpp:2288 json::parse", True),
    "--ui-config": ("tools/server/server-context.cpp:1570 \"failed to parse UI config\"", False),
}
