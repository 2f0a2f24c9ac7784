"""The KV cache: full-attention layers (n_ctx cells each) and SWA layers (their window), on the
device of their layer, or the host with -nkvo (llama-kv-cache.cpp)."""

from __future__ import annotations

from llamarig.plan import memory as M
from llamarig.plan.estimators.base import Contribution, Entry, PlanLayout, entry, mib


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
            out.append(entry(dev, "kv", b, f"{len(full)} attention layer(s) x {full[0].cells} cells x "
                             f"{per // len(full)} B/cell (K {cfg.cache_type_k} + V {cfg.cache_type_v}) = {mib(b)}"))
        if swa:
            b = sum(x.bytes for x in swa)
            out.append(entry(dev, "kv", b, f"{len(swa)} SWA layer(s) x {swa[0].cells} cells "
                             f"(pad256(min(n_ctx_seq, n_swa {spec.swa_window} x "
                             f"{'n_seq' if ctx.kv_unified else '1'} + n_ubatch {ctx.n_ubatch})) x "
                             f"{ctx.n_stream} stream(s)) = {mib(b)}"))
    return Contribution(tuple(out))


def kv_bytes_per_token(lay: PlanLayout) -> int:
    """KV bytes one token adds across all layers (the plan's headline figure)."""
    cfg = lay.cfg
    return M.kv_bytes_per_token(lay.spec, cfg.cache_type_k, cfg.cache_type_v, lay.ctx.flash_attn)
