"""What every estimator reads (``PlanLayout``), what it returns (``Contribution``), and the ``MemoryLines``
the planner posts estimates into."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from llamarig.diagnostics import Diagnostic
from llamarig.gguf.spec import ModelSpec
from llamarig.hardware.cpu import CpuFeatures
from llamarig.hardware.types import GPU, Hardware
from llamarig.plan.config import ServerConfig
from llamarig.plan.memory import ContextLayout, Placement
from llamarig.plan.result import Line, PlanInputs
from llamarig.units import MiB

#: the device index of host RAM in an Entry
HOST = -1


def mib(n: int) -> str:
    """Bytes as the formulas write them."""
    return f"{n / MiB:.2f} MiB"


@dataclass(frozen=True)
class Entry:
    """One figure for one component of one device (``HOST``: host RAM)."""

    device: int
    component: str
    line: Line


def entry(device: int, component: str, nbytes: int, formula: str, method: str = "exact") -> Entry:
    return Entry(device, component, Line(nbytes, formula, method))


@dataclass(frozen=True)
class Contribution:
    """What one estimator adds: memory figures and diagnostics."""

    entries: tuple[Entry, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()

    def __add__(self, other: Contribution) -> Contribution:
        return Contribution((*self.entries, *other.entries), (*self.diagnostics, *other.diagnostics))


@dataclass(frozen=True)
class PlanLayout:
    """The resolved inputs every estimator reads: the model, the settings of this plan (a --fit
    trial's, or the user's), the devices in llama.cpp's order and where each layer sits."""

    inp: PlanInputs
    #: the user's settings (the draft model keeps them when ``inp.cfg`` is a --fit trial)
    base_cfg: ServerConfig
    ctx: ContextLayout
    gpu_names: tuple[str, ...]
    gpus: tuple[GPU, ...]
    placement: Placement
    cpu: CpuFeatures
    #: weights are mmap'd (page cache) rather than read into an allocated buffer
    mmap: bool
    #: what resolving the devices found (--rpc's assumed memory)
    diagnostics: tuple[Diagnostic, ...] = field(default=())
    #: the memory per device the default split divides by
    free: tuple[int, ...] = ()
    #: as one of --fit's dry runs measures it (llamarig.plan.planner.fit_measurement)
    dry_run: bool = False

    @property
    def spec(self) -> ModelSpec:
        return self.inp.spec

    @property
    def cfg(self) -> ServerConfig:
        return self.inp.cfg

    @property
    def hw(self) -> Hardware:
        return self.inp.hardware

    @property
    def n_dev(self) -> int:
        return len(self.gpus)

    @property
    def first_local(self) -> int:
        """The first GPU that is not behind an rpc-server (the mmproj goes there), HOST without GPUs."""
        return next((i for i, g in enumerate(self.gpus) if not g.endpoint), 0 if self.gpus else HOST)

    @property
    def kv_on_gpu(self) -> bool:
        return not self.cfg.no_kv_offload

    def kv_device(self, layer: int) -> int:
        """Where layer ``layer``'s KV cache (or recurrent state) lives: its layer's device, or
        the host with -nkvo."""
        return self.placement.layer_dev[layer] if self.kv_on_gpu else HOST

    def layers_on(self, device: int) -> int:
        return sum(1 for d in self.placement.layer_dev if d == device)


class MemoryLines:
    """The memory lines of one plan, per device and on the host, as estimates are posted in
    order. A component posted twice on one device adds up (the formulas joined with " + ")."""

    def __init__(self, n_dev: int) -> None:
        self.devices: list[dict[str, Line]] = [{} for _ in range(n_dev)]
        self.host: dict[str, Line] = {}
        self.diagnostics: list[Diagnostic] = []

    def lines(self, device: int) -> dict[str, Line]:
        return self.host if device < 0 else self.devices[device]

    def post(self, est: Contribution) -> None:
        for e in est.entries:
            self._add(e)
        self.diagnostics.extend(est.diagnostics)

    def _add(self, e: Entry) -> None:
        tgt = self.lines(e.device)
        old = tgt.get(e.component)
        if old is None:
            tgt[e.component] = e.line
        elif e.line.bytes:
            tgt[e.component] = Line(old.bytes + e.line.bytes, old.formula + " + " + e.line.formula,
                                    old.method if old.method == e.line.method else "modelled")

    def revise(self, revisions: Iterable[Entry]) -> None:
        """Replace lines already posted (in place: a component keeps its position)."""
        for e in revisions:
            self.lines(e.device)[e.component] = e.line

    def all_lines(self) -> list[tuple[int, dict[str, Line]]]:
        """(device, its lines) for every device, then the host."""
        return [*enumerate(self.devices), (HOST, self.host)]
