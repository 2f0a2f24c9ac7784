"""The lines llama-server prints that llamarig reads, as regular expressions: one place for
the log format, used by ``plan.memory_log`` (memory lines at ``-lv 4``, for launch verification
and calibration) and ``bench.logparse`` (request and slot lines, for ``llamarig logs``).

Formats from llama.cpp build 11434 (src/llama-model.cpp, src/llama-kv-cache.cpp,
src/llama-memory-recurrent.cpp, src/llama-context.cpp, tools/server/server-context.cpp,
common/speculative.cpp). Lines carry a timestamp prefix; use ``search``, not ``match``.
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------- memory (plan.memory_log)

MEM_WEIGHTS = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
MEM_KV_BUF = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
MEM_KV_SIZE = re.compile(
    r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/\s*(\d+) seqs\), "
    r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB"
)
MEM_ISWA = re.compile(r"creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
MEM_RS_BUF = re.compile(r"llama_memory_recurrent:\s+(\S+) RS buffer size =\s+([\d.]+) MiB")
MEM_RS_SIZE = re.compile(
    r"llama_memory_recurrent: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+) seqs\s+(\d+) rs_seq\)"
)
MEM_COMPUTE = re.compile(r"(\S+) compute buffer size =\s+([\d.]+) MiB")
MEM_OUTPUT = re.compile(r"(\S+)\s+output buffer size =\s+([\d.]+) MiB")
MEM_CTX_PARAM = re.compile(r"llama_context: (\w+)\s+= (\S+)")
MEM_CONSTRUCT = re.compile(r"llama_context: constructing llama_context")
MEM_RESERVE = re.compile(r"sched_reserve: reserving \.\.\.")
MEM_SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(\w+)'")
#: the per-sequence context before a cap cut one slot's context down (server-context.cpp:1350, 1366)
SRV_CTX_CAPPED = re.compile(r"capping per-slot context \((\d+)\) to --kv-unified-per-slot")
SRV_CTX_TRAIN_CAPPED = re.compile(r"the slot context \((\d+)\) exceeds the training context of the model")
#: a --kv-unified-per-slot above the per-slot pool capacity (server-context.cpp:1355): the capacity
SRV_CTX_POOL_CAPPED = re.compile(r"--kv-unified-per-slot \(\d+\) exceeds the per-slot pool capacity \((\d+)\)")
#: the start-up lines before ``initializing`` whose number is a slot's context before a cap cut it
#: (server-context.cpp:1344-1369); the pool itself is never cut
SRV_CTX_CAP_LINES = (SRV_CTX_CAPPED, SRV_CTX_TRAIN_CAPPED, SRV_CTX_POOL_CAPPED)


def ctx_before_cap(line: str) -> int | None:
    """The per-sequence context a start-up capping line names, or None for any other line."""
    for rx in SRV_CTX_CAP_LINES:
        m = rx.search(line)
        if m is not None:
            return int(m.group(1))
    return None

# ---------------------------------------------------------------- requests and slots (bench.logparse)

NUM = r"([0-9]+(?:\.[0-9]+)?)"
RE_SLOT = re.compile(r"slot\s+([A-Za-z_]+(?:\(\))?):\s+id\s+(\d+)\s*\|\s*task\s+(-?\d+)\s*\|?\s*(.*)$")
RE_PROMPT_EVAL = re.compile(
    rf"prompt eval time\s*=\s*{NUM}\s*ms\s*/\s*(\d+)\s*(?:tokens|runs)\s*\(\s*{NUM}\s*ms per token,\s*{NUM}\s*tokens per second\)"
)
RE_EVAL = re.compile(
    rf"(?<!prompt )\beval time\s*=\s*{NUM}\s*ms\s*/\s*(\d+)\s*(?:tokens|runs)\s*\(\s*{NUM}\s*ms per token,\s*{NUM}\s*tokens per second\)"
)
RE_TOTAL = re.compile(rf"total time\s*=\s*{NUM}\s*ms(?:\s*/\s*(\d+)\s*tokens)?")
RE_NEW_PROMPT = re.compile(r"new prompt, n_ctx_slot = (\d+), n_keep = (\d+), (?:task\.)?n_(?:prompt_)?tokens = (\d+)")
RE_N_PAST = re.compile(r"\bn_past = (\d+)")
RE_SEQ_RM = re.compile(r"(?:memory_seq_rm|kv cache rm) \[(\d+), end\)")
RE_RESTORED = re.compile(
    rf"restored context checkpoint \(pos_min = (-?\d+), pos_max = (-?\d+)(?:, n_tokens = (\d+))?(?:, n_past = (\d+))?, size = {NUM} MiB\)"
)
RE_CREATED = re.compile(
    rf"created context checkpoint (\d+) of (\d+) \(pos_min = (-?\d+), pos_max = (-?\d+)(?:, n_tokens = (\d+))?, size = {NUM} MiB\)"
)
RE_ERASED = re.compile(rf"(erasing old|erased invalidated) context checkpoint .*size = {NUM} MiB")
RE_LCP = re.compile(rf"selected slot by LCP similarity, (?:f_)?sim_best = {NUM} \(> {NUM} thold\)(?:, f_keep = {NUM})?")
RE_SELECT = re.compile(r"selected slot by (LRU|id)")
RE_FORCE = re.compile(r"forcing full prompt re-processing")
RE_REUSE = re.compile(r"reusing chunk with size (\d+)")
RE_RELEASE = re.compile(r"stop processing:?\s+n_(?:tokens|past) = (\d+), truncated = (\d+)")
RE_DRAFT = re.compile(rf"draft acceptance(?: rate)? = {NUM} \(\s*(\d+) accepted /\s*(\d+) generated\)(?:, mean len =\s*{NUM})?")
RE_BUILD = re.compile(r"\bbuild(?:_info)?\s*[:=]\s*b?(\d+)\s*(?:\(([0-9a-f]+)\)|-([0-9a-f]+))?")
#: a slot starts a task (server-context.cpp launch_slot_with_task): ``processing task, is_child = 0``
RE_LAUNCH = re.compile(r"processing task, is_child = (\d+)")
#: decode progress every 3 s once 100 tokens are out (server-context.cpp:653 print_timings_tg)
RE_TG_PROGRESS = re.compile(rf"n_gen\s*=\s*(\d+),\s*tg\s*=\s*{NUM}\s*t/s,\s*tg_3s\s*=\s*{NUM}\s*t/s")
#: an error sent for a task (server-context.cpp:2163 send_error): ``task id = 4, error: …``
RE_SEND_ERROR = re.compile(r"send_error: task id = (\d+), error: (.*?)\s*$")
#: the HTTP side gives up on a task: its client went away, or after an error (server-queue.cpp:610)
RE_CANCEL = re.compile(r"cancel task, id_task = (\d+)")
#: the pool had no free cell for one token (server-context.cpp:4023)
RE_CTX_EXCEEDED = re.compile(r"decode: Context size has been exceeded")
#: the text of that error, as the client and send_error see it
CTX_EXCEEDED = "Context size has been exceeded."
RE_PROGRESS = re.compile(rf"prompt processing progress, n_(?:tokens|past) = (\d+), batch\.n_tokens = (\d+), progress = {NUM}")
#: the timestamp llama-server's log puts first: minutes.seconds.milliseconds.microseconds since the
#: start (common/log.cpp:128-133)
RE_TIMESTAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) [IWEDT] ")
#: "new prompt, n_ctx_slot = 95232, ..." (tools/server/server-context.cpp, update_slots)
RE_CTX_SLOT = re.compile(r"\bn_ctx_slot = (\d+)")
#: "reasoning-budget: activated, budget=2147483647 tokens" (common/reasoning-budget.cpp)
RE_BUDGET = re.compile(r"reasoning-budget: activated, budget=(\d+)")
#: lines we recognise as llama-server/llama.cpp output without extracting data from them
RE_KNOWN = re.compile(
    r"^(?:\d+\.\d{2}\.\d{3}\.\d{3} [IWEDT] |\t[a-z_]+ = |\s*(?:[0-9.]+\s+[IWEDT]\s+)?(?:srv\s|slot\s|cmn\s|main:|llama_|llm_load|load|print_info|common_|ggml_|gguf|system_info|"
    r"build:|system info|model|init|clip_|mtmd|que\s|request:|reasoning-budget|sampler|generate|update_slots|"
    r"warming up|server is listening|all slots|HTTP server|srv|done request|prompt processing|\s*graphs reused|"
    r"\s*(?:prompt )?eval time|\s*total time|\s*load time|\s*sample time|\s*acc per pos|\s*- ))",
    re.IGNORECASE,
)
#: older server builds (2024) end a line with key=value pairs after ' | ':
#: ``INFO [   print_timings] prompt eval time = … | tid="1" timestamp=… id_slot=0 id_task=5 …``
RE_KV_SUFFIX = re.compile(r"\s\|\s+(\w+=.*)$")
RE_KV_SLOT = re.compile(r"\bid_slot=(-?\d+)\b")
RE_KV_TASK = re.compile(r"\bid_task=(-?\d+)\b")
#: the level/function prefix of those builds' text lines: ``INFO [  update_slots] …``
RE_OLD_PREFIX = re.compile(r"^\s*(?:INFO|WARN|WARNING|ERR|ERROR|VERB|DEBUG)\s+\[\s*\w+\]\s")

# ---------------------------------------------------------------- runs of the server (bench.logparse)

#: the first line of a run of llama-server (tools/server/server.cpp:116 ``initializing ...``);
#: older builds began with ``main: build = N (hash)`` (examples/server) or common's
#: ``build: N (hash) with CC for ARCH``
RE_RUN_START = re.compile(r"llama_server: initializing \.\.\.|\bmain: build = \d+|(?:^|\s)build: \d+ \([0-9a-f]+\) with ")
#: a run that stops cleanly says so (tools/server/server.cpp:425, 465)
RE_RUN_EXIT = re.compile(r"cleaning up before exit")
#: the prefix a journal (``journalctl``, syslog) puts before each line of a unit's output: the
#: short format ``Dec 07 23:00:01 host unit[PID]: `` or short-iso ``2026-12-07T23:00:01+0000 host
#: unit[PID]: ``; the PID tells one run of the process from the next (the identifier: the
#: process's own lines from systemd's about the unit)
RE_JOURNAL = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2}|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r" \S+ ([^\s:\[]+)(?:\[(\d+)\])?: "
)
#: journal identifiers that are not the server's own output (systemd's lines about the unit)
JOURNAL_NOT_SERVER = ("systemd", "kernel", "init")
