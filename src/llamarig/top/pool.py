"""The KV pool of a llama-server as ``llamarig top`` sees it: how many cells it has, whether the
slots share them, how it is known, and how many are in use. The pool as the server has it and
the cells in use are llamarig.serverpool's (the gateway's too); here is what top adds: the
command line read into its layout, the pool given with ``--pool``, the reading when the server
does not say whether its slots share the cells, the fill rate and the alerts. Pure: the I/O that
finds a local server's log and command line is in llamarig.top.local, the gateway's view in
llamarig.top.collect.

What llama.cpp build 11434 does (tools/server/server-context.cpp unless named; the sources of
the pool's size are cited in llamarig.serverpool):
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

from llamarig.flags.argv import Command
from llamarig.serverpool import CellsInUse, CommandLayout, ServerFacts, seen_tokens, server_pool
from llamarig.top.model import PoolHint, PoolView, SlotView

#: busy slots holding this share of a unified pool: near full
NEAR_FULL = 0.9
#: ... or this few seconds from full at the busy slots' current decode rate
NEAR_FULL_ETA_S = 30.0


NO_HINT = PoolHint()


def command_layout(argv: Sequence[str]) -> CommandLayout:
    """What a llama-server command line says of its cache: shared by the slots with ``-kvu`` or
    without ``-np`` (tools/server/server.cpp:168-173), ``-c`` and ``--kv-unified-per-slot`` as
    given."""
    cmd = Command.parse(argv)
    n_par = _int(cmd.get("--parallel"))
    kvu = cmd.enabled("--kv-unified")
    unified = kvu if kvu is not None else (n_par is None or n_par < 0)
    return CommandLayout(unified, _int(cmd.get("--ctx-size")), _int(cmd.get("--kv-unified-per-slot")))


def hint_of(facts: ServerFacts | None, process: str = "") -> PoolHint:
    """The pool of a server read directly (llamarig.serverpool.server_pool: its log, its command
    line, else ``/props`` with ``/v1/models``) as top's hint; the detail names the log file or
    the ``process``. From ``/props`` alone the server does not say whether its slots share the
    cells: :func:`pool_view` decides."""
    if facts is None:
        return NO_HINT
    sp = server_pool(facts)
    if sp.source == "props":
        why = f"n_ctx_train {facts.n_ctx_train}" if sp.capped_by_train else ""
        return PoolHint(sp.tokens, None, "props", why, sp.bound)
    detail = facts.log.path if sp.source == "log" and facts.log is not None else process
    return PoolHint(sp.tokens, sp.unified, sp.source, detail, sp.bound)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def pool_view(slots: Sequence[SlotView], hint: PoolHint, split_seen: bool, cells: CellsInUse | None) -> PoolView:
    """The pool of one server from its slots, its cells in use (llamarig.serverpool.cells_in_use)
    and a hint. When the server does not say whether its slots share the cells (``/props`` alone,
    or nothing), they are taken to share one pool of one slot's context (llama-server's default
    without ``-np``, and the reading that warns first), until more cells are in use than that
    (``split_seen``: then each slot owns its context, or a cap hides a larger pool)."""
    busy = [s for s in slots if s.busy]
    ctxs = [s.n_ctx for s in slots if s.n_ctx]
    n_ctx = max(ctxs, default=None)
    rate = sum(s.decode_tok_s or 0.0 for s in busy if s.phase == "decode")
    tokens, unified, source, detail = hint.tokens, hint.unified, hint.source, hint.detail
    if unified is None and source in ("", "props"):  # the layout not said: assumed shared, until seen split
        unified, source = not split_seen, "slots" if split_seen else "assumed"
        tokens = None if split_seen else tokens
    unified = unified is not False  # a pool the slots share, unless said or seen otherwise
    if tokens is None and n_ctx:  # of the size given, else what the slots' contexts show (llamarig.serverpool)
        tokens = seen_tokens(n_ctx, len(ctxs), unified)
    cells_busy = cells.busy if cells is not None and busy else 0
    eta = (tokens - cells_busy) / rate if tokens and unified and rate > 0 and cells_busy < tokens else None
    return PoolView(tokens=tokens, unified=unified, source=source, detail=detail,
                    cells=cells.total if cells is not None else None, cells_busy=cells_busy,
                    cells_needed=cells.needed if cells is not None and busy else 0,
                    fill_tok_s=rate if busy else None, full_in_s=eta, bound=hint.bound, slot_ctx=n_ctx)


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

