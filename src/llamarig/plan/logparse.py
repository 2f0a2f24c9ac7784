"""Parse llama-server's memory lines (printed at ``-lv 4``) into numbers.

Formats from llama.cpp build 11434 (see /work/shared/reference/llama-server-truth.md 4.7):
- ``load_tensors: %12s model buffer size = %8.2f MiB`` (src/llama-model.cpp)
- ``llama_kv_cache: %10s KV buffer size = %8.2f MiB`` and the ``llama_kv_cache: size = ...``
  summary (src/llama-kv-cache.cpp:291-303)
- ``llama_kv_cache_iswa: creating non-SWA|SWA KV cache, size = %u cells``
- ``llama_memory_recurrent: %10s RS buffer size = %8.2f MiB`` and its ``size = ...`` summary
- ``sched_reserve: %10s compute buffer size = %8.2f MiB`` (src/llama-context.cpp)
- ``llama_context: %10s  output buffer size = %8.2f MiB``
- ``llama_context: n_ctx = %u`` etc.
- ``created context checkpoint %d of %d (... size = %.3f MiB)``

Lines carry a timestamp prefix; every regex uses ``search``. A server with an MTP/draft context
prints a second ``llama_context: constructing`` block: lines after it go to ``contexts[1]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llamarig.logformat import (
    MEM_COMPUTE,
    MEM_CONSTRUCT,
    MEM_CTX_PARAM,
    MEM_ISWA,
    MEM_KV_BUF,
    MEM_KV_SIZE,
    MEM_OUTPUT,
    MEM_RESERVE,
    MEM_RS_BUF,
    MEM_RS_SIZE,
    MEM_SLOTS,
    MEM_WEIGHTS,
    RE_CREATED,
)
from llamarig.units import MiB


@dataclass
class KVCacheLog:
    size_mib: float
    cells: int
    layers: int
    seqs: int
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float
    kind: str = "kv"  # kv | non-SWA | SWA


@dataclass
class ContextLog:
    """One llama_context (the target, or the MTP/draft context)."""

    params: dict[str, str] = field(default_factory=dict)
    kv_buffers: list[tuple[str, float]] = field(default_factory=list)
    kv_caches: list[KVCacheLog] = field(default_factory=list)
    rs_buffers: list[tuple[str, float]] = field(default_factory=list)
    rs_size: tuple[float, int, int, int, int] | None = None  # MiB, cells, layers, seqs, rs_seq
    compute: list[tuple[str, float]] = field(default_factory=list)
    output: list[tuple[str, float]] = field(default_factory=list)

    def kv_mib(self) -> float:
        return sum(v for _, v in self.kv_buffers)

    def rs_mib(self) -> float:
        return sum(v for _, v in self.rs_buffers)

    def compute_mib(self, device: str | None = None) -> float:
        """A context may reserve its graph more than once (e.g. when a speculative
        implementation is attached); the scheduler's buffer for a device is then reallocated,
        never added to (ggml-alloc.c grows it to the largest reservation): per device the
        largest logged size counts."""
        per_dev: dict[str, float] = {}
        for d, v in self.compute:
            if device is None or d == device:
                per_dev[d] = max(per_dev.get(d, 0.0), v)
        return sum(per_dev.values())


@dataclass
class ServerMemoryLog:
    weights: list[tuple[str, float]] = field(default_factory=list)  # every model's, in log order
    #: weights per loaded model: [0] the target, [1] a draft model (-md), each one line per
    #: buffer type (CPU_Mapped, CPU_REPACK, AMX, CUDA0, ...)
    model_weights: list[list[tuple[str, float]]] = field(default_factory=list)
    contexts: list[ContextLog] = field(default_factory=list)
    checkpoints: list[float] = field(default_factory=list)
    slots: tuple[int, int, bool] | None = None

    @property
    def target(self) -> ContextLog:
        return self.contexts[0] if self.contexts else ContextLog()

    @property
    def draft(self) -> ContextLog | None:
        return self.contexts[1] if len(self.contexts) > 1 else None

    def weights_mib(self) -> float:
        return sum(v for _, v in self.weights)


def parse_memory_log(text: str) -> ServerMemoryLog:
    out = ServerMemoryLog()
    cur: ContextLog | None = None
    pending_kind = "kv"
    for line in text.splitlines():
        if MEM_CONSTRUCT.search(line):
            cur = ContextLog()
            out.contexts.append(cur)
            pending_kind = "kv"
            continue
        if m := MEM_WEIGHTS.search(line):
            w = (m.group(1), float(m.group(2)))
            out.weights.append(w)
            # a model is loaded before its context: weights after a new context start a new model
            if not out.model_weights or len(out.contexts) >= len(out.model_weights):
                out.model_weights.append([])
            out.model_weights[-1].append(w)
            continue
        if m := RE_CREATED.search(line):
            out.checkpoints.append(float(m.group(6)))
            continue
        if m := MEM_SLOTS.search(line):
            out.slots = (int(m.group(1)), int(m.group(2)), m.group(3) == "true")
            continue
        if cur is None:
            continue
        if MEM_RESERVE.search(line):
            cur.compute = []  # a re-reserve replaces the previous compute buffers
            continue
        if m := MEM_ISWA.search(line):
            pending_kind = m.group(1)
        elif m := MEM_KV_BUF.search(line):
            cur.kv_buffers.append((m.group(1), float(m.group(2))))
        elif m := MEM_KV_SIZE.search(line):
            g = m.groups()
            cur.kv_caches.append(KVCacheLog(float(g[0]), int(g[1]), int(g[2]), int(g[4]), g[5],
                                            float(g[6]), g[7], float(g[8]), pending_kind))
        elif m := MEM_RS_BUF.search(line):
            cur.rs_buffers.append((m.group(1), float(m.group(2))))
        elif m := MEM_RS_SIZE.search(line):
            g = m.groups()
            cur.rs_size = (float(g[0]), int(g[1]), int(g[2]), int(g[3]), int(g[4]))
        elif m := MEM_COMPUTE.search(line):
            cur.compute.append((m.group(1), float(m.group(2))))
        elif m := MEM_OUTPUT.search(line):
            cur.output.append((m.group(1), float(m.group(2))))
        elif m := MEM_CTX_PARAM.search(line):
            cur.params.setdefault(m.group(1), m.group(2))
    return out


# ----------------------------------------------------------------------------- plan vs log

#: buffer names that live in host memory (CPU_Mapped: mmap'd weights; CUDA_Host: pinned)
HOST_BUFFERS = ("CPU", "CPU_Mapped", "CPU_REPACK", "AMX", "KLEIDIAI", "CUDA_Host", "ROCm_Host", "Metal_Mapped")


def _device_of(buffer: str) -> str:
    if buffer in HOST_BUFFERS or buffer.startswith("CPU") or buffer.endswith("_Host"):
        return "host"
    return buffer.removesuffix("_Split").removesuffix("_Mapped")


@dataclass(frozen=True)
class Comparison:
    device: str  # CUDA0 ... or "host"
    component: str  # weights | kv | recurrent | compute | draft_kv
    planned_mib: float
    logged_mib: float
    tolerance_mib: float

    @property
    def ok(self) -> bool:
        return abs(self.planned_mib - self.logged_mib) <= self.tolerance_mib


def compare(plan: object, log: ServerMemoryLog, compute_rel: float = 0.05) -> list[Comparison]:
    """Planned vs logged MiB per device and component. Exact components get the log's rounding
    (0.005 MiB per printed line) as tolerance, compute ``compute_rel`` of the logged value."""
    devices = {d.name: d for d in plan.devices}  # type: ignore[attr-defined]
    host = plan.host  # type: ignore[attr-defined]

    def planned(dev: str, comp: str) -> float:
        src = host if dev == "host" else devices.get(dev)
        return (src.get(comp) if src is not None else 0) / MiB

    out: list[Comparison] = []

    def group(pairs: list[tuple[str, float]]) -> dict[str, tuple[float, int]]:
        g: dict[str, tuple[float, int]] = {}
        for name, v in pairs:
            d = _device_of(name)
            tot, n = g.get(d, (0.0, 0))
            g[d] = (tot + v, n + 1)
        return g

    tgt = log.target
    host_w = host.lines.get("weights")
    if host_w is not None and host_w.parts:
        # host weights per buffer type (CPU_Mapped, CPU_REPACK, AMX, ...)
        logged: dict[str, tuple[float, int]] = {}
        for name, v in log.weights:
            if _device_of(name) == "host":
                tot, n = logged.get(name, (0.0, 0))
                logged[name] = (tot + v, n + 1)
        parts = dict(host_w.parts)
        for name in sorted(set(parts) | set(logged)):
            mib, n = logged.get(name, (0.0, 1))
            out.append(Comparison("host", f"weights {name}", parts.get(name, 0) / MiB, mib, 0.0051 * n))
    for comp, pairs in (("weights", [w for w in log.weights if host_w is None or not host_w.parts
                                     or _device_of(w[0]) != "host"]),
                        ("kv", tgt.kv_buffers), ("recurrent", tgt.rs_buffers)):
        for dev, (mib, n) in group(pairs).items():
            out.append(Comparison(dev, comp, planned(dev, comp), mib, 0.0051 * n))
    for dev, (mib, _) in group(tgt.compute).items():
        out.append(Comparison(dev, "compute", planned(dev, "compute"), mib, compute_rel * mib + 0.02))
    return out
