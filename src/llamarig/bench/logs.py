"""``llamarig logs``: a parsed llama-server log (llamarig.bench.logparse) as figures, a
per-request timeline and plain-language findings, each with its method: the typed
:class:`LogsReport` (``to_json()`` is the ``--json`` document, ``"kind": "logs"``).

A log with several runs of the server (a restart appended to the file, a systemd journal) is
read run by run (llamarig.bench.logparse): each run has its own section (its settings, slots and
pool, its findings, its figures: the last run's under the plain names, an earlier run's with
``_run<K>``), and each restart is a finding.

Decode rates are medians of the server's own ``eval time`` lines, and every median says which
concurrency it holds: how many requests were active at once while each decoded (the spans of
llamarig.bench.logparse.concurrency). A slowdown between requests is put down to parallel decoding
when other requests were active at the time, and to depth only between requests that decoded at
the same concurrency and at clearly different depths.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llamarig import __version__
from llamarig.bench.logparse import (
    UNLIMITED_BUDGET,
    Checkpoints,
    LogParse,
    LogRequest,
    parse_log_text,
    read_log,
)
from llamarig.bench.records import Figure, Json, single_figure, stat_figures
from llamarig.bench.result import SCHEMA_VERSION
from llamarig.errors import InputError
from llamarig.i18n import _
from llamarig.serverpool import LogStart

#: a depth difference smaller than this (and than a quarter of the shallower depth) cannot explain
#: a change of decode speed
DEPTH_STEP = 1024
#: decode changes smaller than this (percent) are "about the same"
FLAT_PCT = 2.0
#: timeline rows kept in the document's plot series
SERIES_ROWS = 5000


#: what a comparison can tell in place of the log's own line: the context the slots ran with, the
#: reasoning budget
FACTS = ("context", "budget")


@dataclass(frozen=True)
class LogComparison:
    """What a comparison (a launch script, a plan: llamarig.app.logs) finds in a log: its
    findings, placed first, and the facts of :data:`FACTS` they tell, which the log's own
    findings then do not tell again (one finding per fact)."""

    findings: tuple[str, ...]
    told: frozenset[str] = frozenset()


@dataclass(frozen=True)
class FigureSource:
    """Where figures come from, as their methods name it: the file, or one run of it."""

    en: str
    zh: str

    def __str__(self) -> str:
        return self.en


@dataclass(frozen=True)
class RunSection:
    """One run of llama-server in the log: its lines, how it started and ended, its settings
    (the ``initializing`` line: None when the log begins mid-run), its findings and the suffix
    of its figures' names."""

    run: int
    line: int
    line_end: int
    start: LogStart | None
    exited: bool
    pid: int | None
    build: str | None
    requests: int
    findings: tuple[str, ...]
    suffix: str = ""

    def to_json(self) -> dict[str, Json]:
        st = self.start
        return {"run": self.run, "line": self.line, "line_end": self.line_end, "exited": self.exited,
                "pid": self.pid, "build": self.build, "requests": self.requests, "figures_suffix": self.suffix,
                "server": None if st is None else _server_json(st),
                "settings": run_settings(st) if st is not None else _("its start is not in the log"),
                "findings": list(self.findings)}


def _server_json(st: LogStart) -> dict[str, Json]:
    return {"line": st.line, "n_slots": st.n_slots, "n_ctx_slot": st.n_ctx_slot, "kv_unified": st.kv_unified,
            "pool_tokens": st.pool_tokens}


@dataclass(frozen=True)
class LogsReport:
    """What ``llamarig logs`` found in one log: ``source`` (what was read), ``figures`` (each with
    its method), ``findings`` (catalogue Messages: English in ``to_json()``, the reader's language
    on the screen; a run's own findings prefixed with its number where the log has several), one
    ``timeline`` row per request (with its run), the plot ``series``, and one section per run of
    the server (``runs``)."""

    source: Mapping[str, Json]
    figures: tuple[Figure, ...]
    findings: tuple[str, ...]
    timeline: tuple[Mapping[str, Json], ...]
    series: Mapping[str, Json] = field(default_factory=dict)
    runs: tuple[RunSection, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "kind": "logs", "tool": f"llamarig {__version__}",
                "source": dict(self.source), "figures": [f.to_json() for f in self.figures],
                "findings": list(self.findings), "timeline": [dict(t) for t in self.timeline],
                "series": dict(self.series), "runs": [r.to_json() for r in self.runs], "errors": []}


def logs_report(path: Path, compare: Callable[[LogParse], LogComparison] | None = None) -> LogsReport:
    """Read ``path``; ``compare``: findings that set the log against what was meant or planned (a
    launch script, a plan: the caller's, llamarig.app.logs), placed first; it is given the last
    run of the server in the log (the one the script started last)."""
    p = parse_log_text(read_log(path), str(path))
    if p.recognised == 0:
        what = "empty" if p.lines == p.empty else "not a llama-server log"
        raise InputError(_("{path}: {what}: no line llama-server writes was found ({lines} line(s))").format(
            path=path, what=what, lines=p.lines))
    cmp = compare(p.runs[-1] if len(p.runs) > 1 else p) if compare is not None else LogComparison(())
    sections = _sections(p, cmp.told)
    figures = tuple(f for _s, figs in sections for f in figs)
    findings = list(cmp.findings) + restart_findings(p)
    if len(p.runs) == 1:
        findings += sections[0][0].findings
    else:
        findings += [_("run {k}: {finding}").format(k=s.run, finding=f) for s, _f in sections for f in s.findings]
    start = p.starts[-1] if p.starts else None
    source: dict[str, Json] = {"path": str(path), "lines": p.lines, "recognised": p.recognised, "skipped": p.skipped,
              "empty": p.empty, "build": p.build, "truncated_tail": p.truncated_tail, "requests": len(p.requests),
              "orphan_timings": p.orphan_timings, "runs": len(p.runs),
              "server": None if start is None else _server_json(start)}
    rows = tuple(timeline_row(r, k) for k, run in enumerate(p.runs, 1) for r in run.requests)
    return LogsReport(source, figures, tuple(findings), rows, _series(p, rows), tuple(s for s, _f in sections))


def _sections(p: LogParse, told: frozenset[str]) -> list[tuple[RunSection, list[Figure]]]:
    """Each run analysed on its own: its section and its figures (an earlier run's names end in
    ``_run<K>``)."""
    name, n = Path(p.path).name, len(p.runs)
    out: list[tuple[RunSection, list[Figure]]] = []
    for k, run in enumerate(p.runs, 1):
        last = k == n
        scope = FigureSource(name, name) if n == 1 else FigureSource(
            f"{name}, run {k} of {n} (lines {run.first_line}-{run.last_line})",
            f"{name} 第 {k} 次运行（共 {n} 次，第 {run.first_line}-{run.last_line} 行）")
        figs, findings = analyse(run, scope, told=told if last else frozenset())
        findings += [] if last else _unfinished(run)
        suffix = "" if last else f"_run{k}"
        figs = [replace(f, name=f.name + suffix, params={**f.params, "run": k}) if n > 1 else f for f in figs]
        st = run.starts[-1] if run.starts else None
        out.append((RunSection(k, run.first_line, run.last_line, st, run.exited, run.pid, run.build,
                               len(run.requests), tuple(findings), suffix), figs))
    return out


def run_settings(st: LogStart) -> str:
    """A run's slots and pool, as its ``initializing`` line has them."""
    if st.kv_unified:
        return _("{slots} slot(s) sharing one KV pool of {pool} cells, n_ctx_slot {ctx}").format(
            slots=st.n_slots, pool=st.pool_tokens, ctx=st.n_ctx_slot)
    return _("{slots} slot(s) of {ctx} cells each, n_ctx_slot {ctx}").format(slots=st.n_slots, ctx=st.n_ctx_slot)


def restart_findings(p: LogParse) -> list[str]:
    """Each restart of the server in the log: where, how the run before ended, what changed;
    and a first run that the log begins in the middle of."""
    runs = p.runs
    if len(runs) < 2:
        return []
    out: list[str] = []
    if runs[0].served and not runs[0].starts:
        out.append(_("run 1 (lines {a}-{b}) begins mid-run: its start, and so its slots and pool, are not in the "
                     "log").format(a=runs[0].first_line, b=runs[0].last_line))
    for k in range(1, len(runs)):
        before, run = runs[k - 1], runs[k]
        ended = (_("run {k} stopped cleanly ('cleaning up before exit')").format(k=k) if before.exited else
                 _("run {k} ended without 'cleaning up before exit' (killed, crashed, or its log cut)").format(k=k))
        st = run.starts[-1] if run.starts else None
        now = run_settings(st) if st is not None else _("its slots are not in the log")
        out.append(_("line {line}: llama-server started again (run {n} of {total}) after {ended}; now {now}{changed}; "
                     "task ids start again at 0, so each run is read on its own").format(
            line=run.first_line, n=k + 1, total=len(runs), ended=ended, now=now,
            changed=_changes(before.starts[-1] if before.starts else None, st)))
    return out


def _changes(a: LogStart | None, b: LogStart | None) -> str:
    """What a restart changed of the slots and the pool, e.g. '; before, 4 slot(s) ...'."""
    if a is None or b is None:
        return ""
    if (a.n_slots, a.n_ctx_slot, a.kv_unified, a.pool_tokens) == (b.n_slots, b.n_ctx_slot, b.kv_unified, b.pool_tokens):
        return _(", as before")
    return _("; before, {before}").format(before=run_settings(a))


def _unfinished(run: LogParse) -> list[str]:
    """The requests a run left running when it ended (a restart followed): no timings, no end."""
    left = [r for r in run.requests if r.slot >= 0 and not r.outcome and r.eval_tok_s is None and r.line_end is None]
    if not left:
        return []
    return [_("{n} request(s) were still running when this run ended (tasks {tasks}): the server went away before "
              "they finished").format(n=len(left), tasks=", ".join(str(r.task) for r in left[:8]))]


# ---------------------------------------------------------------------------- the analysis
def analyse(p: LogParse, src: FigureSource | None = None, told: frozenset[str] = frozenset()) -> tuple[list[Figure], list[str]]:
    """Figures and plain-language findings from a parse (one run of the server); ``src``: where
    the methods say the figures come from (the file's name); ``told``: facts a comparison told
    already (:data:`FACTS`)."""
    src = src or FigureSource(Path(p.path).name, Path(p.path).name)
    dec = _decoded(p.requests)
    figs = _decode_figures(dec, src) + _prefill_figures(p.requests, src) + _task_figures(dec, src)
    findings = _speed_findings(dec) + _ending_findings(p)
    ck_figs, ck_findings = _checkpoint_part(p.checkpoints, src)
    figs += ck_figs
    findings += ck_findings + _cache_findings(p) + _prefill_size_findings(p.requests)
    figs += _draft_figures(p.requests, src)
    findings += _run_findings(p, told)
    return figs, findings


def _decoded(requests: Sequence[LogRequest]) -> list[LogRequest]:
    """Requests with a final decode timing over more than one token."""
    return [r for r in requests if r.eval_tok_s is not None and (r.eval_n or 0) > 1]


def _mix(reqs: Sequence[LogRequest]) -> dict[str, int]:
    """How many requests decoded alone, how many with others active, and the most at once."""
    alone = sum(1 for r in reqs if r.concurrency <= 1)
    return {"alone": alone, "parallel": len(reqs) - alone, "max_concurrency": max((r.concurrency for r in reqs), default=1)}


def _mix_text(mix: dict[str, int]) -> str:
    """The concurrency a median holds, for its method (English, as every method)."""
    if not mix["parallel"]:
        return "every request decoded alone (no other request active at the time)"
    if not mix["alone"]:
        return f"every request decoded with others active (up to {mix['max_concurrency']} at once)"
    return (f"{mix['alone']} decoded alone, {mix['parallel']} with others active (up to {mix['max_concurrency']} "
            "at once): the median mixes both")


def _decode_figures(dec: list[LogRequest], src: FigureSource) -> list[Figure]:
    if not dec:
        return []
    mix = _mix(dec)
    method = (f"'eval time = … tokens per second' lines of {src} (the server's own figure; build 11434 computes "
              f"(n_gen − 1) ÷ t, older builds n ÷ t); concurrency: {_mix_text(mix)}")
    zh = (f"{src.zh} 中 'eval time = … tokens per second' 行的速度（服务器自己算的数：构建 11434 为 (n_gen − 1) ÷ t，"
          "旧构建为 n ÷ t）；并发：" + ("每个请求都是单独解码（当时没有其他请求在跑）" if not mix["parallel"] else
                                     f"{mix['alone']} 个单独解码，{mix['parallel']} 个解码时有其他请求在跑（最多 "
                                     f"{mix['max_concurrency']} 个同时），中位数两者都算"))
    figs = stat_figures("log_decode_tok_s", [r.eval_tok_s for r in dec if r.eval_tok_s is not None], "tok/s", method,
                        stats=("median", "p10", "max"), scenario="logs", params=dict(mix), method_zh=zh)
    if mix["alone"] and mix["parallel"]:
        alone = [r.eval_tok_s for r in dec if r.concurrency <= 1 and r.eval_tok_s is not None]
        par = [r.eval_tok_s for r in dec if r.concurrency > 1 and r.eval_tok_s is not None]
        figs += stat_figures("log_decode_tok_s_alone", alone, "tok/s",
                             f"'eval time' lines of {src} of the requests that decoded with no other request active",
                             stats=("median",), scenario="logs", params={"requests": len(alone)},
                             method_zh="日志中的“eval time”行：解码时没有其他请求在跑的请求")
        figs += stat_figures("log_decode_tok_s_parallel", par, "tok/s",
                             f"'eval time' lines of {src} of the requests that decoded while others were active "
                             f"(up to {mix['max_concurrency']} at once); per request, not their sum",
                             stats=("median",), scenario="logs",
                             params={"requests": len(par), "max_concurrency": mix["max_concurrency"]},
                             method_zh="日志中的“eval time”行：解码时有其他请求同时在跑的请求（单个请求的速度，不是总和）")
    return figs


def _prefill_figures(requests: Sequence[LogRequest], src: FigureSource) -> list[Figure]:
    pre = [r.prompt_tok_s for r in requests if r.prompt_tok_s is not None]
    if not pre:
        return []
    return stat_figures("log_prefill_tok_s", pre, "tok/s",
                        f"'prompt eval time = … tokens per second' lines of {src}; only tokens actually processed "
                        "(cached tokens excluded)", stats=("median", "max"), scenario="logs",
                        method_zh="日志中的“prompt eval time”行（不含缓存命中的 token）")


def _task_figures(dec: list[LogRequest], src: FigureSource) -> list[Figure]:
    figs: list[Figure] = []
    seen: set[str] = set()
    for r in dec:
        if r.depth is None:
            continue
        name = f"log_decode_tok_s_task{r.task}"
        name = name if name not in seen else f"{name}_line{r.line}"  # task ids repeat after a restart
        seen.add(name)
        figs.append(single_figure(
            name, r.eval_tok_s, "tok/s",
            f"{src} line {r.line}: slot {r.slot} task {r.task}, eval {r.eval_n} tokens in {r.eval_ms} ms at depth {r.depth} "
            f"with {r.concurrency} request(s) active at once "
            "(depth = task.n_tokens from the 'new prompt' line, else 'stop processing' n_tokens − generated + 1)",
            samples=[r.eval_tok_s] if r.eval_tok_s is not None else [], scenario="logs",
            params={"depth": r.depth, "slot": r.slot, "task": r.task, "prompt_eval_n": r.prompt_eval_n,
                    "cached": r.cached, "concurrency": r.concurrency},
            method_zh=f"{src.zh} 第 {r.line} 行：槽位 {r.slot} 任务 {r.task}，深度 {r.depth} 时 {r.eval_ms} ms 生成 {r.eval_n} 个 "
                      f"token，同时在跑 {r.concurrency} 个请求（深度 = 'new prompt' 行的 task.n_tokens，没有时取 'stop processing' "
                      "行的 n_tokens − 生成数 + 1）",
        ))
    return figs


def _median_rate(reqs: Sequence[LogRequest]) -> float:
    return statistics.median(r.eval_tok_s for r in reqs if r.eval_tok_s is not None)


def _speed_findings(dec: list[LogRequest]) -> list[str]:
    """Concurrency first (the requests that decoded alone against those that decoded while others
    were active), then depth among requests at the same concurrency."""
    out: list[str] = []
    alone = [r for r in dec if r.concurrency <= 1]
    par = [r for r in dec if r.concurrency > 1]
    if alone and par:
        out.append(_parallel_finding(alone, par))
    group = alone if len(alone) >= 2 else max((g for g in _by_concurrency(par).values()), key=len, default=[])
    if len(group) >= 2:
        out += _depth_finding(group)
    return out


def _by_concurrency(reqs: Sequence[LogRequest]) -> dict[int, list[LogRequest]]:
    out: dict[int, list[LogRequest]] = {}
    for r in reqs:
        out.setdefault(r.concurrency, []).append(r)
    return out


def _depth_range(reqs: Sequence[LogRequest]) -> str:
    ds = [r.depth for r in reqs if r.depth is not None]
    if not ds:
        return "?"
    return f"{min(ds):,}" if min(ds) == max(ds) else f"{min(ds):,}–{max(ds):,}"


def _parallel_finding(alone: list[LogRequest], par: list[LogRequest]) -> str:
    va, vp = _median_rate(alone), _median_rate(par)
    most = max(r.concurrency for r in par)
    pct = 100.0 * (va - vp) / va if va else 0.0
    fields = {"va": f"{va:.2f}", "vp": f"{vp:.2f}", "na": len(alone), "np": len(par), "most": most,
              "pct": f"{abs(pct):.1f}", "depths": _depth_range(alone + par)}
    if pct > FLAT_PCT:
        return _("decode {va} tok/s per request while it decoded alone ({na} requests) vs {vp} tok/s while other "
                 "requests were active at the same time ({np} requests, up to {most} at once): {pct} % slower per "
                 "request. Parallel decoding shares every step between the slots, so each stream gets a part of "
                 "the speed; not depth (depths {depths} tokens)").format(**fields)
    if pct < -FLAT_PCT:
        return _("decode {vp} tok/s per request while other requests were active ({np} requests, up to {most} at "
                 "once) vs {va} tok/s alone ({na} requests): {pct} % faster in parallel, so something else changed "
                 "between these requests (load on the machine, clocks)").format(**fields)
    return _("decode about the same alone ({va} tok/s, {na} requests) and with other requests active ({vp} tok/s, "
             "{np} requests, up to {most} at once)").format(**fields)


def _depth_finding(group: list[LogRequest]) -> list[str]:
    pts = sorted(((r.depth, r.eval_tok_s) for r in group if r.depth is not None and r.eval_tok_s is not None),
                 key=lambda x: x[0])
    if len(pts) < 2:
        return []
    (d0, v0), (d1, v1) = pts[0], pts[-1]
    if not v0:
        return []
    pct = 100.0 * (v0 - v1) / v0
    most = max(r.concurrency for r in group)
    how = _("each decoding alone") if most <= 1 else _("each with {n} requests active at once").format(n=most)
    f = {"v0": f"{v0:.2f}", "v1": f"{v1:.2f}", "d0": f"{d0:,}", "d1": f"{d1:,}", "pct": f"{abs(pct):.1f}",
         "change": f"{-pct:+.1f}", "how": how}
    if d1 - d0 < max(DEPTH_STEP, d0 // 4):
        if abs(pct) <= 10 * FLAT_PCT:
            return []
        return [_("decode varied {pct} % ({v0} vs {v1} tok/s) between requests at about the same depth ({d0} and "
                  "{d1} tokens, {how}): not depth; the load on the machine or its clocks changed").format(**f)]
    if pct > FLAT_PCT:
        return [_("decode fell from {v0} to {v1} tok/s ({pct} %) as depth grew from {d0} to {d1} tokens ({how}): "
                  "expected, every generated token reads the whole KV cache, so decode slows as the context "
                  "fills").format(**f)]
    if pct < -FLAT_PCT:
        return [_("decode rose from {v0} to {v1} tok/s as depth grew from {d0} to {d1} tokens ({how}): something "
                  "else changed between these requests (load, clocks)").format(**f)]
    return [_("decode {v0} tok/s at depth {d0} vs {v1} tok/s at depth {d1} ({change} %, {how}): essentially flat "
              "over this range; KV reads grow with depth, but here weight reads dominate").format(**f)]


def _ending_findings(p: LogParse) -> list[str]:
    """How requests ended, when not with their answer: the shared pool running out, an error, a cancel."""
    out: list[str] = []
    over = [r for r in p.requests if r.outcome == "context_exceeded"]
    if over:
        out.append(_overflow_finding(p, over))
    errors = [r for r in p.requests if r.outcome == "error"]
    if errors:
        out.append(_("{n} request(s) ended with an error: {error} (tasks {tasks})").format(
            n=len(errors), error=errors[0].error, tasks=", ".join(str(r.task) for r in errors[:5])))
    cancelled = [r for r in p.requests if r.outcome == "cancelled"]
    if cancelled:
        gen = [f"{r.task} ({r.generated if r.generated is not None else '?'})" for r in cancelled[:5]]
        out.append(_("{n} request(s) were cancelled before they finished ('cancel task' without an error: the client "
                     "went away or stopped reading); task (tokens generated): {list}").format(
            n=len(cancelled), list=", ".join(gen)))
    return out


def _overflow_finding(p: LogParse, over: list[LogRequest]) -> str:
    line = p.overflows[0] if p.overflows else over[0].line_end or over[0].line
    start = next((st for st in reversed(p.starts) if st.line < line), None)
    held = sum(r.n_tokens_end or 0 for r in over)
    base = _("{n} requests ended with 'Context size has been exceeded' at line {line}, all at once (tasks {tasks}): "
             "llama-server ends every busy slot when a decode finds no free cell").format(
        n=len(over), line=line, tasks=", ".join(str(r.task) for r in over[:8]))
    if start is not None and start.kv_unified:
        return base + _("; the {slots} slots share one KV pool of {pool} cells (kv_unified, n_ctx_slot {ctx} each) "
                        "and these requests had grown to {held} tokens together ('stop processing' n_tokens): each "
                        "fit its own slot's context, together they did not fit the pool").format(
            slots=start.n_slots, pool=start.pool_tokens, ctx=start.n_ctx_slot, held=held)
    return base


def _checkpoint_part(ck: Checkpoints, src: FigureSource) -> tuple[list[Figure], list[str]]:
    if not ck.sizes_mib:
        return [], []
    size = statistics.median(ck.sizes_mib)
    kept = sum(ck.kept_by_slot.values())
    ram = kept * size
    figs = [
        single_figure("checkpoint_size_mib", size, "MiB",
                      f"'created context checkpoint K of N (… size = S MiB)' lines of {src}: median S",
                      samples=ck.sizes_mib, scenario="logs",
                      method_zh=f"{src.zh} 中 'created context checkpoint K of N (… size = S MiB)' 行的 S 的中位数"),
        single_figure("checkpoints_kept", float(kept), "checkpoints",
                      f"last 'created context checkpoint K of N' K per slot in {src}, minus later 'erased invalidated' lines",
                      scenario="logs", params={"by_slot": {str(k): v for k, v in ck.kept_by_slot.items()}, "limit": ck.limit,
                                               "created": ck.created, "erased": ck.erased},
                      method_zh=f"{src.zh} 中每个槽位最后一行 'created context checkpoint K of N' 的 K，减去之后 'erased invalidated' 的行数"),
        single_figure("checkpoint_host_ram_mib", ram, "MiB",
                      "checkpoints kept × median checkpoint size (checkpoints live in host RAM: server_prompt_checkpoint "
                      "data, tools/server/server-common.h)",
                      scenario="logs", params={"checkpoints_kept": kept, "checkpoint_size_mib": size},
                      method_zh="保留的检查点数 × 检查点大小的中位数（检查点在主机内存中：server_prompt_checkpoint 数据，tools/server/server-common.h）"),
    ]
    line = _("each context checkpoint is {size} MiB; {kept} kept → {ram} of host RAM").format(
        size=f"{size:.1f}" if size >= 1 else f"{size:.3f}", kept=kept, ram=_gib(ram) if size >= 1 else f"{ram:.3f} MiB")
    if ck.limit:
        at_limit = _gib(ck.limit * size) if size >= 1 else f"{ck.limit * size:.3f} MiB"
        line += _(" (the limit of {limit} per slot, --ctx-checkpoints, would take {ram})").format(limit=ck.limit, ram=at_limit)
    return figs, [line]


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def _cache_findings(p: LogParse) -> list[str]:
    out: list[str] = []
    restored = [r for r in p.requests if r.restored_n_past is not None and (r.prompt_tokens or r.depth)]
    for r in restored[:3]:
        n_past = r.restored_n_past or 0
        total = r.prompt_tokens or r.depth or 0
        done = r.prompt_eval_n if r.prompt_eval_n is not None else total - n_past
        out.append(_("task {task} restored a context checkpoint at {n_past:,} tokens: only {done:,} of {total:,} "
                     "prompt tokens were processed").format(task=r.task, n_past=n_past, done=done, total=total))
    if len(restored) > 3:
        out.append(_("… {n} requests in all restored a context checkpoint instead of re-processing their "
                     "prompt").format(n=len(restored)))
    if p.forced_full:
        out.append(_("{n} request(s) re-processed the whole prompt ('forcing full prompt re-processing'): "
                     "no usable checkpoint (SWA/hybrid/recurrent memory)").format(n=p.forced_full))
    return out


def _prefill_size_findings(requests: Sequence[LogRequest]) -> list[str]:
    sized = [r for r in requests if r.prompt_tok_s is not None and (r.prompt_eval_n or 0) >= 16]
    if len(sized) < 2:
        return []
    small = min(sized, key=lambda r: r.prompt_eval_n or 0)
    big = max(sized, key=lambda r: r.prompt_eval_n or 0)
    if (big.prompt_eval_n or 0) < 4 * max(1, small.prompt_eval_n or 0) or not (small.prompt_tok_s and big.prompt_tok_s):
        return []
    return [_("prefill {r0:.1f} tok/s for {n0} new tokens vs {r1:.1f} tok/s for {n1}: short prompts do not fill a "
              "ubatch, so their rate is not the GPU's prefill speed").format(
        r0=small.prompt_tok_s, n0=small.prompt_eval_n, r1=big.prompt_tok_s, n1=big.prompt_eval_n)]


def _draft_figures(requests: Sequence[LogRequest], src: FigureSource) -> list[Figure]:
    drafts = [r for r in requests if r.draft_generated]
    if not drafts:
        return []
    acc = sum(r.draft_accepted or 0 for r in drafts) / sum(r.draft_generated or 0 for r in drafts)
    return [single_figure("log_spec_acceptance", acc, "ratio",
                          f"Σ accepted ÷ Σ generated over 'draft acceptance = … (A accepted / G generated)' lines of {src}",
                          samples=[r.draft_acceptance for r in drafts if r.draft_acceptance is not None], scenario="logs",
                          method_zh=f"{src.zh} 中 'draft acceptance = … (A accepted / G generated)' 行：Σ accepted ÷ Σ generated")]


def _run_findings(p: LogParse, told: frozenset[str] = frozenset()) -> list[str]:
    """What ran (reasoning budget, slot context: unless a comparison ``told`` them) and how the
    file read."""
    out: list[str] = []
    if "budget" not in told and any(b == UNLIMITED_BUDGET for _, b in p.reasoning_budgets):
        at = next(n for n, b in p.reasoning_budgets if b == UNLIMITED_BUDGET)
        out.append(_("line {line}: reasoning budget {budget} tokens (INT_MAX): the server got no --reasoning-budget, so "
                     "thinking is unlimited; if the launch script sets one, that flag never reached llama-server "
                     "(`llamarig check SCRIPT` shows where the command is cut off)").format(line=at, budget=UNLIMITED_BUDGET))
    slots = sorted({c for _, c in p.ctx_slots})
    if slots and "context" not in told:
        out.append(_("the server ran with n_ctx_slot = {slots} tokens per slot (first at line {line})").format(
            slots=", ".join(str(c) for c in slots), line=p.ctx_slots[0][0]))
    if p.skipped:
        out.append(_("{skipped} of {lines} lines were not llama-server output and were skipped").format(
            skipped=p.skipped, lines=p.lines))
    if p.truncated_tail:
        out.append(_("the file ends mid-line (truncated log): the last line was not parsed"))
    incomplete = [r for r in p.requests if r.prompt_tokens is not None and r.eval_tok_s is None and not r.outcome]
    if incomplete:
        out.append(_("{n} request(s) have no timing lines (still running or cut off)").format(n=len(incomplete)))
    return out


# ---------------------------------------------------------------------------- the timeline
def timeline_row(r: LogRequest, run: int = 1) -> dict[str, Any]:
    """One request of the timeline: its run of the server, its slot and task, depth and cache, rates, how it ended
    (``outcome``) and how many requests were active at once with it (``concurrency``). A request
    that ended early has its decode rate and tokens from its last progress line (``decode_from``)."""
    return {"run": run, "slot": r.slot, "task": r.task, "line": r.line, "depth": r.depth, "prompt_tokens": r.prompt_tokens,
            "cached": r.cached, "prompt_eval_n": r.prompt_eval_n, "prefill_tok_s": r.prompt_tok_s,
            "eval_n": r.generated, "decode_tok_s": r.decode_tok_s, "decode_from": r.decode_from or None,
            "restored_checkpoint": r.restored_n_past, "selection": r.selection, "lcp_similarity": r.lcp_similarity,
            "checkpoints_created": r.checkpoints_created, "n_tokens_end": r.n_tokens_end,
            "outcome": r.outcome or None, "error": r.error or None, "concurrency": r.concurrency,
            "line_end": r.line_end, "t_start_s": r.t_start_s, "t_end_s": r.t_end_s}


def _series(p: LogParse, rows: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    dec = _decoded(p.requests)
    depth_pts = sorted(((r.depth, r.eval_tok_s) for r in dec if r.depth is not None), key=lambda x: x[0])
    pre = sorted((r for r in p.requests if r.prompt_tok_s is not None and r.prompt_eval_n),
                 key=lambda r: r.prompt_eval_n or 0)
    lines = sorted(((g, r) for r in p.requests for g in r.progress), key=lambda x: x[0].line)[:SERIES_ROWS]
    progress = [{"slot": r.slot, "task": r.task, "line": g.line, "t_s": g.t_s, "n_gen": g.n_gen, "tg": g.tg,
                 "tg_3s": g.tg_3s} for g, r in lines]
    return {
        "timeline": list(rows[:SERIES_ROWS]),
        "decode_vs_depth": [{"depth": d, "tok_s": v} for d, v in depth_pts],
        "prefill_vs_length": [{"length": r.prompt_eval_n, "tok_s": r.prompt_tok_s} for r in pre],
        "progress": progress,
    }


def outcome_words() -> dict[str, str]:
    """The outcome of a timeline row in the reader's language (the JSON keeps the English key)."""
    return {"done": _("done"), "cancelled": _("cancelled"), "context_exceeded": _("context exceeded"),
            "error": _("error")}
