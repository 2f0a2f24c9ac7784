"""What ``llamarig bench`` returns: a typed :class:`BenchReport` whose ``to_json()`` is the
``--json`` document (``"kind": "bench"``, llamarig/data/bench.schema.json, docs/bench.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llamarig import __version__
from llamarig.bench.records import Figure, Json

if TYPE_CHECKING:  # annotations only: the HTTP client (the bench extra) stays off `llamarig logs`
    from llamarig.bench.client import RequestSample
    from llamarig.bench.monitor import InterferenceEvent

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Target:
    """The server measured: its URL, whether it is a llama-server, its build, model, slot context
    and slots (from ``/props``, kept whole in ``props``), and how ``/health`` answered."""

    url: str
    is_llama_server: bool
    build_info: str | None
    model: str | None
    n_ctx_slot: int | None
    total_slots: int | None
    props: Mapping[str, Json]
    health: Mapping[str, Json]

    def to_json(self) -> dict[str, Json]:
        return {"url": self.url, "is_llama_server": self.is_llama_server, "build_info": self.build_info,
                "model": self.model, "n_ctx_slot": self.n_ctx_slot, "total_slots": self.total_slots,
                "props": dict(self.props), "health": dict(self.health)}


@dataclass(frozen=True)
class Scenario:
    """One scenario's outcome: its figures, errors, notes (skips, rejected samples: Messages),
    plot series and when it ran (seconds since the run began)."""

    name: str
    figures: tuple[Figure, ...]
    errors: tuple[str, ...]
    notes: tuple[str, ...]
    series: Mapping[str, Json]
    t_start: float
    t_end: float

    def to_json(self) -> dict[str, Json]:
        return {"name": self.name, "errors": list(self.errors), "notes": list(self.notes), "series": dict(self.series),
                "t_start_s": round(self.t_start, 3), "t_end_s": round(self.t_end, 3)}


@dataclass(frozen=True)
class Interference:
    """What the run saw of other work on the server: which endpoints answered, what was missing,
    the slots busy before it began, the /slots polls, the events, and the /metrics reconciliation."""

    slots_endpoint: bool
    metrics_endpoint: bool
    missing: tuple[str, ...]
    busy_before_start: tuple[int, ...]
    n_polls: int
    poll_failures: int
    last_poll_error: str
    poll_interval_s: float
    max_busy_slots: int
    max_requests_deferred: float
    events: tuple[InterferenceEvent, ...]
    busy_series: tuple[tuple[float, int, int], ...]
    reconciliation: Mapping[str, Json]

    def to_json(self) -> dict[str, Json]:
        return {"slots_endpoint": self.slots_endpoint, "metrics_endpoint": self.metrics_endpoint,
                "missing": list(self.missing), "busy_before_start": list(self.busy_before_start),
                "n_polls": self.n_polls, "poll_failures": self.poll_failures, "last_poll_error": self.last_poll_error,
                "poll_interval_s": self.poll_interval_s, "max_busy_slots": self.max_busy_slots,
                "max_requests_deferred": self.max_requests_deferred, "events": [e.to_json() for e in self.events],
                "busy_series": [list(b) for b in self.busy_series], "reconciliation": dict(self.reconciliation)}


@dataclass(frozen=True)
class BenchReport:
    """One ``llamarig bench`` run: provenance, the target and client, the options, every figure
    (each with its method), the scenarios, every request, interference, GPU telemetry, errors."""

    run_id: str
    started_at: str
    finished_at: str
    target: Target
    client: Mapping[str, Json]
    config: Mapping[str, Json]
    figures: tuple[Figure, ...]
    scenarios: tuple[Scenario, ...]
    requests: tuple[RequestSample, ...]
    interference: Interference
    gpu: Mapping[str, Json]
    errors: tuple[str, ...] = ()
    aborted: str = ""

    def figure(self, name: str) -> Figure | None:
        return next((f for f in self.figures if f.name == name), None)

    def to_json(self) -> dict[str, Json]:
        return {"schema_version": SCHEMA_VERSION, "kind": "bench", "tool": f"llamarig {__version__}",
                "run_id": self.run_id, "started_at": self.started_at, "finished_at": self.finished_at,
                "target": self.target.to_json(), "client": dict(self.client), "config": dict(self.config),
                "figures": [f.to_json() for f in self.figures], "scenarios": [s.to_json() for s in self.scenarios],
                "requests": [s.to_json() for s in self.requests], "interference": self.interference.to_json(),
                "gpu": dict(self.gpu), "errors": list(self.errors), "aborted": self.aborted}
