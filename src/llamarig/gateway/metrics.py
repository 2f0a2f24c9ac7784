"""Prometheus metrics (one registry per gateway), backend metrics re-exported with a ``backend``
label, and the JSONL request log (no API keys; no message text unless enabled)."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any, TextIO, TypeVar, cast

from llamarig.extras import needed

with needed("gateway"):
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
    from prometheus_client.metrics import MetricWrapperBase


log = logging.getLogger("llamarig.gateway")

_Metric = TypeVar("_Metric", bound=MetricWrapperBase)

_LAT = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "llamarig_gateway_"
        self.requests = Counter(p + "requests", "Finished requests by outcome", ["tier", "backend", "outcome"], registry=r)
        self.rejected = Counter(p + "rejected", "Requests not admitted (429/503) by real cause (reason) and outcome (code)",
                                ["tier", "reason", "code"], registry=r)
        self.bad_requests = Counter(p + "bad_requests", "Requests refused with a 4xx before admission", ["code"], registry=r)
        self.queue_length = Gauge(p + "queue_length", "Requests waiting for admission", ["tier"], registry=r)
        self.queue_wait = Histogram(p + "queue_wait_seconds", "Time from arrival to admission", ["tier"], registry=r,
                                    buckets=(0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60))
        self.reserved = Gauge(p + "reserved_tokens", "Tokens reserved (prompt + max_tokens) in flight", ["backend"], registry=r)
        self.pool = Gauge(p + "pool_tokens", "Reservable KV pool tokens", ["backend"], registry=r)
        self.in_flight = Gauge(p + "in_flight", "Admitted requests in flight", ["backend"], registry=r)
        self.slots = Gauge(p + "slots", "Backend slots (-np)", ["backend"], registry=r)
        self.up = Gauge(p + "backend_up", "1 if the backend is healthy (not ejected)", ["backend"], registry=r)
        self.ttft = Histogram(p + "ttft_seconds", "Time to first token after admission: a stream's first chunk with "
                              "text, a whole answer's server prompt time (timings.prompt_ms); cron 1 for cron jobs, "
                              "cache: the prompt cache (hit, partial, miss, unknown)", ["tier", "backend", "cron", "cache"],
                              registry=r, buckets=_LAT)
        self.pin_events = Counter(p + "slot_pin_events", "Slot pins made, expired, or released early because the pool "
                                  "needed the slot", ["backend", "event"], registry=r)
        self.duration = Histogram(p + "request_seconds", "Admission to last byte", ["tier", "backend"], registry=r, buckets=_LAT)
        self.tokens = Counter(p + "tokens", "Tokens reported by the backend (timings/usage)", ["tier", "backend", "kind"], registry=r)
        self.errors = Counter(p + "upstream_errors", "Upstream failures", ["backend", "kind"], registry=r)
        self.clamped = Counter(p + "clamped", "Requests whose max_tokens was lowered", ["tier"], registry=r)
        self.reloads = Counter(p + "config_reloads", "Config reloads by result", ["result"], registry=r)
        self.server_pool = Gauge(p + "server_pool_tokens", "KV pool of the backend as llama-server has it "
                                 "(its log, or /props: a lower bound when server_pool_exact is 0)", ["backend"], registry=r)
        self.pool_exact = Gauge(p + "pool_exact", "1 if the pool admission uses is known, 0 if only a lower bound is", ["backend"],
                                registry=r)
        self.mismatch = Gauge(p + "pool_mismatch", "1: the config sets more than the server has (clamped); "
                              "-1: less (kept); 0: agrees", ["backend", "field"], registry=r)
        self.cells = Gauge(p + "kv_cells_in_use", "KV cells the backend's slots hold (GET /slots)", ["backend"],
                           registry=r)
        self.server_exact = Gauge(p + "server_pool_exact", "1 if the server's pool (server_pool_tokens) is known, 0 if "
                                  "only a lower bound is", ["backend"], registry=r)
        self.slot_ctx = Gauge(p + "server_slot_ctx_tokens", "One slot's context as llama-server has it (/props n_ctx: "
                              "the pool per sequence, capped at n_ctx_train)", ["backend"], registry=r)
        self.pool_used = Gauge(p + "kv_pool_used_ratio", "KV cells in use over the server's pool (at most this when "
                               "server_pool_exact is 0)", ["backend"], registry=r)
        self.decode_rate = Gauge(p + "decode_tokens_per_second", "Measured decode rate per stream", ["backend"],
                                 registry=r)
        self.group_reserved = Gauge(p + "group_reserved_tokens", "Tokens reserved by a tier or cron", ["group", "backend"],
                                    registry=r)
        self.group_in_flight = Gauge(p + "group_in_flight", "Requests in flight of a tier or cron", ["group", "backend"],
                                     registry=r)
        self.ledger_up = Gauge(p + "ledger_up", "1 if the admission ledger can decide (a shared store is reachable)",
                               registry=r)
        self.ledger_pending = Gauge(p + "ledger_pending_releases", "Releases not yet written to the shared store",
                                    registry=r)

        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}

    def child(self, metric: _Metric, *labels: str) -> _Metric:
        """``metric.labels(*labels)``, cached (the hot path calls this several times per request)."""
        k = (id(metric), labels)
        c = self._children.get(k)
        if c is None:
            c = self._children[k] = metric.labels(*labels)
        return cast(_Metric, c)  # the key holds id(metric): the cached child is metric's type

    def render(self, backend_texts: Mapping[str, str]) -> bytes:
        return generate_latest(self.registry) + relabel_backend_metrics(backend_texts).encode()


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?(\s.*)$")


def relabel_backend_metrics(texts: Mapping[str, str]) -> str:
    """Merge backends' Prometheus texts, adding ``backend="NAME"`` to every sample; HELP/TYPE once."""
    seen_meta: set[str] = set()
    meta: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    order: list[str] = []

    def family(name: str) -> None:
        if name not in samples:
            meta.setdefault(name, [])
            samples[name] = []
            order.append(name)

    for backend, text in texts.items():
        esc = backend.replace("\\", "\\\\").replace('"', '\\"')
        fam = ""
        for line in text.splitlines():
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    fam = parts[2]
                    family(fam)
                    if line not in seen_meta:
                        seen_meta.add(line)
                        meta[fam].append(line)
                continue
            m = _SAMPLE.match(line)
            if not m:
                continue
            name, _, labels, rest = m.groups()
            key = fam if fam and name.startswith(fam) else name
            family(key)
            samples[key].append(f'{name}{{backend="{esc}"' + (f",{labels}" if labels else "") + f"}}{rest}")
    out = [x for f in order for x in (*meta.get(f, []), *samples.get(f, []))]
    return "\n".join(out) + ("\n" if out else "")


class RequestLog:
    """One JSON object per finished request, appended to a file. Never the API key; message
    text only when ``log_content`` is set."""

    def __init__(self, path: str | None, log_content: bool = False) -> None:
        self.path: str | None = None
        self.log_content = log_content
        self._fh: TextIO | None = None
        self.reopen(path, log_content)

    def reopen(self, path: str | None, log_content: bool) -> None:
        """Write to ``path`` from now on (a reload changed it); None: no log."""
        if (path, log_content) == (self.path, self.log_content) and (self._fh is not None) == bool(path):
            return
        self.close()
        self.path, self.log_content = path, log_content
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._fh = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in close()

    def write(self, rec: dict[str, Any], body: Mapping[str, Any] | None = None) -> None:
        if self._fh is None:
            return
        rec = dict(rec)
        rec.setdefault("ts", round(time.time(), 3))
        if self.log_content and body is not None:
            rec["messages"] = body.get("messages")
            rec["prompt"] = body.get("prompt")
        try:
            self._fh.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
        except OSError as e:  # a full disk must not take the gateway down
            log.warning("request log %s: %s", self.path, e)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
