"""The recurrent state of Mamba / gated-delta-net layers: per sequence, plus the rollback rows
speculative decoding keeps (llama-memory-recurrent.cpp)."""

from __future__ import annotations

from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.estimator import Contribution, Entry, PlanLayout, entry


def estimate_recurrent(lay: PlanLayout) -> Contribution:
    spec, ctx = lay.spec, lay.ctx
    rps = M.recurrent_bytes_per_seq(spec)
    r = spec.recurrent
    if not rps or r is None:
        return Contribution()
    rows = M.recurrent_rows(ctx)
    per_layer = rps // max(1, M.recurrent_layer_count(spec))
    out: list[Entry] = []
    for dev in range(-1, lay.n_dev):
        n = sum(1 for ly in spec.layers if ly.kind == "recurrent" and not ly.nextn and lay.kv_device(ly.index) == dev)
        if n:
            out.append(entry(dev, "recurrent", per_layer * n * rows,
                             _("{n} recurrent layer(s) x 4 B x ({sizes}) x {rows} rows ({rows_formula})").format(
                                 n=n, rows=rows, sizes=f"n_embd_r {r.n_embd_r} + n_embd_s {r.n_embd_s}",
                                 rows_formula=f"max(1, n_seq {ctx.n_parallel}) x (1 + n_rs_seq {ctx.n_rs_seq})")))
    return Contribution(tuple(out))
