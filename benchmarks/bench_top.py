"""What one refresh of `llamarig top` costs (run on demand, not a test).

Against a real llama-server (the pinned build, $LLAMARIG_SERVER_BIN; a synthetic 2-layer llama,
`-c 131072 -np 2 --metrics -t 2`) with one long request decoding, N refreshes back to back:
for each, the wall time of the round of GETs (`Collector.snapshot`: /health, /slots, /metrics),
and top's own CPU (`time.process_time`) for the round plus drawing the full screen at 80x30
(rich, the interactive path minus the terminal write). A refresh is 3 GETs (/props only on
first contact).

Usage: .venv/bin/python benchmarks/bench_top.py [--refreshes 100]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from rich.console import Console

from llamarig.cli.top_view import ViewState, full_screen
from llamarig.launch.server import start_server
from llamarig.testing.synth import write_model
from llamarig.top.collect import Collector

LONG = """
import json, sys, urllib.request
body = json.dumps({"prompt": "a long story", "n_predict": 100000, "ignore_eos": True, "stream": True}).encode()
req = urllib.request.Request(sys.argv[1] + "/completion", data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=3600) as r:
    for _ in r:
        pass
"""


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1]


async def measure(url: str, n: int) -> dict[str, float]:
    console = Console(width=80, height=30, file=io.StringIO(), force_terminal=True)
    walls, cpus = [], []
    async with Collector(url, gpu=False) as c:
        await c.snapshot()  # first contact (reads /props too)
        for _ in range(n):
            w0, c0 = time.perf_counter(), time.process_time()
            snap = await c.snapshot()
            console.print(full_screen(snap, ViewState()))
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
    return {"wall_ms_median": 1000 * statistics.median(walls), "wall_ms_p90": 1000 * pct(walls, 90),
            "cpu_ms_median": 1000 * statistics.median(cpus), "cpu_ms_p90": 1000 * pct(cpus, 90)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--refreshes", type=int, default=100)
    a = ap.parse_args()
    binary = os.environ.get("LLAMARIG_SERVER_BIN")
    if not binary:
        sys.exit("set LLAMARIG_SERVER_BIN to the pinned build's llama-server")
    tmp = Path(tempfile.mkdtemp(prefix="bench-top-"))
    model = write_model(tmp / "long.gguf", "llama", n_ctx_train=131072)
    srv = start_server(binary, model, ["-c", "131072", "-np", "2", "--metrics"], log_dir=tmp)
    client = subprocess.Popen([sys.executable, "-c", LONG, srv.url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not any(s.get("is_processing") for s in json.loads(urllib.request.urlopen(srv.url + "/slots").read())):
            time.sleep(0.05)
        out = asyncio.run(measure(srv.url, a.refreshes))
        out["refreshes"] = a.refreshes
        out["load_average_1m"] = os.getloadavg()[0]
        print(json.dumps({k: round(v, 2) for k, v in out.items()}))
    finally:
        client.terminate()
        client.wait(timeout=30)
        srv.stop()


if __name__ == "__main__":
    main()
