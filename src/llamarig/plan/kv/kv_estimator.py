"""The KV cache: full-attention layers (n_ctx cells each) and SWA layers (their window), on the
device of their layer, or the host with -nkvo (llama-kv-cache.cpp)."""

from __future__ import annotations

from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.estimator import Contribution, Entry, PlanLayout, entry, mib


def estimate_kv(lay: PlanLayout) -> Contribution:
    spec, cfg, ctx = lay.spec, lay.cfg, lay.ctx
    kvl = M.kv_layers(spec, ctx, cfg.cache_type_k, cfg.cache_type_v)
    out: list[Entry] = []
    for dev in range(-1, lay.n_dev):
        sel = [x for x in kvl if lay.kv_device(x.layer) == dev]
        full = [x for x in sel if x.kind == "attention"]
        swa = [x for x in sel if x.kind == "swa"]
        if full:
            b = sum(x.bytes for x in full)
            per = b // full[0].cells
            out.append(entry(dev, "kv", b, _("{n} attention layer(s) x {cells} cells x {per} B/cell (K {tk} + V {tv}) "
                                             "= {size}").format(n=len(full), cells=full[0].cells, per=per // len(full),
                                                                tk=cfg.cache_type_k, tv=cfg.cache_type_v, size=mib(b))))
        if swa:
            b = sum(x.bytes for x in swa)
            out.append(entry(dev, "kv", b, _("{n} SWA layer(s) x {cells} cells ({cells_formula} x {streams} stream(s)) = "
                                             "{size}").format(
                n=len(swa), cells=swa[0].cells, streams=ctx.n_stream, size=mib(b),
                cells_formula=f"pad256(min(n_ctx_seq, n_swa {spec.swa_window} x "
                              f"{'n_seq' if ctx.kv_unified else '1'} + n_ubatch {ctx.n_ubatch}))")))
    return Contribution(tuple(out))


def kv_bytes_per_token(lay: PlanLayout) -> int:
    """KV bytes one token adds across all layers (the plan's headline figure)."""
    cfg = lay.cfg
    return M.kv_bytes_per_token(lay.spec, cfg.cache_type_k, cfg.cache_type_v, lay.ctx.flash_attn)
