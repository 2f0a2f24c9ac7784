"""Read the local machine: GPUs by ``hardware.telemetry`` (NVML, else nvidia-smi; matched to the
GPU catalogue), CPU cores, CPU features and RAM from the OS."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace

from llamarig.catalogue.gpus import find_gpu
from llamarig.errors import UnknownNameError
from llamarig.hardware.cpu import detect_cpu
from llamarig.hardware.telemetry import GpuRaw, GpuTelemetry
from llamarig.hardware.types import GPU, Hardware, MiB


def host_memory() -> tuple[int | None, int | None]:
    """(total, available) bytes from /proc/meminfo (Linux) or sysconf."""
    try:
        with open("/proc/meminfo") as f:
            info = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in f if ln.split()[1:2]}
        return info.get("MemTotal"), info.get("MemAvailable", info.get("MemFree"))
    except (OSError, ValueError, IndexError):
        pass
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return int(total), None
    except (ValueError, OSError, AttributeError):
        return None, None


def cpu_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


#: what read the GPUs, for a GPU the catalogue does not know
TOOLS = {"nvml": "NVML", "nvidia-smi": "nvidia-smi"}


def gpus_of(raws: Iterable[GpuRaw], source: str = "nvidia-smi") -> list[GPU]:
    """This machine's GPUs as planner GPUs: the catalogue's entry with the memory read here, or
    one without bandwidth/TFLOPS for a board the catalogue does not know."""
    out = []
    for raw in raws:
        if raw.mem_total_mib is None:
            continue
        total = int(raw.mem_total_mib) * MiB
        try:
            g = replace(find_gpu(raw.name), memory_bytes=total, detected=True)
        except UnknownNameError:
            g = GPU(id=raw.name.lower().replace(" ", "-"), name=raw.name, backend="CUDA", memory_bytes=total,
                    bandwidth_gbs=None, fp16_tflops=None, overhead_bytes=300 * MiB,
                    source=f"{TOOLS.get(source, source)} (not in the catalogue: no bandwidth/TFLOPS)", detected=True)
        out.append(g)
    return out


def detect(timeout: float = 5.0) -> Hardware:
    tel = GpuTelemetry(smi_timeout_s=timeout)
    try:
        got = tel.read()
    finally:
        tel.close()
    gpus = gpus_of(got.gpus, got.source) if got.available else []
    total, avail = host_memory()
    return Hardware(tuple(gpus), total, avail, cpu_cores(), source="detected", cpu=detect_cpu())
