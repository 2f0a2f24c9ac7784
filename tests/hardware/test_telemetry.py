"""One home for NVML and nvidia-smi (llamarig.hardware.telemetry): ``detect`` reads this
machine's GPUs through the same reader as bench and top, NVML first."""

from __future__ import annotations

import sys
import types

import pytest

from llamarig.detect import detect
from llamarig.hardware import telemetry


def _fake_nvml(name: bytes, total: int) -> types.SimpleNamespace:
    """A stand-in for nvidia-ml-py (this machine has no NVIDIA driver): its functions and
    constants, one GPU."""
    return types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: name,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=total // 2, total=total),
        nvmlDeviceGetPowerUsage=lambda h: 100_000, nvmlDeviceGetTemperature=lambda h, k: 50,
        nvmlDeviceGetClockInfo=lambda h, k: 1000, nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=7),
        nvmlDeviceGetTotalEnergyConsumption=lambda h: 1000, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=2)


def test_detect_reads_gpus_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(b"NVIDIA GeForce RTX 3090", 24 << 30))
    hw = detect()
    assert [g.id for g in hw.gpus] == ["rtx3090"] and hw.gpus[0].memory_bytes == 24 << 30
    assert hw.gpus[0].detected
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(b"Some Future GPU", 8 << 30))
    g = detect().gpus[0]
    assert g.bandwidth_gbs is None and g.source == "NVML (not in the catalogue: no bandwidth/TFLOPS)"


def test_without_nvml_or_nvidia_smi_there_are_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    monkeypatch.setattr(telemetry, "nvidia_smi", lambda: None)
    got = telemetry.GpuTelemetry().read()
    assert not got.available and got.reason_kind == "no_nvml" and "\n" not in got.reason
    assert detect().gpus == ()
