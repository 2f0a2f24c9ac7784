"""The KV pool of a llama-server as ``llamarig top`` sees it: how many cells it has, whether the
slots share them, and how many are in use. Pure: the I/O that finds a hint (the server's log or
command line on this machine) is in llamarig.top.local, the gateway's view in derive.

What llama.cpp build 11434 does (tools/server/server-context.cpp unless named):
- Every slot's context is ``n_ctx_slot()`` (4377): the per-sequence context
  (src/llama-context.cpp:295-298: the whole ``-c`` with a unified KV cache, ``-c / -np`` without),
  capped by ``--kv-unified-per-slot`` and by the model's ``n_ctx_train``. ``/props`` and ``/slots``
  report only that; none of ``/props``, ``/slots`` or ``/metrics`` says whether the cache is
  unified or how many cells it has. The log does: ``initializing, n_slots = N, n_ctx_slot = C,
  kv_unified = 'true'`` (1383), and when a cap binds, the uncapped per-sequence size (1350, 1366).
  Without ``-np`` llama-server runs 4 slots on a unified cache (tools/server/server.cpp:168-173).
- Cells in use: ``/slots`` ``n_prompt_tokens`` is ``prompt.tokens.size()`` (738), the tokens in
  the slot's cache, prompt and generated. Their sum over the slots is the cells in use (an upper
  bound when slots share a prefix copied with ``seq_cp``, which only child tasks of one request do).
  Idle slots keep their cache until a new task starts (then, on a unified cache, they are saved to
  the RAM prompt cache and cleared, 2641-2653) or the pool runs out (``try_clear_idle_slots``, 1800).
- When a decode finds no free cells even for one token after clearing the idle slots, every busy
  slot ends with "Context size has been exceeded." and its cache is cleared (4023, 4040-4048).
  A slot can also never grow past its own ``n_ctx`` (2015-2023).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from llamarig.bench.logparse import server_starts
from llamarig.flags.argv import Command
from llamarig.top.model import PoolHint, PoolView, SlotView

#: busy slots holding this share of a unified pool: near full
NEAR_FULL = 0.9
#: ... or this few seconds from full at the busy slots' current decode rate
NEAR_FULL_ETA_S = 30.0


NO_HINT = PoolHint()


def hint_from_log(text: str, detail: str = "") -> PoolHint | None:
    """The pool from llama-server's start-up lines (the last start in ``text``), read as
    ``llamarig logs`` reads them (bench.logparse.server_starts)."""
    starts = server_starts(text)
    if not starts:
        return None
    st = starts[-1]
    return PoolHint(st.pool_tokens, st.kv_unified, "log", detail)


def hint_from_argv(argv: Sequence[str], slot_ctx: int | None, detail: str = "") -> PoolHint:
    """The pool from a llama-server command line (what was meant, not what ran: ``--fit`` may
    have lowered ``-c``): unified with ``-kvu`` or without ``-np``; its size is ``-c`` (padded to
    256) where that is more than one slot's context (a capped slot), else one slot's context."""
    cmd = Command.parse(argv)
    n_par = _int(cmd.get("--parallel"))
    kvu = cmd.enabled("--kv-unified")
    unified = kvu if kvu is not None else (n_par is None or n_par < 0)
    if not unified:
        return PoolHint(None, False, "command", detail)
    c = _int(cmd.get("--ctx-size"))
    padded = -(-c // 256) * 256 if c else None
    tokens = padded if padded and slot_ctx and padded > slot_ctx else slot_ctx
    return PoolHint(tokens, True, "command", detail)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def pool_view(slots: Sequence[SlotView], hint: PoolHint, split_seen: bool) -> PoolView:
    """The pool of one server from its slots and a hint. Without a hint the slots are taken to
    share one pool of one slot's context (llama-server's default without ``-np``, and the reading
    that warns first), until more cells are in use than that (``split_seen``: then each slot owns
    its context, or a cap hides a larger pool)."""
    used = [s.ctx_used for s in slots if s.ctx_used is not None]
    cells = sum(used) if used else None
    busy = [s for s in slots if s.busy]
    cells_busy = sum(s.ctx_used or 0 for s in busy)
    n_ctx = max((s.n_ctx for s in slots if s.n_ctx), default=None)
    total = sum(s.n_ctx for s in slots if s.n_ctx) or None
    rate = sum(s.decode_tok_s or 0.0 for s in busy if s.phase == "decode")
    needed = cells_busy + sum(s.n_remain for s in busy if s.n_remain is not None and s.n_remain > 0)
    tokens, unified, source, detail = hint.tokens, hint.unified, hint.source, hint.detail
    if unified is None and tokens is None:
        if split_seen:
            tokens, unified, source = total, False, "slots"
        else:
            tokens, unified, source = n_ctx, True, "assumed"
    elif unified is False:
        tokens = tokens or total
    else:  # a pool the slots share: of the size given, else of one slot's context
        tokens, unified = tokens or n_ctx, True
    eta = (tokens - cells_busy) / rate if tokens and unified and rate > 0 and cells_busy < tokens else None
    return PoolView(tokens=tokens, unified=unified, source=source, detail=detail, cells=cells,
                    cells_busy=cells_busy if busy else 0, cells_needed=needed if busy else 0,
                    fill_tok_s=rate if busy else None, full_in_s=eta)


def more_than_one_slot(slots: Iterable[SlotView]) -> bool:
    """More cells in use than one slot's context: the slots do not share one pool of that size."""
    ss = list(slots)
    n_ctx = max((s.n_ctx for s in ss if s.n_ctx), default=0)
    return bool(n_ctx) and sum(s.ctx_used or 0 for s in ss) > n_ctx


def pool_alerts(pool: PoolView) -> list[tuple[str, dict[str, Any]]]:
    """(kind, values) of the pool's alerts: ``pool_near_full`` when the busy slots hold 90 % of a
    shared pool or will fill it within 30 s at their decode rate; ``pool_overflow_ahead`` when
    they need more cells to finish than it has (each busy slot's context + its ``n_remain``)."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not pool.tokens or not pool.unified or not pool.cells_busy:
        return out
    frac = pool.cells_busy / pool.tokens
    soon = pool.full_in_s is not None and pool.full_in_s <= NEAR_FULL_ETA_S
    if frac >= NEAR_FULL or soon:
        out.append(("pool_near_full", {"used": pool.cells_busy, "total": pool.tokens, "pct": round(100 * frac),
                                       "full_in_s": None if pool.full_in_s is None else round(pool.full_in_s)}))
    if pool.cells_needed > pool.tokens:
        out.append(("pool_overflow_ahead", {"needed": pool.cells_needed, "total": pool.tokens,
                                            "full_in_s": None if pool.full_in_s is None else round(pool.full_in_s)}))
    return out

