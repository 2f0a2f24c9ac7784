"""The default search space of ``llamarig tune`` (no ``--try``): built from the goal, the model
and the machine, kept small (a CPU test machine must get through it), then pruned by the
planner like any other space (llamarig.app.tune.prune: nothing that cannot fit is launched).

Dimensions, and when each is included:

- threads ``-t``: the physical cores, one less, half, and one more when the machine has more
  logical than physical cores (always: the folklore "threads 10 -> 8" is exactly this);
- ``-b/-ub`` pairs 512/128, 2048/512 (llama-server's default), 2048/2048: when prompt
  processing counts (prefill, ttft, weighted);
- KV types f16/f16 and q8_0/q8_0, the latter only when the model's K and V head sizes are
  multiples of q8_0's 32-value block: for decode and weighted (the KV cache is read per token),
  and whenever memory is tight;
- flash attention ``-fa on/off`` (always; a quantized V cache needs it on, so that pair is left out);
- ``-np 1/2/4`` with ``-kvu``: for the throughput goal;
- ``--spec-draft-n-max 2/4/8``: when the command has a draft model or a speculative type;
- ``-ngl`` (dense) or ``--n-cpu-moe`` (MoE) steps: when the command's own plan does not fit a
  GPU or leaves it less than 10 % free.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llamarig.flags.rules import physical_cores
from llamarig.i18n import _
from llamarig.tune.search import ABSENT, Candidate

Setting = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class Dimension:
    name: str  # shown in the report
    settings: tuple[Setting, ...]
    why: str


def threads_values(physical: int | None, logical: int | None) -> list[int]:
    p = physical or logical or 1
    lg = max(logical or p, p)
    vals = {max(1, p // 2), max(1, p - 1), p}
    if lg > p:
        vals.add(p + 1)
    return sorted(vals)


def _q8_ok(spec: Any) -> bool:
    layers = [ly for ly in getattr(spec, "layers", ()) if getattr(ly, "n_head_kv", 0)]
    return bool(layers) and all(ly.head_dim_k % 32 == 0 and ly.head_dim_v % 32 == 0 for ly in layers)


def _memory_tight(plan: Any) -> bool:
    if plan is None:
        return False
    if not plan.fits:
        return True
    return any(d.capacity and d.free is not None and d.free < 0.1 * d.capacity for d in plan.devices
               if d.name != "CPU")


def default_dimensions(objective: str, spec: Any, cfg: Any, plan: Any, *, physical: int | None = None,
                       logical: int | None = None) -> list[Dimension]:
    """The dimensions for ``objective`` (decode, prefill, ttft, weighted, throughput)."""
    if physical is None:
        physical = physical_cores()
    if logical is None:
        logical = os.cpu_count()
    dims: list[Dimension] = []
    ts = threads_values(physical, logical)
    dims.append(Dimension(_("threads"), tuple(((("-t", str(t)),)) for t in ts),
                          _("physical cores {physical} (logical {logical}) and around").format(
                              physical=physical or "?", logical=logical or "?")))
    if objective in ("prefill", "ttft", "weighted"):
        pairs = [("512", "128"), ("2048", "512"), ("2048", "2048")]
        dims.append(Dimension("-b/-ub", tuple((("-b", b), ("-ub", u)) for b, u in pairs),
                              _("prompt processing is part of the goal")))
    tight = _memory_tight(plan)
    kv = [(("-ctk", "f16"), ("-ctv", "f16"))]
    if (objective in ("decode", "weighted") or tight) and _q8_ok(spec):
        kv.append((("-ctk", "q8_0"), ("-ctv", "q8_0")))
    fa = [(("-fa", "on"),), (("-fa", "off"),)]
    if len(kv) > 1:
        # -fa and KV types together: a quantized V cache needs flash attention
        combos = [k + f for k in kv for f in fa if not (k[1][1] != "f16" and f[0][1] == "off")]
        dims.append(Dimension(_("KV types x flash attention"), tuple(combos),
                              _("KV read per decoded token; a quantized V cache needs -fa on")))
    else:
        dims.append(Dimension(_("flash attention"), tuple(fa), _("attention kernels differ per backend")))
    if objective == "throughput":
        dims.append(Dimension(_("-np (with -kvu)"), tuple((("-np", n), ("-kvu", None)) for n in ("1", "2", "4")),
                              _("concurrent slots for aggregate throughput")))
    has_draft = bool(getattr(cfg, "draft_model", None)) or any(t.startswith("draft-") for t in getattr(cfg, "spec_types", ()))
    if has_draft and objective in ("decode", "weighted", "throughput"):
        dims.append(Dimension(_("draft length"), tuple(((("--spec-draft-n-max", n),)) for n in ("2", "4", "8")),
                              _("a draft model / MTP is configured")))
    if tight:
        n_exp = getattr(spec, "n_expert", 0) or 0
        n_layer = spec.n_layer_main
        if n_exp:
            steps = sorted({0, n_layer // 4, n_layer // 2, (3 * n_layer) // 4, n_layer})
            dims.append(Dimension("--n-cpu-moe", tuple(((("--n-cpu-moe", str(s)),)) for s in steps),
                                  _("memory is tight: experts of the first N layers on the CPU")))
        else:
            steps = sorted({n_layer, (3 * n_layer) // 4, n_layer // 2, n_layer // 4} - {0}, reverse=True)
            dims.append(Dimension("-ngl", tuple(((("-ngl", str(s)),)) for s in steps),
                                  _("memory is tight: fewer layers on the GPU")))
    return dims


def candidates(dims: Sequence[Dimension]) -> list[Candidate]:
    """The product of the dimensions' settings, in a stable order."""
    out = []
    for combo in itertools.product(*[d.settings for d in dims]):
        flags: list[tuple[str, str | None]] = []
        for s in combo:
            flags.extend(s)
        out.append(Candidate(tuple(flags)))
    return out


def describe(dims: Sequence[Dimension]) -> list[dict[str, Any]]:
    return [{"dimension": d.name, "values": [Candidate(s).key for s in d.settings], "why": d.why} for d in dims]


__all__ = ["ABSENT", "Dimension", "candidates", "default_dimensions", "describe", "threads_values"]
