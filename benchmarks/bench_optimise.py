"""Benchmark: optimiser wall time, and the CPU speed prediction vs the real llama-server.

Method (optimiser): ``llamarig.plan.optimise.optimise`` on catalogue entries, timed R times with
time.perf_counter (first run included: catalogue JSON parsing is cached after it); min and median
reported with the number of configurations the memory + speed models evaluated.
- seed: Qwen3.6-27B IQ4_NL + f16 mmproj, one RTX 3090, --target-ctx 105000 --target-decode 40
- 3gpu: Qwen3.6-27B Q8_0, RTX 5070 Ti + 5060 Ti 16G + 4060 Ti 16G, --target-ctx 65536
- mtp: Qwen3.8-27B UD-Q4_K_XL (MTP), one RTX 3090, --target-ctx 65536 --target-decode 45

Method (--cpu-server): a synthetic f16 llama (8 x 1024, n_ff 2816: 181 MB) served by the real
llama-server (-t 1, -c 2048, -fa on); /completion with a ~440-token prompt and 48 generated
tokens, best of 3; host bandwidth (numpy copy, one thread) and GFLOPS (numpy matmul) measured
just before; the prediction uses them in place of the catalogue defaults.

Run:  .venv/bin/python benchmarks/bench_optimise.py [--repeat 20] [--cpu-server]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from llamarig.catalogue.gpus import find_gpu
from llamarig.catalogue.models import build_spec, catalogue_mmproj, find_model
from llamarig.hardware import Hardware
from llamarig.plan.config import ServerConfig, parse_server_args
from llamarig.plan.optimise import Targets, optimise
from llamarig.plan.planner import PlanInputs
from llamarig.units import GiB


def _inputs(model: str, gpus: list[str], mmproj: str | None) -> PlanInputs:
    m, q = find_model(model)
    mm = catalogue_mmproj(m, mmproj) if mmproj else None
    hw = Hardware(tuple(find_gpu(g) for g in gpus), ram_bytes=64 * GiB)
    return PlanInputs(build_spec(m, q), ServerConfig(), hw, mm)


CASES = {
    "seed": (("qwen3.6-27b:iq4_nl", ["rtx3090"], "f16"), Targets(ctx=105000, decode_tok_s=40, vision=True)),
    "3gpu": (("qwen3.6-27b:q8_0", ["rtx5070ti", "rtx5060ti16", "rtx4060ti16"], None), Targets(ctx=65536)),
    "mtp": (("qwen3.8-27b:ud-q4_k_xl", ["rtx3090"], None), Targets(ctx=65536, decode_tok_s=45)),
}


def bench_optimiser(repeat: int) -> None:
    print("| case | min | median | runs | configurations | verdict | winner |")
    print("|---|---|---|---|---|---|---|")
    for name, (args, targets) in CASES.items():
        times = []
        res = None
        for _ in range(repeat):
            inp = _inputs(*args)
            t = time.perf_counter()
            res = optimise(inp, targets)
            times.append(time.perf_counter() - t)
        assert res is not None and res.best is not None
        b = res.best
        ts = ",".join(f"{x:g}" for x in b.cfg.tensor_split) if b.cfg.tensor_split else "-"
        win = (f"K {b.cfg.cache_type_k}/V {b.cfg.cache_type_v}, -ub {b.plan.n_ubatch}, -ts {ts}, "
               f"{b.decode_at_target:.0f} tok/s @{targets.depth}")
        print(f"| {name} | {min(times) * 1000:.1f} ms | {statistics.median(times) * 1000:.1f} ms | {repeat} | "
              f"{res.evaluated} | {res.verdict} | {win} |")


def bench_cpu_server(repeat: int = 3) -> None:
    from llamarig.binary import find_binary
    from llamarig.gguf import load_spec
    from llamarig.plan.calibration_files import load_calibration
    from llamarig.plan.host_probes import measure_host_bandwidth, measure_host_gflops
    from llamarig.plan.speed import speed_report
    from llamarig.testing.server import start_server
    from llamarig.testing.synth import write_model

    tmp = Path(tempfile.mkdtemp(prefix="llamarig-bench-speed-"))
    path = write_model(tmp / "cpu-llama.gguf", "llama", n_layer=8, n_embd=1024, n_head=16, n_head_kv=4,
                       head_dim=64, n_ff=2816, n_ctx_train=4096)
    spec = load_spec(path)
    args = ["-c", "2048", "-np", "1", "-fa", "on", "-ub", "512", "--no-warmup"]
    bw = measure_host_bandwidth(128)
    gf = measure_host_gflops(512, repeats=7, threads=1)
    srv = start_server(find_binary("llama-server", None), path, args, log_dir=tmp, threads=1)
    dec, pp, n_prompt = 0.0, 0.0, 0
    try:
        for i in range(repeat):
            r = srv.post("/completion", {"prompt": f"{i} " + "hello world " * 40, "n_predict": 48,
                                         "cache_prompt": False, "temperature": 0, "ignore_eos": True})
            t = r["timings"]
            dec = max(dec, t["predicted_per_second"])
            if t["prompt_n"] > 100:
                pp, n_prompt = max(pp, t["prompt_per_second"]), t["prompt_n"]
    finally:
        srv.stop()
    cal = replace(load_calibration(), host_bandwidth_gbs=bw, host_gflops=gf)
    rep = speed_report(spec, parse_server_args(args), Hardware(()), cal=cal, prompt_tokens=n_prompt,
                       depths=[n_prompt])
    print(f"load average {os.getloadavg()[0]:.1f}; host {bw:.1f} GB/s (numpy copy, 1 thread), {gf:.0f} GFLOPS (numpy matmul, 1 thread)")
    print(f"weights {spec.weights_bytes / 1e6:.0f} MB; decode predicted {rep.by_depth[0].decode_tok_s:.1f} "
          f"(limit {rep.by_depth[0].limit_tok_s:.1f}) measured {dec:.1f} tok/s; prefill ({n_prompt} tokens) "
          f"predicted {rep.prefill.tok_s:.0f} measured {pp:.0f} tok/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cpu-server", action="store_true")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    bench_optimiser(a.repeat)
    if a.cpu_server:
        bench_cpu_server()


if __name__ == "__main__":
    main()
