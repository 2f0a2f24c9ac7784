"""Many llama-server backends: their pools (llamarig.gateway.pool), health checks with ejection
and recovery, least-reserved choice with conversation affinity and tier routes, what is wrong
with a backend that fails its check (:func:`classify`: connection refused, timeout, not a
llama-server, not ready, ...), and each backend's ``/slots`` while requests run there
(llamarig.gateway.progress).

``choose_backend`` is pure; ``Backends`` does the I/O (aiohttp) on the gateway's event loop.

Every health check reads ``GET /health`` and ``GET /props`` (cheap: llama-server answers it from
cached metadata, server-context.cpp:4955), and, when configured or found, stats the server's log.
When ``/props`` changes (a restart with other ``-c``/``-np``), the log shows a new start, or the
backend comes back, the pool is derived again (with ``/v1/models`` for n_ctx_train) and a change
is logged; a config value the server contradicts is logged once per value.
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

from llamarig.extras import needed
from llamarig.gateway import reasons
from llamarig.gateway.admission import AdmitRequest, ReservationLedger
from llamarig.gateway.config import BackendConfig, GatewayConfig
from llamarig.gateway.errors import BackendError
from llamarig.gateway.pool import (
    Pool,
    Share,
    admission_pool,
    bound_text,
    facts_from_props,
    group_limits,
    launched_log,
    log_size,
    mismatch_text,
)
from llamarig.gateway.progress import BackendProgress, read_slots
from llamarig.gateway.upstream import Clients
from llamarig.i18n import _, localize
from llamarig.serverpool import LogStart, cells_in_use, last_start, newer_start, server_pool

with needed("gateway"):
    import aiohttp

log = logging.getLogger("llamarig.gateway")

#: the /props fields whose change means the pool must be derived again (a restart)
_PROPS_KEY = ("total_slots", "build_info", "model_path")


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
    log: LogStart | None = None  # the server's start as its log showed it
    log_path: str | None = None
    log_seen: tuple[int, int] | None = None  # (inode, size) of the log when last read
    n_ctx_train: int | None = None
    progress: BackendProgress = field(default_factory=BackendProgress)
    said: set[tuple[object, ...]] = field(default_factory=set)  # pool lines logged (each once)

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
                   affinity: str | None = None, exclude: frozenset[str] = frozenset(), *,
                   shares: tuple[Share, ...] = (), allowed: frozenset[str] | None = None) -> str | None:
    """The backend for a request of ``tokens`` (prompt + max_tokens), or None if none fits now.

    Candidates: healthy, not removed, pool known, on the tier's route (``allowed``), a free slot,
    room in the pool and under the caps of its groups (``shares``). The affinity backend (where
    this conversation went before; its prompt cache holds the prefix) wins if it is a candidate;
    otherwise the one with the smallest reserved fraction after admission
    ((reserved + tokens) / (pool * weight)), then fewest in flight per slot, then name.
    """
    best: tuple[float, float, str] | None = None
    for s in states:
        if not s.healthy or s.removed or s.pool is None or s.name in exclude:
            continue
        if allowed is not None and s.name not in allowed:
            continue
        if not ledger.fits(s.name, s.pool, tokens, group_limits(shares, s.pool)):
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
    """The backend set: states, health loop, the /slots watch."""

    def __init__(self, cfg: GatewayConfig, ledger: ReservationLedger, clients: Clients, lang: str = "en") -> None:
        self.cfg = cfg
        self.ledger = ledger
        self.clients = clients
        self.states: dict[str, BackendState] = {b.name: BackendState(b) for b in cfg.backends}
        self.affinity = Affinity()
        self.on_change: list[Any] = []  # callbacks after health/pool changes (admission pump)
        self._tasks: list[asyncio.Task[None]] = []
        self._metrics_cache: dict[str, tuple[float, str]] = {}
        self.lang = lang  # the language of the lines it logs (the gateway's, llamarig.gateway.server)

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
    def pick(self, req: AdmitRequest, exclude: frozenset[str]) -> str | None:
        pref = self.affinity.get(req.affinity)
        return choose_backend(self.states.values(), self.ledger, req.tokens, pref, exclude,
                              shares=req.shares, allowed=req.backends)

    def pool_of(self, name: str) -> Pool | None:
        """The pool of backend ``name`` as last read (a shared ledger checks claims against it)."""
        st = self.states.get(name)
        return st.pool if st is not None else None

    def blocked(self, req: AdmitRequest) -> reasons.Blocked | None:
        """Why ``req`` fits no backend now (None: one fits)."""
        return reasons.blocked(self.states.values(), self.ledger, req.tokens, req.exclude, shares=req.shares,
                               allowed=req.backends)

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

    def any_healthy(self, allowed: frozenset[str] | None = None) -> bool:
        """A backend is up (among ``allowed``, a tier's route; None: any)."""
        return any(s.healthy and not s.removed and (allowed is None or s.name in allowed) for s in self.states.values())

    def max_slot_ctx(self, allowed: frozenset[str] | None = None) -> int | None:
        vals = [s.pool.slot_ctx for s in self.healthy() if s.pool and (allowed is None or s.name in allowed)]
        return max(vals) if vals else None

    def max_pool(self, allowed: frozenset[str] | None = None) -> Pool | None:
        """The largest usable pool among the healthy backends (on a route: ``allowed``)."""
        pools = [s.pool for s in self.healthy() if s.pool and (allowed is None or s.name in allowed)]
        return max(pools, key=lambda p: p.pool_tokens) if pools else None

    def models(self) -> list[str]:
        out: list[str] = []
        for s in self.states.values():
            for m in s.models:
                if m not in out:
                    out.append(m)
        return out

    def url(self, name: str) -> str:
        return self.states[name].cfg.url

    # -- health and the pool
    async def _get(self, st: BackendState, path: str) -> tuple[int, bytes]:
        timeout = aiohttp.ClientTimeout(total=self.cfg.health.timeout_s)
        async with self.clients.session.get(st.cfg.url + path, timeout=timeout, headers=st.headers()) as r:
            return r.status, await r.read()

    async def _props(self, st: BackendState) -> dict[str, Any]:
        status, data = await self._get(st, "/health")
        if status == 503:
            raise NotReady(_("GET /health: HTTP 503{error_message}").format(error_message=_error_message(data)))
        if status != 200:
            raise NotLlamaServer(_("GET /health: HTTP {status}").format(status=status))
        status, data = await self._get(st, "/props")
        if status != 200:
            raise NotLlamaServer(_("GET /props: HTTP {status}").format(status=status))
        try:
            props = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise NotLlamaServer(_("GET /props: not JSON")) from None
        if not isinstance(props, dict):
            raise NotLlamaServer(_("GET /props: not a JSON object"))
        return props

    async def _models(self, st: BackendState) -> dict[str, Any] | None:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            status, data = await self._get(st, "/v1/models")
            got = json.loads(data) if status == 200 else None
            return got if isinstance(got, dict) else None
        return None

    def _stale(self, st: BackendState, props: Mapping[str, Any]) -> bool:
        """Must the pool be derived again: never derived, the backend was down, ``/props`` says
        something else now (a restart), or the server's log shows a new start."""
        if st.pool is None or not st.healthy or st.props is None:
            return True
        gs = props.get("default_generation_settings") or {}
        if any(st.props.get(k) != props.get(k) for k in _PROPS_KEY) or st.props.get("n_ctx") != gs.get("n_ctx"):
            return True
        if st.log_path is None:
            return False
        seen = log_size(st.log_path)
        if seen == st.log_seen:
            return False
        old, st.log_seen = st.log_seen, seen
        return seen is None or old is None or seen[0] != old[0] or seen[1] < old[1] or newer_start(st.log_path, old[1])

    async def check(self, st: BackendState) -> None:
        was = st.healthy
        try:
            props = await self._props(st)
            if self._stale(st, props):
                self._derive(st, props, await self._models(st))
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

    def _derive(self, st: BackendState, props: Mapping[str, Any], models: Mapping[str, Any] | None) -> None:
        """The pool from what the server says now (llamarig.serverpool), what admission makes of it
        (llamarig.gateway.pool), and the lines on it."""
        st.log_path = st.cfg.log or launched_log(st.cfg.url)
        if st.log_path is not None:
            st.log_seen = log_size(st.log_path)
            st.log = last_start(st.log_path)
        facts = facts_from_props(props, models, st.log)
        sp = server_pool(facts, st.cfg.unified)
        pool = admission_pool(sp, st.cfg, self.cfg.admission.safety)
        gs = props.get("default_generation_settings") or {}
        st.props = {k: props.get(k) for k in ("total_slots", "model_alias", "build_info", "is_sleeping", "model_path")}
        st.props["n_ctx"] = gs.get("n_ctx") if isinstance(gs, Mapping) else None
        st.n_ctx_train = facts.n_ctx_train
        st.models = _model_names(models)
        old, st.pool = st.pool, pool
        st.progress.unsupported = False  # ask /slots again: the server may have been restarted with it
        if old is not None and (old.pool_tokens, old.slots, old.slot_ctx) != (pool.pool_tokens, pool.slots, pool.slot_ctx):
            st.progress = BackendProgress()  # other settings: other rates
            log.warning("%s", localize(reasons.pool_changed_line(st.name, old.pool_tokens, pool.pool_tokens,
                                                                 pool.source, pool.slots, pool.slot_ctx), self.lang))
        self._say_once(st, pool)

    def _say_once(self, st: BackendState, pool: Pool) -> None:
        """Each config value the server contradicts, and a pool seen only as a lower bound, once."""
        for m in pool.mismatches:
            key = (m.field, m.configured, m.server)
            if key not in st.said:
                st.said.add(key)
                text = localize(mismatch_text(st.name, m, pool.server), self.lang)
                log.log(logging.ERROR if m.larger else logging.WARNING, "%s", text)
        if not pool.exact and pool.server is not None and ("bound", pool.server.tokens) not in st.said:
            st.said.add(("bound", pool.server.tokens))
            log.warning("%s", localize(bound_text(st.name, pool.server, st.n_ctx_train), self.lang))

    def line(self, st: BackendState, *, startup: bool = False) -> str:
        """One line on a backend: reachable with its slots and pool, or what is wrong with it
        (``startup``: and that the gateway starts without it and keeps checking)."""
        h = self.cfg.health
        if st.pool is not None and (st.healthy or not st.problem):
            return reasons.backend_ok_line(st.name, st.cfg.url, st.pool.slots, st.pool.pool_tokens,
                                           st.pool.source, st.pool.slot_ctx, exact=st.pool.exact)
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
        st.last_error = ""  # a recovered backend shows no stale error
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

    # -- /slots: progress, slots held, cells in use
    async def read_slots(self, st: BackendState) -> tuple[Any, str]:
        """One ``GET /slots`` of ``st`` into its progress (the requests this replica has there, the
        cells in use): the answer read (None on an error) and the error ("" when none). Every reader
        of the slots (``/gateway/status``, ``/metrics``, ``/gateway/slots``) takes them from here,
        so all show the cells of one reading."""
        try:
            status, data = await self._get(st, "/slots")
            body = json.loads(data) if status == 200 else None
            slots = read_slots(body)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            return None, f"GET /slots: {type(e).__name__}"
        except ValueError:  # not JSON: not llama-server's /slots
            status, body, slots = 200, None, None
        if slots is None:  # --no-slots (501), no such endpoint, or not a list: stop asking
            st.progress.unsupported = status in (200, 404, 501)
            return None, f"GET /slots: HTTP {status}" if status != 200 else "GET /slots: not a list of slots"
        mine = [r for r in self.ledger.active.values() if r.backend == st.name]
        st.progress.observe(slots, time.monotonic(), mine, cells_in_use(body))
        return body, ""

    async def refresh_slots(self, max_age_s: float) -> None:
        """Read the ``/slots`` of every healthy backend whose last reading is older than ``max_age_s``
        or than the end of a request there."""
        now = time.monotonic()
        await asyncio.gather(*(self.read_slots(s) for s in self.healthy() if not s.progress.unsupported
                               and (s.progress.stale or now - s.progress.t >= max_age_s)))

    async def _slots_loop(self) -> None:
        while True:
            every = self.cfg.health.slots_interval_s
            await asyncio.sleep(every if every > 0 else self.cfg.health.interval_s)
            if every <= 0:
                continue
            busy = [s for s in self.healthy() if not s.progress.unsupported
                    and any(r.backend == s.name for r in self.ledger.active.values())]
            await asyncio.gather(*(self.read_slots(s) for s in busy))

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._loop()), loop.create_task(self._slots_loop())]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    # -- metrics re-export
    async def backend_metrics(self) -> Mapping[str, str]:
        """Each healthy backend's /metrics text (cached ``metrics_cache_s``); missing on error."""
        out: dict[str, str] = {}
        now = time.monotonic()

        async def one(st: BackendState) -> None:
            cached = self._metrics_cache.get(st.name)
            if cached and now - cached[0] < self.cfg.health.metrics_cache_s:
                out[st.name] = cached[1]
                return
            try:
                status, data = await self._get(st, "/metrics")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                return
            if status != 200:
                return
            text = data.decode("utf-8", "replace")
            self._metrics_cache[st.name] = (now, text)
            out[st.name] = text

        await asyncio.gather(*(one(s) for s in self.healthy()))
        return out


def _model_names(models: Mapping[str, Any] | None) -> list[str]:
    names: list[Any] = []
    data = (models or {}).get("data")
    for m in data if isinstance(data, list) else ():
        if isinstance(m, Mapping):
            aliases = m.get("aliases")
            names.extend([m.get("id"), *(aliases if isinstance(aliases, list) else ())])
    return [n for n in names if isinstance(n, str)]


def _error_message(data: bytes) -> str:
    """`` (MESSAGE)`` from a llama-server error body (``{"error": {"message": ...}}``), or ""."""
    try:
        err = json.loads(data).get("error") or {}
        msg = err.get("message") if isinstance(err, dict) else None
    except (ValueError, UnicodeDecodeError, AttributeError):
        return ""
    return f" ({msg})" if isinstance(msg, str) and msg else ""
