"""``llamarig logs``: parse llama-server logs into per-request records, figures and findings.

Line formats (vendored llama.cpp build 11434, tools/server/server-context.cpp and
server-common.h): slot lines are ``slot <func>: id <slot> | task <task> | <message>``
(``SLT_INF``), server lines ``srv  <func>: <message>``; ``print_timings`` writes
``prompt eval time = … ms / N tokens (… ms per token, … tokens per second)``, ``eval time = …``
and ``total time = …``. Older builds prefix them with ``print_timings:`` / ``llama_print_timings:``
or log JSON objects with a ``msg`` field, or text lines ending in ``| … id_slot=0 id_task=5 …``;
pasted logs often break the slot prefix and the timing onto separate lines. All are accepted.
Unknown lines are counted as skipped, never fatal.

Pairing timings with requests: a timing line (prompt eval / eval / total) goes to the request
its slot/task names, else to the request of a preceding ``print_timing`` line without payload,
else to the block the previous timing line went to, else to the only request in progress; in
every case only if that request has no value for that field yet. Otherwise it starts a new
request (same slot/task when known: task ids repeat across restarts), so a second timing block
never overwrites the first and one block's prompt-eval and eval lines stay one request.

Context checkpoints (``created context checkpoint K of N (… size = S MiB)``) are copies of the
recurrent/SWA state kept in host memory (``server_prompt_checkpoint::data`` is a
``std::vector<uint8_t>``, tools/server/server-common.h), so K × S is host RAM in use per slot.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamarig import __version__
from llamarig.bench.records import Figure, single_figure, stat_figures
from llamarig.errors import InputError
from llamarig.i18n import _
from llamarig.logformat import (
    RE_BUILD,
    RE_CREATED,
    RE_DRAFT,
    RE_ERASED,
    RE_EVAL,
    RE_FORCE,
    RE_KNOWN,
    RE_KV_SLOT,
    RE_KV_SUFFIX,
    RE_KV_TASK,
    RE_LCP,
    RE_N_PAST,
    RE_NEW_PROMPT,
    RE_OLD_PREFIX,
    RE_PROMPT_EVAL,
    RE_RELEASE,
    RE_RESTORED,
    RE_REUSE,
    RE_SELECT,
    RE_SEQ_RM,
    RE_SLOT,
    RE_TOTAL,
)

MAX_BYTES = 512 * 1024 * 1024


@dataclass
class LogRequest:
    slot: int
    task: int
    line: int
    n_ctx_slot: int | None = None
    prompt_tokens: int | None = None  # task.n_tokens: the whole prompt
    n_past: int | None = None  # tokens reused (after restores/reuse)
    restored_n_past: int | None = None
    restored_size_mib: float | None = None
    selection: str = ""
    lcp_similarity: float | None = None
    forced_full: bool = False
    reused_chunks: int = 0
    prompt_eval_ms: float | None = None
    prompt_eval_n: int | None = None
    prompt_tok_s: float | None = None
    eval_ms: float | None = None
    eval_n: int | None = None
    eval_tok_s: float | None = None
    total_ms: float | None = None
    n_tokens_end: int | None = None
    draft_acceptance: float | None = None
    draft_accepted: int | None = None
    draft_generated: int | None = None
    checkpoints_created: int = 0

    @property
    def cached(self) -> int | None:
        if self.prompt_tokens is not None and self.prompt_eval_n is not None:
            return max(0, self.prompt_tokens - self.prompt_eval_n)
        if self.n_past is not None:
            return self.n_past
        d = self.depth
        if d is not None and self.prompt_eval_n is not None:
            return max(0, d - self.prompt_eval_n)
        return None

    @property
    def depth(self) -> int | None:
        """Context depth when decoding starts = whole prompt (task.n_tokens), else cached + evaluated."""
        if self.prompt_tokens is not None:
            return self.prompt_tokens
        if self.n_past is not None and self.prompt_eval_n is not None:
            return self.n_past + self.prompt_eval_n
        if self.n_tokens_end is not None and self.eval_n:
            # 'stop processing: n_tokens = T' counts prompt + generated − 1 (the last sampled
            # token is never decoded); build 11434 logs 'new prompt' only at trace verbosity
            return max(0, self.n_tokens_end - self.eval_n + 1)
        return None

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items()}
        d["cached"] = self.cached
        d["depth"] = self.depth
        d["prefill_tok_s"] = self.prompt_tok_s
        d["decode_tok_s"] = self.eval_tok_s
        return d


@dataclass
class Checkpoints:
    created: int = 0
    erased: int = 0
    sizes_mib: list[float] = field(default_factory=list)
    kept_by_slot: dict[int, int] = field(default_factory=dict)
    limit: int | None = None
    restores: int = 0


@dataclass
class LogParse:
    path: str
    lines: int = 0
    recognised: int = 0
    skipped: int = 0
    empty: int = 0
    requests: list[LogRequest] = field(default_factory=list)
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    build: str | None = None
    forced_full: int = 0
    truncated_tail: bool = False
    orphan_timings: int = 0
    ctx_slots: list[tuple[int, int]] = field(default_factory=list)  # (line, n_ctx_slot) as logged
    reasoning_budgets: list[tuple[int, int]] = field(default_factory=list)  # (line, budget tokens)


def _json_msg(line: str) -> tuple[str, dict[str, Any]] | None:
    """Old builds (2024) could log JSON objects: {"msg": "...", "id_slot": 0, "id_task": 5}."""
    s = line.strip()
    if not (s.startswith("{") and s.endswith("}")):
        return None
    try:
        obj = json.loads(s)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "msg" not in obj:
        return None
    return str(obj["msg"]), obj


#: "new prompt, n_ctx_slot = 95232, ..." (tools/server/server-context.cpp, update_slots)
RE_CTX_SLOT = re.compile(r"\bn_ctx_slot = (\d+)")
#: "reasoning-budget: activated, budget=2147483647 tokens" (common/reasoning-budget.cpp)
RE_BUDGET = re.compile(r"reasoning-budget: activated, budget=(\d+)")
#: INT_MAX: the budget when no --reasoning-budget reached the server (common/common.h reasoning_budget -1)
UNLIMITED_BUDGET = 2**31 - 1


def parse_log_text(text: str, path: str = "<text>") -> LogParse:
    res = LogParse(path)
    by_key: dict[tuple[int, int], LogRequest] = {}
    last_timing_ctx: tuple[int, int] | None = None  # slot/task of a 'print_timing' line without payload
    open_block: LogRequest | None = None  # the request the last timing line went to, until 'total time'
    current_by_slot: dict[int, LogRequest] = {}
    pending: dict[int, tuple[str, float | None]] = {}  # slot selection seen on a 'task -1' line
    raw_lines = text.splitlines()
    res.lines = len(raw_lines)
    if text and not text.endswith("\n") and raw_lines and (RE_KNOWN.search(raw_lines[-1]) or RE_SLOT.search(raw_lines[-1])):
        res.truncated_tail = True

    def get(slot: int, task: int, no: int) -> LogRequest:
        key = (slot, task)
        if key not in by_key:
            return new(slot, task, no)
        current_by_slot[slot] = by_key[key]
        return by_key[key]

    def new(slot: int, task: int, no: int) -> LogRequest:
        by_key[(slot, task)] = LogRequest(slot, task, no)
        res.requests.append(by_key[(slot, task)])
        current_by_slot[slot] = by_key[(slot, task)]
        return by_key[(slot, task)]

    for no, raw in enumerate(raw_lines, 1):
        line = raw.strip()
        if not line:
            res.empty += 1
            continue
        slot = task = None
        msg = line
        jm = _json_msg(line)
        if jm is not None:
            msg, obj = jm
            if isinstance(obj.get("id_slot"), int):
                slot = obj["id_slot"]
                task = obj.get("id_task", -1) if isinstance(obj.get("id_task"), int) else -1
        kv = RE_KV_SUFFIX.search(line) if jm is None else None
        if kv is not None and (ks := RE_KV_SLOT.search(kv.group(1))) is not None:
            kt = RE_KV_TASK.search(kv.group(1))
            slot, task, msg = int(ks.group(1)), int(kt.group(1)) if kt else -1, line[: kv.start()]
        m = RE_SLOT.search(line)
        if m:
            slot, task, msg = int(m.group(2)), int(m.group(3)), m.group(4)
            func = m.group(1)
            if func.startswith("print_timing") and not msg.strip():
                last_timing_ctx = (slot, task)
                res.recognised += 1
                continue
        known = bool(m) or jm is not None or bool(RE_KNOWN.search(raw)) or bool(RE_OLD_PREFIX.search(line))
        hit = False
        req: LogRequest | None = None
        if slot is not None and task is not None and task >= 0:
            req = get(slot, task, no)
        # ---- timings (possibly on a line of their own after 'print_timing: id … |')
        pe, ev, tt = RE_PROMPT_EVAL.search(msg), RE_EVAL.search(msg), RE_TOTAL.search(msg)
        if pe or ev or tt:
            hit = True
            fields = [f for f, x in (("prompt_eval_ms", pe), ("eval_ms", ev), ("total_ms", tt)) if x]
            if req is not None:
                tgt = req if _free(req, fields) else new(req.slot, req.task, no)
                req = tgt
            elif last_timing_ctx is not None:
                tgt = get(*last_timing_ctx, no)
                if not _free(tgt, fields):
                    tgt = new(tgt.slot, tgt.task, no)
            elif open_block is not None and _free(open_block, fields):
                tgt = open_block
            else:
                tgt = _orphan(res, current_by_slot, fields, no)
            if pe:
                tgt.prompt_eval_ms, tgt.prompt_eval_n = float(pe.group(1)), int(pe.group(2))
                tgt.prompt_tok_s = float(pe.group(4))
            if ev:
                tgt.eval_ms, tgt.eval_n, tgt.eval_tok_s = float(ev.group(1)), int(ev.group(2)), float(ev.group(4))
            open_block = tgt
            if tt:
                tgt.total_ms = float(tt.group(1))
                last_timing_ctx = open_block = None
        if req is not None:
            if mm := RE_NEW_PROMPT.search(msg):
                if not _free(req, ["prompt_eval_ms", "eval_ms"]):
                    req = new(req.slot, req.task, no)  # a task id seen again (after a restart): a new request
                req.n_ctx_slot, req.prompt_tokens = int(mm.group(1)), int(mm.group(3))
                hit = True
            if (mm := RE_RESTORED.search(msg)) is not None:
                req.restored_n_past = int(mm.group(4)) if mm.group(4) else None
                req.restored_size_mib = float(mm.group(5))
                res.checkpoints.restores += 1
                hit = True
            elif (mm := RE_N_PAST.search(msg)) is not None and req.n_past is None:
                req.n_past = int(mm.group(1))
                hit = True
            if (mm := RE_SEQ_RM.search(msg)) is not None and req.prompt_eval_n is None and req.n_past is None:
                req.n_past = int(mm.group(1))
                hit = True
            if (mm := RE_CREATED.search(msg)) is not None:
                ck = res.checkpoints
                ck.created += 1
                ck.sizes_mib.append(float(mm.group(6)))
                ck.kept_by_slot[req.slot] = int(mm.group(1))
                ck.limit = int(mm.group(2))
                req.checkpoints_created += 1
                hit = True
            if (mm := RE_ERASED.search(msg)) is not None:
                res.checkpoints.erased += 1
                if mm.group(1) == "erased invalidated" and res.checkpoints.kept_by_slot.get(req.slot):
                    res.checkpoints.kept_by_slot[req.slot] -= 1
                hit = True
            if (mm := RE_LCP.search(msg)) is not None:
                req.selection, req.lcp_similarity = "LCP similarity", float(mm.group(1))
                hit = True
            elif (mm := RE_SELECT.search(msg)) is not None:
                req.selection = mm.group(1)
                hit = True
            if RE_FORCE.search(msg):
                req.forced_full = True
                res.forced_full += 1
                hit = True
            if RE_REUSE.search(msg):
                req.reused_chunks += 1
                hit = True
            if (mm := RE_RELEASE.search(msg)) is not None:
                req.n_tokens_end = int(mm.group(1))
                hit = True
            if (mm := RE_DRAFT.search(msg)) is not None:
                req.draft_acceptance = float(mm.group(1))
                req.draft_accepted, req.draft_generated = int(mm.group(2)), int(mm.group(3))
                hit = True
        elif slot is not None:
            # task -1 lines (slot selection before the task id is known): remember for the next task
            if (mm := RE_LCP.search(msg)) is not None:
                current_by_slot.pop(slot, None)
                pending[slot] = ("LCP similarity", float(mm.group(1)))
                hit = True
            elif (mm := RE_SELECT.search(msg)) is not None:
                pending[slot] = (mm.group(1), None)
                hit = True
        if req is not None and slot in pending and not req.selection:
            req.selection, req.lcp_similarity = pending.pop(slot)
        if (mm := RE_CTX_SLOT.search(line)) is not None:
            res.ctx_slots.append((no, int(mm.group(1))))
        if (mm := RE_BUDGET.search(line)) is not None:
            res.reasoning_budgets.append((no, int(mm.group(1))))
            hit = True
        if res.build is None and (mm := RE_BUILD.search(msg)) is not None:
            res.build = f"b{mm.group(1)}" + (f"-{mm.group(2) or mm.group(3)}" if (mm.group(2) or mm.group(3)) else "")
            hit = True
        if hit or known:
            res.recognised += 1
        else:
            res.skipped += 1
    return res


def _free(r: LogRequest, fields: list[str]) -> bool:
    """True when ``r`` has no value yet for any of the timing ``fields``."""
    return all(getattr(r, f) is None for f in fields)


def _orphan(res: LogParse, current: dict[int, LogRequest], fields: list[str], no: int) -> LogRequest:
    """Timings with no slot/task context (very old builds): attach to the only request in
    progress if it has no value for these fields yet, else start an anonymous request."""
    if len(current) == 1:
        only = next(iter(current.values()))
        if _free(only, fields):
            return only
    res.orphan_timings += 1
    r = LogRequest(-1, -no, no)
    res.requests.append(r)
    return r


def read_log(path: Path) -> str:
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES)
    except OSError as e:
        raise InputError(_("{path}: cannot read log: {error}").format(path=path, error=e.strerror or e)) from e
    if size > MAX_BYTES:
        data = data[: data.rfind(b"\n") + 1]
    if b"\x00" in data[:4096]:
        raise InputError(_("{path}: binary file, not a llama-server log").format(path=path))
    return data.decode("utf-8", errors="replace")


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def analyse(p: LogParse) -> dict[str, Any]:
    """Figures, series and plain-language findings from a parse."""
    reqs = [r for r in p.requests if r.eval_tok_s is not None or r.prompt_tok_s is not None]
    figs: list[Figure] = []
    findings: list[str] = []
    dec = [r for r in reqs if r.eval_tok_s is not None and (r.eval_n or 0) > 1]
    src = f"{Path(p.path).name}"
    m_dec = (f"'eval time = … tokens per second' lines of {src} (the server's own figure; build 11434 computes "
             "(n_gen − 1) ÷ t, older builds n ÷ t)")
    if dec:
        figs += stat_figures("log_decode_tok_s", [r.eval_tok_s for r in dec if r.eval_tok_s is not None], "tok/s", m_dec, stats=("median", "p10", "max"),
                             scenario="logs", method_zh="日志 eval time 行的 tokens per second")
    pre = [r for r in reqs if r.prompt_tok_s is not None]
    figs += [] if not pre else stat_figures("log_prefill_tok_s", [r.prompt_tok_s for r in pre if r.prompt_tok_s is not None], "tok/s",
                         f"'prompt eval time = … tokens per second' lines of {src}; only tokens actually processed (cached tokens excluded)",
                         stats=("median", "max"), scenario="logs", method_zh="日志 prompt eval time 行（不含缓存命中的 token）")
    depth_pts = sorted(((r.depth, r.eval_tok_s) for r in dec if r.depth is not None and r.eval_tok_s is not None),
                       key=lambda x: x[0])
    seen: set[str] = set()
    for r in dec:
        if r.depth is not None:
            name = f"log_decode_tok_s_task{r.task}"
            name = name if name not in seen else f"{name}_line{r.line}"  # task ids repeat after a restart
            seen.add(name)
            figs.append(single_figure(
                name, r.eval_tok_s, "tok/s",
                f"{src} line {r.line}: slot {r.slot} task {r.task}, eval {r.eval_n} tokens in {r.eval_ms} ms at depth {r.depth} "
                "(depth = task.n_tokens from the 'new prompt' line, else 'stop processing' n_tokens − generated + 1)",
                samples=[r.eval_tok_s] if r.eval_tok_s is not None else [], scenario="logs",
                params={"depth": r.depth, "slot": r.slot, "task": r.task, "prompt_eval_n": r.prompt_eval_n, "cached": r.cached},
                method_zh=f"第 {r.line} 行：槽位 {r.slot} 任务 {r.task}，深度 {r.depth} 时 {r.eval_ms} ms 生成 {r.eval_n} 个 token",
            ))
    if len(depth_pts) >= 2:
        (d0, v0), (d1, v1) = depth_pts[0], depth_pts[-1]
        if d1 > d0 and v0:
            pct = 100.0 * (v0 - v1) / v0
            if pct > 2:
                findings.append(
                    _("decode fell from {v0:.2f} to {v1:.2f} tok/s ({pct:.1f} %) as depth grew from {d0:,} to {d1:,} "
                      "tokens: expected, every generated token reads the whole KV cache, so decode slows as the "
                      "context fills").format(v0=v0, v1=v1, pct=pct, d0=d0, d1=d1))
            elif pct < -2:
                findings.append(_("decode rose from {v0:.2f} to {v1:.2f} tok/s as depth grew from {d0:,} to {d1:,} "
                                  "tokens: something else changed between these requests (load, clocks, other "
                                  "slots)").format(v0=v0, v1=v1, d0=d0, d1=d1))
            else:
                findings.append(
                    _("decode {v0:.2f} tok/s at depth {d0:,} vs {v1:.2f} tok/s at depth {d1:,} ({change:+.1f} %): "
                      "essentially flat over this range; KV reads grow with depth, but here weight reads "
                      "dominate").format(v0=v0, v1=v1, d0=d0, d1=d1, change=-pct))
    ck = p.checkpoints
    if ck.sizes_mib:
        size = statistics.median(ck.sizes_mib)
        kept = sum(ck.kept_by_slot.values())
        ram = kept * size
        figs.append(single_figure("checkpoint_size_mib", size, "MiB",
                                  f"'created context checkpoint K of N (… size = S MiB)' lines of {src}: median S",
                                  samples=ck.sizes_mib, scenario="logs", method_zh="日志 created context checkpoint 行的 size"))
        figs.append(single_figure("checkpoints_kept", float(kept), "checkpoints",
                                  f"last 'created context checkpoint K of N' K per slot in {src}, minus later 'erased invalidated' lines",
                                  scenario="logs", params={"by_slot": {str(k): v for k, v in ck.kept_by_slot.items()}, "limit": ck.limit,
                                                           "created": ck.created, "erased": ck.erased},
                                  method_zh="每个槽位最后一行 created context checkpoint K of N 的 K，减去之后 erased invalidated 的行数"))
        figs.append(single_figure("checkpoint_host_ram_mib", ram, "MiB",
                                  "checkpoints kept × median checkpoint size (checkpoints live in host RAM: server_prompt_checkpoint data, tools/server/server-common.h)",
                                  scenario="logs", params={"checkpoints_kept": kept, "checkpoint_size_mib": size},
                                  method_zh="保留的 checkpoint 数 × 每个大小（主机内存）"))
        line = _("each context checkpoint is {size} MiB; {kept} kept → {ram} of host RAM").format(
            size=f"{size:.1f}" if size >= 1 else f"{size:.3f}", kept=kept,
            ram=_gib(ram) if size >= 1 else f"{ram:.3f} MiB")
        if ck.limit:
            at_limit = _gib(ck.limit * size) if size >= 1 else f"{ck.limit * size:.3f} MiB"
            line += _(" (the limit of {limit} per slot, --ctx-checkpoints, would take {ram})").format(
                limit=ck.limit, ram=at_limit)
        findings.append(line)
    restored = [r for r in p.requests if r.restored_n_past is not None and (r.prompt_tokens or r.depth)]
    for r in restored[:3]:
        n_past = r.restored_n_past
        assert n_past is not None  # ``restored`` keeps only requests that have one
        total = r.prompt_tokens or r.depth or 0
        done = r.prompt_eval_n if r.prompt_eval_n is not None else total - n_past
        findings.append(_("task {task} restored a context checkpoint at {n_past:,} tokens: only {done:,} of "
                          "{total:,} prompt tokens were processed").format(task=r.task, n_past=n_past, done=done,
                                                                           total=total))
    if len(restored) > 3:
        findings.append(_("… {n} requests in all restored a context checkpoint instead of re-processing their "
                          "prompt").format(n=len(restored)))
    if p.forced_full:
        findings.append(_("{n} request(s) re-processed the whole prompt ('forcing full prompt re-processing'): "
                          "no usable checkpoint (SWA/hybrid/recurrent memory)").format(n=p.forced_full))
    sized = [r for r in pre if (r.prompt_eval_n or 0) >= 16]
    if len(sized) >= 2:
        small = min(sized, key=lambda r: r.prompt_eval_n or 0)
        big = max(sized, key=lambda r: r.prompt_eval_n or 0)
        if (big.prompt_eval_n or 0) >= 4 * max(1, small.prompt_eval_n or 0) and small.prompt_tok_s and big.prompt_tok_s:
            findings.append(
                _("prefill {r0:.1f} tok/s for {n0} new tokens vs {r1:.1f} tok/s for {n1}: short prompts do not "
                  "fill a ubatch, so their rate is not the GPU's prefill speed").format(
                    r0=small.prompt_tok_s, n0=small.prompt_eval_n, r1=big.prompt_tok_s, n1=big.prompt_eval_n))
    drafts = [r for r in p.requests if r.draft_generated]
    if drafts:
        acc = sum(r.draft_accepted or 0 for r in drafts) / sum(r.draft_generated or 0 for r in drafts)
        figs.append(single_figure("log_spec_acceptance", acc, "ratio",
                                  f"Σ accepted ÷ Σ generated over 'draft acceptance = … (A accepted / G generated)' lines of {src}",
                                  samples=[r.draft_acceptance for r in drafts if r.draft_acceptance is not None], scenario="logs",
                                  method_zh="日志 draft acceptance 行：Σ accepted ÷ Σ generated"))
    budgets = sorted({b for _, b in p.reasoning_budgets})
    if UNLIMITED_BUDGET in budgets:
        at = next(n for n, b in p.reasoning_budgets if b == UNLIMITED_BUDGET)
        findings.append(_("line {line}: reasoning budget {budget} tokens (INT_MAX): the server got no "
                          "--reasoning-budget, so thinking is unlimited; if the launch script sets one, that flag "
                          "never reached llama-server (`llamarig check SCRIPT` shows where the command is cut "
                          "off)").format(line=at, budget=UNLIMITED_BUDGET))
    slots = sorted({c for _, c in p.ctx_slots})
    if slots:
        findings.append(_("the server ran with n_ctx_slot = {slots} tokens per slot (first at line {line})").format(
            slots=", ".join(str(c) for c in slots), line=p.ctx_slots[0][0]))
    if p.skipped:
        findings.append(_("{skipped} of {lines} lines were not llama-server output and were skipped").format(
            skipped=p.skipped, lines=p.lines))
    if p.truncated_tail:
        findings.append(_("the file ends mid-line (truncated log): the last line was not parsed"))
    incomplete = [r for r in p.requests if r.prompt_tokens is not None and r.eval_tok_s is None]
    if incomplete:
        findings.append(_("{n} request(s) have no timing lines (still running or cut off)").format(n=len(incomplete)))
    timeline = [
        {"slot": r.slot, "task": r.task, "line": r.line, "depth": r.depth, "prompt_tokens": r.prompt_tokens,
         "cached": r.cached, "prompt_eval_n": r.prompt_eval_n, "prefill_tok_s": r.prompt_tok_s, "eval_n": r.eval_n,
         "decode_tok_s": r.eval_tok_s, "restored_checkpoint": r.restored_n_past, "selection": r.selection,
         "lcp_similarity": r.lcp_similarity, "checkpoints_created": r.checkpoints_created, "n_tokens_end": r.n_tokens_end}
        for r in p.requests
    ]
    return {
        "figures": figs,
        "findings": findings,
        "timeline": timeline,
        "series": {
            "timeline": timeline,
            "decode_vs_depth": [{"depth": d, "tok_s": v} for d, v in depth_pts],
            "prefill_vs_length": sorted(({"length": r.prompt_eval_n, "tok_s": r.prompt_tok_s} for r in pre if r.prompt_eval_n),
                                        key=lambda x: x["length"]),
        },
    }


def logs_document(path: Path, compare: Callable[[LogParse], list[str]] | None = None) -> dict[str, Any]:
    """``llamarig logs --json``: the log's figures, timeline and findings; ``compare``: findings
    that set the log against what was meant or planned (a launch script, a plan: the caller's,
    llamarig.app.logs), placed first."""
    from llamarig.bench.runner import SCHEMA_VERSION  # lazy: runner pulls aiohttp (0.2 s)

    p = parse_log_text(read_log(path), str(path))
    if p.recognised == 0:
        what = "empty" if p.lines == p.empty else "not a llama-server log"
        raise InputError(_("{path}: {what}: no line llama-server writes was found ({lines} line(s))").format(path=path, what=what, lines=p.lines))
    a = analyse(p)
    if compare is not None:
        a["findings"] = compare(p) + a["findings"]
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "logs",
        "tool": f"llamarig {__version__}",
        "source": {"path": str(path), "lines": p.lines, "recognised": p.recognised, "skipped": p.skipped,
                   "empty": p.empty, "build": p.build, "truncated_tail": p.truncated_tail, "requests": len(p.requests),
                   "orphan_timings": p.orphan_timings},
        "figures": [f.to_json() for f in a["figures"]],
        "findings": a["findings"],
        "timeline": a["timeline"],
        "series": a["series"],
        "errors": [],
    }
