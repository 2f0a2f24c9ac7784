"""Many llama-server backends: pool discovery (/props), health checks with ejection and recovery,
least-reserved choice with conversation affinity, and what is wrong with a backend that fails its
check (:func:`classify`: connection refused, timeout, not a llama-server, not ready, ...).

``choose_backend`` is pure; ``Backends`` does the I/O (aiohttp) on the gateway's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from llamarig.gateway import reasons
from llamarig.gateway.admission import Pool, ReservationLedger, pool_from_props
from llamarig.gateway.config import BackendConfig, GatewayConfig
from llamarig.gateway.errors import BackendError
from llamarig.i18n import _, localize

log = logging.getLogger("llamarig.gateway")


@dataclass
class BackendState:
    cfg: BackendConfig
    pool: Pool | None = None
    healthy: bool = False
    fails: int = 0
    successes: int = 0
    models: list[str] = field(default_factory=list)
    last_error: str = ""
    last_check: float = 0.0
    checks: int = 0
    removed: bool = False  # dropped by a config reload; drains its in-flight requests
    props: dict[str, Any] | None = None
    problem: str = ""  # why the last check failed: a kind of reasons.PROBLEMS; "" when it passed
    problem_detail: str = ""

    @property
    def name(self) -> str:
        return self.cfg.name

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.cfg.api_key}"} if self.cfg.api_key else {}


class NotReady(BackendError):
    """``/health`` answered 503: a llama-server that is loading its model (or sleeping)."""


class NotLlamaServer(BackendError):
    """Something answers HTTP at the URL, but not as llama-server does."""


def classify(e: BaseException) -> tuple[str, str]:
    """(kind, detail) of a failed health check; kind is one of llamarig.gateway.reasons.PROBLEMS."""
    if isinstance(e, NotReady):
        return reasons.NOT_READY, str(e)
    if isinstance(e, BackendError):  # NotLlamaServer, or /props without the fields the pool needs
        return reasons.NOT_LLAMA_SERVER, str(e)
    if isinstance(e, asyncio.TimeoutError):  # aiohttp's ServerTimeoutError is one too
        return reasons.TIMEOUT, ""
    if isinstance(e, aiohttp.ClientConnectorDNSError):
        return reasons.DNS, str(e.os_error)
    if isinstance(e, aiohttp.ClientConnectorError):
        if isinstance(e.os_error, ConnectionRefusedError):
            return reasons.REFUSED, ""
        return reasons.CONNECT, str(e.os_error.strerror or e.os_error)
    if isinstance(e, ConnectionRefusedError):
        return reasons.REFUSED, ""
    if isinstance(e, aiohttp.ClientResponseError):  # not HTTP as aiohttp reads it
        return reasons.NOT_LLAMA_SERVER, f"{type(e).__name__}: {e.message}"
    return reasons.ERROR, f"{type(e).__name__}: {e}"


def choose_backend(states: Iterable[BackendState], ledger: ReservationLedger, tokens: int,
                   affinity: str | None = None, exclude: frozenset[str] = frozenset()) -> str | None:
    """The backend for a request of ``tokens`` (prompt + max_tokens), or None if none fits now.

    Candidates: healthy, not removed, pool known, a free slot and room in the pool. The affinity
    backend (where this conversation went before; its prompt cache holds the prefix) wins if it is
    a candidate; otherwise the one with the smallest reserved fraction after admission
    ((reserved + tokens) / (pool * weight)), then fewest in flight per slot, then name.
    """
    best: tuple[float, float, str] | None = None
    for s in states:
        if not s.healthy or s.removed or s.pool is None or s.name in exclude:
            continue
        if not ledger.fits(s.name, s.pool, tokens):
            continue
        if affinity is not None and s.name == affinity:
            return s.name
        frac = (ledger.reserved.get(s.name, 0) + tokens) / (s.pool.pool_tokens * max(s.cfg.weight, 1e-9))
        load = ledger.in_flight.get(s.name, 0) / s.pool.slots
        key = (frac, load, s.name)
        if best is None or key < best:
            best = key
    return best[2] if best else None


class Affinity:
    """Bounded LRU map: conversation hash -> backend name."""

    def __init__(self, size: int = 10000) -> None:
        self.size = size
        self._m: OrderedDict[str, str] = OrderedDict()

    def get(self, key: str | None) -> str | None:
        if key is None:
            return None
        v = self._m.get(key)
        if v is not None:
            self._m.move_to_end(key)
        return v

    def set(self, key: str | None, backend: str) -> None:
        if key is None:
            return
        self._m[key] = backend
        self._m.move_to_end(key)
        while len(self._m) > self.size:
            self._m.popitem(last=False)

    def __len__(self) -> int:
        return len(self._m)


class Backends:
    """The backend set: states, health loop, upstream session."""

    def __init__(self, cfg: GatewayConfig, ledger: ReservationLedger, session: aiohttp.ClientSession) -> None:
        self.cfg = cfg
        self.ledger = ledger
        self.session = session
        self.states: dict[str, BackendState] = {b.name: BackendState(b) for b in cfg.backends}
        self.affinity = Affinity()
        self.on_change: list[Any] = []  # callbacks after health/pool changes (admission pump)
        self._task: asyncio.Task[None] | None = None
        self._metrics_cache: dict[str, tuple[float, str]] = {}
        self.lang = "en"  # the language of the lines it logs (the gateway's, llamarig.gateway.server)

    # -- config
    def apply_config(self, cfg: GatewayConfig) -> None:
        """Reload: keep states of unchanged backends; mark dropped ones removed (they drain)."""
        self.cfg = cfg
        new = {b.name: b for b in cfg.backends}
        for name, st in list(self.states.items()):
            if name not in new:
                st.removed = True
                if self.ledger.in_flight.get(name, 0) == 0:
                    del self.states[name]
            elif new[name] != st.cfg:
                self.states[name] = BackendState(new[name])
        for name, b in new.items():
            if name not in self.states:
                self.states[name] = BackendState(b)

    # -- queries
    def pick(self, tokens: int, affinity: str | None, exclude: frozenset[str]) -> str | None:
        pref = self.affinity.get(affinity)
        return choose_backend(self.states.values(), self.ledger, tokens, pref, exclude)

    def pool_of(self, name: str) -> Pool | None:
        """The pool of backend ``name`` as last read (a shared ledger checks claims against it)."""
        st = self.states.get(name)
        return st.pool if st is not None else None

    def blocked(self, tokens: int, exclude: frozenset[str]) -> reasons.Blocked | None:
        """Why a request of ``tokens`` fits no backend now (None: one fits)."""
        return reasons.blocked(self.states.values(), self.ledger, tokens, exclude)

    def default_backend(self) -> str | None:
        """The backend answering non-inference GETs (/props, /slots): the one the default route
        would choose for a new request without affinity (least reserved fraction, with a free
        slot), else the first healthy backend in config order; None when none is healthy."""
        name = choose_backend(self.states.values(), self.ledger, 1)
        if name is not None:
            return name
        healthy = self.healthy()
        return healthy[0].name if healthy else None

    def healthy(self) -> list[BackendState]:
        return [s for s in self.states.values() if s.healthy and not s.removed]

    def any_healthy(self) -> bool:
        return any(s.healthy and not s.removed for s in self.states.values())

    def total_slots(self) -> int:
        return sum(s.pool.slots for s in self.healthy() if s.pool)

    def max_slot_ctx(self) -> int | None:
        vals = [s.pool.slot_ctx for s in self.healthy() if s.pool]
        return max(vals) if vals else None

    def models(self) -> list[str]:
        out: list[str] = []
        for s in self.states.values():
            for m in s.models:
                if m not in out:
                    out.append(m)
        return out

    def url(self, name: str) -> str:
        return self.states[name].cfg.url

    # -- health
    async def check(self, st: BackendState) -> None:
        h = self.cfg.health
        timeout = aiohttp.ClientTimeout(total=h.timeout_s)
        was = st.healthy
        try:
            async with self.session.get(st.cfg.url + "/health", timeout=timeout, headers=st.headers()) as r:
                data = await r.read()
                if r.status == 503:
                    raise NotReady(_("GET /health: HTTP 503{error_message}").format(error_message=_error_message(data)))
                if r.status != 200:
                    raise NotLlamaServer(_("GET /health: HTTP {status}").format(status=r.status))
            if st.pool is None or not st.healthy or st.checks % 12 == 0:
                async with self.session.get(st.cfg.url + "/props", timeout=timeout, headers=st.headers()) as r:
                    if r.status != 200:
                        raise NotLlamaServer(_("GET /props: HTTP {status}").format(status=r.status))
                    try:
                        props = json.loads(await r.read())
                    except (ValueError, UnicodeDecodeError):
                        raise NotLlamaServer(_("GET /props: not JSON")) from None
                    if not isinstance(props, dict):
                        raise NotLlamaServer(_("GET /props: not a JSON object"))
                b = st.cfg
                st.pool = pool_from_props(props, pool_tokens=b.pool_tokens, slots=b.slots, slot_ctx=b.slot_ctx,
                                          unified=b.unified, safety=self.cfg.admission.safety)
                st.props = {k: props.get(k) for k in ("total_slots", "model_alias", "build_info", "is_sleeping")}
                st.props["n_ctx"] = (props.get("default_generation_settings") or {}).get("n_ctx")
                with contextlib.suppress(Exception):
                    async with self.session.get(st.cfg.url + "/v1/models", timeout=timeout, headers=st.headers()) as r:
                        data = json.loads(await r.read())
                        names: list[str] = []
                        for m in data.get("data", []):
                            names.append(m.get("id"))
                            names.extend(m.get("aliases") or [])
                        st.models = [n for n in names if isinstance(n, str)]
            self.mark_ok(st)
        except (BackendError, aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError, ValueError) as e:
            kind, detail = classify(e)
            self.mark_failure(st.name, f"{type(e).__name__}: {e}", kind=kind, detail=detail)
        finally:
            st.checks += 1
            st.last_check = time.time()
        if st.healthy != was:
            if st.healthy:
                log.info("%s", localize(self.line(st), self.lang))
            self._changed()  # an ejection was logged by mark_failure

    def line(self, st: BackendState, *, startup: bool = False) -> str:
        """One line on a backend: reachable with its slots and pool, or what is wrong with it
        (``startup``: and that the gateway starts without it and keeps checking)."""
        h = self.cfg.health
        if st.pool is not None and (st.healthy or not st.problem):
            return reasons.backend_ok_line(st.name, st.cfg.url, st.pool.slots, st.pool.pool_tokens,
                                           st.pool.source, st.pool.slot_ctx)
        return reasons.backend_problem_line(st.name, st.cfg.url, st.problem or reasons.ERROR,
                                            st.problem_detail or st.last_error, h.timeout_s,
                                            h.interval_s if startup else None)

    def startup_lines(self) -> list[str]:
        """One line per backend after the first check (``Gateway.start`` ran it)."""
        return [self.line(s, startup=True) for s in self.states.values() if not s.removed]

    def mark_ok(self, st: BackendState) -> None:
        st.fails = 0
        st.successes += 1
        st.problem = st.problem_detail = ""
        if not st.healthy and st.successes >= self.cfg.health.recover_after and st.pool is not None:
            st.healthy = True
            self._changed()

    def mark_failure(self, name: str, error: str, *, hard: bool = False, kind: str = "",
                     detail: str = "") -> None:
        """A failed check or upstream connection. ``hard``: eject now (connection refused).
        ``kind``/``detail``: what :func:`classify` made of a failed check (default: the error)."""
        st = self.states.get(name)
        if st is None:
            return
        st.successes = 0
        st.fails += 1
        st.last_error = error
        st.problem = kind or reasons.ERROR
        st.problem_detail = detail if kind else error
        if st.healthy and (hard or st.fails >= self.cfg.health.eject_after):
            st.healthy = False
            log.warning("backend %s ejected: %s", name, error)
            self._changed()

    def _changed(self) -> None:
        for cb in self.on_change:
            cb()

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(s) for s in list(self.states.values()) if not s.removed))

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.health.interval_s)
            for name in [n for n, s in self.states.items() if s.removed and self.ledger.in_flight.get(n, 0) == 0]:
                del self.states[name]
            await self.check_all()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- metrics re-export
    async def backend_metrics(self) -> Mapping[str, str]:
        """Each healthy backend's /metrics text (cached ``metrics_cache_s``); missing on error."""
        out: dict[str, str] = {}
        now = time.monotonic()
        timeout = aiohttp.ClientTimeout(total=self.cfg.health.timeout_s)

        async def one(st: BackendState) -> None:
            cached = self._metrics_cache.get(st.name)
            if cached and now - cached[0] < self.cfg.health.metrics_cache_s:
                out[st.name] = cached[1]
                return
            try:
                async with self.session.get(st.cfg.url + "/metrics", timeout=timeout, headers=st.headers()) as r:
                    if r.status != 200:
                        return
                    text = (await r.read()).decode("utf-8", "replace")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                return
            self._metrics_cache[st.name] = (now, text)
            out[st.name] = text

        await asyncio.gather(*(one(s) for s in self.healthy()))
        return out


def _error_message(data: bytes) -> str:
    """`` (MESSAGE)`` from a llama-server error body (``{"error": {"message": ...}}``), or ""."""
    try:
        err = json.loads(data).get("error") or {}
        msg = err.get("message") if isinstance(err, dict) else None
    except (ValueError, UnicodeDecodeError, AttributeError):
        return ""
    return f" ({msg})" if isinstance(msg, str) and msg else ""
