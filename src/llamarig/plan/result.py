"""Plan inputs and results: frozen dataclasses, every figure with the formula behind it.

``Plan.speed`` is filled by the speed model (plan/speed/speed_model.py); the memory model leaves it None.
What the planner has to say beside the figures is ``Plan.diagnostics`` (``warnings`` and
``notes`` are their messages by severity). The JSON form is documented in docs/plan.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llamarig.diagnostics import Diagnostic, Severity, messages
from llamarig.i18n import _
from llamarig.units import fmt_bytes

if TYPE_CHECKING:  # annotations only: result.py stays importable without the readers
    from llamarig.catalogue.models import MMProjInfo
    from llamarig.gguf.spec import ModelSpec
    from llamarig.hardware.cpu import CpuFeatures
    from llamarig.hardware.types import Hardware
    from llamarig.plan.config import ServerConfig
    from llamarig.plan.speed.speed_model import SpeedReport

#: the per-device memory components, in table order
COMPONENTS = ("weights", "kv", "recurrent", "compute", "mmproj", "draft", "other")


@dataclass(frozen=True)
class Line:
    """One figure and how it was obtained. ``method``: exact (llama.cpp's own arithmetic),
    modelled (a fitted approximation), given (user/catalogue input)."""

    bytes: int
    formula: str
    method: str = "exact"
    #: the figure per ggml buffer type, where llama.cpp logs it in several (host weights:
    #: CPU_Mapped, CPU_REPACK, AMX); empty when it is one buffer
    parts: tuple[tuple[str, int], ...] = ()
    #: relative uncertainty of an "estimated" figure (0.06: the true value is within +-6 %)
    spread: float = 0.0


class _Budget:
    """Memory lines against a capacity (a device's VRAM or the host's RAM)."""

    capacity: int | None
    lines: dict[str, Line]

    def get(self, comp: str) -> int:
        ln = self.lines.get(comp)
        return ln.bytes if ln else 0

    @property
    def total(self) -> int:
        return sum(ln.bytes for ln in self.lines.values())

    @property
    def free(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.total

    @property
    def uncertainty(self) -> int:
        """Bytes the estimated lines may be off by, either way."""
        return int(sum(ln.bytes * ln.spread for ln in self.lines.values()))

    @property
    def free_range(self) -> tuple[int, int] | None:
        """(least, most) free memory the estimates allow; None without a capacity."""
        f = self.free
        return None if f is None else (f - self.uncertainty, f + self.uncertainty)


@dataclass(frozen=True)
class DevicePlan(_Budget):
    name: str  # CUDA0 / ROCm0 / MTL0 / CPU
    label: str  # "NVIDIA GeForce RTX 3090" / "host"
    capacity: int | None
    lines: dict[str, Line]

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "label": self.label}
        for c in COMPONENTS:
            d[c] = self.get(c)
        d["total"] = self.total
        d["capacity"] = self.capacity
        d["free"] = self.free
        d["formulas"] = {k: {"formula": v.formula, "method": v.method, **({"spread": v.spread} if v.spread else {})}
                         for k, v in self.lines.items()}
        fr = self.free_range
        d["free_range"] = list(fr) if self.uncertainty and fr is not None else None  # what the estimates allow
        return d


#: host components that fill over a long session instead of being allocated at start
#: (context checkpoints per slot, the prompt cache: tools/server/server-context.cpp)
HOST_GROWTH = ("checkpoints", "cache_ram")


@dataclass(frozen=True)
class HostPlan(_Budget):
    capacity: int | None
    lines: dict[str, Line]  # weights, kv, recurrent, compute, output, mmproj, checkpoints, cache_ram
    mmap: bool  # weights are mmap'd (page cache: counted, but evictable)

    @property
    def growth(self) -> int:
        """What fills over long sessions (checkpoints, prompt cache): not needed at start."""
        return sum(self.get(c) for c in HOST_GROWTH)

    @property
    def start_total(self) -> int:
        """What llama-server allocates at start."""
        return self.total - self.growth

    @property
    def free_at_start(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.start_total

    def to_json(self) -> dict[str, Any]:
        keys = ("weights", "kv", "recurrent", "compute", "output", "mmproj", "draft",
                "checkpoints", "cache_ram")
        d: dict[str, Any] = {k: self.get(k) for k in keys}
        d["total"] = self.total
        d["capacity"] = self.capacity
        d["free"] = self.free
        d["weights_mmap"] = self.mmap
        d["start_total"] = self.start_total  # allocated at start
        d["growth"] = self.growth  # checkpoints + prompt cache, filled over long sessions
        d["free_at_start"] = self.free_at_start
        w = self.lines.get("weights")
        d["weights_buffers"] = dict(w.parts) if w is not None and w.parts else {}
        d["formulas"] = {k: {"formula": v.formula, "method": v.method} for k, v in self.lines.items()}
        return d


@dataclass(frozen=True)
class Plan:
    model: str
    architecture: str
    n_ctx: int
    n_ctx_seq: int
    n_ctx_slot: int
    n_parallel: int
    kv_unified: bool
    n_batch: int
    n_ubatch: int
    flash_attn: bool
    cache_type_k: str
    cache_type_v: str
    kv_bytes_per_token: int
    recurrent_bytes_per_seq: int
    checkpoint_bytes: int
    n_rs_seq: int
    devices: tuple[DevicePlan, ...]
    host: HostPlan
    command: tuple[str, ...]
    #: warnings and notes, in the order the estimators gave them (each room's estimator)
    diagnostics: tuple[Diagnostic, ...] = ()
    speed: SpeedReport | None = None  # filled by the speed model (plan/speed/speed_model.py)
    #: the settings llama-server runs after --fit moved layers or lowered the context (None:
    #: --fit changed nothing): what the speed model sees
    effective_cfg: ServerConfig | None = field(default=None, compare=False)
    #: the CPU the host buffers were planned for (its features decide AMX / CPU_REPACK)
    cpu: CpuFeatures | None = field(default=None, compare=False)
    #: the model's bytes per device as fit.cpp sums them (the draft model's included)
    fit_model_bytes: tuple[int, ...] = field(default=(), compare=False)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The messages of the warnings (what may not run as meant)."""
        return messages(self.diagnostics, Severity.WARNING)

    @property
    def notes(self) -> tuple[str, ...]:
        """The messages of the notes (worth knowing)."""
        return messages(self.diagnostics, Severity.INFO)

    def with_diagnostics(self, *diags: Diagnostic) -> Plan:
        """This plan with ``diags`` after its own."""
        return replace(self, diagnostics=(*self.diagnostics, *diags))

    @property
    def fits(self) -> bool:
        # host RAM is judged on what is allocated at start; what can grow is a warning
        return all(d.free is None or d.free >= 0 for d in self.devices) and (
            self.host.free_at_start is None or self.host.free_at_start >= 0
        )

    def shortfalls(self) -> list[str]:
        out = []
        for d in self.devices:
            if d.free is not None and d.free < 0:
                out.append(_("{device} ({label}) is short by {short}").format(device=d.name, label=d.label,
                                                                              short=fmt_bytes(-d.free)))
        fs = self.host.free_at_start
        if fs is not None and fs < 0:
            out.append(_("host RAM is short by {short} at start").format(short=fmt_bytes(-fs)))
        return out

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "model": self.model,
            "architecture": self.architecture,
            "n_ctx": self.n_ctx,
            "n_ctx_seq": self.n_ctx_seq,
            "n_ctx_slot": self.n_ctx_slot,
            "n_parallel": self.n_parallel,
            "kv_unified": self.kv_unified,
            "n_batch": self.n_batch,
            "n_ubatch": self.n_ubatch,
            "flash_attn": self.flash_attn,
            "cache_type_k": self.cache_type_k,
            "cache_type_v": self.cache_type_v,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "recurrent_bytes_per_seq": self.recurrent_bytes_per_seq,
            "checkpoint_bytes": self.checkpoint_bytes,
            "n_rs_seq": self.n_rs_seq,
            "devices": [x.to_json() for x in self.devices],
            "host": self.host.to_json(),
            "fits": self.fits,
            "shortfalls": self.shortfalls(),
            "command": list(self.command),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "diagnostics": [x.to_json() for x in self.diagnostics],
            "cpu": self.cpu.to_json() if self.cpu is not None else None,
        }
        if self.speed is not None:
            d["speed"] = self.speed.to_json()
        return d


@dataclass(frozen=True)
class PlanInputs:
    spec: ModelSpec
    cfg: ServerConfig
    hardware: Hardware
    mmproj: MMProjInfo | None = None
    draft: ModelSpec | None = None
    overhead_bytes: int | None = None  # per-GPU driver/context overhead override
    #: what resolving the inputs found (which catalogue GPU a name matched, ...)
    diagnostics: tuple[Diagnostic, ...] = field(default=())
