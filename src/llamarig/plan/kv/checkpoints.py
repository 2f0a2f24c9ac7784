"""Host RAM that fills over a long session instead of being allocated at start: context
checkpoints per slot and the prompt cache (tools/server/server-context.cpp)."""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.diagnostics import Diagnostic, warning
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.estimator import HOST, Contribution, Entry, PlanLayout, entry, mib
from llamarig.units import MiB

#: a diagnostic code: --cache-ram -1
UNBOUNDED_PROMPT_CACHE = "unbounded-prompt-cache"


@dataclass(frozen=True)
class HostExtras:
    estimate: Contribution
    #: bytes of one context checkpoint (0: none are kept)
    checkpoint_bytes: int


def checkpoint(lay: PlanLayout) -> tuple[int, str]:
    """One context checkpoint's bytes and formula: a hybrid model's recurrent state, or an SWA
    model's unmasked window, plus the MTP context's KV; (0, "") when none is kept."""
    spec, cfg, ctx = lay.spec, lay.cfg, lay.ctx
    if cfg.ctx_checkpoints <= 0:
        return 0, ""
    ckpt, formula = 0, ""
    if M.recurrent_bytes_per_seq(spec):
        ckpt = M.recurrent_checkpoint_bytes(spec)
        formula = _("recurrent state of one sequence + 1180 B header")
    elif ctx.swa_cells:
        ckpt = M.swa_checkpoint_bytes(spec, ctx, cfg.cache_type_k, cfg.cache_type_v)
        formula = _("the unmasked SWA cells of one sequence (n_swa {n_swa}) x SWA layers' K+V rows + state "
                    "header").format(n_swa=spec.swa_window)
    mtp = M.mtp_kv_layers(spec, ctx, cfg)
    if ckpt and mtp:
        # the MTP draft context is a plain KV cache: PARTIAL_ONLY is ignored and the whole
        # sequence's nextn-layer KV is saved (llama-kv-cache.cpp:2071; server-context.cpp:2567)
        per_tok_mtp = sum(x.bytes // x.cells for x in mtp)
        ckpt += M.kv_state_bytes(mtp, ctx.n_ctx_slot, ctx.n_stream)
        formula += _(" + MTP context KV of the slot (up to {n} tokens x {per} B)").format(n=ctx.n_ctx_slot,
                                                                                           per=per_tok_mtp)
    return ckpt, formula


def estimate_host_extras(lay: PlanLayout) -> HostExtras:
    cfg, ctx = lay.cfg, lay.ctx
    out: list[Entry] = []
    diags: list[Diagnostic] = []
    ckpt, formula = checkpoint(lay)
    if ckpt:
        n_ck = cfg.ctx_checkpoints * ctx.n_parallel
        out.append(entry(HOST, "checkpoints", ckpt * n_ck,
                         _("--ctx-checkpoints {n} x {slots} slot(s) x {size} ({formula}); worst case").format(
                             n=cfg.ctx_checkpoints, slots=ctx.n_parallel, size=mib(ckpt), formula=formula), "exact"))
    if cfg.cache_ram_mib < 0:
        diags.append(warning(UNBOUNDED_PROMPT_CACHE, _("--cache-ram -1: the prompt cache in host RAM has no byte limit")))
    elif cfg.cache_ram_mib > 0:
        out.append(entry(HOST, "cache_ram", cfg.cache_ram_mib * MiB,
                         _("--cache-ram {n} MiB prompt cache (upper bound, filled over time)").format(
                             n=cfg.cache_ram_mib), "given"))
    return HostExtras(Contribution(tuple(out), tuple(diags)), ckpt)
