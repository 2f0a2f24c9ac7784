"""The resolved deployment: one frozen value of what one llama-server command runs, computed
once per input, that every view renders (check, check --fix, explain, render, launch, tune and
plan's headline; docs/architecture.md "One truth of what runs").

- :class:`Settings`: the settings the server runs, the pinned build's defaults and automatic
  choices applied: ``-np`` unset is 4 slots sharing one pool (tools/server/server.cpp:168-173),
  ``-c`` padded to 256 and split per slot without a shared pool (src/llama-context.cpp:290-305),
  and, with the model known, the per-slot context clamped to its training context
  (``n_ctx_slot()``, tools/server/server-context.cpp:4377-4385), after what ``--fit`` changed;
- :class:`FitState`: whether ``--fit`` is on, and why it cannot act on the context or the layers
  (common/fit.cpp:455, 464-486), as coded Diagnostics;
- :class:`Resolution`: what llama-server receives and what was meant, each priced by the plan
  (:class:`Priced`), the settings that differ, and the diagnostics.

No view re-derives a slot, a context or a fit from argv: it reads these values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llamarig.diagnostics import Diagnostic, info, warning
from llamarig.errors import LlamarigError
from llamarig.flags.rules import RESOLVED_RULES
from llamarig.i18n import _

if TYPE_CHECKING:
    from llamarig.app.check import WhatRuns
    from llamarig.plan.config import ServerConfig
    from llamarig.plan.deployment import Deployment
    from llamarig.plan.result import Plan

#: the Diagnostic codes of this module (docs/check.md lists them; check reports fit's under these
#: rule ids, llamarig.flags.rules.RESOLVED_RULES)
FIT_CANNOT_ACT, FIT_CONTEXT_FIXED, FIT_LAYERS_FIXED, FIT_MEANT = RESOLVED_RULES
SLOT_CLAMPED = "slot-ctx-clamped"


def _pad(n: int, to: int = 256) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class Settings:
    """What one llama-server command runs, in the terms a user compares. ``n_ctx``: the context
    as given (0: unset, the model's training context); ``n_ctx_slot``: the tokens one slot holds
    as the server has it (0: not known here: the model's training context, no model read);
    ``clamped_from``: the per-slot context the flags ask for when the server caps it at the
    model's training context (None: not capped); ``method``: ``plan`` (the planner's, the model
    read and ``--fit`` applied) or ``flags`` (the flags alone, llama-server's defaults)."""

    slots: int
    unified: bool
    n_ctx: int
    n_ctx_slot: int
    cache_type_k: str
    cache_type_v: str
    n_batch: int
    n_ubatch: int
    n_gpu_layers: str
    flash_attn: str
    method: str = "flags"
    clamped_from: int | None = None

    @property
    def streams(self) -> int:
        """KV streams: one shared pool, or one per slot."""
        return 1 if self.unified else self.slots

    def rows(self) -> dict[str, str]:
        """(what, value) as every view names them (the first three: how the context is shared
        and stored)."""
        per = str(self.n_ctx_slot) if self.n_ctx_slot else _("the model's training context")
        if self.clamped_from is not None:
            per = _("{per} (capped at the model's training context; the flags ask {asked})").format(
                per=self.n_ctx_slot, asked=self.clamped_from)
        return {
            _("slots (-np)"): f"{self.slots}" + (_(" (unified KV)") if self.unified and self.slots > 1 else ""),
            _("context per slot"): per,
            _("KV cache K / V"): f"{self.cache_type_k} / {self.cache_type_v}",
            "-b / -ub": f"{self.n_batch} / {self.n_ubatch}",
            "-ngl": self.n_gpu_layers,
            _("flash attention"): self.flash_attn,
        }

    def to_json(self) -> dict[str, object]:
        return {"slots": self.slots, "kv_unified": self.unified, "n_ctx": self.n_ctx, "n_ctx_slot": self.n_ctx_slot,
                "cache_type_k": self.cache_type_k, "cache_type_v": self.cache_type_v, "n_batch": self.n_batch,
                "n_ubatch": self.n_ubatch, "n_gpu_layers": self.n_gpu_layers, "flash_attn": self.flash_attn,
                "method": self.method, "clamped_from": self.clamped_from}


def _ngl(n: int) -> str:
    return {-1: "auto", -2: "all"}.get(n, str(n))


def flag_settings(cfg: ServerConfig, type_k: str | None = None, type_v: str | None = None) -> Settings:
    """The settings of a command read alone (no model): llama-server's defaults where unset.
    ``type_k``/``type_v``: the KV types as written (a type the server rejects is still what the
    command says)."""
    slots = cfg.n_parallel if cfg.n_parallel > 0 else 4
    unified = bool(cfg.kv_unified) if cfg.n_parallel > 0 else True
    n_ctx = _pad(cfg.n_ctx) if cfg.n_ctx > 0 else 0
    per = (n_ctx if unified else _pad(n_ctx // slots)) if n_ctx else 0
    return Settings(slots, unified, cfg.n_ctx, per, type_k or cfg.cache_type_k, type_v or cfg.cache_type_v,
                    cfg.n_batch, cfg.n_ubatch, _ngl(cfg.n_gpu_layers), cfg.flash_attn)


def plan_settings(plan: Plan, cfg: ServerConfig) -> Settings:
    """The settings the plan runs (after ``--fit``; the per-slot context capped at the model's
    training context as ``n_ctx_slot()`` caps it)."""
    eff = plan.effective_cfg if plan.effective_cfg is not None else cfg
    asked = plan.n_ctx if plan.kv_unified else plan.n_ctx_seq
    clamped = asked if asked > plan.n_ctx_slot else None
    return Settings(plan.n_parallel, plan.kv_unified, cfg.n_ctx, plan.n_ctx_slot, plan.cache_type_k,
                    plan.cache_type_v, plan.n_batch, plan.n_ubatch, _ngl(eff.n_gpu_layers),
                    "on" if plan.flash_attn else "off", "plan", clamped)


@dataclass(frozen=True)
class FitState:
    """``--fit`` on this command: ``on`` (its default, common/arg.cpp), and why it cannot act
    (``blocked``: coded Diagnostics citing common/fit.cpp), whether the plan shows it changing
    anything (``changed``). fit runs once at start, on the memory free then."""

    on: bool
    context_fixed: bool = False
    layers_fixed: tuple[str, ...] = ()
    changed: bool = False
    #: --fit or --fit-target written in the command (kept as a fallback): then ``blocked`` says
    #: why it cannot act; fit as the default is the plan's to describe
    written: bool = False
    blocked: tuple[Diagnostic, ...] = ()

    @property
    def can_act(self) -> bool:
        return self.on and not (self.context_fixed and self.layers_fixed)

    def to_json(self) -> dict[str, object]:
        return {"on": self.on, "context_fixed": self.context_fixed, "layers_fixed": list(self.layers_fixed),
                "changed": self.changed, "can_act": self.can_act, "written": self.written,
                "blocked": [d.to_json() for d in self.blocked]}


#: ServerConfig fields that, given, stop fit moving layers (common/fit.cpp:462-486), and the flag
_LAYER_FIELDS = (("n_gpu_layers", "-ngl"), ("tensor_split", "-ts"), ("override_tensor", "-ot"),
                 ("cpu_moe", "-cmoe"), ("n_cpu_moe", "-ncmoe"))


def fit_state(cfg: ServerConfig, plan: Plan | None = None) -> FitState:
    """What ``--fit`` can do for ``cfg`` (its diagnostics only where ``--fit``/``--fit-target`` is
    written: kept as a fallback): with ``-c N`` given (``-c 0`` too: the full training context,
    common/arg.cpp:1648) the context is not changed
    (common/fit.cpp:455), with ``-ngl``, ``-ts``, ``-ot``, ``-cmoe`` or ``-ncmoe`` given no layer
    is moved (common/fit.cpp:462-486)."""
    if not cfg.fit:
        return FitState(False)
    # -c N is kept as given (fit.cpp:455); an explicit -c 0 asks for the full training context,
    # which fit never reduces (common/arg.cpp:1648 sets fit_params_min_ctx = UINT32_MAX; fit.cpp:448)
    ctx_fixed = "n_ctx" in cfg.set_flags
    where = "common/fit.cpp:455" if cfg.n_ctx > 0 else "common/arg.cpp:1648, common/fit.cpp:448"
    layers = tuple(flag for name, flag in _LAYER_FIELDS if name in cfg.set_flags)
    out: list[Diagnostic] = []
    if ctx_fixed:
        out.append(info(FIT_CONTEXT_FIXED, _(
            "--fit does not change the context: -c {n} is set ({where})").format(n=cfg.n_ctx, where=where)))
    if layers:
        out.append(info(FIT_LAYERS_FIXED, _(
            "--fit does not move layers: {flags} set (\"n_gpu_layers already set by user ... abort\", "
            "common/fit.cpp:464-486)").format(flags=", ".join(layers))))
    if ctx_fixed and layers:
        out = [warning(FIT_CANNOT_ACT, _(
            "--fit can change nothing here: -c {n} fixes the context ({where}) and {flags} the "
            "layers (common/fit.cpp:464-486); it runs once at start and never when memory grows, so it is no "
            "fallback: size -c and the KV cache to fit").format(n=cfg.n_ctx, where=where, flags=", ".join(layers)))]
    changed = plan is not None and plan.effective_cfg is not None
    written = "fit" in cfg.set_flags or "fit_target_mib" in cfg.set_flags
    return FitState(True, ctx_fixed, layers, changed, written, tuple(out) if written else ())


def _can(f: FitState) -> str:
    """What ``--fit`` can do for a command, in a few words (common/fit.cpp:455, 464-486)."""
    if not f.on:
        return _("is off")
    if f.context_fixed and f.layers_fixed:
        return _("can change nothing (the context and the layers are set)")
    if f.context_fixed:
        return _("keeps the context (-c is set, common/fit.cpp:455) and can move layers")
    if f.layers_fixed:
        return _("keeps the layers ({flags} set, common/fit.cpp:464-486) and can lower the context").format(
            flags=", ".join(f.layers_fixed))
    return _("can lower the context and move layers")


def meant_fit_diagnostics(runs: FitState, meant: FitState, cut_line: int | None) -> tuple[Diagnostic, ...]:
    """What ``--fit`` could do for the command as meant, where that differs from what it can do
    for the command that runs (the cut-off flags set -c or the layers); only where ``--fit`` is
    written, as a fallback."""
    said, meant_said = _can(runs), _can(meant)
    if said == meant_said or not (runs.written or meant.written):
        return ()
    return (info(FIT_MEANT, _("--fit as meant (the flags cut off at line {line} put back) {meant}; for what runs it "
                              "{runs}").format(line=cut_line, meant=meant_said, runs=said)),)


@dataclass(frozen=True)
class Priced:
    """One argv and its plan, or why it has none (``error``: llama-server would refuse the
    command, the model cannot be read; both None: no model to plan, -m is not on this machine);
    ``settings``: what it runs (the plan's when there is one, else the flags'); ``deployment``:
    what was planned."""

    argv: tuple[str, ...]
    plan: Plan | None = None
    error: LlamarigError | None = None
    settings: Settings | None = None
    deployment: Deployment | None = field(default=None, repr=False, compare=False)

    @property
    def kv_bytes(self) -> int | None:
        """The whole KV cache (every device and host RAM), as the plan has it."""
        if self.plan is None:
            return None
        return sum(d.get("kv") for d in self.plan.devices) + self.plan.host.get("kv")


@dataclass(frozen=True)
class Resolution:
    """One llama-server command resolved: ``pair`` what llama-server receives and what its
    author meant (argvs, line, where it is cut off); ``runs`` the received command priced, with
    its :class:`Settings`; ``meant`` the meant command priced (None: the same command);
    ``changes`` the settings the meant command would change, (what, runs, meant); ``fit`` what
    ``--fit`` can do (``meant_fit``: for the meant command, None when it is the same command);
    ``diagnostics`` coded findings of the resolution (the cap at the training context, fit that
    cannot act, what fit could do as meant); ``notes`` how the model's files were found."""

    pair: WhatRuns
    runs: Priced
    meant: Priced | None = None
    changes: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = ()
    fit: FitState = field(default_factory=lambda: FitState(True))
    diagnostics: tuple[Diagnostic, ...] = ()
    meant_fit: FitState | None = None

    @property
    def settings(self) -> Settings | None:
        """What the server runs (the received command's settings)."""
        return self.runs.settings

    def to_json(self) -> dict[str, object]:
        st = self.runs.settings
        return {"line": self.pair.line, "cut_line": self.pair.cut_line, "received": list(self.pair.received),
                "meant": list(self.pair.meant), "settings": st.to_json() if st is not None else None,
                "fit": self.fit.to_json(), "diagnostics": [d.to_json() for d in self.diagnostics],
                "meant_fit": self.meant_fit.to_json() if self.meant_fit is not None else None}


def changes_between(a: Settings | None, b: Settings | None) -> tuple[tuple[str, str, str], ...]:
    """(what, a, b) for every setting that differs."""
    ra = a.rows() if a is not None else {}
    rb = b.rows() if b is not None else {}
    return tuple((k, ra.get(k, "-"), rb.get(k, "-")) for k in dict.fromkeys([*ra, *rb]) if ra.get(k) != rb.get(k))


def slot_diagnostics(st: Settings | None, need_ctx: int | None = None) -> tuple[Diagnostic, ...]:
    """The per-slot context against the server's cap and the workload's need (``check
    --need-ctx``)."""
    if st is None:
        return ()
    out: list[Diagnostic] = []
    if st.clamped_from is not None:
        out.append(warning(SLOT_CLAMPED, _(
            "each slot holds {per} tokens, not {asked}: the server caps the per-slot context at the model's "
            "training context (n_ctx_slot(), tools/server/server-context.cpp:4377-4385) while KV is allocated for "
            "all of -c").format(per=st.n_ctx_slot, asked=st.clamped_from)))
    if need_ctx and st.n_ctx_slot and st.n_ctx_slot < need_ctx:
        out.append(warning("need-ctx", _(
            "one slot holds {per} tokens, below the {need} the workload needs (--need-ctx): a longer request fails "
            "or is truncated").format(per=st.n_ctx_slot, need=need_ctx)))
    return tuple(out)
