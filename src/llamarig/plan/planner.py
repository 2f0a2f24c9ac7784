"""Assemble a Plan: memory per device and host RAM, each figure with its formula.

The planner runs the component estimators (each room's ``*_estimator``) in order on one
``PlanLayout`` and posts what each returns into a ``MemoryLines``; then --fit's replay
(fit.fit_estimator) may re-plan with the settings llama-server would really run::

    PlanInputs -> layout -> weights, kv, recurrent, compute, draft (MTP, -md), mmproj,
                  overhead, host extras -> revisions -> budget, settings -> Plan -> --fit
"""

from __future__ import annotations

from dataclasses import replace

from llamarig.plan.budget import budget
from llamarig.plan.compute.compute_estimator import estimate_compute_buffers
from llamarig.plan.config import ServerConfig
from llamarig.plan.draft.draft_estimator import estimate_draft_model, estimate_mtp
from llamarig.plan.estimator import MemoryLines, PlanLayout
from llamarig.plan.fit.fit_estimator import apply_fit
from llamarig.plan.kv.checkpoints import estimate_host_extras
from llamarig.plan.kv.kv_estimator import estimate_kv, kv_bytes_per_token
from llamarig.plan.kv.recurrent import estimate_recurrent
from llamarig.plan.layout import layout
from llamarig.plan.memory import recurrent_bytes_per_seq
from llamarig.plan.mmproj.mmproj_estimator import estimate_mmproj
from llamarig.plan.overhead import estimate_overhead
from llamarig.plan.result import Plan, PlanInputs
from llamarig.plan.revise import gpu_compute_range, tensor_split, weights_origin
from llamarig.plan.settings import settings_diagnostics
from llamarig.plan.speed.speed_estimator import effective_inputs
from llamarig.plan.weights.weights_estimator import estimate_weights

__all__ = ["Plan", "PlanInputs", "effective_inputs", "fit_measurement", "make_plan", "plan_once"]


def make_plan(inp: PlanInputs) -> Plan:
    """The plan for the given settings, after what --fit (on by default) would change
    (common/fit.cpp; estimators.fit)."""
    plan = plan_once(inp)
    if inp.diagnostics:
        plan = replace(plan, diagnostics=(*inp.diagnostics, *plan.diagnostics))
    return apply_fit(inp, plan, plan_once)


def _post_estimates(lay: PlanLayout, ledger: MemoryLines) -> tuple[tuple[int, ...], int]:
    """Every estimator's figures, in table order; (the model's bytes per device as fit.cpp sums
    them, the bytes of one context checkpoint)."""
    weights = estimate_weights(lay)
    ledger.post(weights.estimate)
    ledger.post(estimate_kv(lay))
    ledger.post(estimate_recurrent(lay))
    ledger.post(estimate_compute_buffers(lay))
    mtp = estimate_mtp(lay)
    ledger.post(mtp.estimate)
    draft = estimate_draft_model(lay)
    ledger.post(draft.estimate)
    ledger.post(estimate_mmproj(lay))
    ledger.post(estimate_overhead(lay, mtp.device))
    extras = estimate_host_extras(lay)
    ledger.post(extras.estimate)
    for revise in (tensor_split, weights_origin, gpu_compute_range):
        ledger.revise(revise(lay, ledger))
    fit_model = tuple(w + d for w, d in zip(weights.split.per_device, draft.weights_per_device, strict=True))
    return fit_model, extras.checkpoint_bytes


def fit_measurement(inp: PlanInputs, base_cfg: ServerConfig | None = None) -> Plan:
    """What one of --fit's dry runs measures for ``inp`` (common/fit.cpp:30-153): the model loaded
    without allocating, so each compute buffer is the prompt graph's alone with nothing pinned
    (:func:`llamarig.plan.compute.buffers.replayed_buffers`), and the MTP context measured with the user's
    own placement, ``base_cfg`` (its params are copied before fit changes the main model's,
    common/common.cpp:1244-1258, and fit measures it again only when the context changes,
    fit.cpp:205-258)."""
    return plan_once(inp, base_cfg, dry_run=True)


def plan_once(inp: PlanInputs, base_cfg: ServerConfig | None = None, dry_run: bool = False) -> Plan:
    """One plan for exactly these settings, without --fit. ``base_cfg``: the user's settings when
    ``inp.cfg`` is a --fit trial (the draft model keeps the user's -ts, fit.cpp changes only the
    main model); ``dry_run``: as one of --fit's dry runs measures it (:func:`fit_measurement`)."""
    spec, cfg = inp.spec, inp.cfg
    lay = layout(inp, base_cfg, dry_run)
    ledger = MemoryLines(lay.n_dev)
    fit_model, ckpt = _post_estimates(lay, ledger)
    bud = budget(lay, ledger)
    ctx = lay.ctx
    # what the header reader found (unknown architecture, missing keys) and what llama-server
    # would reject in the command come first
    head = (*spec.diagnostics(), *cfg.problems, *lay.diagnostics)
    return Plan(
        model=spec.path, architecture=spec.architecture, n_ctx=ctx.n_ctx, n_ctx_seq=ctx.n_ctx_seq,
        n_ctx_slot=ctx.n_ctx_slot, n_parallel=ctx.n_parallel, kv_unified=ctx.kv_unified,
        n_batch=ctx.n_batch, n_ubatch=ctx.n_ubatch, flash_attn=ctx.flash_attn,
        cache_type_k=cfg.cache_type_k, cache_type_v=cfg.cache_type_v, kv_bytes_per_token=kv_bytes_per_token(lay),
        recurrent_bytes_per_seq=recurrent_bytes_per_seq(spec), checkpoint_bytes=ckpt, n_rs_seq=ctx.n_rs_seq,
        devices=bud.devices, host=bud.host, command=("llama-server", *cfg.argv(cfg.model or spec.path)),
        diagnostics=(*head, *ledger.diagnostics, *bud.diagnostics, *settings_diagnostics(lay)),
        cpu=lay.cpu, fit_model_bytes=fit_model,
    )
