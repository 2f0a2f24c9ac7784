"""The page's alerts as Prometheus gauges (the gateway's ``/metrics``, ``top --web``'s
``/metrics``): ``llamarig_alert{kind,subject}`` 1 while a threshold is crossed (0 once it is not
any more), ``llamarig_alert_threshold{kind}`` the threshold itself."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from llamarig.web.alerts import KINDS, Crossed, Thresholds


class AlertGauges:
    def __init__(self, registry: CollectorRegistry, thresholds: Thresholds) -> None:
        self.alert = Gauge("llamarig_alert", "1 while a threshold of the live page is crossed (llamarig.web.alerts)",
                           ["kind", "subject"], registry=registry)
        self.threshold = Gauge("llamarig_alert_threshold", "The live page's alert threshold (W, degrees C, "
                               "percent of the KV pool, queued requests)", ["kind"], registry=registry)
        self.firing = Gauge("llamarig_alerts_firing", "Thresholds crossed now, by kind", ["kind"], registry=registry)
        self.seen: set[tuple[str, str]] = set()
        self.set_thresholds(thresholds)

    def set_thresholds(self, th: Thresholds) -> None:
        for k, v in (("power", th.power_w), ("temperature", th.temp_c), ("pool", th.pool_pct), ("queue", th.queue)):
            if v is not None:
                self.threshold.labels(k).set(v)

    def update(self, crossed: tuple[Crossed, ...]) -> None:
        now = {(c.kind, c.subject) for c in crossed}
        for k in self.seen - now:
            self.alert.labels(*k).set(0)
        for k in now:
            self.alert.labels(*k).set(1)
        self.seen |= now
        for kind in KINDS:
            self.firing.labels(kind).set(sum(1 for c in crossed if c.kind == kind))
