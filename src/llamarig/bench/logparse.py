"""``llamarig logs``, the reading: llama-server log lines into per-request records.

Line formats (llama.cpp build 11434, tools/server/server-context.cpp and server-common.h; one home
for them: llamarig.logformat): slot lines are ``slot <func>: id <slot> | task <task> | <message>``
(``SLT_INF``), server lines ``srv  <func>: <message>``; ``print_timings`` writes ``prompt eval time
= … ms / N tokens (… ms per token, … tokens per second)``, ``eval time = …`` and ``total time = …``;
a decoding slot writes ``n_gen = N, tg = R t/s, tg_3s = W t/s`` every 3 s once 100 tokens are out
(653); a task that ends early leaves ``send_error: task id = T, error: …`` (2163: 'Context size has
been exceeded.' when the shared pool has no cell left, 4023) and ``stop: cancel task, id_task = T``
(tools/server/server-queue.cpp:610: its client went away, or after the error). Lines may start with
the log's timestamp (minutes.seconds.ms.µs, common/log.cpp:128). Older builds prefix the timings
with ``print_timings:`` / ``llama_print_timings:`` or log JSON objects with a ``msg`` field, or text
lines ending in ``| … id_slot=0 id_task=5 …``; pasted logs often break the slot prefix and the
timing onto separate lines. All are accepted. Unknown lines are counted as skipped, never fatal.

Pairing timings with requests: a timing line (prompt eval / eval / total) goes to the request
its slot/task names, else to the request of a preceding ``print_timing`` line without payload,
else to the block the previous timing line went to, else to the only request in progress; in
every case only if that request has no value for that field yet. Otherwise it starts a new
request (same slot/task when known: task ids repeat across restarts), so a second timing block
never overwrites the first and one block's prompt-eval and eval lines stay one request.

Context checkpoints (``created context checkpoint K of N (… size = S MiB)``) are copies of the
recurrent/SWA state kept in host memory (``server_prompt_checkpoint::data`` is a
``std::vector<uint8_t>``, tools/server/server-common.h), so K × S is host RAM in use per slot.

Concurrency: the server's loop is one thread, so the order of the lines is the order of events.
A request is active from its first line (``processing task``) to its last (``stop processing``,
else its timings); the requests active at once with it are counted from those spans
(:func:`concurrency`), so a slowdown can be told from parallel decoding rather than depth.

Runs: a log may hold several runs of llama-server, one after the other (a file the server
appends to, a systemd journal). Each run is read on its own (:attr:`LogParse.runs`): task ids
start again at 0 in each, so a request, a span and a timing pair only within their run, and a
request a run left unfinished ends with its run. A run begins at the server's first line
(``llama_server: initializing ...``, tools/server/server.cpp:116; ``main: build = N`` or
``build: N (hash) with`` in older builds) once the run before has started serving (its
``initializing, n_slots`` line or a request), at a second ``initializing, n_slots`` line (a log
filtered of its first lines), or where a journal's PID changes. A journal's prefix (``Dec 07
23:00:01 host unit[PID]: ``) is taken off every line before it is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llamarig.errors import InputError
from llamarig.i18n import _, os_error
from llamarig.logformat import (
    CTX_EXCEEDED,
    JOURNAL_NOT_SERVER,
    MEM_SLOTS,
    RE_BUDGET,
    RE_BUILD,
    RE_CANCEL,
    RE_CREATED,
    RE_CTX_SLOT,
    RE_DRAFT,
    RE_ERASED,
    RE_EVAL,
    RE_FORCE,
    RE_JOURNAL,
    RE_KNOWN,
    RE_KV_SLOT,
    RE_KV_SUFFIX,
    RE_KV_TASK,
    RE_LAUNCH,
    RE_LCP,
    RE_N_PAST,
    RE_NEW_PROMPT,
    RE_OLD_PREFIX,
    RE_PROMPT_EVAL,
    RE_RELEASE,
    RE_RESTORED,
    RE_REUSE,
    RE_RUN_EXIT,
    RE_RUN_START,
    RE_SELECT,
    RE_SEND_ERROR,
    RE_SEQ_RM,
    RE_SLOT,
    RE_TG_PROGRESS,
    RE_TIMESTAMP,
    RE_TOTAL,
)
from llamarig.serverpool import LogStart, StartReader

MAX_BYTES = 512 * 1024 * 1024
#: INT_MAX: the budget when no --reasoning-budget reached the server (common/common.h reasoning_budget -1)
UNLIMITED_BUDGET = 2**31 - 1
#: how a request ended (``outcome``); "" when the log does not say (still running, or cut off)
OUTCOMES = ("done", "cancelled", "context_exceeded", "error")


@dataclass(frozen=True)
class Progress:
    """One ``n_gen = N, tg = R t/s, tg_3s = W t/s`` line: tokens generated so far, the decode rate
    since the first token and over the last ~3 s (server-context.cpp:653)."""

    line: int
    t_s: float | None
    n_gen: int
    tg: float
    tg_3s: float


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
    line_end: int | None = None  # its last line (stop processing, else its last timing line)
    t_start_s: float | None = None  # the log's timestamps, where it has them
    t_end_s: float | None = None
    outcome: str = ""  # done | cancelled | context_exceeded | error | "" (not said)
    error: str = ""
    progress: list[Progress] = field(default_factory=list)
    concurrency: int = 1  # the most requests active at once while it was (itself included)

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

    @property
    def generated(self) -> int | None:
        """Tokens generated: the final timing's count, else the last progress line's."""
        if self.eval_n is not None:
            return self.eval_n
        return self.progress[-1].n_gen if self.progress else None

    @property
    def decode_tok_s(self) -> float | None:
        """The server's decode rate: its final timing, else (a request that ended early) the last
        progress line's rate since its first token."""
        if self.eval_tok_s is not None:
            return self.eval_tok_s
        return self.progress[-1].tg if self.progress else None

    @property
    def decode_from(self) -> str:
        """Where :attr:`decode_tok_s` comes from: "timings", "progress" or ""."""
        if self.eval_tok_s is not None:
            return "timings"
        return "progress" if self.progress else ""


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
    starts: list[LogStart] = field(default_factory=list)  # each start's lines (llamarig.serverpool)
    overflows: list[int] = field(default_factory=list)  # lines of 'decode: Context size has been exceeded'
    first_line: int = 1  # the lines of the text this parse covers (a run: its own)
    last_line: int = 0
    exited: bool = False  # a run that said 'cleaning up before exit' (stopped, not killed)
    pid: int | None = None  # the PID a journal's prefix gives
    runs: list[LogParse] = field(default_factory=list)  # the whole log: each run of the server on its own

    @property
    def served(self) -> bool:
        """Whether this run had started serving (its slots initialized, or a request)."""
        return bool(self.starts or self.requests)


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


def _timestamp(line: str) -> float | None:
    m = RE_TIMESTAMP.match(line)
    if m is None:
        return None
    return int(m.group(1)) * 60 + int(m.group(2)) + int(m.group(3)) / 1e3 + int(m.group(4)) / 1e6


@dataclass
class _Line:
    """One line as read: its number, slot/task (None when it names none), the message after the
    slot prefix, and whether it had a slot prefix."""

    no: int
    text: str
    msg: str
    func: str = ""  # the function of a slot line ('print_timing', 'release', ...)
    slot: int | None = None
    task: int | None = None
    slot_line: bool = False
    json_line: bool = False
    t: float | None = None


def unprefix(raw: str) -> tuple[str, int | None]:
    """A line without the journal's prefix, and the PID the prefix names (None: no prefix, none
    named, or a line of systemd's about the unit)."""
    m = RE_JOURNAL.match(raw)
    if m is None:
        return raw, None
    own = m.group(2) is not None and m.group(1) not in JOURNAL_NOT_SERVER
    return raw[m.end():], int(m.group(2)) if own else None


def _read_line(no: int, raw: str) -> _Line:
    line = raw.strip()
    ln = _Line(no, line, line, t=_timestamp(line))
    jm = _json_msg(line)
    if jm is not None:
        ln.msg, obj = jm
        ln.json_line = True
        if isinstance(obj.get("id_slot"), int):
            ln.slot = obj["id_slot"]
            ln.task = obj["id_task"] if isinstance(obj.get("id_task"), int) else -1
        return ln
    kv = RE_KV_SUFFIX.search(line)
    if kv is not None and (ks := RE_KV_SLOT.search(kv.group(1))) is not None:
        kt = RE_KV_TASK.search(kv.group(1))
        ln.slot, ln.task, ln.msg = int(ks.group(1)), int(kt.group(1)) if kt else -1, line[: kv.start()]
    m = RE_SLOT.search(line)
    if m:
        ln.slot, ln.task, ln.msg, ln.slot_line, ln.func = int(m.group(2)), int(m.group(3)), m.group(4), True, m.group(1)
    return ln


class _Parser:
    """The state of one pass over a log (:func:`parse_log_text`)."""

    def __init__(self, path: str, first_line: int = 1) -> None:
        self.res = LogParse(path, first_line=first_line)
        self.by_key: dict[tuple[int, int], LogRequest] = {}
        self.by_task: dict[int, LogRequest] = {}  # the latest request of each task id
        self.last_timing_ctx: tuple[int, int] | None = None  # slot/task of a 'print_timing' line without payload
        self.open_block: LogRequest | None = None  # the request the last timing line went to, until 'total time'
        self.current_by_slot: dict[int, LogRequest] = {}
        self.pending: dict[int, tuple[str, float | None]] = {}  # slot selection seen on a 'task -1' line
        self.starts = StartReader()

    # ---------------------------------------------------------------- requests
    def get(self, slot: int, task: int, no: int) -> LogRequest:
        key = (slot, task)
        if key not in self.by_key:
            return self.new(slot, task, no)
        self.current_by_slot[slot] = self.by_key[key]
        return self.by_key[key]

    def new(self, slot: int, task: int, no: int) -> LogRequest:
        r = LogRequest(slot, task, no)
        self.by_key[(slot, task)] = r
        self.by_task[task] = r
        self.res.requests.append(r)
        self.current_by_slot[slot] = r
        return r

    # ---------------------------------------------------------------- one line
    def feed(self, no: int, raw: str) -> None:
        ln = _read_line(no, raw)
        if not ln.text:
            self.res.empty += 1
            return
        if ln.func.startswith("print_timing") and not ln.msg.strip():
            self.last_timing_ctx = (ln.slot or 0, ln.task or 0)
            self.res.recognised += 1
            return
        known = ln.slot_line or ln.json_line or bool(RE_KNOWN.search(raw)) or bool(RE_OLD_PREFIX.search(ln.text))
        req = self.get(ln.slot, ln.task, no) if ln.slot is not None and ln.task is not None and ln.task >= 0 else None
        if req is not None and req.t_start_s is None:
            req.t_start_s = ln.t
        hit = self.timings(ln, req)
        if req is not None:  # the timings may have opened a new request for the same slot and task
            hit = self.slot_events(ln, self.by_key[(req.slot, req.task)]) or hit
        elif ln.slot is not None:
            hit = self.selection(ln) or hit
        if req is not None and ln.slot in self.pending and not req.selection:
            req.selection, req.lcp_similarity = self.pending.pop(ln.slot)
        hit = self.server_events(ln) or hit
        if hit or known:
            self.res.recognised += 1
        else:
            self.res.skipped += 1

    def timings(self, ln: _Line, req: LogRequest | None) -> bool:
        """Timing lines (possibly on a line of their own after 'print_timing: id … |')."""
        pe, ev, tt = RE_PROMPT_EVAL.search(ln.msg), RE_EVAL.search(ln.msg), RE_TOTAL.search(ln.msg)
        if not (pe or ev or tt):
            return False
        fields = [f for f, x in (("prompt_eval_ms", pe), ("eval_ms", ev), ("total_ms", tt)) if x]
        tgt = self.timing_target(req, fields, ln.no)
        if pe:
            tgt.prompt_eval_ms, tgt.prompt_eval_n, tgt.prompt_tok_s = float(pe.group(1)), int(pe.group(2)), float(pe.group(4))
        if ev:
            tgt.eval_ms, tgt.eval_n, tgt.eval_tok_s = float(ev.group(1)), int(ev.group(2)), float(ev.group(4))
            tgt.outcome = tgt.outcome or "done"
        tgt.line_end = ln.no if tgt.line_end is None else max(tgt.line_end, ln.no)
        tgt.t_end_s = ln.t if ln.t is not None else tgt.t_end_s
        self.open_block = tgt
        if tt:
            tgt.total_ms = float(tt.group(1))
            self.last_timing_ctx = self.open_block = None
        return True

    def timing_target(self, req: LogRequest | None, fields: list[str], no: int) -> LogRequest:
        if req is not None:
            return req if _free(req, fields) else self.new(req.slot, req.task, no)
        if self.last_timing_ctx is not None:
            tgt = self.get(*self.last_timing_ctx, no)
            return tgt if _free(tgt, fields) else self.new(tgt.slot, tgt.task, no)
        if self.open_block is not None and _free(self.open_block, fields):
            return self.open_block
        return _orphan(self.res, self.current_by_slot, fields, no)

    def slot_events(self, ln: _Line, req: LogRequest) -> bool:
        """The lines of a slot's task: its start, prompt, cache, checkpoints, progress, release."""
        msg = ln.msg
        hit = False
        if RE_LAUNCH.search(msg):
            hit = True
        if mm := RE_NEW_PROMPT.search(msg):
            if not _free(req, ["prompt_eval_ms", "eval_ms"]):
                req = self.new(req.slot, req.task, ln.no)  # a task id seen again (after a restart): a new request
            req.n_ctx_slot, req.prompt_tokens = int(mm.group(1)), int(mm.group(3))
            hit = True
        hit = self.cache_events(msg, req) or hit
        hit = self.checkpoint_events(msg, req) or hit
        if (mm := RE_TG_PROGRESS.search(msg)) is not None:
            req.progress.append(Progress(ln.no, ln.t, int(mm.group(1)), float(mm.group(2)), float(mm.group(3))))
            hit = True
        if (mm := RE_RELEASE.search(msg)) is not None:
            req.n_tokens_end = int(mm.group(1))
            req.line_end, req.t_end_s = ln.no, ln.t
            hit = True
        if (mm := RE_DRAFT.search(msg)) is not None:
            req.draft_acceptance = float(mm.group(1))
            req.draft_accepted, req.draft_generated = int(mm.group(2)), int(mm.group(3))
            hit = True
        return hit

    def cache_events(self, msg: str, req: LogRequest) -> bool:
        hit = False
        if (mm := RE_RESTORED.search(msg)) is not None:
            req.restored_n_past = int(mm.group(4)) if mm.group(4) else None
            req.restored_size_mib = float(mm.group(5))
            self.res.checkpoints.restores += 1
            hit = True
        elif (mm := RE_N_PAST.search(msg)) is not None and req.n_past is None:
            req.n_past = int(mm.group(1))
            hit = True
        if (mm := RE_SEQ_RM.search(msg)) is not None and req.prompt_eval_n is None and req.n_past is None:
            req.n_past = int(mm.group(1))
            hit = True
        if (mm := RE_LCP.search(msg)) is not None:
            req.selection, req.lcp_similarity = "LCP similarity", float(mm.group(1))
            hit = True
        elif (mm := RE_SELECT.search(msg)) is not None:
            req.selection = mm.group(1)
            hit = True
        if RE_FORCE.search(msg):
            req.forced_full = True
            self.res.forced_full += 1
            hit = True
        if RE_REUSE.search(msg):
            req.reused_chunks += 1
            hit = True
        return hit

    def checkpoint_events(self, msg: str, req: LogRequest) -> bool:
        ck = self.res.checkpoints
        hit = False
        if (mm := RE_CREATED.search(msg)) is not None:
            ck.created += 1
            ck.sizes_mib.append(float(mm.group(6)))
            ck.kept_by_slot[req.slot] = int(mm.group(1))
            ck.limit = int(mm.group(2))
            req.checkpoints_created += 1
            hit = True
        if (mm := RE_ERASED.search(msg)) is not None:
            ck.erased += 1
            if mm.group(1) == "erased invalidated" and ck.kept_by_slot.get(req.slot):
                ck.kept_by_slot[req.slot] -= 1
            hit = True
        return hit

    def selection(self, ln: _Line) -> bool:
        """task -1 lines (slot selection before the task id is known): remembered for the next task."""
        assert ln.slot is not None
        if (mm := RE_LCP.search(ln.msg)) is not None:
            self.current_by_slot.pop(ln.slot, None)
            self.pending[ln.slot] = ("LCP similarity", float(mm.group(1)))
            return True
        if (mm := RE_SELECT.search(ln.msg)) is not None:
            self.pending[ln.slot] = (mm.group(1), None)
            return True
        return False

    def server_events(self, ln: _Line) -> bool:
        """Server lines: start-up, budget, build, a task's error or cancel, the pool overflowing."""
        res, line, msg = self.res, ln.text, ln.msg
        hit = False
        if (mm := RE_CTX_SLOT.search(line)) is not None:
            res.ctx_slots.append((ln.no, int(mm.group(1))))
        if (st := self.starts.feed(ln.no, line)) is not None:
            res.starts.append(st)
            hit = True
        if (mm := RE_BUDGET.search(line)) is not None:
            res.reasoning_budgets.append((ln.no, int(mm.group(1))))
            hit = True
        if res.build is None and (mm := RE_BUILD.search(msg)) is not None:
            res.build = f"b{mm.group(1)}" + (f"-{mm.group(2) or mm.group(3)}" if (mm.group(2) or mm.group(3)) else "")
            hit = True
        if "decode: " + CTX_EXCEEDED.rstrip(".") in line:
            res.overflows.append(ln.no)
            hit = True
        if (mm := RE_SEND_ERROR.search(line)) is not None:
            r = self.by_task.get(int(mm.group(1)))
            if r is not None:
                r.error = mm.group(2)
                r.outcome = "context_exceeded" if mm.group(2).startswith(CTX_EXCEEDED.rstrip(".")) else "error"
            hit = True
        if (mm := RE_CANCEL.search(line)) is not None:
            r = self.by_task.get(int(mm.group(1)))
            if r is not None and not r.outcome:
                r.outcome = "cancelled"  # after an error the HTTP side cancels too: the error stands
            hit = True
        if "cleaning" in line and RE_RUN_EXIT.search(line):
            res.exited = hit = True
        return hit

    def begins_run(self, line: str, pid: int | None) -> bool:
        """Whether ``line`` (its journal prefix taken off) starts another run of the server
        than the one read so far (see the module)."""
        res = self.res
        if pid is not None and res.pid is not None and pid != res.pid:
            return True
        if not res.served or ("initializing" not in line and "build" not in line):  # most lines: no regex
            return False
        return bool(RE_RUN_START.search(line)) or (bool(res.starts) and MEM_SLOTS.search(line) is not None)

    def finish(self, last_line: int) -> LogParse:
        self.res.last_line = last_line
        self.res.lines = last_line - self.res.first_line + 1
        concurrency(self.res.requests, last_line)
        return self.res


def parse_log_text(text: str, path: str = "<text>") -> LogParse:
    """The log as a whole (every run's requests, in order) and each run of the server in it
    (``runs``), each read on its own."""
    raw_lines = text.splitlines()
    runs: list[LogParse] = []
    p = _Parser(path)
    for no, raw in enumerate(raw_lines, 1):
        line, pid = unprefix(raw)
        if p.begins_run(line, pid):
            runs.append(p.finish(no - 1))
            p = _Parser(path, no)
        if pid is not None:
            p.res.pid = pid
        p.feed(no, line)
    runs.append(p.finish(len(raw_lines)))
    whole = _whole(path, runs, len(raw_lines))
    if text and not text.endswith("\n") and raw_lines and (RE_KNOWN.search(raw_lines[-1]) or RE_SLOT.search(raw_lines[-1])):
        whole.truncated_tail = runs[-1].truncated_tail = True
    return whole


def _whole(path: str, runs: list[LogParse], lines: int) -> LogParse:
    """The whole log from its runs: their requests and events in order, the counts summed; the
    checkpoints kept are the last run's (a restart frees the others)."""
    w = LogParse(path, lines=lines, last_line=lines, runs=runs, exited=runs[-1].exited, pid=runs[-1].pid)
    last = runs[-1].checkpoints
    w.checkpoints = Checkpoints(kept_by_slot=dict(last.kept_by_slot), limit=last.limit)
    for r in runs:
        w.recognised, w.skipped, w.empty = w.recognised + r.recognised, w.skipped + r.skipped, w.empty + r.empty
        w.requests += r.requests
        w.starts += r.starts
        w.ctx_slots += r.ctx_slots
        w.reasoning_budgets += r.reasoning_budgets
        w.overflows += r.overflows
        w.forced_full += r.forced_full
        w.orphan_timings += r.orphan_timings
        w.build = w.build or r.build
        ck = r.checkpoints
        w.checkpoints.created += ck.created
        w.checkpoints.erased += ck.erased
        w.checkpoints.sizes_mib += ck.sizes_mib
        w.checkpoints.restores += ck.restores
    return w


def concurrency(requests: list[LogRequest], last_line: int) -> None:
    """Set each request's ``concurrency``: the most requests active at once during its span
    (first line to last; a request with no end runs to the end of the log). One pass over the
    starts and ends in line order: linear in the requests times the slots."""
    events: list[tuple[int, int, int]] = []  # (line, 0 = start / 1 = end, index)
    for i, r in enumerate(requests):
        if r.slot < 0:
            continue  # anonymous timing blocks of very old builds: no span
        events.append((r.line, 0, i))
        events.append((r.line_end if r.line_end is not None else last_line, 1, i))
    active: set[int] = set()
    for _line, kind, i in sorted(events):
        if kind == 0:
            active.add(i)
            for j in active:
                requests[j].concurrency = max(requests[j].concurrency, len(active))
        else:
            active.discard(i)


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
        raise InputError(_("{path}: cannot read log: {error}").format(path=path, error=os_error(e))) from e
    if size > MAX_BYTES:
        data = data[: data.rfind(b"\n") + 1]
    if b"\x00" in data[:4096]:
        raise InputError(_("{path}: binary file, not a llama-server log").format(path=path))
    return data.decode("utf-8", errors="replace")

