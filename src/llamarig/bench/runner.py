"""Run a benchmark: pre-flight, background monitors, the chosen scenarios, reconciliation.

``run_bench(config)`` returns the report document (a dict that validates against
``llamarig/data/bench.schema.json``). All network I/O is here and in client.py; the
scenarios (scenarios.py) only decide what to send and how to summarise it.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import platform
import socket
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from llamarig import __version__
from llamarig.bench.client import BenchClient, RequestSample
from llamarig.bench.gpu import GpuSampler, energy_joules
from llamarig.bench.monitor import InterferenceEvent, Monitor, Scrape, Tracker, reconcile
from llamarig.bench.records import Figure, note_text, single_figure
from llamarig.bench.result import BenchReport, Interference, Scenario, Target
from llamarig.errors import ExitCode, InputError, LlamarigError, ServerError
from llamarig.extras import needed
from llamarig.hardware.telemetry import is_local
from llamarig.i18n import N_, _, error_text, unknown_name

with needed("bench"):
    import aiohttp

SCENARIOS = ("decode", "prefill", "ttft", "depth", "concurrency", "spec", "workload")
LLAMA_ONLY = ("prefill", "ttft", "depth")


class InterferenceError(LlamarigError):
    """--strict and foreign work was seen on the server."""

    exit_code = ExitCode.PROBLEMS


#: in ``prefill_lengths`` / ``depths``: the largest point that fits the slot context
#: (``--lengths ctx``, ``--depths max``), resolved against /props n_ctx when the run starts
FIT_CTX = -1


@dataclass(frozen=True)
class BenchConfig:
    """What ``llamarig bench`` measures and how (``llamarig.bench_server``'s settings)."""

    url: str
    scenarios: tuple[str, ...] = ("decode",)
    seed: int = 0
    warmup: int = 1
    k: int = 5
    n_predict: int = 128
    prompt_set: str = "synthetic"
    temperature: float | None = None  # None: the server's default sampling
    endpoint: str = "chat"  # chat: /v1/chat/completions; completion: raw /completion
    prefill_lengths: tuple[int, ...] = (1024, 8192, 32768)
    repeats: int = 3
    depths: tuple[int, ...] = (0, 8192, 32768)
    concurrency: tuple[int, ...] = (1, 2, 4)
    ttft_prefix: int = 2048
    slot: int | None = 0
    baseline_url: str | None = None
    workload: Path | None = None
    strict: bool = False
    wait_ready_s: float = 60.0
    request_timeout_s: float = 600.0
    poll_interval_s: float = 0.2
    gpu_interval_s: float = 1.0
    api_key: str | None = None
    # test hooks: prove the cold-prefill validation works (never exposed on the CLI)
    prefill_cache_prompt: bool = False
    prefill_salt: bool = True

    def validate(self) -> None:
        bad = [s for s in self.scenarios if s not in SCENARIOS]
        if bad:
            raise unknown_name(_("scenario"), bad[0], difflib.get_close_matches(bad[0], SCENARIOS, 3) or list(SCENARIOS))
        if self.endpoint not in ("chat", "completion"):
            raise InputError(_("--endpoint {endpoint!r}: expected chat or completion").format(endpoint=self.endpoint))
        if "workload" in self.scenarios and self.workload is None:
            raise InputError(_("scenario 'workload' needs --workload FILE.jsonl"))
        if self.k < 1 or self.n_predict < 2 or self.repeats < 1 or self.warmup < 0:
            raise InputError(_("--k >= 1, --n-predict >= 2, --repeats >= 1, --warmup >= 0 required"))
        u = urlparse(self.url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise InputError(_("--url {url!r}: expected http://HOST:PORT").format(url=self.url))


@dataclass
class ScenarioResult:
    name: str
    figures: list[Figure] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    t_start: float = 0.0
    t_end: float = 0.0


ProgressFn = Callable[[str, int, int], None]  # (label, done, total)


class Runner:
    """State shared by the scenarios: client, tracker, monitor, the samples."""

    def __init__(self, cfg: BenchConfig, client: BenchClient, progress: ProgressFn | None = None) -> None:
        self.cfg = cfg
        self.client = client
        self.tracker = Tracker()
        self.monitor = Monitor(client, self.tracker, interval_s=cfg.poll_interval_s)
        self.samples: list[RequestSample] = []
        self.props: dict[str, Any] = {}
        self.is_llama = True
        self.n_ctx_slot: int | None = None
        self.total_slots: int | None = None
        self.run_id = uuid.UUID(int=(cfg.seed << 64) | int(time.time() * 1e6)).hex[-8:]
        self.progress = progress or (lambda label, done, total: None)
        self.planned = 0
        self.done = 0
        self._consecutive_conn_errors = 0
        self.errors: list[str] = []
        self._seq = 0
        self.dead = ""  # set after 3 consecutive connection failures

    # ----------------------------------------------------------------- requests
    def llama_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        """Drop llama-server-only request fields when the target is another OpenAI server."""
        if self.is_llama:
            return body
        return {k: v for k, v in body.items() if k not in ("ignore_eos", "id_slot", "cache_prompt", "n_predict", "timings_per_token")}

    async def request(
        self,
        scenario: str,
        label: str,
        path: str,
        body: dict[str, Any],
        *,
        slot: int | None = None,
        warmup: bool = False,
        client: BenchClient | None = None,
        count: bool = True,
    ) -> RequestSample:
        c = client or self.client
        if self.dead:
            # the server stopped answering: the rest of the scenario is not sent, but what was
            # measured so far still becomes figures (the scenario runs to its end)
            return RequestSample(seq=-1, scenario=scenario, label=label, warmup=warmup, error=note_text(N_("not sent: {reason}"), reason=self.dead))
        self._seq += 1
        s = RequestSample(seq=self._seq - 1, scenario=scenario, label=label, warmup=warmup, id_slot=slot)
        if slot is not None and self.is_llama:
            body = dict(body, id_slot=slot)
        body = self.llama_fields(body)
        if c is self.client:
            self.tracker.start(slot)
        try:
            await c.stream(path, body, s)
        finally:
            if c is self.client:
                self.tracker.end(slot)
        if c is not self.client:
            s.extra["target"] = c.url
            s.t_start += c.t0 - self.client.t0
        self.samples.append(s)
        self.check_strict()  # --strict: stop between requests as soon as foreign work was seen
        if count:
            self.done += 1
            self.progress(f"{scenario}: {label}", self.done, max(self.planned, self.done))
        if s.error:
            self.errors.append(f"{scenario}/{label}: " + s.error)
            if s.error.startswith("connection error") or s.status in (502, 503):
                self._consecutive_conn_errors += 1
                if self._consecutive_conn_errors >= 3:
                    self.dead = note_text(N_("{n} consecutive failed requests (last: {error})"), n=self._consecutive_conn_errors, error=s.error)
            else:
                self._consecutive_conn_errors = 0
        else:
            self._consecutive_conn_errors = 0
        return s

    def mark_contamination(self) -> None:
        for s in self.samples:
            if s.t_end_s is None:
                continue
            if self.monitor.slots_available:
                s.contaminated = self.monitor.foreign_between(s.t_start, s.t_start + s.t_end_s)
            else:
                s.contaminated = None

    def check_strict(self) -> None:
        if self.cfg.strict and self.monitor.events:
            e = self.monitor.events[0]
            raise InterferenceError(_("--strict: interference on {url}: {kind}: {detail}").format(url=self.cfg.url, kind=e.kind, detail=e.detail))


# ---------------------------------------------------------------------- pre-flight
async def wait_ready(client: BenchClient, wait_s: float) -> dict[str, Any]:
    """GET /health until 200. Connection refused -> ServerError at once (after 2 tries);
    503 'Loading model' -> wait up to ``wait_s`` then ServerError naming the wait."""
    deadline = time.monotonic() + wait_s
    conn_failures = 0
    last = ""
    waited_loading = False
    while True:
        try:
            res = await client.get("/health", timeout=5)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            conn_failures += 1
            last = error_text(e)
            if conn_failures >= 2:
                raise ServerError(_("cannot reach {url}: {last}").format(url=client.url, last=last)) from None
            await asyncio.sleep(0.5)
            continue
        if res.status == 200:
            return {"health": res.body, "waited_for_loading": waited_loading}
        if res.status in (404, 405):
            return {"health": None, "note": f"GET /health answered HTTP {res.status}: not a llama-server?"}
        if res.status == 503:
            waited_loading = True
            last = str(res.body)[:160]
            if time.monotonic() > deadline:
                raise ServerError(_("{url} still loading after {wait_s:.0f} s (HTTP 503 from /health: {last}); raise "
                                    "--wait-ready").format(url=client.url, wait_s=wait_s, last=last))
            await asyncio.sleep(0.5)
            continue
        if res.status == 401:
            raise ServerError(_("{url}/health answered 401: pass --api-key").format(url=client.url))
        raise ServerError(_("{url}/health answered HTTP {status}: {body}").format(url=client.url, status=res.status, body=str(res.body)[:160]))


def client_machine() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "llamarig": __version__,
    }


# ---------------------------------------------------------------------- the run
@dataclass
class _Preflight:
    """What the run knows before its first request."""

    ready: dict[str, Any]
    missing: list[str]
    busy_before: list[int]
    first: Scrape | None


async def _preflight(r: Runner) -> _Preflight:
    """/health (waiting while the model loads), /props, /slots, /metrics; what is missing is said."""
    cfg, client = r.cfg, r.client
    ready = await wait_ready(client, cfg.wait_ready_s)
    missing: list[str] = []
    props = await client.get("/props", timeout=10)
    if props.status == 200 and isinstance(props.body, dict):
        r.props = props.body
        dgs = r.props.get("default_generation_settings") or {}
        r.n_ctx_slot = dgs.get("n_ctx") if isinstance(dgs, dict) else None
        r.total_slots = r.props.get("total_slots")
    else:
        r.is_llama = False
        missing.append(note_text(N_("/props (HTTP {status}): not a llama-server; llama-only fields are not sent"), status=props.status))
    if r.is_llama and r.total_slots is not None and cfg.slot is not None and cfg.slot >= int(r.total_slots):
        raise InputError(_("--slot {slot}: the server has {total_slots} slot(s) (0..{last})").format(
            slot=cfg.slot, total_slots=r.total_slots, last=int(r.total_slots) - 1))
    slots0 = await r.monitor.probe_slots()
    if slots0 is None:
        missing.append(note_text(N_("{reason}: interference cannot be detected, samples are marked 'unknown'"),
                                 reason=r.monitor.slots_reason))
    first = await r.monitor.scrape()
    if first is None:
        missing.append(note_text(N_("{reason}: no counter reconciliation, no server-wide spec counters"),
                                 reason=r.monitor.metrics_reason))
    busy = [s.get("id") for s in (slots0 or []) if s.get("is_processing")]
    return _Preflight(ready, missing, [b for b in busy if isinstance(b, int)], first)


async def _one_scenario(r: Runner, name: str, run: Callable[[Runner, ScenarioResult], Awaitable[None]]) -> tuple[ScenarioResult, str]:
    """Run one scenario; a server that stopped answering cuts it short (what was measured stays)
    and, unless /health answers again within 10 s, aborts the run (the second value says why)."""
    from llamarig.bench.scenarios import annotate_contamination  # lazy: cycle with scenarios

    cfg = r.cfg
    res = ScenarioResult(name, t_start=r.monitor.client_time())
    aborted = ""
    if name in LLAMA_ONLY and not r.is_llama:
        res.notes.append(note_text(N_("skipped: '{name}' needs llama-server's /completion, /tokenize and "
                                      "timings (no /props at {url})"), name=name, url=cfg.url))
        return res, aborted
    try:
        await run(r, res)
    except (ServerError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        r.dead = r.dead or f"{type(e).__name__}: {e}"  # e.g. /tokenize failing: the server went away mid-scenario
    if r.dead:
        res.errors.append(note_text(N_("scenario cut short: {reason}"), reason=r.dead))
        r.errors.append(note_text(N_("{scenario}: cut short: {reason}"), scenario=name, reason=r.dead))
        try:
            await wait_ready(r.client, min(cfg.wait_ready_s, 10))
            r.dead, r._consecutive_conn_errors = "", 0
        except ServerError as e2:
            aborted = note_text(N_("server unreachable after scenario '{scenario}': {error}"), scenario=name, error=str(e2))
    res.t_end = r.monitor.client_time()
    r.mark_contamination()
    annotate_contamination(r, res)
    return res, aborted


async def _scenarios(r: Runner, gpu: GpuSampler) -> tuple[list[ScenarioResult], str]:
    """Every scenario of the run in order, the monitors running; stops at an abort or --strict."""
    from llamarig.bench import scenarios as sc  # lazy: cycle bench.runner <-> bench.scenarios

    results: list[ScenarioResult] = []
    aborted = ""
    r.planned = sc.planned_requests(r.cfg, r)
    r.monitor.start()
    gpu.start()
    try:
        for name in r.cfg.scenarios:
            res, aborted = await _one_scenario(r, name, getattr(sc, f"scenario_{name}"))
            results.append(res)
            r.check_strict()
            if aborted:
                break
    finally:
        await r.monitor.stop()
        await gpu.stop()
    return results, aborted


async def run_async(cfg: BenchConfig, progress: ProgressFn | None = None) -> BenchReport:
    cfg.validate()
    started = datetime.now(timezone.utc)
    gpu = GpuSampler(interval_s=cfg.gpu_interval_s)
    async with BenchClient(cfg.url, timeout_s=cfg.request_timeout_s, api_key=cfg.api_key) as client:
        r = Runner(cfg, client, progress)
        pre = await _preflight(r)
        gpu.t0 = client.t0
        results, aborted = await _scenarios(r, gpu)
        last = await r.monitor.scrape() if r.monitor.metrics_available else None
        props_end = await client.get("/props", timeout=10) if r.is_llama and not aborted else None
    r.mark_contamination()
    events = list(r.monitor.events)
    if props_end is not None and props_end.status == 200 and isinstance(props_end.body, dict):
        b0, b1 = r.props.get("build_info"), props_end.body.get("build_info")
        if b0 != b1:
            events.append(InterferenceEvent(r.monitor.client_time(), "restart", f"/props build_info changed {b0} -> {b1}"))
    figures = [f for res in results for f in res.figures] + _energy_figures(r, gpu) + [_interference_figure(r, events)]
    return BenchReport(
        run_id=r.run_id, started_at=started.isoformat(), finished_at=datetime.now(timezone.utc).isoformat(),
        target=Target(cfg.url, r.is_llama, r.props.get("build_info"), r.props.get("model_alias") or r.props.get("model_path"),
                      r.n_ctx_slot, r.total_slots, _trim_props(r.props), pre.ready),
        client=client_machine(), config=_config_json(cfg), figures=tuple(figures),
        scenarios=tuple(Scenario(x.name, tuple(x.figures), tuple(x.errors), tuple(x.notes), x.series, x.t_start, x.t_end)
                        for x in results),
        requests=tuple(r.samples), interference=_interference(r, pre, events, last), gpu=gpu.to_json(),
        errors=tuple(r.errors), aborted=aborted)


def _interference(r: Runner, pre: _Preflight, events: list[InterferenceEvent], last: Scrape | None) -> Interference:
    ours = {k: float(sum(int(s.timings.get(k, 0) or 0) for s in r.samples if s.extra.get("target") is None))
            for k in ("predicted_n", "prompt_n", "cache_n", "draft_n", "draft_n_accepted")}
    mon = r.monitor
    return Interference(
        slots_endpoint=bool(mon.slots_available), metrics_endpoint=bool(mon.metrics_available), missing=tuple(pre.missing),
        busy_before_start=tuple(pre.busy_before), n_polls=mon.n_polls, poll_failures=mon.poll_failures,
        last_poll_error=mon.last_poll_error, poll_interval_s=r.cfg.poll_interval_s, max_busy_slots=mon.max_busy,
        max_requests_deferred=mon.max_deferred, events=tuple(events), busy_series=tuple(mon.busy_series[-5000:]),
        reconciliation=reconcile(pre.first, last, ours))


def _energy_figures(r: Runner, gpu: GpuSampler) -> list[Figure]:
    tokens = sum(s.predicted_n or 0 for s in r.samples if s.ok and s.extra.get("target") is None)
    energy = energy_joules(gpu.samples) if gpu.to_json()["available"] else None
    if not energy or not energy[0]:
        return []
    joules, how = energy
    return [single_figure(
        "energy_tokens_per_joule", tokens / joules, "tok/J",
        f"generated tokens of all our requests ({tokens}, from timings.predicted_n) ÷ energy over the run, summed "
        f"over GPUs ({how}; {gpu.to_json()['source']})"
        + ("" if is_local(r.cfg.url) else " (server is remote: this is NOT the server's energy)"),
        scenario="gpu", params={"tokens": tokens, "joules": joules, "gpu_samples": len(gpu.samples)})]


def _interference_figure(r: Runner, events: list[Any]) -> Figure:
    mon = r.monitor
    foreign = [e for e in events if e.kind in ("foreign_slot", "excess_processing")]
    restarts = [e for e in events if e.kind == "restart"]
    if not mon.slots_available:
        return single_figure(
            "interference_events", None, "events",
            "GET /slots polled during the run: not available, so foreign work could not be detected",
            scenario="interference", note=mon.slots_reason,
            method_zh="运行期间轮询 GET /slots：接口不可用，无法发现别人的请求",
        )
    return single_figure(
        "interference_events", float(len(foreign) + len(restarts)), "events",
        f"GET /slots polled every {r.cfg.poll_interval_s:g} s ({mon.n_polls} polls): a busy slot we did not pin a request to "
        "(seen in 2 consecutive polls), or more busy slots than our in-flight requests (3 polls), or a restart "
        "(Process-Start-Time-Unix / build_info change / task ids going back)",
        scenario="interference",
        params={"foreign": len(foreign), "restarts": len(restarts), "polls": mon.n_polls},
        method_zh=f"每 {r.cfg.poll_interval_s:g} 秒轮询一次 GET /slots（共 {mon.n_polls} 次）：某个忙碌槽位上不是我们固定过去的"
                  "请求（连续 2 次轮询都看到），或忙碌槽位数多于我们在途的请求数（3 次轮询），或服务器重启"
                  "（Process-Start-Time-Unix / build_info 变化 / 任务 id 倒退）",
    )


def _trim_props(p: dict[str, Any]) -> dict[str, Any]:
    out = dict(p)
    if isinstance(out.get("chat_template"), str) and len(out["chat_template"]) > 2000:
        out["chat_template"] = out["chat_template"][:2000] + "…"
    return out


def _config_json(cfg: BenchConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["workload"] = str(cfg.workload) if cfg.workload else None
    d.pop("api_key", None)
    for k, v in d.items():
        if isinstance(v, tuple):
            d[k] = list(v)
    for k in ("prefill_lengths", "depths"):
        d[k] = ["ctx" if x == FIT_CTX else x for x in d[k]]
    return d


def run_bench(cfg: BenchConfig, progress: ProgressFn | None = None) -> BenchReport:
    """Run the benchmark; network failures outside a request become ServerError (exit 3)."""
    try:
        return asyncio.run(run_async(cfg, progress))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        raise ServerError(f"{cfg.url}: {type(e).__name__}: {e}") from None
