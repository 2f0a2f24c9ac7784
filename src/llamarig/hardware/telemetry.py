"""GPU telemetry, the one home of NVML and ``nvidia-smi`` for ``llamarig bench``, ``top`` and
this machine's hardware (``llamarig.detect``): NVML through ``nvidia-ml-py`` (the ``gpu`` extra:
memory, power, temperature, clocks, utilisation and the driver's total energy counter), and
``nvidia-smi --query-gpu`` where NVML cannot be loaded. The figures describe *this* machine's
GPUs: valid for a server only when it runs here (:func:`is_local`), and the callers say so. A
failure is a reading with ``available=False`` and one line of why, never an exception."""

from __future__ import annotations

import contextlib
import ipaddress
import shutil
import socket
import subprocess
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MIB = 1024 * 1024
QUERY = "index,name,power.draw,temperature.gpu,clocks.sm,clocks.mem,memory.used,memory.total,utilization.gpu"
FIELDS = ("index", "name", "power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "mem_used_mib", "mem_total_mib", "util_pct")
SMI_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class GpuRaw:
    """One GPU at one moment (None: the board does not report that figure)."""

    index: int
    name: str
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    util_pct: float | None = None
    energy_j: float | None = None  # the driver's total energy counter (Volta and later; NVML only)


@dataclass(frozen=True)
class GpuReading:
    """Every GPU of this machine at one moment, or why there is none: ``reason`` (English, for
    --json) and ``reason_kind`` (``no_nvml``, ``remote``, ``nvml_error``, ``off``, ``unknown``:
    the screens translate it); ``source`` says which tool read them (``nvml`` or ``nvidia-smi``)."""

    available: bool
    reason: str = ""
    reason_kind: str = ""
    gpus: tuple[GpuRaw, ...] = ()
    source: str = ""
    library_error: str = ""  # NVML's own words for why it is missing, shown as they are


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


def remote_reading() -> GpuReading:
    return GpuReading(False, "the server runs on another machine: this machine's GPUs are not its GPUs", "remote")


class Nvml:
    """An NVML session: ``read()`` samples every GPU."""

    def __init__(self) -> None:
        self.mod: Any = None
        self.reason = ""
        self.kind = ""
        try:
            import pynvml  # lazy: nvidia-ml-py loads libnvidia-ml, only where GPUs are read
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
        return GpuReading(True, "", "", gpus, "nvml")

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


def parse_nvidia_smi(text: str) -> list[GpuRaw]:
    """``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`` output as readings
    (``[N/A]``, ``[Not Supported]``: that figure absent)."""
    out: list[GpuRaw] = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(FIELDS):
            continue
        vals: dict[str, Any] = {}
        for k, v in zip(FIELDS[2:], parts[2:], strict=True):
            try:
                vals[k] = float(v)
            except ValueError:
                vals[k] = None
        try:
            index = int(parts[0])
        except ValueError:
            continue
        out.append(GpuRaw(index, parts[1], **vals))
    return out


def nvidia_smi() -> str | None:
    """Where ``nvidia-smi`` is on PATH (None: not here, so no NVIDIA driver to ask)."""
    return shutil.which("nvidia-smi")


class Smi:
    """``nvidia-smi`` as the fallback reader (no energy counter: power × time instead)."""

    def __init__(self, timeout_s: float = SMI_TIMEOUT_S) -> None:
        self.exe = nvidia_smi()
        self.timeout_s = timeout_s

    def read(self) -> GpuReading:
        if self.exe is None:
            return GpuReading(False, "nvidia-smi not found on PATH", "no_nvml")
        try:
            r = subprocess.run([self.exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return GpuReading(False, f"nvidia-smi failed: {type(e).__name__}", "nvml_error")
        if r.returncode != 0:
            return GpuReading(False, f"nvidia-smi exited {r.returncode}: {r.stderr.strip()[:160]}", "nvml_error")
        return GpuReading(True, "", "", tuple(parse_nvidia_smi(r.stdout)), "nvidia-smi")


class GpuTelemetry:
    """This machine's GPUs: NVML, else nvidia-smi. ``read()`` never raises."""

    def __init__(self, smi_timeout_s: float = SMI_TIMEOUT_S) -> None:
        self.nvml = Nvml()
        self.smi: Smi | None = None if self.nvml.mod is not None else Smi(smi_timeout_s)

    def read(self) -> GpuReading:
        if self.smi is None:
            return self.nvml.read()
        got = self.smi.read()
        if got.available:
            return got
        why = f"{self.nvml.reason}; {got.reason}" if got.reason_kind == "no_nvml" else got.reason
        return GpuReading(False, why, got.reason_kind, library_error=self.nvml.reason)

    def close(self) -> None:
        self.nvml.close()


SOURCES = {"nvml": "NVML (nvidia-ml-py)", "nvidia-smi": "nvidia-smi --query-gpu"}
