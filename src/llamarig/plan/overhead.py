"""What a GPU process holds beyond its logged buffers: the driver / context overhead (the
catalogue's, or --overhead), and the MTP context's own CUDA backend."""

from __future__ import annotations

from llamarig.i18n import _
from llamarig.plan.estimator import Contribution, Entry, PlanLayout, entry
from llamarig.units import MiB

#: process memory the MTP draft context adds on a CUDA GPU beyond its logged buffers (one run:
#: benchmarks/evidence/h200-qwen3.8-27b-a.json, the draft-mtp run against the same settings without)
MTP_CUDA_OVERHEAD = 24 * MiB


def estimate_overhead(lay: PlanLayout, mtp_device: int | None) -> Contribution:
    """``mtp_device``: where the MTP draft context runs (draft.estimate_mtp), None without one."""
    out: list[Entry] = []
    for i, g in enumerate(lay.gpus):
        ov = lay.inp.overhead_bytes if lay.inp.overhead_bytes is not None else g.overhead_bytes
        if ov:
            out.append(entry(i, "other", ov, _("{backend} driver/context overhead (catalogue default; --overhead to "
                                               "change)").format(backend=g.backend), "given"))
    if mtp_device is not None and lay.kv_on_gpu and 0 <= mtp_device < lay.n_dev \
            and lay.gpus[mtp_device].backend == "CUDA":
        out.append(entry(mtp_device, "other", MTP_CUDA_OVERHEAD, _(
            "the MTP context's own CUDA backend (streams, cuBLAS, ggml's memory pool): {size} MiB measured once "
            "(H200, -ub 512: +6 MiB after load, +24 MiB after an 8K prompt; "
            "benchmarks/evidence/h200-qwen3.8-27b-a.json)").format(size=MTP_CUDA_OVERHEAD // MiB), "given"))
    return Contribution(tuple(out))
