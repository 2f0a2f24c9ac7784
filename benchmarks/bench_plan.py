"""Benchmark: `llamarig plan` wall time and memory-model throughput.

Method:
1. CLI: run the README command (`llamarig plan qwen3.6-27b:iq4_nl --mmproj f16 --gpu rtx3090
   -c 105000`) as a fresh process R times (subprocess, output discarded), report min / median
   wall time. This includes Python start-up and imports.
2. In-process plan on the 27B catalogue entry and on the large synthetic header
   (llamarig.testing.bigheader: a Qwen3.6-27B-shaped GGUF with the full 851-tensor table):
   time `make_plan` (header already parsed) R times, min / median.
3. Throughput: evaluate `make_plan` over a grid of configurations (ctx x KV types x slots x
   unified) for the catalogue 27B and report configurations per second.

Run:  .venv/bin/python benchmarks/bench_plan.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamarig.catalogue.gpus import parse_gpu_arg
from llamarig.catalogue.models import build_spec, catalogue_mmproj, find_model
from llamarig.gguf import load_spec
from llamarig.hardware.types import Hardware
from llamarig.plan.config import parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.testing.bigheader import write_qwen36_like

README = ["plan", "qwen3.6-27b:iq4_nl", "--mmproj", "f16", "--gpu", "rtx3090", "-c", "105000"]


def timed(fn, repeat: int) -> tuple[float, float]:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    exe = [sys.executable, "-m", "llamarig.cli.main"]
    cli = timed(lambda: subprocess.run(exe + README, stdout=subprocess.DEVNULL, check=False), max(5, args.repeat // 2))
    print(f"CLI README command: min {cli[0] * 1000:.0f} ms, median {cli[1] * 1000:.0f} ms")
    imp = timed(lambda: subprocess.run([sys.executable, "-c", "import llamarig.gguf.ggml_types"], check=True), 5)
    print(f"  of which `import llamarig.gguf.ggml_types` (literal table, no gguf import): min {imp[0] * 1000:.0f} ms")

    m, q = find_model("qwen3.6-27b:iq4_nl")
    spec = build_spec(m, q)
    hw = Hardware((parse_gpu_arg("rtx3090"),), 64 << 30)
    cfg = parse_server_args(["-c", "105000", "-np", "1", "-ctk", "q4_0", "-ctv", "q4_0"])
    mm = catalogue_mmproj(m, "f16")
    t = timed(lambda: make_plan(PlanInputs(spec, cfg, hw, mm)), args.repeat)
    print(f"make_plan, catalogue 27B: min {t[0] * 1e3:.2f} ms, median {t[1] * 1e3:.2f} ms")

    with tempfile.TemporaryDirectory() as d:
        path = write_qwen36_like(Path(d) / "big.gguf")
        big = load_spec(path)
        t = timed(lambda: make_plan(PlanInputs(big, cfg, hw)), args.repeat)
        print(f"make_plan, synthetic 27B header ({len(big.tensors)} tensors): min {t[0] * 1e3:.2f} ms, median {t[1] * 1e3:.2f} ms")
        os.unlink(path)

    grid = list(itertools.product([8192, 32768, 65536, 105000, 131072, 262144],
                                  ["f16", "q8_0", "q4_0"], ["1", "2", "4"], [True, False]))
    cfgs = [parse_server_args(["-c", str(c), "-ctk", k, "-ctv", k, "-np", n] + (["-kvu"] if u else []))
            for c, k, n, u in grid]
    t0 = time.perf_counter()
    rounds = 5
    for _ in range(rounds):
        for c in cfgs:
            make_plan(PlanInputs(spec, c, hw, mm))
    dt = time.perf_counter() - t0
    print(f"throughput: {rounds * len(cfgs) / dt:.0f} configurations/s ({len(cfgs)} configs x {rounds})")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
