"""The Grafana dashboard (docs/grafana/llamarig.json) against a real Prometheus (Debian's
``prometheus``) scraping a real gateway in front of the real llama-server (build 11434) under
traffic: every panel's every query returns data through Prometheus's HTTP API. The GPU panels need
NVML: without it they must return nothing (never a made-up figure). Waits are bounded; every
process is stopped by pid."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from tests.top.helpers import decoding_tasks, get_json, stop_pid, wait_for

from llamarig.testing.server import free_port

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "llamarig.json"
PROMETHEUS = shutil.which("prometheus")


def targets() -> list[tuple[str, str, str | None]]:
    """(panel title, query, what it needs) of every target of the dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"], p.get("llamarig", {}).get("needs")) for p in dash["panels"] for t in p["targets"]]


def test_the_dashboard_names_llama_cpp_and_llamarig_metrics() -> None:
    exprs = " ".join(e for _, e, _ in targets())
    for name in ("llamacpp:tokens_predicted_total", "llamacpp:prompt_tokens_total", "llamacpp:requests_processing",
                 "llamacpp:requests_deferred", "llamacpp:n_busy_slots_per_decode",
                 "llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:spec_decode_num_draft_tokens_total",
                 "llamarig_gateway_kv_pool_used_ratio", "llamarig_gateway_reserved_tokens", "llamarig_gpu_memory_used_bytes",
                 "llamarig_alerts_firing"):
        assert name in exprs, name


def query(prom: str, expr: str) -> list[Any]:
    doc = get_json(f"{prom}/api/v1/query?query={urllib.parse.quote(expr)}", timeout=10)
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def test_every_panel_returns_data(np2: Any, long_request: Any, web_gateway: Any, tmp_path: Path) -> None:
    if PROMETHEUS is None:
        pytest.skip("prometheus not installed (Debian: apt-get install -y prometheus)")
    gw = web_gateway(np2.url)
    long_request(gw, 30000)
    wait_for("a slot decoding", lambda: len(decoding_tasks(np2.url)) == 1)
    gport = gw.rsplit(":", 1)[1]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                   f"  - job_name: gateway\n    static_configs:\n      - targets: ['127.0.0.1:{gport}']\n")
    port = free_port()
    prom = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    p = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    log.close()
    try:
        wait_for("prometheus scraped the gateway 3 times",
                 lambda: query(prom, 'count_over_time(up{job="gateway"}[1m]) >= 3') and query(prom, 'up{job="gateway"} == 1'),
                 limit_s=90)
        gpu = bool(query(prom, "llamarig_gpu_power_watts"))
        missing = []
        for title, expr, needs in targets():
            if needs == "nvml" and not gpu:
                assert not query(prom, expr), (title, expr)  # no NVML here: nothing, not a guess
                continue
            deadline = time.monotonic() + 30
            while not query(prom, expr) and time.monotonic() < deadline:
                time.sleep(0.5)
            if not query(prom, expr):
                missing.append((title, expr))
        assert not missing, missing
    finally:
        stop_pid(p)
