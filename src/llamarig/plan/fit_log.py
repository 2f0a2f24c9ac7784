"""What llama-server's own ``--fit`` decided, read back from its ``-lv 4`` log.

common_params_fit_impl (common/fit.cpp at build 11434) traces every step at LOG_TRC, which
llama-server prints at verbosity 4: the memory it projects per device for the initial settings
(fit.cpp:343-346), the context it chose (fit.cpp:434-435, 441-442), the layers it gave each
device (fit.cpp:726-728 dense, 864-866/871-873 MoE with their overflowing part), and why it gave
up (fit.cpp:895, "failed to fit params to free device memory: ..."). The model and context then
load with those settings: ``llama_context: n_ctx = N`` and ``load_tensors: offloaded X/Y
layers to GPU`` are the outcome. ``llamarig.plan.fit`` replays the same steps on the memory
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


def parse_fit_log(text: str) -> FitLog:
    """Read fit's trace and the loaded n_ctx / offloaded layers from a ``-lv 4`` log."""
    devs: dict[str, DeviceFit] = {}
    order: list[str] = []  # device order: the projected lines come in it (fit.cpp:332-347)
    placed: list[str] = []  # the layer lines come back to front (fit.cpp:676-729)
    ctx_to = gave_up = None
    no_change = False
    trials: list[FitTrial] = []
    rows: list[tuple[tuple[int, int, int], int]] = []
    for line in text.splitlines():
        if "common_" not in line:
            continue
        m = _TRIAL.search(line)
        if m:
            i, n_layer, n_part, ov, mem = (int(x) for x in m.groups())
            if i == 0 and rows:
                trials.append(FitTrial(tuple(r for r, _ in rows), tuple(x for _, x in rows)))
                rows = []
            rows.append(((n_layer, n_part, ov), mem))
            continue
        if "memory for test allocation" in line and rows:
            trials.append(FitTrial(tuple(r for r, _ in rows), tuple(x for _, x in rows)))
            rows = []
        m = _PROJECTED.search(line)
        if m:
            name = m.group(1)
            if name not in devs:
                order.append(name)
            devs[name] = DeviceFit(name, m.group(2).strip(), int(m.group(3)), int(m.group(4)), int(m.group(6)))
            continue
        m = _LAYERS.search(line)
        if m:
            name = m.group(1)
            old = devs.get(name) or DeviceFit(name, m.group(2).strip())
            if name not in devs:
                placed.append(name)
            devs[name] = DeviceFit(old.name, old.description, old.total_mib, old.used_mib, old.target_mib,
                                   int(m.group(3)), int(m.group(4) or 0))
            continue
        m = _CTX.search(line)
        if m:
            ctx_to = int(m.group(2))
            continue
        m = _GAVE_UP.search(line)
        if m:
            gave_up = m.group(1).strip()
            continue
        no_change = no_change or bool(_NO_CHANGE.search(line))
    if rows:
        trials.append(FitTrial(tuple(r for r, _ in rows), tuple(x for _, x in rows)))
    m_ctx = _N_CTX.search(text)
    m_off = _OFFLOADED.search(text)
    return FitLog("common_params_fit_impl" in text or "common_fit_params" in text, no_change, ctx_to, gave_up,
                  tuple(devs[n] for n in order + placed[::-1]),
                  int(m_ctx.group(1)) if m_ctx else None,
                  (int(m_off.group(1)), int(m_off.group(2))) if m_off else None, tuple(trials))

