"""The figures against capacity: a DevicePlan per device, the HostPlan (Apple silicon's unified
memory shared with the GPU), and the diagnostics of what does not fit."""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.diagnostics import Diagnostic, info, warning
from llamarig.i18n import _
from llamarig.plan.estimator import MemoryLines, PlanLayout
from llamarig.plan.result import DevicePlan, HostPlan
from llamarig.units import GiB, fmt_bytes

#: diagnostic codes
UNIFIED_MEMORY = "unified-memory"
DEVICE_SHORT = "device-short"
DEVICE_TIGHT = "device-tight"
HOST_SHORT = "host-short"
HOST_GROWS_SHORT = "host-grows-short"


@dataclass(frozen=True)
class Budget:
    devices: tuple[DevicePlan, ...]
    host: HostPlan
    diagnostics: tuple[Diagnostic, ...]


def _shortfalls(devs: tuple[DevicePlan, ...], host: HostPlan) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for dp in devs:
        free = dp.free
        if free is None or dp.capacity == 0:
            continue
        if free < 0:
            out.append(warning(DEVICE_SHORT, _("{device} ({label}): needs {used} of {capacity}: short by {short}").format(
                device=dp.name, label=dp.label, used=fmt_bytes(dp.total), capacity=fmt_bytes(dp.capacity or 0),
                short=fmt_bytes(-free))))
        elif free < GiB:
            out.append(warning(DEVICE_TIGHT, _(
                "less than 1 GiB free on {device} ({free}): expect spill or OOM (llama.cpp's --fit "
                "keeps 1024 MiB free by default)").format(device=dp.name, free=fmt_bytes(free))))
    fs = host.free_at_start
    if fs is not None and fs < 0:
        out.append(warning(HOST_SHORT, _("host RAM: needs {used} at start of {capacity}: short by {short}").format(
            used=fmt_bytes(host.start_total), capacity=fmt_bytes(host.capacity or 0), short=fmt_bytes(-fs))))
    elif host.free is not None and host.free < 0:
        ck = host.lines.get("checkpoints")
        out.append(warning(HOST_GROWS_SHORT, _(
            "host RAM fits at start ({used} of {capacity}) but can grow to {total} over long "
            "sessions{why}: lower --ctx-checkpoints or --cache-ram to bound it").format(
            used=fmt_bytes(host.start_total), capacity=fmt_bytes(host.capacity or 0), total=fmt_bytes(host.total),
            why=f" ({ck.formula.split(';')[0]})" if ck else "")))
    return out


def budget(lay: PlanLayout, ledger: MemoryLines) -> Budget:
    gpus = lay.gpus
    devs = tuple(DevicePlan(lay.gpu_names[i], g.name, g.memory_bytes or None, ledger.devices[i])
                 for i, g in enumerate(gpus))
    ram = lay.hw.ram_bytes
    diags: list[Diagnostic] = []
    unified = [g for g in gpus if g.unified_memory]
    if unified and unified[0].system_memory_bytes:
        # Apple silicon: GPU buffers live in the same RAM; what the GPU uses is not free for the host
        system = ram or unified[0].system_memory_bytes
        ram = system - sum(dp.total for dp in devs if any(g.unified_memory for g in gpus if g.name == dp.label))
        diags.append(info(UNIFIED_MEMORY, _(
            "unified memory: host capacity = {size} system RAM minus what the GPU uses; the GPU may use "
            "up to Metal's recommendedMaxWorkingSetSize (its capacity here)").format(size=fmt_bytes(system))))
    host = HostPlan(ram, ledger.host, lay.mmap)
    return Budget(devs, host, tuple(diags + _shortfalls(devs, host)))
