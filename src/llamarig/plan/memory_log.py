"""What llama-server logged it allocated: its memory lines (printed at ``-lv 4``) as numbers, and
the plan against them (``compare``, launch's verification). The line formats are logformat.py's
(bench/logparse.py reads the same log for its timings).

Formats from llama.cpp build 11434 (libllama INFO lines, printed at -lv 4: common/log.cpp:532-540):
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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
from llamarig.plan.result import Plan
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


def _model_line(out: ServerMemoryLog, line: str) -> bool:
    """A line about the model, not a context (weights, checkpoints, slots): read into ``out``."""
    if m := MEM_WEIGHTS.search(line):
        w = (m.group(1), float(m.group(2)))
        out.weights.append(w)
        # a model is loaded before its context: weights after a new context start a new model
        if not out.model_weights or len(out.contexts) >= len(out.model_weights):
            out.model_weights.append([])
        out.model_weights[-1].append(w)
    elif m := RE_CREATED.search(line):
        out.checkpoints.append(float(m.group(6)))
    elif m := MEM_SLOTS.search(line):
        out.slots = (int(m.group(1)), int(m.group(2)), m.group(3) == "true")
    else:
        return False
    return True


def _buffer_line(cur: ContextLog, line: str) -> None:
    """One context's buffer line (KV, recurrent state, compute, output) or parameter."""
    if m := MEM_KV_BUF.search(line):
        cur.kv_buffers.append((m.group(1), float(m.group(2))))
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


#: the lines --fit prints when it is done (common/fit.cpp:893-902, trace level: -lv 4)
_FIT_END = "common_fit_params: "


def parse_memory_log(text: str) -> ServerMemoryLog:
    out = ServerMemoryLog()
    cur: ContextLog | None = None
    pending_kind = "kv"
    for line in text.splitlines():
        if _FIT_END in line:
            # --fit's dry runs (common/fit.cpp) log zero-sized weights and a context of their own
            # before the real load: what came before its last line is not the server's memory
            out = ServerMemoryLog()
            cur = None
            continue
        if MEM_CONSTRUCT.search(line):
            cur = ContextLog()
            out.contexts.append(cur)
            pending_kind = "kv"
        elif _model_line(out, line) or cur is None:
            continue
        elif MEM_RESERVE.search(line):
            cur.compute = []  # a re-reserve replaces the previous compute buffers
        elif m := MEM_ISWA.search(line):
            pending_kind = m.group(1)
        elif not MEM_KV_BUF.search(line) and (m := MEM_KV_SIZE.search(line)):
            g = m.groups()
            cur.kv_caches.append(KVCacheLog(float(g[0]), int(g[1]), int(g[2]), int(g[4]), g[5],
                                            float(g[6]), g[7], float(g[8]), pending_kind))
        else:
            _buffer_line(cur, line)
    return out


# ----------------------------------------------------------------------------- plan vs log

#: a figure printed with %.2f MiB is within 0.005 MiB of the truth
LOG_ROUNDING_MIB = 0.0051
#: components the planner computes with llama.cpp's own arithmetic (exact) vs modelled ones
EXACT = ("weights", "kv", "recurrent")
#: compute/output/draft: within 10 % + 0.05 MiB by default (the plan tests hold compute to 5 %)
MODELLED_TOLERANCE = 0.10


@dataclass(frozen=True)
class VerifyRow:
    device: str  # "host" or CUDA0, ...
    component: str
    planned: int  # bytes
    actual_mib: float | None  # None: not in the log
    tolerance_mib: float
    method: str

    @property
    def diff_mib(self) -> float | None:
        return None if self.actual_mib is None else self.actual_mib - self.planned / MiB

    @property
    def ok(self) -> bool:
        d = self.diff_mib
        return d is None or abs(d) <= self.tolerance_mib

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "component": self.component,
                "planned_mib": round(self.planned / MiB, 3),
                "actual_mib": self.actual_mib, "diff_mib": None if self.diff_mib is None else round(self.diff_mib, 3),
                "tolerance_mib": round(self.tolerance_mib, 4), "ok": self.ok, "method": self.method}


#: the CPU backend's buffer types: host RAM (ggml-cpu.cpp:42-71; amx/amx.cpp "AMX";
#: repack.cpp "CPU_REPACK"; kleidiai "KLEIDIAI"; the mmap'd file "CPU_Mapped")
CPU_BUFFER_TYPES = ("CPU", "CPU_Mapped", "CPU_REPACK", "AMX", "KLEIDIAI")


def buffer_device(name: str) -> str:
    """A ggml buffer name from the log -> the plan's device: the CPU backend's buffer types and
    pinned host buffers (CUDA_Host, ...) are host RAM; CUDA0/ROCm1/Vulkan0/MTL0 are devices."""
    if name in CPU_BUFFER_TYPES or name.startswith("CPU") or name.endswith("_Host") or name.lower() == "host":
        return "host"
    return name


def _base(comp: str) -> str:
    """"weights CPU_REPACK" -> "weights"."""
    return comp.split(" ", 1)[0]


def _logged(mem: ServerMemoryLog) -> dict[tuple[str, str], list[float]]:
    """(device, component) -> the MiB of each buffer the log shows; host weights per buffer type."""
    actual: dict[tuple[str, str], list[float]] = {}

    def put(comp: str, bufs: Sequence[tuple[str, float]]) -> None:
        for name, mib in bufs:
            actual.setdefault((buffer_device(name), comp), []).append(mib)

    for name, mib in mem.weights:
        dev = buffer_device(name)
        actual.setdefault((dev, f"weights {name}" if dev == "host" else "weights"), []).append(mib)
    tgt = mem.target
    put("kv", tgt.kv_buffers)
    put("recurrent", tgt.rs_buffers)
    put("compute", tgt.compute)
    put("output", tgt.output)
    if mem.draft is not None:  # the MTP / draft context: its KV cache and compute buffers
        put("draft", mem.draft.kv_buffers + mem.draft.compute)
    return actual


def _planned(plan: Plan) -> dict[tuple[str, str], tuple[int, str]]:
    """(device, component) -> (bytes, method) of the plan; host weights per buffer type."""
    planned: dict[tuple[str, str], tuple[int, str]] = {}
    for d in plan.devices:
        for comp, ln in d.lines.items():
            planned[(d.name, comp)] = (ln.bytes, ln.method)
    for comp, ln in plan.host.lines.items():
        if comp == "weights" and ln.parts:
            for buf, b in ln.parts:
                planned[("host", f"weights {buf}")] = (b, ln.method)
        else:
            planned[("host", comp)] = (ln.bytes, ln.method)
    return planned


def compare(plan: Plan, log_text: str, modelled_tolerance: float = MODELLED_TOLERANCE) -> list[VerifyRow]:
    """Planned vs logged buffers, per device and component, host weights per buffer type
    (CPU_Mapped, CPU_REPACK, AMX, CUDA_Host, ...). Exact components (weights, KV, recurrent
    state, and a compute buffer the plan replays exactly: qwen35 / qwen35moe on the CPU) must
    match within the log's 2-decimal MiB rounding per buffer; modelled compute and output buffers
    within MODELLED_TOLERANCE."""
    mem = parse_memory_log(log_text)
    actual = _logged(mem)
    planned = _planned(plan)
    rows = []
    comps = ("weights", "kv", "recurrent", "compute", "output", "draft")
    keys = sorted({k for k in planned if _base(k[1]) in comps} | set(actual),
                  key=lambda k: (k[0] != "host", k[0], comps.index(_base(k[1])) if _base(k[1]) in comps else 9, k[1]))
    for dev, comp in keys:
        pb, method = planned.get((dev, comp), (0, "not planned"))
        vals = actual.get((dev, comp))
        if vals is None and not pb:
            continue
        act = round(sum(vals), 2) if vals is not None else (0.0 if mem.weights else None)
        if _base(comp) in EXACT or (comp == "compute" and method == "exact"):
            tol = LOG_ROUNDING_MIB * max(1, len(vals or ()))
        else:
            tol = modelled_tolerance * (act if act else pb / MiB) + 0.05
        rows.append(VerifyRow(dev, comp, pb, act, tol, method))
    return rows
