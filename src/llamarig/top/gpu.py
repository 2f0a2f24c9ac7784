"""GPU figures for ``llamarig top`` via NVML (``nvidia-ml-py``, imported on first use): memory
used/total, power, temperature, clocks, utilisation and the driver's total energy counter.
They describe *this* machine's GPUs, so they are shown only when the server runs here."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

from llamarig.top.model import GpuRaw, GpuReading

MIB = 1024 * 1024


def is_local(url: str) -> bool:
    """Does ``url`` point at this machine (loopback, or one of this host's addresses)?"""
    host = urlsplit(url if "//" in url else "//" + url).hostname or ""
    if host in ("localhost", "", socket.gethostname()):
        return True
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        try:
            addr = ipaddress.ip_address(socket.gethostbyname(host))
        except (OSError, ValueError):
            return False
    if addr.is_loopback or addr.is_unspecified:
        return True
    try:
        mine = {i[4][0] for i in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return False
    return str(addr) in mine


class Nvml:
    """An NVML session: ``read()`` samples every GPU; never raises (a failure is a reading
    with ``available=False`` and the reason)."""

    def __init__(self) -> None:
        self.mod: Any = None
        self.reason = ""
        self.kind = ""
        try:
            import pynvml  # lazy: nvidia-ml-py loads libnvidia-ml, only where top shows GPUs
        except ImportError:
            self.reason, self.kind = "the Python package nvidia-ml-py is not installed", "no_nvml"
            return
        try:
            pynvml.nvmlInit()
        except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            self.reason, self.kind = str(e) or type(e).__name__, "no_nvml"
            return
        self.mod = pynvml

    def close(self) -> None:
        if self.mod is not None:
            with contextlib.suppress(Exception):  # shutting down anyway
                self.mod.nvmlShutdown()
            self.mod = None

    def read(self) -> GpuReading:
        n = self.mod
        if n is None:
            return GpuReading(False, self.reason, self.kind)
        try:
            count = n.nvmlDeviceGetCount()
            gpus = tuple(self._one(n, i) for i in range(count))
        except Exception as e:  # noqa: BLE001
            return GpuReading(False, f"NVML failed: {e}", "nvml_error")
        return GpuReading(True, "", "", gpus)

    @staticmethod
    def _one(n: Any, i: int) -> GpuRaw:
        h = n.nvmlDeviceGetHandleByIndex(i)

        def get(fn: Any, *a: Any) -> Any:
            try:
                return fn(h, *a)
            except Exception:  # noqa: BLE001 - "Not Supported" on some boards: that figure is absent
                return None

        name = get(n.nvmlDeviceGetName)
        mem = get(n.nvmlDeviceGetMemoryInfo)
        power = get(n.nvmlDeviceGetPowerUsage)  # mW
        temp = get(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU)
        sm = get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM)
        memclk = get(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM)
        util = get(n.nvmlDeviceGetUtilizationRates)
        energy = get(n.nvmlDeviceGetTotalEnergyConsumption)  # mJ since the driver loaded
        return GpuRaw(
            index=i, name=name.decode() if isinstance(name, bytes) else str(name or "?"),
            mem_used_mib=mem.used / MIB if mem is not None else None,
            mem_total_mib=mem.total / MIB if mem is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            temp_c=float(temp) if temp is not None else None,
            sm_clock_mhz=float(sm) if sm is not None else None,
            mem_clock_mhz=float(memclk) if memclk is not None else None,
            util_pct=float(util.gpu) if util is not None else None,
            energy_j=energy / 1000.0 if energy is not None else None,
        )


def remote_reading() -> GpuReading:
    return GpuReading(False, "the server runs on another machine: this machine's GPUs are not its GPUs", "remote")
