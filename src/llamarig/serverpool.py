"""The KV pool of a llama-server as the server itself has it: how many cells, whether that is
exact or only a lower bound, where it is known from, and how many cells are in use. One home
for the gateway (``gateway/pool.py`` builds admission on it) and ``llamarig top`` (``top/pool.py``
builds its live view on it). Pure over llama-server's JSON and its start-up lines, but for
:func:`last_start` and :func:`newer_start`, which read a log file.

What build 11434 exposes (tools/server/ and src/ of the pinned tree):

- ``GET /props``: ``total_slots`` = ``-np`` (server-context.cpp:4970) and
  ``default_generation_settings.n_ctx`` = ``n_ctx_slot()`` (server-context.cpp:4962), the
  context of ONE slot: ``min(n_ctx_seq, --kv-unified-per-slot, n_ctx_train)``
  (server-context.cpp:4377-4385). It does not say whether the cache is unified, nor ``-c``.
- ``GET /v1/models``: ``data[0].meta.n_ctx_train`` (server-context.cpp:4913), so a slot context
  equal to it may be the training-context cap rather than the pool.
- ``n_ctx`` is ``-c`` padded to 256; ``n_ctx_seq`` is ``n_ctx`` with ``-kvu`` and ``n_ctx / n_seq``
  (padded to 256) without (src/llama-context.cpp:292-298): with ``-kvu`` it is the pool itself.
  Without ``-np`` llama-server runs 4 slots on a unified cache (tools/server/server.cpp:168-173).
  ``--fit`` only adjusts arguments the command leaves unset (common/arg.cpp:2871-2872), so a
  ``-c`` on the running process's command line is its ``n_ctx``.
- The log, at the default verbosity: ``initializing, n_slots = N, n_ctx_slot = C, kv_unified =
  'true'`` (server-context.cpp:1383), and when a cap binds, the pool before the cap: ``capping
  per-slot context (SEQ) to --kv-unified-per-slot (P)`` (server-context.cpp:1350), ``the slot
  context (SEQ) exceeds the training context of the model (T) - capping``
  (server-context.cpp:1366), ``--kv-unified-per-slot (P) exceeds the per-slot pool capacity
  (SEQ)`` (server-context.cpp:1355). No cap line: ``n_ctx_seq`` = ``n_ctx_slot``. Each start
  begins with ``initializing ...`` (tools/server/server.cpp:116).
- ``GET /slots``: each slot's ``n_prompt_tokens`` = the tokens its sequence holds in the cache,
  generated ones included (server-context.cpp:738, 578), and ``next_token[0].n_remain`` the
  tokens it may still generate (server-context.cpp:746): their sums are the cells in use and
  what the busy slots need to finish. Idle slots keep their cells until a new task or a full
  pool clears them.
- ``/metrics`` has no KV gauge at this build (server-task.cpp:1535-1600).

So the pool is exact from the log; from the running process's command line when it sets ``-c``;
from ``/props`` it is exact (with ``-kvu``) when the slot context is below ``n_ctx_train`` and no
``--kv-unified-per-slot`` caps it, and only a lower bound when the slot context equals
``n_ctx_train`` (the 307K-context MTP field report: ``-c 307200 -np 4 -kvu`` with n_ctx_train
262144 shows 262144). :func:`server_pool` says which.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from llamarig.logformat import MEM_SLOTS, ctx_before_cap

#: how the pool's size is known: the number itself, or only a lower bound of it
Bound = Literal["exact", "at_least"]
#: where it is known from: the server's start-up lines, its command line, ``/props``
Source = Literal["log", "props", "command"]

#: the start of a run and its ``initializing`` line (tools/server/server.cpp:116,
#: server-context.cpp:1383), searched for in a log file as bytes
_RUN = b"llama_server: initializing ..."
_INIT = b"initializing, n_slots = "
#: the places a share full is shown to (``--json``, ``/gateway/status``, ``/metrics``)
FRAC_PLACES = 4
#: the cell granularity of n_ctx and n_ctx_seq (src/llama-context.cpp:292, 297)
PAD = 256


# ------------------------------------------------------------------------------ the log


@dataclass(frozen=True)
class LogStart:
    """One start of llama-server in its log: its ``initializing, n_slots = N, n_ctx_slot = C,
    kv_unified = '…'`` line and the per-sequence context a capping line before it gave (a slot's
    context cut to n_ctx_train or --kv-unified-per-slot; the pool is not cut)."""

    n_slots: int
    n_ctx_slot: int
    kv_unified: bool
    n_ctx_seq: int  # the pool per sequence: the whole pool with -kvu
    line: int = 0  # line number of the initializing line in the text read (0: not counted)
    at: int = 0  # byte offset of the initializing line in the file read (a later start is a restart)
    path: str = ""  # the file read

    @property
    def pool_tokens(self) -> int:
        """The KV cells: one per-sequence context shared by the slots (unified), else one each
        (src/llama-context.cpp:294-298)."""
        return self.n_ctx_seq if self.kv_unified else self.n_ctx_seq * self.n_slots


class StartReader:
    """Reads llama-server's start-up lines one at a time: the capping lines, then the
    ``initializing`` line that closes a start."""

    def __init__(self) -> None:
        self.seq: int | None = None

    def feed(self, no: int, line: str) -> LogStart | None:
        if (seq := ctx_before_cap(line)) is not None:
            self.seq = max(self.seq or 0, seq)
            return None
        m = MEM_SLOTS.search(line)
        if m is None:
            return None
        n_slots, slot_ctx = int(m.group(1)), int(m.group(2))
        start = LogStart(n_slots, slot_ctx, m.group(3) == "true", max(self.seq or 0, slot_ctx), line=no)
        self.seq = None
        return start


def log_starts(text: str) -> list[LogStart]:
    """Every start of a llama-server in ``text`` (a log may hold several runs)."""
    reader = StartReader()
    return [st for no, line in enumerate(text.splitlines(), 1) if (st := reader.feed(no, line)) is not None]


def last_start(path: str, after: int = 0) -> LogStart | None:
    """The last start of llama-server in the log at ``path`` at or after byte ``after`` (None:
    no start there, or the file cannot be read). Searches from the end (``mmap.rfind``), so the
    cost is the bytes of that start, not the file."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                return None
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return _last_start(m, path, after)
    except (OSError, ValueError):
        return None


def _last_start(m: mmap.mmap, path: str, after: int) -> LogStart | None:
    at = m.rfind(_INIT, after)
    if at < 0:
        return None
    end = m.find(b"\n", at)
    # its capping lines lie between the run's first line (or the start before it) and its init line
    begin = max(0, m.rfind(_RUN, 0, at), m.rfind(_INIT, 0, at))
    reader = StartReader()
    found = None
    for line in m[begin:end if end >= 0 else len(m)].decode("utf-8", "replace").splitlines():
        found = reader.feed(0, line)  # the last line is the init line at ``at``
    return None if found is None else replace(found, at=at, path=path)


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


# ------------------------------------------------------------------------------ the pool


@dataclass(frozen=True)
class CommandLayout:
    """What the running process's command line says of its cache: whether the slots share it
    (``-kvu``, or no ``-np``), ``-c`` and ``--kv-unified-per-slot`` as given (None: not given;
    the environment, ``LLAMA_ARG_CTX_SIZE``, may set them unseen)."""

    unified: bool
    ctx: int | None = None
    per_slot: int | None = None


@dataclass(frozen=True)
class ServerFacts:
    """What one llama-server says about its slots (``/props``, ``/v1/models``, its log, its
    command line)."""

    slots: int
    slot_ctx: int
    n_ctx_train: int | None = None
    log: LogStart | None = None
    command: CommandLayout | None = None


@dataclass(frozen=True)
class ServerPool:
    """The server's KV pool in tokens (cells), how it is known, and its slots."""

    tokens: int
    bound: Bound  # "at_least": only a lower bound is visible (the slot context is capped)
    source: Source
    slots: int
    slot_ctx: int
    unified: bool | None  # None: not said by the server (the caller's ``unified`` was assumed)
    capped_by_train: bool = False  # the slot context is the model's n_ctx_train

    @property
    def exact(self) -> bool:
        return self.bound == "exact"


def props_slots(props: Mapping[str, Any] | None) -> tuple[int | None, int | None]:
    """(``total_slots``, ``default_generation_settings.n_ctx``) of ``GET /props``; None for a
    field that is missing or not a positive number."""
    p = props or {}
    gs = p.get("default_generation_settings")
    return _positive(p.get("total_slots")), _positive(gs.get("n_ctx") if isinstance(gs, Mapping) else None)


def n_ctx_train(models: Mapping[str, Any] | None) -> int | None:
    """``data[0].meta.n_ctx_train`` of ``GET /v1/models`` (server-context.cpp:4913)."""
    data = (models or {}).get("data")
    meta = data[0].get("meta") if isinstance(data, list) and data and isinstance(data[0], Mapping) else None
    return _positive(meta.get("n_ctx_train") if isinstance(meta, Mapping) else None)


def server_facts(props: Mapping[str, Any] | None, models: Mapping[str, Any] | None = None,
                 log: LogStart | None = None, command: CommandLayout | None = None) -> ServerFacts | None:
    """The facts of ``/props`` (with ``/v1/models`` for n_ctx_train, and what the log and the
    command line add); None when ``/props`` lacks what every llama-server has."""
    slots, slot_ctx = props_slots(props)
    if slots is None or slot_ctx is None:
        return None
    return ServerFacts(slots, slot_ctx, n_ctx_train(models), log, command)


def server_pool(f: ServerFacts, unified: bool = True) -> ServerPool:
    """The pool the server has: from its log when that start is the one ``/props`` shows (same
    slots and slot context); else from its command line; else from ``/props`` with ``unified``
    (the caller's word, llama-server's default when ``-np`` is auto) as the cache layout."""
    lg = f.log
    train = f.n_ctx_train is not None and f.slot_ctx >= f.n_ctx_train
    if lg is not None and (lg.n_slots, lg.n_ctx_slot) == (f.slots, f.slot_ctx):
        return ServerPool(lg.pool_tokens, "exact", "log", f.slots, f.slot_ctx, lg.kv_unified,
                          capped_by_train=f.n_ctx_train == f.slot_ctx and lg.n_ctx_seq > f.slot_ctx)
    if f.command is not None:
        return _command_pool(f, f.command, train)
    tokens = seen_tokens(f.slot_ctx, f.slots, unified)  # split: each slot owns n_ctx_seq >= slot_ctx
    return ServerPool(tokens, "at_least" if train else "exact", "props", f.slots, f.slot_ctx, None, train)


def _command_pool(f: ServerFacts, c: CommandLayout, train: bool) -> ServerPool:
    """The pool from the command line's layout: ``-c`` (padded) is the cache; without it, what
    ``/props`` shows, a lower bound when a cap (n_ctx_train, --kv-unified-per-slot) may hide more."""
    seen = seen_tokens(f.slot_ctx, f.slots, c.unified)
    if c.ctx:
        return ServerPool(max(_pad(c.ctx), seen), "exact", "command", f.slots, f.slot_ctx, c.unified,
                          train and _pad(c.ctx) > seen)
    capped = train or (c.per_slot is not None and f.slot_ctx >= c.per_slot)
    return ServerPool(seen, "at_least" if capped else "exact", "command", f.slots, f.slot_ctx, c.unified, train)


def seen_tokens(slot_ctx: int, slots: int, unified: bool) -> int:
    """The cells the slots' contexts show: one context shared by the slots (unified), else one
    each (src/llama-context.cpp:294-298); a lower bound when a cap cut the slot context."""
    return slot_ctx if unified else slot_ctx * slots


def used_frac(cells: int | None, tokens: int | None) -> float | None:
    """How full the pool is: the cells in use over its cells (at most this when ``tokens`` is a
    lower bound); None when either is unknown. Every reader shows it to :data:`FRAC_PLACES` places."""
    return None if cells is None or not tokens else cells / tokens


def _pad(n: int) -> int:
    return -(-n // PAD) * PAD


def _positive(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


# ------------------------------------------------------------------------------ cells in use


@dataclass(frozen=True)
class CellsInUse:
    """The cells the slots hold (``GET /slots``: the sum of ``n_prompt_tokens``, idle slots'
    cached prompts included), those of the busy slots, and what the busy slots need to finish
    (their cells plus their ``n_remain``)."""

    total: int
    busy: int
    needed: int


def cells_in_use(slots: Any) -> CellsInUse | None:
    """The cells in use of a ``GET /slots`` answer; None when it is not a list of slots or no
    slot says how many cells it holds."""
    if not isinstance(slots, (list, tuple)):
        return None
    total = busy = needed = 0
    seen = False
    for s in slots:
        n = _int(s.get("n_prompt_tokens")) if isinstance(s, Mapping) else None
        if n is None:
            continue
        seen = True
        total += n
        if s.get("is_processing"):
            busy += n
            needed += n + max(0, _n_remain(s))
    return CellsInUse(total, busy, needed) if seen else None


def _n_remain(s: Mapping[str, Any]) -> int:
    nt = s.get("next_token")
    first = nt[0] if isinstance(nt, list) and nt and isinstance(nt[0], Mapping) else {}
    return _int(first.get("n_remain")) or 0


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None
