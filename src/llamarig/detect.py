"""Read the local machine: GPUs via nvidia-smi (when present, matched to the GPU catalogue), CPU
cores, CPU features and RAM from the OS."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace

from llamarig.catalogue.gpus import find_gpu
from llamarig.errors import UnknownNameError
from llamarig.hardware.cpu import detect_cpu
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


def parse_nvidia_smi(text: str) -> list[GPU]:
    """Lines of ``nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits``."""
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2:
            continue
        name = parts[0]
        try:
            total = int(float(parts[1])) * MiB
        except ValueError:
            continue
        try:
            g = replace(find_gpu(name), memory_bytes=total, detected=True)
        except UnknownNameError:
            g = GPU(id=name.lower().replace(" ", "-"), name=name, backend="CUDA", memory_bytes=total,
                    bandwidth_gbs=None, fp16_tflops=None, overhead_bytes=300 * MiB,
                    source="nvidia-smi (not in the catalogue: no bandwidth/TFLOPS)", detected=True)
        out.append(g)
    return out


def detect(timeout: float = 5.0) -> Hardware:
    gpus: list[GPU] = []
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run(
                [smi, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=timeout, check=False,
            )
            if r.returncode == 0:
                gpus = parse_nvidia_smi(r.stdout)
        except (OSError, subprocess.TimeoutExpired):
            gpus = []
    total, avail = host_memory()
    return Hardware(tuple(gpus), total, avail, cpu_cores(), source="detected", cpu=detect_cpu())
