"""The vision projector (--mmproj): its weights and its worst-case compute, on the first local
GPU (or the host with --no-mmproj-offload); the figures come from plan/mmproj/projector.py or the
catalogue."""

from __future__ import annotations

from llamarig.i18n import _
from llamarig.plan.estimator import HOST, Contribution, PlanLayout, entry


def estimate_mmproj(lay: PlanLayout) -> Contribution:
    mm = lay.inp.mmproj
    if mm is None:
        return Contribution()
    fa = lay.ctx.flash_attn
    dev = lay.first_local if lay.cfg.mmproj_offload else HOST
    return Contribution((
        entry(dev, "mmproj", mm.weights_bytes, _("mmproj weights ({label})").format(label=mm.label), "given"),
        entry(dev, "mmproj", mm.compute_fa_on if fa else mm.compute_fa_off,
              (_("mmproj worst-case compute, flash attention on ({source})") if fa else
               _("mmproj worst-case compute, flash attention off ({source})")).format(source=mm.source), "modelled"),
    ))
