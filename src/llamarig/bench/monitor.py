"""Interference and context: poll ``/slots`` during a run, scrape ``/metrics`` before and
after, detect foreign work and restarts.

Server facts (vendored llama.cpp build 11434):
- ``/slots`` is on by default (``--no-slots`` disables it, 501); each slot has ``id``,
  ``is_processing``, ``id_task`` (tools/server/server-context.cpp ``server_slot::to_json``).
- ``/metrics`` needs ``--metrics`` (501 otherwise); names carry the ``llamacpp:`` prefix; the
  response header ``Process-Start-Time-Unix`` is the server's start time
  (server-context.cpp, ``handle_metrics``). Counters grow when a request *finishes*.
- Every ``/metrics`` scrape resets the two rate gauges, so we only use counter deltas.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from llamarig.bench.client import BenchClient
from llamarig.bench.records import note_text
from llamarig.i18n import N_

_METRIC_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {name (with labels, 'llamacpp:' prefix removed): value}. Tolerant:
    unknown lines are skipped (metric formatting has changed between builds, llama.cpp#17384)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _METRIC_RE.match(line)
        if not m:
            continue
        name = m.group(1).removeprefix("llamacpp:") + (m.group(2) or "")
        try:
            out[name] = float(m.group(3))
        except ValueError:
            continue
    # a proxy in front (e.g. `llamarig gateway`) re-exports the backend's samples with a label
    # (`{backend="..."}`): when no unlabelled sample exists, the sum over labels stands for it
    summed: dict[str, float] = {}
    for name, v in out.items():
        base, brace, _ = name.partition("{")
        if brace:
            summed[base] = summed.get(base, 0.0) + v
    for base, v in summed.items():
        out.setdefault(base, v)
    return out


@dataclass
class Scrape:
    t: float
    values: dict[str, float]
    start_time: str | None


@dataclass
class InterferenceEvent:
    t: float
    kind: str  # foreign_slot | excess_processing | deferred | restart | endpoint_error
    detail: str
    slot: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"t_s": round(self.t, 3), "kind": self.kind, "detail": self.detail, "slot": self.slot}


@dataclass
class Tracker:
    """What *we* have in flight: the monitor compares it with what ``/slots`` shows."""

    in_flight: int = 0
    pinned: dict[int, int] = field(default_factory=dict)  # slot id -> our requests on it
    unpinned: int = 0

    def start(self, slot: int | None) -> None:
        self.in_flight += 1
        if slot is None:
            self.unpinned += 1
        else:
            self.pinned[slot] = self.pinned.get(slot, 0) + 1

    def end(self, slot: int | None) -> None:
        self.in_flight -= 1
        if slot is None:
            self.unpinned -= 1
        else:
            self.pinned[slot] -= 1
            if self.pinned[slot] <= 0:
                del self.pinned[slot]


@dataclass(frozen=True)
class SlotRuleState:
    """What :func:`judge_slots` remembers between two ``/slots`` polls."""

    suspect: Mapping[int, int] = field(default_factory=dict)  # slot -> consecutive suspicious polls
    excess_streak: int = 0  # consecutive polls with more busy slots than requests in flight
    last_task: Mapping[int, int] = field(default_factory=dict)  # slot -> last task id seen


@dataclass(frozen=True)
class SlotJudgement:
    state: SlotRuleState
    events: tuple[InterferenceEvent, ...]
    foreign_now: bool  # this poll saw confirmed foreign work
    foreign_prev: bool  # ... and it was already there at the previous poll


def judge_slots(state: SlotRuleState, slots: list[dict[str, Any]], *, in_flight: int,
                pinned: Mapping[int, int], unpinned: int, t: float) -> SlotJudgement:
    """The interference rule, pure: one ``/slots`` answer against the requests *we* have in
    flight (``pinned``: slot id -> our requests on it; ``unpinned``: ours on any slot).
    Used by bench's :class:`Monitor` and by ``llamarig top`` (where "we" is the gateway).

    1) a slot busy although none of our requests is pinned to it, while all of ours are
       pinned: unambiguous, confirmed at two consecutive polls (a slot is released a little
       after the final chunk);
    2) more busy slots than requests in flight (unpinned requests): three consecutive polls;
    3) task ids only grow (server_queue ids) and an idle slot keeps its last one, so a big drop
       on the same slot means a new process (a restart).
    """
    events: list[InterferenceEvent] = []
    last_task = _task_ids(state, slots, t, events)
    busy = [s for s in slots if s.get("is_processing")]
    suspect: dict[int, int] = {}
    now = prev_too = False
    if unpinned == 0:
        suspect, now, prev_too = _unpinned_busy(state, busy, pinned, t, events)
    streak = 0
    if unpinned > 0 and len(busy) > in_flight:
        streak = state.excess_streak + 1
        now = now or streak >= 3
        if streak == 3:
            events.append(InterferenceEvent(t, "excess_processing", note_text(N_("{busy} slots busy but only {in_flight} llamarig requests in flight"), busy=len(busy), in_flight=in_flight)))
    return SlotJudgement(SlotRuleState(suspect, streak, last_task), tuple(events), now, prev_too)


def _task_ids(state: SlotRuleState, slots: list[dict[str, Any]], t: float,
              events: list[InterferenceEvent]) -> dict[int, int]:
    """Rule 3: each slot's last task id; one that went back by half is a restart."""
    last_task = dict(state.last_task)
    for s in slots:
        tid, sid = s.get("id_task"), s.get("id")
        if isinstance(tid, int) and tid >= 0 and isinstance(sid, int):
            prev = last_task.get(sid, -1)
            if prev > 100 and tid < prev // 2:
                events.append(InterferenceEvent(t, "restart", note_text(N_("slot {slot}: task ids went back from {prev} to {now}"), slot=sid, prev=prev, now=tid), sid))
            last_task[sid] = tid
    return last_task


def _unpinned_busy(state: SlotRuleState, busy: list[dict[str, Any]], pinned: Mapping[int, int], t: float,
                   events: list[InterferenceEvent]) -> tuple[dict[int, int], bool, bool]:
    """Rule 1: busy slots none of our (all pinned) requests is on; (suspects, now, seen before too)."""
    suspect: dict[int, int] = {}
    now = prev_too = False
    for s in busy:
        sid = s.get("id")
        if not isinstance(sid, int) or sid in pinned:
            continue
        n = suspect[sid] = state.suspect.get(sid, 0) + 1
        if n >= 2:
            now = True
            prev_too = prev_too or n == 2
        if n == 2:
            events.append(InterferenceEvent(t, "foreign_slot", note_text(N_("slot {slot} busy with task {task} that llamarig did not start"), slot=sid, task=s.get("id_task")), sid))
    return suspect, now, prev_too


class Monitor:
    """Background poller of ``/slots`` (and ``/health`` for restarts)."""

    def __init__(self, client: BenchClient, tracker: Tracker, *, interval_s: float = 0.2) -> None:
        self.client = client
        self.tracker = tracker
        self.interval_s = interval_s
        self.events: list[InterferenceEvent] = []
        self.slots_available: bool | None = None
        self.slots_reason = ""
        self.metrics_available: bool | None = None
        self.metrics_reason = ""
        self.n_polls = 0
        self.poll_failures = 0
        self.last_poll_error = ""
        self.max_busy = 0
        self.max_deferred = 0.0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._rule = SlotRuleState()
        self.scrapes: list[Scrape] = []
        self.busy_series: list[tuple[float, int, int]] = []  # t, busy slots, ours in flight
        self.foreign_times: list[float] = []  # every poll that saw confirmed foreign work
        self._prev_t = 0.0

    # ------------------------------------------------------------------ /metrics
    async def scrape(self) -> Scrape | None:
        try:
            res = await self.client.get("/metrics", timeout=10)
        except Exception as e:  # noqa: BLE001 - any failure means "not available"
            self.metrics_available = False
            self.metrics_reason = note_text(N_("GET /metrics failed: {error}"), error=type(e).__name__)
            return None
        if res.status != 200 or not isinstance(res.body, str):
            self.metrics_available = False
            self.metrics_reason = (
                note_text(N_("GET /metrics answered HTTP {status} (llama-server needs --metrics)"), status=res.status)
                if res.status in (404, 501)
                else note_text(N_("GET /metrics answered HTTP {status}"), status=res.status)
            )
            return None
        self.metrics_available = True
        s = Scrape(self.client_time(), parse_metrics(res.body), res.headers.get("Process-Start-Time-Unix"))
        if self.scrapes and s.start_time and self.scrapes[-1].start_time and s.start_time != self.scrapes[-1].start_time:
            self.events.append(
                InterferenceEvent(s.t, "restart", note_text(N_("Process-Start-Time-Unix changed {before} -> {after}"), before=self.scrapes[-1].start_time, after=s.start_time))
            )
        self.max_deferred = max(self.max_deferred, s.values.get("requests_deferred", 0.0))
        self.scrapes.append(s)
        return s

    def client_time(self) -> float:
        return time.perf_counter() - self.client.t0

    # ------------------------------------------------------------------ /slots
    async def probe_slots(self) -> list[dict[str, Any]] | None:
        """One GET /slots. A missing endpoint (404/501, --no-slots) disables polling; a
        transient failure (server busy, dropped connection) is counted and polling goes on."""
        try:
            res = await self.client.get("/slots", timeout=5)
        except Exception as e:  # noqa: BLE001
            self.poll_failures += 1
            self.last_poll_error = note_text(N_("GET /slots failed: {error}"), error=f"{type(e).__name__}: {e}")
            if self.slots_available is None:
                self.slots_available = False
                self.slots_reason = self.last_poll_error
            return None
        if res.status == 503 and self.slots_available:
            self.poll_failures += 1  # e.g. ?fail_on_no_slot or loading: transient
            return None
        if res.status != 200 or not isinstance(res.body, list):
            self.slots_available = False
            self.slots_reason = (
                note_text(N_("GET /slots answered HTTP {status} (llama-server started with --no-slots, or not a "
                             "llama-server)"), status=res.status)
            )
            return None
        self.slots_available = True
        return res.body

    def check(self, slots: list[dict[str, Any]], t: float) -> None:
        """Compare one ``/slots`` answer with what we have in flight (:func:`judge_slots`)."""
        tr = self.tracker
        busy = sum(1 for s in slots if s.get("is_processing"))
        self.max_busy = max(self.max_busy, busy)
        self.busy_series.append((round(t, 3), busy, tr.in_flight))
        j = judge_slots(self._rule, slots, in_flight=tr.in_flight, pinned=tr.pinned, unpinned=tr.unpinned, t=t)
        self._rule = j.state
        self.events.extend(j.events)
        if j.foreign_prev:
            self.foreign_times.append(self._prev_t)
        if j.foreign_now:
            self.foreign_times.append(t)
        self._prev_t = t

    async def _loop(self) -> None:
        while not self._stop.is_set():
            slots = await self.probe_slots()
            if slots is None:
                if not self.slots_available:
                    return  # degrade: no /slots (404/501), nothing to poll
            else:
                self.n_polls += 1
                self.check(slots, self.client_time())
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.interval_s)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    def foreign_between(self, t0: float, t1: float) -> bool:
        """Was confirmed foreign work seen by a poll overlapping [t0, t1] (± one interval)?"""
        return any(t0 - self.interval_s <= t <= t1 + self.interval_s for t in self.foreign_times)


def reconcile(first: Scrape | None, last: Scrape | None, ours: dict[str, float]) -> dict[str, Any]:
    """Counter deltas between the first and last scrape vs. the sum of our own requests.
    Excess predicted/prompt tokens mean work we did not send finished during the run."""
    if first is None or last is None:
        return {"available": False}
    pairs = {
        "tokens_predicted_total": "predicted_n",
        "prompt_tokens_total": "prompt_n",
        "prompt_tokens_cached_total": "cache_n",
        "spec_decode_num_draft_tokens_total": "draft_n",
        "spec_decode_num_accepted_tokens_total": "draft_n_accepted",
    }
    rows = {}
    foreign = False
    for metric, field_ in pairs.items():
        if metric not in last.values:
            continue
        delta = last.values[metric] - first.values.get(metric, 0.0)
        mine = ours.get(field_, 0.0)
        excess = delta - mine
        rows[metric] = {"server_delta": delta, "ours": mine, "excess": excess}
        if metric in ("tokens_predicted_total", "prompt_tokens_total") and excess > 0.5:
            foreign = True
    spec = None
    d_acc = last.values.get("spec_decode_num_accepted_tokens_total", 0) - first.values.get("spec_decode_num_accepted_tokens_total", 0)
    d_drafts = last.values.get("spec_decode_num_drafts_total", 0) - first.values.get("spec_decode_num_drafts_total", 0)
    if d_drafts > 0:
        spec = {"accepted": d_acc, "drafts": d_drafts, "mean_acceptance_length": 1 + d_acc / d_drafts}
    return {
        "available": True,
        "counters": rows,
        "foreign_work_completed": foreign,
        "restart": bool(first.start_time and last.start_time and first.start_time != last.start_time),
        "requests_processing_at_end": last.values.get("requests_processing"),
        "spec": spec,
    }
