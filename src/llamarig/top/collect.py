"""The I/O edge of ``llamarig top``: read-only ``GET``s with timeouts, one round per snapshot.

A llama-server: ``/health``, ``/slots`` and ``/metrics`` every round, ``/props`` and
``/v1/models`` (n_ctx_train: whether the slot context is capped, llamarig.serverpool) on first
contact and whenever the server comes back. A llamarig gateway (it answers
``/gateway/status``): ``/gateway/status``, ``/gateway/slots`` (each backend's ``/slots`` and
``/props``) and its ``/metrics`` (the backends' samples carry ``backend="NAME"``). Nothing is
ever sent that changes the server; every GET has a timeout. The only side effect llama-server
has on a GET is that ``/metrics`` resets its two averaging gauges (``prompt_tokens_seconds``,
``predicted_tokens_seconds``; tools/server/server-context.cpp:5040, 5053): top uses counters
only, and ``--no-metrics`` leaves them alone for a Prometheus that reads them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from llamarig.bench.client import BenchClient, HTTPResult
from llamarig.bench.monitor import parse_metrics
from llamarig.extras import needed
from llamarig.hardware.telemetry import GpuReading, GpuTelemetry, is_local, remote_reading
from llamarig.i18n import _, data_text, error_text
from llamarig.serverpool import Bound
from llamarig.top import derive
from llamarig.top.local import pool_hint
from llamarig.top.model import PoolHint, Raw, ServerRaw, Snapshot
from llamarig.top.pool import NO_HINT

with needed("bench"):
    import aiohttp

#: the name of the one server top watches (a Message: "server" in --json, 服务器 on a Chinese screen)
SERVER = data_text("server")


def _why(e: BaseException) -> str:
    """Why a GET failed: a catalogue message for a timeout or a connection error (i18n.error_text)."""
    return error_text(e)


def split_backend_metrics(text: str) -> dict[str, dict[str, float]]:
    """The gateway's ``/metrics``: backend name -> {metric: value} of its re-exported samples
    (only samples whose one label is ``backend``)."""
    out: dict[str, dict[str, float]] = {}
    for name, v in parse_metrics(text).items():
        base, brace, labels = name.partition("{")
        if not brace:
            continue
        labels = labels.rstrip("}")
        if not labels.startswith('backend="') or '",' in labels:
            continue
        out.setdefault(labels[len('backend="'):-1], {})[base] = v
    return out


class Collector:
    """``async with Collector(url) as c: snap = await c.snapshot()``: each call does one round
    of GETs and returns the next :class:`Snapshot` (rates need two)."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 2.0, metrics: bool = True,
                 gpu: bool = True, pool: PoolHint | None = None) -> None:
        self.url = url.rstrip("/")
        self.given = pool  # top --pool: the server's pool as the user gives it
        self.hint: PoolHint | None = None  # the pool found on first contact (read again when the server is back)
        self.timeout_s = timeout_s
        self.metrics = metrics
        self.client = BenchClient(self.url, timeout_s=max(timeout_s * 2, 5.0), api_key=api_key)
        self.mode: str | None = None
        self.props: dict[str, Any] = {}
        self.models: dict[str, Any] | None = None  # GET /v1/models, read with /props
        self.prev: Snapshot | None = None
        self.want_gpu = gpu
        self.telemetry: GpuTelemetry | None = None
        self.local: bool | None = None

    async def __aenter__(self) -> Collector:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.__aexit__(*exc)
        if self.telemetry is not None:
            self.telemetry.close()

    async def _get(self, path: str) -> HTTPResult | BaseException:
        try:
            return await self.client.get(path, timeout=self.timeout_s)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            return e

    async def _detect(self) -> str | None:
        r = await self._get("/gateway/status")
        if isinstance(r, BaseException):
            return None
        if r.status == 200 and isinstance(r.body, dict) and "backends" in r.body:
            return "gateway"
        if r.status == 401 and _gateway_error(r.body):
            return "gateway"  # a gateway with keys: its rounds say that --api-key is needed
        return "server"

    async def raw(self) -> Raw:
        if self.mode is None:
            self.mode = await self._detect()
        if self.mode == "gateway":
            servers, status, gw_err = await self._gateway_round()
        else:
            servers, status, gw_err = (await self._server_round(),), None, ""
        return Raw(self.url, self.mode or "server", time.monotonic(), time.time(), servers, self._gpu(servers),
                   status, gw_err)

    async def snapshot(self) -> Snapshot:
        raw = await self.raw()
        self.prev = derive.build(self.prev, raw)
        return self.prev

    # ------------------------------------------------------------------ GPU
    def _local(self, urls: tuple[str, ...] = ()) -> bool:
        """Does the server (every backend, through a gateway) run on this machine?"""
        if self.local is None:
            self.local = all(is_local(u) for u in (urls or (self.url,)))
        return self.local

    def _gpu(self, servers: tuple[ServerRaw, ...]) -> GpuReading:
        if not self.want_gpu:
            return GpuReading(False, "not asked for (--no-gpu)", "off")
        if not servers:
            return GpuReading(False, "no server answered yet: whether it runs on this machine is not known", "unknown")
        if not self._local(tuple(s.url for s in servers)):
            return remote_reading()
        if self.telemetry is None:
            self.telemetry = GpuTelemetry()
        return self.telemetry.read()

    # ------------------------------------------------------------------ a llama-server
    async def _server_round(self) -> ServerRaw:
        paths = ["/health", "/slots"] + (["/metrics"] if self.metrics else [])
        if not self.props:
            paths += ["/props", "/v1/models"]
        got = dict(zip(paths, await asyncio.gather(*(self._get(p) for p in paths)), strict=True))
        health = got["/health"]
        if isinstance(health, BaseException):
            self.props, self.hint = {}, None  # read again when it is back: another build, model or pool
            return ServerRaw(SERVER, self.url, False, error=_why(health))
        pr = got.get("/props")
        if isinstance(pr, HTTPResult) and pr.status == 200 and isinstance(pr.body, dict):
            self.props = pr.body
            md = got.get("/v1/models")
            self.models = md.body if isinstance(md, HTTPResult) and md.status == 200 and isinstance(md.body, dict) else None
            self.hint = None
        slots, slots_err = _slots(got["/slots"])
        if self.hint is None:
            self.hint = self.given or pool_hint(self.url, self.props, self.models)
        metrics: Mapping[str, float] | None = None
        m_err = "not read (--no-metrics)"
        start: float | None = None
        uptime: float | None = None
        m = got.get("/metrics")
        if isinstance(m, HTTPResult):
            if m.status == 200 and isinstance(m.body, str):
                metrics, m_err = parse_metrics(m.body), ""
                try:
                    start = float(m.headers.get("Process-Start-Time-Unix", ""))
                except ValueError:
                    start = None
                if start is not None and self._local():
                    # ggml_time_us() at start-up: CLOCK_MONOTONIC microseconds (derive.py's notes)
                    up = time.monotonic() - start / 1e6
                    uptime = up if up >= 0 else None
            else:
                hint = _status_hint("/metrics", m.status)
                m_err = _("{hint} (llama-server needs --metrics)").format(hint=hint) if m.status in (404, 501) else hint
        elif isinstance(m, BaseException):
            m_err = f"GET /metrics: {_why(m)}"
        return ServerRaw(SERVER, self.url, True, health=health.status, slots=slots, slots_error=slots_err,
                         metrics=metrics, metrics_error=m_err, start_time=start, uptime_s=uptime,
                         props=self.props or None, pool_hint=self.hint, checkpoints=checkpoints_of(self.props))

    # ------------------------------------------------------------------ a gateway
    async def _gateway_round(self) -> tuple[tuple[ServerRaw, ...], dict[str, Any] | None, str]:
        paths = ["/gateway/status", "/gateway/slots"] + (["/metrics"] if self.metrics else [])
        got = dict(zip(paths, await asyncio.gather(*(self._get(p) for p in paths)), strict=True))
        st = got["/gateway/status"]
        if isinstance(st, BaseException) or st.status != 200 or not isinstance(st.body, dict):
            err = _why(st) if isinstance(st, BaseException) else _status_hint("/gateway/status", st.status)
            return (), None, err
        status: dict[str, Any] = st.body
        sl = got["/gateway/slots"]
        per: dict[str, Mapping[str, Any]] = {}
        if isinstance(sl, HTTPResult) and sl.status == 200 and isinstance(sl.body, dict):
            for b in sl.body.get("backends") or ():
                if isinstance(b, dict) and isinstance(b.get("name"), str):
                    per[b["name"]] = b
        m = got.get("/metrics")
        mets = split_backend_metrics(m.body) if isinstance(m, HTTPResult) and m.status == 200 and isinstance(m.body, str) else {}
        out = []
        for b in status.get("backends") or ():
            if not isinstance(b, dict) or not isinstance(b.get("name"), str) or b.get("removed"):
                continue
            name, url = b["name"], str(b.get("url") or "")
            sb = per.get(name, {})
            if not b.get("healthy"):
                out.append(ServerRaw(name, url, False, error=str(b.get("problem_detail") or b.get("problem") or b.get("last_error") or "unhealthy")))
                continue
            raw_slots = sb.get("slots")
            slots = tuple(s for s in raw_slots if isinstance(s, dict)) if isinstance(raw_slots, list) else None
            props = sb.get("props") if isinstance(sb.get("props"), dict) else None
            out.append(ServerRaw(name, url, True, slots=slots, slots_error=str(sb.get("error") or ""),
                                 metrics=mets.get(name), metrics_error="" if name in mets else "no /metrics from this backend",
                                 props=props, pool_hint=gateway_pool_hint(b), checkpoints=checkpoints_of(props)))
        return tuple(out), status, ""


def checkpoints_of(props: Mapping[str, Any] | None) -> bool | None:
    """Whether the server's model keeps context checkpoints: only recurrent/hybrid models and
    sliding-window attention have them (tools/server/server-context.cpp: checkpoints are made
    for ``n_swa > 0`` or a recurrent memory); read from the GGUF at ``props.model_path`` when that
    file is on this machine, None otherwise."""
    path = props.get("model_path") if props else None
    return _checkpoints(path) if isinstance(path, str) and path else None


@lru_cache(maxsize=64)
def _checkpoints(path: str) -> bool | None:
    from llamarig.gguf.spec import load_spec  # lazy: only when a local model file is named

    try:
        spec = load_spec(path)
    except Exception:  # noqa: BLE001 - not readable here, another machine's path, not a GGUF
        return None
    return bool(spec.is_recurrent_or_hybrid or spec.swa_window)


def gateway_pool_hint(b: Mapping[str, Any]) -> PoolHint:
    """One backend's KV pool as ``/gateway/status`` publishes it: ``pool.server_tokens`` and
    ``pool.server_bound`` (the cells the server has, or a lower bound: llamarig.serverpool) with
    ``pool.unified`` (else the layout the gateway's config assumes); else the pool the gateway
    admits against (``pool_tokens``, after its safety fraction)."""
    conf = b.get("configured")
    assumed = conf.get("unified") if isinstance(conf, Mapping) else None
    p = b.get("pool")
    if isinstance(p, Mapping):
        tokens = p.get("server_tokens") if isinstance(p.get("server_tokens"), int) else p.get("tokens")
        if isinstance(tokens, int) and not isinstance(tokens, bool):
            unified = p.get("unified") if isinstance(p.get("unified"), bool) else assumed
            how = [str(x) for x in (p.get("server_source") or p.get("source"), p.get("server_bound")) if x]
            bound: Bound = "at_least" if p.get("server_bound") == "at_least" else "exact"
            return PoolHint(tokens, unified if isinstance(unified, bool) else None, "gateway", ", ".join(how), bound)
    tokens = b.get("pool_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        return NO_HINT
    return PoolHint(tokens, assumed if isinstance(assumed, bool) else None, "gateway",
                    str(b.get("pool_source") or ""))


def _gateway_error(body: Any) -> bool:
    """The gateway's error body (OpenAI style, llamarig.gateway.errors): {"error": {"code": ...}}."""
    err = body.get("error") if isinstance(body, dict) else None
    return isinstance(err, dict) and "code" in err and "type" in err


def _status_hint(path: str, status: int) -> str:
    if status in (401, 403):
        return f"GET {path}: HTTP {status} (give the key: --api-key KEY or $LLAMARIG_API_KEY)"
    return f"GET {path}: HTTP {status}"


def _slots(r: HTTPResult | BaseException) -> tuple[tuple[Mapping[str, Any], ...] | None, str]:
    if isinstance(r, BaseException):
        return None, f"GET /slots: {_why(r)}"
    if r.status != 200 or not isinstance(r.body, list):
        hint = " (llama-server started with --no-slots)" if r.status == 501 else ""
        return None, _status_hint("/slots", r.status) + hint
    return tuple(s for s in r.body if isinstance(s, dict)), ""


async def once(url: str, *, api_key: str | None = None, interval_s: float = 1.0, timeout_s: float = 2.0,
               metrics: bool = True, gpu: bool = True, pool: PoolHint | None = None) -> Snapshot:
    """``derive.READINGS`` rounds ``interval_s`` apart (as many as the slowest rule needs: rates
    take two, foreign work three); the last snapshot."""
    async with Collector(url, api_key=api_key, timeout_s=timeout_s, metrics=metrics, gpu=gpu, pool=pool) as c:
        snap = await c.snapshot()
        for _ in range(derive.READINGS - 1):
            await asyncio.sleep(interval_s)
            snap = await c.snapshot()
        return snap
