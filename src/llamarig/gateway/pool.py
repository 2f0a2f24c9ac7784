"""What admission reserves against on one backend: the KV pool llama-server has
(:mod:`llamarig.serverpool`: how many cells, exact or a lower bound, from ``/props``,
``/v1/models`` and the server's log, with the pinned build's source lines) meeting the config,
and a group's cap on it.

:func:`admission_pool` meets the config: a configured pool (or slot count, or slot context)
larger than the server's is clamped to the server's (an error: admission would promise more than
the server holds), a smaller one is kept (a note); a configured pool above a lower bound is
consistent with it and used. :func:`facts_from_props` refuses a ``/props`` without the fields
every llama-server has (a :class:`BackendError`: not a llama-server).

Everything here is pure but :func:`log_size` (a stat) and :func:`launched_log` (the state file of
``llamarig launch``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from llamarig.gateway.config import BackendConfig
from llamarig.gateway.errors import BackendError
from llamarig.i18n import _
from llamarig.serverpool import LogStart, ServerFacts, ServerPool, n_ctx_train, props_slots

_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


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
                     log: LogStart | None = None) -> ServerFacts:
    """``/props`` (and ``/v1/models`` for n_ctx_train) as :class:`ServerFacts`; BackendError when
    ``/props`` lacks what every llama-server has."""
    slots, slot_ctx = props_slots(props)
    if slot_ctx is None:
        raise BackendError(_("backend /props has no default_generation_settings.n_ctx"))
    if slots is None:
        raise BackendError(_("backend /props has no total_slots"))
    return ServerFacts(slots=slots, slot_ctx=slot_ctx, n_ctx_train=n_ctx_train(models), log=log)


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
