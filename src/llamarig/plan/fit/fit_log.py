"""What llama-server's own ``--fit`` decided, read back from its ``-lv 4`` log.

common_params_fit_impl (common/fit.cpp at build 11434) traces every step at LOG_TRC, which
llama-server prints at verbosity 4: the memory it projects per device for the initial settings
(fit.cpp:343-346), the context it chose (fit.cpp:434-435, 441-442), the layers it gave each
device (fit.cpp:726-728 dense, 864-866/871-873 MoE with their overflowing part), and why it gave
up (fit.cpp:895, "failed to fit params to free device memory: ..."). The model and context then
load with those settings: ``llama_context: n_ctx = N`` and ``load_tensors: offloaded X/Y
layers to GPU`` are the outcome. ``llamarig.plan.fit.fit_replay`` replays the same steps on the memory
model; tests/launch/test_rpc_fit.py holds the two against each other on the RPC rig.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PROJECTED = re.compile(r"common_params_fit_impl:\s+- (\S+) \((.*?)\):\s+(\d+) total,\s+(-?\d+) used,\s+(-?\d+) free "
                        r"vs\. target of\s+(\d+)")
_LAYERS = re.compile(r"common_params_fit_impl:\s+- (\S+) \((.*?)\):\s+(\d+) layers(?: \(\s*(\d+) overflowing\))?,"
                     r"\s+(-?\d+) MiB used,\s+(-?\d+) MiB free")
_TRIAL = re.compile(r"id=(\d+), n_layer=\s*(\d+), n_part=\s*(\d+), overflow_type=(\d+), mem=\s*(-?\d+) MiB")
_CTX = re.compile(r"common_params_fit_impl: context size reduced from (\d+) to (\d+)")
_GAVE_UP = re.compile(r"failed to fit params to free device memory: (.*)")
_NO_CHANGE = re.compile(r"common_params_fit_impl: (?:.*no changes needed|targets for free memory can be met on all devices)")
_N_CTX = re.compile(r"llama_context: n_ctx\s+= (\d+)")
_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")


@dataclass(frozen=True)
class DeviceFit:
    """One device in fit's trace: its ggml name (``RPC1``, ``CUDA0``), description (an
    rpc-server's is its endpoint), what fit projected for the initial settings, and the layers
    it gave the device (None when fit stopped before placing layers)."""

    name: str
    description: str
    total_mib: int | None = None
    used_mib: int | None = None
    target_mib: int | None = None
    layers: int | None = None
    overflowing: int = 0


@dataclass(frozen=True)
class FitTrial:
    """One dry run of fit's layer search (fit.cpp:598-606): per device (n_layer, n_part,
    overflow_type) and the memory it measured, MiB rounded down."""

    layers: tuple[tuple[int, int, int], ...]
    mem_mib: tuple[int, ...]


@dataclass(frozen=True)
class FitLog:
    """``--fit``'s decisions as the log shows them."""

    ran: bool
    #: fit found every device within its target at the initial settings
    no_change: bool
    #: the context fit chose when it lowered it (None: not lowered)
    ctx_to: int | None
    #: the reason fit gave up ("n_gpu_layers already set by user to 99, abort"), or None
    gave_up: str | None
    devices: tuple[DeviceFit, ...] = field(default=())
    #: what loaded: n_ctx and (offloaded, of) layers
    n_ctx: int | None = None
    offloaded: tuple[int, int] | None = None
    trials: tuple[FitTrial, ...] = ()

    def layers(self) -> tuple[int, ...] | None:
        """Layers per device in device order, when fit placed them."""
        if not self.devices or any(d.layers is None for d in self.devices):
            return None
        return tuple(d.layers or 0 for d in self.devices)

    def by_description(self) -> dict[str, DeviceFit]:
        return {d.description: d for d in self.devices}


class _Reader:
    """One pass over fit's trace lines, one method per kind of line."""

    def __init__(self) -> None:
        self.devs: dict[str, DeviceFit] = {}
        self.order: list[str] = []  # device order: the projected lines come in it (fit.cpp:332-347)
        self.placed: list[str] = []  # the layer lines come back to front (fit.cpp:676-729)
        self.ctx_to: int | None = None
        self.gave_up: str | None = None
        self.no_change = False
        self.trials: list[FitTrial] = []
        self.rows: list[tuple[tuple[int, int, int], int]] = []

    def line(self, line: str) -> None:
        for rx, handle in ((_TRIAL, self.trial), (_PROJECTED, self.projected), (_LAYERS, self.layers),
                           (_CTX, self.ctx), (_GAVE_UP, self.give_up)):
            m = rx.search(line)
            if m:
                handle(m)
                return
        if "memory for test allocation" in line:
            self.flush()
        self.no_change = self.no_change or bool(_NO_CHANGE.search(line))

    def flush(self) -> None:
        if self.rows:
            self.trials.append(FitTrial(tuple(r for r, _ in self.rows), tuple(x for _, x in self.rows)))
            self.rows = []

    def trial(self, m: re.Match[str]) -> None:
        i, n_layer, n_part, ov, mem = (int(x) for x in m.groups())
        if i == 0:
            self.flush()
        self.rows.append(((n_layer, n_part, ov), mem))

    def projected(self, m: re.Match[str]) -> None:
        name = m.group(1)
        if name not in self.devs:
            self.order.append(name)
        self.devs[name] = DeviceFit(name, m.group(2).strip(), int(m.group(3)), int(m.group(4)), int(m.group(6)))

    def layers(self, m: re.Match[str]) -> None:
        name = m.group(1)
        old = self.devs.get(name) or DeviceFit(name, m.group(2).strip())
        if name not in self.devs:
            self.placed.append(name)
        self.devs[name] = DeviceFit(old.name, old.description, old.total_mib, old.used_mib, old.target_mib,
                                    int(m.group(3)), int(m.group(4) or 0))

    def ctx(self, m: re.Match[str]) -> None:
        self.ctx_to = int(m.group(2))

    def give_up(self, m: re.Match[str]) -> None:
        self.gave_up = m.group(1).strip()


def parse_fit_log(text: str) -> FitLog:
    """Read fit's trace and the loaded n_ctx / offloaded layers from a ``-lv 4`` log."""
    r = _Reader()
    for line in text.splitlines():
        if "common_" in line:
            r.line(line)
    r.flush()
    m_ctx = _N_CTX.search(text)
    m_off = _OFFLOADED.search(text)
    return FitLog("common_params_fit_impl" in text or "common_fit_params" in text, r.no_change, r.ctx_to, r.gave_up,
                  tuple(r.devs[n] for n in r.order + r.placed[::-1]),
                  int(m_ctx.group(1)) if m_ctx else None,
                  (int(m_off.group(1)), int(m_off.group(2))) if m_off else None, tuple(r.trials))
