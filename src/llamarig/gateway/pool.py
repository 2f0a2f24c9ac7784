"""The KV pool of a llama-server as the server itself has it, and what admission reserves against.

What build 11434 exposes (tools/server/ and src/ of the pinned tree):

- ``GET /props``: ``total_slots`` = ``-np`` (server-context.cpp:4970) and
  ``default_generation_settings.n_ctx`` = ``n_ctx_slot()`` (server-context.cpp:4962, 4551), the
  context of ONE slot: ``min(n_ctx_seq, --kv-unified-per-slot, n_ctx_train)``
  (server-context.cpp:4377-4385). It does not say whether the cache is unified, nor ``-c``.
- ``GET /v1/models``: ``data[0].meta.n_ctx_train`` (server-context.cpp:4913), so a slot context
  equal to it may be the training-context cap rather than the pool.
- ``n_ctx_seq`` is ``n_ctx`` with ``-kvu`` and ``n_ctx / n_seq`` (padded to 256) without
  (src/llama-context.cpp:294-298): with ``-kvu`` it is the pool itself.
- The log, at the default verbosity: ``initializing, n_slots = N, n_ctx_slot = C, kv_unified =
  'true'`` (server-context.cpp:1383), and when a cap binds, the pool before the cap: ``capping
  per-slot context (SEQ) to --kv-unified-per-slot (P)`` (server-context.cpp:1350), ``the slot
  context (SEQ) exceeds the training context of the model (T) - capping``
  (server-context.cpp:1366), ``--kv-unified-per-slot (P) exceeds the per-slot pool capacity
  (SEQ)`` (server-context.cpp:1355). No cap line: ``n_ctx_seq`` = ``n_ctx_slot``.
- ``GET /slots``: each slot's ``n_prompt_tokens`` = the tokens its sequence holds in the cache,
  generated ones included (server-context.cpp:738, 578): their sum is the cells in use.
- ``/metrics`` has no KV gauge at this build (server-task.cpp:1535-1600).

So the pool is exact from the log; from ``/props`` it is exact (with ``-kvu``) when the slot
context is below ``n_ctx_train`` and no ``--kv-unified-per-slot`` is set, and a lower bound when
the slot context equals ``n_ctx_train`` (the 307K-context MTP field report: ``-c 307200 -np 4
-kvu`` with n_ctx_train 262144 shows 262144). :func:`server_pool` says which.
:func:`admission_pool` then meets the config: a configured pool (or slot count, or slot
context) larger than the server's is clamped to the server's (an error: admission would promise
more than the server holds), a smaller one is kept (a note).

Everything here is pure but :func:`read_log` (a local file) and :func:`launched_log` (the state
file of ``llamarig launch``).
"""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from llamarig.gateway.config import BackendConfig
from llamarig.gateway.errors import BackendError
from llamarig.i18n import _
from llamarig.logformat import MEM_SLOTS, ctx_before_cap

# the log lines (tools/server/server.cpp:116, server-context.cpp:1350-1384)
_START = b"llama_server: initializing ..."
_INIT = b"initializing, n_slots = "
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class LogFacts:
    """What llama-server printed when it started (the last start in the file)."""

    path: str
    n_slots: int
    n_ctx_slot: int
    n_ctx_seq: int  # the pool per sequence: the whole pool with -kvu
    kv_unified: bool
    at: int  # byte offset of its init line (a later start is a restart)


@dataclass(frozen=True)
class ServerFacts:
    """What one llama-server says about its slots (``/props``, ``/v1/models``, its log)."""

    slots: int
    slot_ctx: int
    n_ctx_train: int | None = None
    log: LogFacts | None = None


Bound = Literal["exact", "at_least"]


@dataclass(frozen=True)
class ServerPool:
    """The server's KV pool in tokens (cells), how it is known, and its slots."""

    tokens: int
    bound: Bound  # "at_least": only a lower bound is visible (the slot context is capped)
    source: Literal["log", "props"]
    slots: int
    slot_ctx: int
    unified: bool | None  # None: not said by the server (the config's ``unified`` was assumed)
    capped_by_train: bool = False  # the slot context is the model's n_ctx_train


@dataclass(frozen=True)
class Mismatch:
    """The config says ``configured`` where the server has ``server``."""

    field: Literal["pool_tokens", "slots", "slot_ctx"]
    configured: int
    server: int

    @property
    def larger(self) -> bool:
        """The config promises more than the server holds: admission uses the server's."""
        return self.configured > self.server

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "configured": self.configured, "server": self.server,
                "action": "clamped" if self.larger else "kept"}


@dataclass(frozen=True)
class Pool:
    """What admission reserves against on one backend."""

    pool_tokens: int  # reservable tokens (after the safety fraction)
    slots: int  # concurrent requests (-np)
    slot_ctx: int  # largest prompt + max_tokens of one request
    source: str  # where the pool came from: "props", "log", "config", or "props+config" ...
    server: ServerPool | None = None  # None: the server was not read (tests, a config-only pool)
    mismatches: tuple[Mismatch, ...] = ()

    @property
    def exact(self) -> bool:
        """False when the pool is only a lower bound of the server's (nothing configured)."""
        return not (self.server is not None and self.server.bound == "at_least" and "config" not in self.source)


@dataclass(frozen=True)
class Cap:
    """The most a group (a tier, or cron) may hold on one backend; None: no limit."""

    tokens: int | None = None
    slots: int | None = None


@dataclass(frozen=True)
class Share:
    """A group's cap on each backend (a tier's or cron's ``max_pool_share`` and ``max_slots``;
    None: no cap). Every request belongs to ``tier:NAME`` and, when it is a cron job, ``cron``;
    each group's tokens and requests are counted per backend whether capped or not."""

    group: str
    pool_share: float | None = None
    slots: int | None = None

    @property
    def capped(self) -> bool:
        return self.pool_share is not None or self.slots is not None

    def cap(self, pool: Pool) -> Cap:
        """The cap on a backend with ``pool``: its share of the usable pool, in tokens."""
        tokens = None if self.pool_share is None else max(1, math.floor(self.pool_share * pool.pool_tokens))
        return Cap(tokens, self.slots)


def group_limits(shares: tuple[Share, ...], pool: Pool) -> tuple[tuple[str, Cap], ...]:
    """The caps of ``shares`` that apply on a backend with ``pool`` (uncapped groups left out)."""
    return tuple((s.group, s.cap(pool)) for s in shares if s.capped)


def cap_blocks(cap: Cap, reserved: int, in_flight: int, tokens: int) -> bool:
    """A group holding ``reserved`` tokens in ``in_flight`` requests cannot take ``tokens`` more."""
    return (cap.slots is not None and in_flight >= cap.slots) or (cap.tokens is not None and reserved + tokens > cap.tokens)


# ------------------------------------------------------------------------------ the server's pool


def facts_from_props(props: Mapping[str, Any] | None, models: Mapping[str, Any] | None = None,
                     log: LogFacts | None = None) -> ServerFacts:
    """``/props`` (and ``/v1/models`` for n_ctx_train) as :class:`ServerFacts`; BackendError when
    ``/props`` lacks what every llama-server has."""
    gs = (props or {}).get("default_generation_settings") or {}
    slot_ctx = gs.get("n_ctx") if isinstance(gs, Mapping) else None
    slots = (props or {}).get("total_slots")
    if not isinstance(slot_ctx, int) or slot_ctx <= 0:
        raise BackendError(_("backend /props has no default_generation_settings.n_ctx"))
    if not isinstance(slots, int) or slots <= 0:
        raise BackendError(_("backend /props has no total_slots"))
    return ServerFacts(slots=slots, slot_ctx=slot_ctx, n_ctx_train=n_ctx_train(models), log=log)


def n_ctx_train(models: Mapping[str, Any] | None) -> int | None:
    """``data[0].meta.n_ctx_train`` of ``GET /v1/models`` (server-context.cpp:4913)."""
    data = (models or {}).get("data")
    meta = data[0].get("meta") if isinstance(data, list) and data and isinstance(data[0], Mapping) else None
    v = meta.get("n_ctx_train") if isinstance(meta, Mapping) else None
    return v if isinstance(v, int) and v > 0 else None


def server_pool(f: ServerFacts, unified: bool = True) -> ServerPool:
    """The pool the server has. From its log when that start is the one ``/props`` shows (same
    slots and slot context); else from ``/props`` with ``unified`` (the config's word, llama-server's
    default when ``-np`` is auto) as the cache layout."""
    lg = f.log
    if lg is not None and (lg.n_slots, lg.n_ctx_slot) == (f.slots, f.slot_ctx):
        tokens = lg.n_ctx_seq if lg.kv_unified else lg.n_ctx_seq * lg.n_slots
        return ServerPool(tokens, "exact", "log", f.slots, f.slot_ctx, lg.kv_unified,
                          capped_by_train=f.n_ctx_train == f.slot_ctx and lg.n_ctx_seq > f.slot_ctx)
    capped = f.n_ctx_train is not None and f.slot_ctx >= f.n_ctx_train
    if not unified:  # each slot owns its part: n_ctx_seq >= slot_ctx each
        return ServerPool(f.slot_ctx * f.slots, "at_least" if capped else "exact", "props", f.slots, f.slot_ctx,
                          None, capped)
    return ServerPool(f.slot_ctx, "at_least" if capped else "exact", "props", f.slots, f.slot_ctx, None, capped)


def admission_pool(sp: ServerPool | None, b: BackendConfig, safety: float = 1.0) -> Pool:
    """The pool admission uses: the server's, with what the config sets where it is not larger
    than the server's (a larger one is clamped: :class:`Mismatch`). ``sp`` None: the config alone
    (the backend was never read; every field must be configured)."""
    if sp is None:
        if b.pool_tokens is None or b.slots is None or b.slot_ctx is None:
            raise BackendError(_("backend /props has no default_generation_settings.n_ctx"))
        return _usable(b.pool_tokens, b.slots, b.slot_ctx, "config", None, (), safety)
    src: list[str] = [sp.source]
    mism: list[Mismatch] = []

    def meet(fld: Literal["pool_tokens", "slots", "slot_ctx"], conf: int | None, server: int, lower_bound: bool) -> int:
        if conf is None:
            return server
        if "config" not in src:
            src.append("config")
        if conf != server and not (lower_bound and conf > server):
            mism.append(Mismatch(fld, conf, server))
        return conf if lower_bound else min(conf, server)

    pool = meet("pool_tokens", b.pool_tokens, sp.tokens, sp.bound == "at_least")
    slots = meet("slots", b.slots, sp.slots, False)
    slot_ctx = meet("slot_ctx", b.slot_ctx, sp.slot_ctx, False)
    return _usable(pool, slots, slot_ctx, "+".join(src), sp, tuple(mism), safety)


def _usable(pool: int, slots: int, slot_ctx: int, source: str, sp: ServerPool | None,
            mism: tuple[Mismatch, ...], safety: float) -> Pool:
    usable = max(1, math.floor(pool * safety))
    return Pool(pool_tokens=usable, slots=slots, slot_ctx=min(slot_ctx, usable), source=source, server=sp,
                mismatches=mism)


def cells_in_use(slots: Any) -> int | None:
    """Cells the slots hold in the KV cache (``GET /slots``: the sum of ``n_prompt_tokens``,
    which counts generated tokens too; idle slots keep theirs until cleared); None when the
    answer is not a list of slots."""
    if not isinstance(slots, list):
        return None
    n = 0
    for s in slots:
        v = s.get("n_prompt_tokens") if isinstance(s, Mapping) else None
        n += v if isinstance(v, int) else 0
    return n


# ------------------------------------------------------------------------------ the log


def read_log(path: str, after: int = 0) -> LogFacts | None:
    """The last start of llama-server in the log at ``path`` at or after byte ``after`` (None:
    no start there, or the file cannot be read). Searches from the end (``mmap.rfind``), so the
    cost is the bytes after that start, not the file."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                return None
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return _facts(m, path, after)
    except (OSError, ValueError):
        return None


def _facts(m: mmap.mmap, path: str, after: int) -> LogFacts | None:
    at = m.rfind(_INIT, after)
    if at < 0:
        return None
    line_end = m.find(b"\n", at)
    init = MEM_SLOTS.search(m[at:line_end if line_end >= 0 else len(m)].decode("utf-8", "replace"))
    if init is None:
        return None
    start = max(0, m.rfind(_START, 0, at))
    block = m[start:at].decode("utf-8", "replace")
    n_slots, n_ctx_slot = int(init.group(1)), int(init.group(2))
    seq = max((c for ln in block.splitlines() if (c := ctx_before_cap(ln)) is not None), default=n_ctx_slot)
    return LogFacts(path, n_slots, n_ctx_slot, max(seq, n_ctx_slot), init.group(3) == "true", at)


def newer_start(path: str, since: int) -> bool:
    """Has llama-server started again in the log after byte ``since`` (a restart appended to the
    same file)? Reads only the bytes after ``since``."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size <= since:
                return False
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return m.find(_INIT, max(0, since - len(_INIT))) >= 0
    except (OSError, ValueError):
        return False


def log_size(path: str) -> tuple[int, int] | None:
    """(inode, size) of the log, to tell cheaply whether it changed; None when unreadable."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size


def launched_log(url: str) -> str | None:
    """The log of a llama-server that ``llamarig launch`` started on this machine at ``url``'s
    port (its state file, llamarig.launch.process), if there is one."""
    from llamarig.launch.process import read_state, state_path  # lazy: only for local backends

    u = urlsplit(url)
    if u.hostname not in _LOOPBACK or u.port is None:
        return None
    p = state_path(u.port)
    if not p.exists():
        return None
    try:
        return read_state(p).log_path
    except Exception:  # noqa: BLE001 - a stale or foreign state file: no log
        return None


def mismatch_text(name: str, m: Mismatch, sp: ServerPool | None = None) -> str:
    """One line on a config value the server contradicts (the gateway logs it once)."""
    if not m.larger:
        return _("backend {name}: the config's {field} = {configured} is below the server's {server}: admission "
                 "keeps {configured} (a note: the server could take more)").format(
                     name=name, field=m.field, configured=m.configured, server=m.server)
    if m.field == "pool_tokens" and sp is not None and sp.source == "props":
        return _("backend {name}: the config's pool_tokens = {configured} is larger than the server's pool {server} "
                 "(/props: one slot's context, the whole pool with -kvu): admission uses {server} (clamped); if "
                 "llama-server runs without -kvu set unified = false, if it runs --kv-unified-per-slot set the "
                 "backend's log").format(name=name, configured=m.configured, server=m.server)
    return _("backend {name}: the config's {field} = {configured} is larger than the server's {server}: "
             "admission uses {server} (clamped); fix the config or restart llama-server with the "
             "larger value").format(name=name, field=m.field, configured=m.configured, server=m.server)


def bound_text(name: str, sp: ServerPool, n_train: int | None) -> str:
    """The line on a pool the server shows only as a lower bound (the slot context is capped)."""
    return _("backend {name}: KV pool at least {tokens} tokens: /props shows the slot context capped at "
             "the model's n_ctx_train {train}, and the pool itself is only in llama-server's log; set the "
             "backend's log (or pool_tokens) to admit the whole pool").format(
                 name=name, tokens=sp.tokens, train=n_train if n_train is not None else sp.slot_ctx)
