"""GPU telemetry on the *client* machine via ``nvidia-smi`` (valid for the server only when the
server runs on the same machine; the report says so). Absent tool -> a clean 'not available'."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

QUERY = "index,name,power.draw,temperature.gpu,clocks.sm,clocks.mem,memory.used,memory.total,utilization.gpu"
FIELDS = ("index", "name", "power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "mem_used_mib", "mem_total_mib", "util_pct")


def parse_nvidia_smi(text: str, t: float) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`` output."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(FIELDS):
            continue
        row: dict[str, Any] = {"t_s": round(t, 3)}
        for k, v in zip(FIELDS, parts, strict=True):
            if k == "name":
                row[k] = v
                continue
            try:
                row[k] = float(v)
            except ValueError:
                row[k] = None  # "[N/A]", "[Not Supported]"
        rows.append(row)
    return rows


def energy_joules(samples: list[dict[str, Any]]) -> float | None:
    """Trapezoidal integral of power.draw over time, summed over GPUs."""
    by_gpu: dict[Any, list[tuple[float, float]]] = {}
    for s in samples:
        if s.get("power_w") is not None:
            by_gpu.setdefault(s.get("index"), []).append((s["t_s"], s["power_w"]))
    total = 0.0
    found = False
    for pts in by_gpu.values():
        pts.sort()
        for (t0, p0), (t1, p1) in zip(pts, pts[1:], strict=False):
            total += (p0 + p1) / 2 * (t1 - t0)
            found = True
    return total if found else None


@dataclass
class GpuSampler:
    interval_s: float = 1.0
    t0: float = field(default_factory=time.perf_counter)
    samples: list[dict[str, Any]] = field(default_factory=list)
    available: bool = False
    reason: str = ""
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def probe(self) -> bool:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            self.available = False
            self.reason = "nvidia-smi not found on PATH of the client machine (no NVIDIA driver here); GPU power, clocks and tokens per joule not measured"
            return False
        self.exe = exe
        self.available = True
        return True

    async def _one(self) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                self.exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), timeout=5)
        except (OSError, asyncio.TimeoutError) as e:
            self.available = False
            self.reason = f"nvidia-smi failed: {type(e).__name__}"
            return
        if proc.returncode != 0:
            self.available = False
            self.reason = f"nvidia-smi exited {proc.returncode}: {err.decode(errors='replace').strip()[:160]}"
            return
        self.samples.extend(parse_nvidia_smi(out.decode(errors="replace"), time.perf_counter() - self.t0))

    async def _loop(self) -> None:
        while not self._stop.is_set() and self.available:
            await self._one()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self.interval_s)

    def start(self) -> None:
        if self.probe():
            self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available and bool(self.samples),
            "reason": self.reason if not (self.available and self.samples) else "",
            "source": "nvidia-smi --query-gpu (client machine)",
            "interval_s": self.interval_s,
            "samples": self.samples,
        }
