"""GPU figures of a bench run: a sampler that reads this machine's GPUs (``hardware.telemetry``:
NVML, else nvidia-smi) while the run goes on, and the run's energy from its samples."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from llamarig.hardware.telemetry import SOURCES, GpuTelemetry


def energy_joules(samples: list[dict[str, Any]]) -> tuple[float, str] | None:
    """The energy over a run, summed over GPUs: the driver's energy counter (last − first reading)
    where every GPU has it, else the trapezoidal integral of power over time; (joules, how)."""
    by_gpu: dict[Any, list[dict[str, Any]]] = {}
    for s in samples:
        by_gpu.setdefault(s.get("index"), []).append(s)
    counters = [[s["energy_j"] for s in rows if s.get("energy_j") is not None] for rows in by_gpu.values()]
    if by_gpu and all(len(c) >= 2 for c in counters):
        return sum(c[-1] - c[0] for c in counters), "the driver's energy counter (NVML), last − first reading"
    total, found = 0.0, False
    for rows in by_gpu.values():
        pts = sorted((s["t_s"], s["power_w"]) for s in rows if s.get("power_w") is not None)
        for (t0, p0), (t1, p1) in zip(pts, pts[1:], strict=False):
            total += (p0 + p1) / 2 * (t1 - t0)
            found = True
    return (total, "trapezoidal ∫ power dt") if found else None


@dataclass
class GpuSampler:
    """Samples the GPUs every ``interval_s`` while a bench runs (in a thread: NVML and nvidia-smi
    block), each sample one dict per GPU with ``t_s`` since the run began."""

    interval_s: float = 1.0
    t0: float = field(default_factory=time.perf_counter)
    samples: list[dict[str, Any]] = field(default_factory=list)
    available: bool = False
    reason: str = ""
    source: str = ""
    reason_kind: str = ""  # as GpuReading's: no_nvml, remote, nvml_error, off, unknown
    library_error: str = ""  # NVML's own words, shown quoted
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tel: GpuTelemetry | None = None

    def _sample(self) -> bool:
        assert self._tel is not None
        got = self._tel.read()
        t = time.perf_counter() - self.t0
        if not got.available:
            self.available, self.reason = False, got.reason
            self.reason_kind, self.library_error = got.reason_kind, got.library_error
            return False
        self.available, self.source = True, got.source
        self.samples += [{"t_s": round(t, 3), **{k: v for k, v in g.__dict__.items()}} for g in got.gpus]
        return True

    async def _loop(self) -> None:
        while not self._stop.is_set() and await asyncio.to_thread(self._sample):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.interval_s)

    def start(self) -> None:
        self._tel = GpuTelemetry()
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        if self._tel is not None:
            self._tel.close()

    def to_json(self) -> dict[str, Any]:
        ok = self.available and bool(self.samples)
        return {
            "available": ok,
            "reason": "" if ok else (self.reason or "no GPU reading was taken"),
            "reason_kind": "" if ok else self.reason_kind,
            "library_error": "" if ok else self.library_error,
            "source": f"{SOURCES.get(self.source, self.source)} (client machine)" if ok else "",
            "interval_s": self.interval_s,
            "samples": self.samples,
        }
