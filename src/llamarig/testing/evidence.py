"""Plan against a GPU evidence file (benchmarks/gpu_evidence.py) without the GPU and without the
model's data: the synthetic GGUF of a run is rewritten from the shape the file records, as a
sparse file (``fill="sparse"``: the exact header, the tensor data a hole), and plan reads only
its header. Used by tests/plan/test_h200_evidence.py and scripts/accuracy.py."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from llamarig.testing.synth import SynthShape, write_model

MiB = 1 << 20

_BUF_RE = re.compile(r"(\S+)\s+(model|KV|RS|compute|output) buffer size =\s*([\d.]+) MiB")


def sparse_model(run: dict[str, Any], workdir: Path) -> Path:
    """The run's synthetic model (``run["synthetic"]``: architecture and shape), header exact,
    data a hole; its size is checked against the one recorded."""
    syn = run["synthetic"]
    names = {f.name for f in fields(SynthShape)}
    kw: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in syn["shape"].items() if k in names}
    kw["fill"] = "sparse"
    path = workdir / f"{run['model']}-{kw.get('weight_type', 'f16')}.gguf"
    if not path.exists():
        write_model(path, syn["arch"], replace(SynthShape(), **kw))
    size = path.stat().st_size
    if size != syn["bytes"]:
        raise AssertionError(f"{path}: {size} bytes, the evidence recorded {syn['bytes']}")
    return path


def plan_args(run: dict[str, Any]) -> list[str]:
    """The run's llama-server arguments without the logging ones (-lv N, --no-warmup)."""
    out: list[str] = []
    skip = False
    for a in run["args"]:
        if skip:
            skip = False
            continue
        if a in ("-lv", "--verbosity", "--log-verbosity"):
            skip = True
            continue
        if a == "--no-warmup":
            continue
        out.append(a)
    return out


def logged_buffers(lines: Sequence[str]) -> dict[str, float]:
    """Every buffer of the run's -lv 4 log (MiB), by what it is: weights per buffer type, the
    target context's KV / RS / compute / output and the MTP draft context's (its KV is the second
    KV line, its compute lines come after the target's; a context that reserves again logs the
    same buffer again, kept once)."""
    out: dict[str, float] = {}
    n_kv = 0
    for ln in lines:
        m = _BUF_RE.search(ln)
        if not m:
            continue
        buf, kind, mib = m.group(1), m.group(2), float(m.group(3))
        if kind == "model":
            out[f"{buf} weights"] = out.get(f"{buf} weights", 0.0) + mib
        elif kind == "KV":
            n_kv += 1
            out[f"{buf} KV" if n_kv == 1 else f"{buf} MTP KV"] = mib
        elif kind == "RS":
            out[f"{buf} RS"] = mib
        elif kind == "compute":
            key = f"{buf} compute" if n_kv <= 1 else f"{buf} MTP compute"
            out.setdefault(key, mib)
        elif kind == "output":  # each context logs it before its KV line
            key = f"{buf} output" if f"{buf} output" not in out else f"{buf} MTP output"
            out[key] = mib
    return out


def compare(plan: Any, logged: dict[str, float]) -> list[tuple[str, float, float]]:
    """(what, planned MiB, logged MiB) for every logged buffer: the device lines of the first GPU
    (CUDA0), the host's (CPU_Mapped weights, CUDA_Host compute and output); the MTP context's KV
    and compute together make plan's "draft" line on the GPU, its host compute the host's."""
    dev = plan.devices[0]
    host = plan.host
    rows: list[tuple[str, float, float]] = []

    def row(what: str, planned: int, *keys: str) -> None:
        have = [logged[k] for k in keys if k in logged]
        if have:
            rows.append((what, planned / MiB, sum(have)))

    row("CUDA0 weights", dev.get("weights"), "CUDA0 weights")
    row("CUDA0 KV", dev.get("kv"), "CUDA0 KV")
    row("CUDA0 recurrent state", dev.get("recurrent"), "CUDA0 RS")
    row("CUDA0 compute", dev.get("compute"), "CUDA0 compute")
    row("CUDA0 MTP context (KV + compute)", dev.get("draft"), "CUDA0 MTP KV", "CUDA0 MTP compute")
    row("host weights (CPU_Mapped)", host.get("weights"), "CPU_Mapped weights")
    row("CUDA_Host compute", host.get("compute"), "CUDA_Host compute")
    row("CUDA_Host MTP compute", host.get("draft"), "CUDA_Host MTP compute")
    row("CUDA_Host output", host.get("output"), "CUDA_Host output", "CUDA_Host MTP output")
    return rows
