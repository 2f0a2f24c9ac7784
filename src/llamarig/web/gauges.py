"""The page's alerts as Prometheus gauges (the gateway's ``/metrics``, ``top --web``'s
``/metrics``): ``llamarig_alert{kind,subject}`` 1 while a threshold is crossed (0 once it is not
any more), ``llamarig_alert_threshold{kind}`` the threshold itself; and each GPU as the page
reads it (NVML, llamarig.hardware.telemetry): ``llamarig_gpu_memory_used_bytes``,
``llamarig_gpu_memory_total_bytes``, ``llamarig_gpu_power_watts``,
``llamarig_gpu_temperature_celsius`` (none on a machine without NVML)."""

from __future__ import annotations

from llamarig.extras import needed
from llamarig.top.model import Snapshot
from llamarig.web.alerts import KINDS, Crossed, Thresholds

with needed("bench"):
    from prometheus_client import CollectorRegistry, Gauge

MIB = 1 << 20


class AlertGauges:
    def __init__(self, registry: CollectorRegistry, thresholds: Thresholds) -> None:
        self.alert = Gauge("llamarig_alert", "1 while a threshold of the live page is crossed (llamarig.web.alerts)",
                           ["kind", "subject"], registry=registry)
        self.threshold = Gauge("llamarig_alert_threshold", "The live page's alert threshold (W, degrees C, "
                               "percent of the KV pool, queued requests)", ["kind"], registry=registry)
        self.firing = Gauge("llamarig_alerts_firing", "Thresholds crossed now, by kind", ["kind"], registry=registry)
        g = ["gpu", "name"]
        self.mem_used = Gauge("llamarig_gpu_memory_used_bytes", "GPU memory in use (NVML)", g, registry=registry)
        self.mem_total = Gauge("llamarig_gpu_memory_total_bytes", "GPU memory (NVML)", g, registry=registry)
        self.power = Gauge("llamarig_gpu_power_watts", "GPU power draw (NVML)", g, registry=registry)
        self.temp = Gauge("llamarig_gpu_temperature_celsius", "GPU temperature (NVML)", g, registry=registry)
        self.seen: set[tuple[str, str]] = set()
        self.set_thresholds(thresholds)

    def set_thresholds(self, th: Thresholds) -> None:
        for k, v in (("power", th.power_w), ("temperature", th.temp_c), ("pool", th.pool_pct), ("queue", th.queue)):
            if v is not None:
                self.threshold.labels(k).set(v)

    def update(self, last: Snapshot | None, crossed: tuple[Crossed, ...]) -> None:
        self._gpus(last)
        now = {(c.kind, c.subject) for c in crossed}
        for k in self.seen - now:
            self.alert.labels(*k).set(0)
        for k in now:
            self.alert.labels(*k).set(1)
        self.seen |= now
        for kind in KINDS:
            self.firing.labels(kind).set(sum(1 for c in crossed if c.kind == kind))

    def _gpus(self, last: Snapshot | None) -> None:
        if last is None or not last.gpu.available:
            return
        for d in last.gpu.gpus:
            lab = (str(d.index), d.name)
            for gauge, v, k in ((self.mem_used, d.mem_used_mib, MIB), (self.mem_total, d.mem_total_mib, MIB),
                                (self.power, d.power_w, 1), (self.temp, d.temp_c, 1)):
                if v is not None:
                    gauge.labels(*lab).set(v * k)
