"""Benchmark: optimiser wall time, and the CPU speed prediction vs the real llama-server.

Method (optimiser): ``llamarig.plan.optimise.search.optimise`` on catalogue entries, timed R times with
time.perf_counter (first run included: catalogue JSON parsing is cached after it), each run cold:
the compute replays remembered from the previous run are forgotten first (a CLI invocation is a
fresh process); min and median wall time and the least CPU time of this process (less sensitive to
the other processes of a shared machine) reported with the number of configurations the memory +
speed models evaluated.
- seed: Qwen3.6-27B IQ4_NL + f16 mmproj, one RTX 3090, --target-ctx 105000 --target-decode 40
- 3gpu: Qwen3.6-27B Q8_0, RTX 5070 Ti + 5060 Ti 16G + 4060 Ti 16G, --target-ctx 65536
- mtp: Qwen3.8-27B UD-Q4_K_XL (MTP), one RTX 3090, --target-ctx 65536 --target-decode 45

Method (--cpu-server): a synthetic f16 llama (8 x 1024, n_ff 2816: 181 MB) served by the real
llama-server (-t 1, -c 2048, -fa on); /completion with a ~440-token prompt and 48 generated
tokens, best of 3; host bandwidth (numpy copy, one thread) and GFLOPS (numpy matmul) measured
just before; the prediction uses them in place of the catalogue defaults.

Method (--catalogue): every catalogue model at its first quant, on one RTX 3090, on one RTX 4060
Ti 16 GB (where the 27B models need layers on the CPU) and on the 3gpu case's three cards: one ``make_plan`` (-c 32768 -np 1; MTP models with --spec-type draft-mtp) and
one ``optimise`` (--target-ctx 65536, or n_ctx_train when smaller), each cold, the median of R
runs, as wall time (time.perf_counter) and this process's CPU time (time.process_time: less
sensitive to the other processes of a shared machine); the load average before and after.

Run:  .venv/bin/python benchmarks/bench_optimise.py [--repeat 20] [--cpu-server] [--catalogue]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from llamarig.catalogue.gpus import find_gpu
from llamarig.catalogue.models import (
    CatalogueModel,
    build_spec,
    catalogue_mmproj,
    find_model,
    load_models,
)
from llamarig.hardware import Hardware
from llamarig.plan.compute import replay
from llamarig.plan.config import ServerConfig, parse_server_args
from llamarig.plan.optimise.search import OptimiseResult, Targets, optimise
from llamarig.plan.planner import PlanInputs, make_plan
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
    print("| case | min | median | CPU min | runs | configurations | verdict | winner |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (args, targets) in CASES.items():
        times = []
        cpu = []
        res = None
        for _ in range(repeat):
            inp = _inputs(*args)
            forget_replays()
            t, c = time.perf_counter(), time.process_time()
            res = optimise(inp, targets)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        assert res is not None and res.best is not None
        b = res.best
        ts = ",".join(f"{x:g}" for x in b.cfg.tensor_split) if b.cfg.tensor_split else "-"
        win = (f"K {b.cfg.cache_type_k}/V {b.cfg.cache_type_v}, -ub {b.plan.n_ubatch}, -ts {ts}, "
               f"{b.decode_at_target:.0f} tok/s @{targets.depth}")
        print(f"| {name} | {min(times) * 1000:.1f} ms | {statistics.median(times) * 1000:.1f} ms | "
              f"{min(cpu) * 1000:.1f} ms | {repeat} | "
              f"{res.evaluated} | {res.verdict} | {win} |")


def forget_replays() -> None:
    """Cold start: the compute replays a previous run remembered (by the model's shape) are
    forgotten, as in a fresh `llamarig plan` process."""
    replay.forget()


def _cold(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall and CPU time of ``repeat`` cold runs."""
    wall, cpu = [], []
    for _ in range(repeat):
        forget_replays()
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def bench_catalogue(repeat: int) -> None:
    """A plan and a search per catalogue model, one and three GPUs (--catalogue)."""
    setups = {"1 GPU": ["rtx3090"], "1 x 16 GB": ["rtx4060ti16"], "3 GPUs": ["rtx5070ti", "rtx5060ti16", "rtx4060ti16"]}
    print(f"load average before: {os.getloadavg()[0]:.1f}; medians of {repeat} cold runs")
    print("| model | arch | GPUs | plan wall / CPU | optimise wall / CPU | configurations |")
    print("|---|---|---|---|---|---|")
    for mid in load_models():
        m, q = find_model(mid)
        spec = build_spec(m, q)
        mtp = ["--spec-type", "draft-mtp"] if spec.nextn_layers else []
        for label, gpus in setups.items():
            hw = Hardware(tuple(find_gpu(g) for g in gpus), ram_bytes=64 * GiB)
            cfg = parse_server_args(["-c", "32768", "-np", "1", *mtp])
            targets = Targets(ctx=min(65536, spec.n_ctx_train or 4096))
            res: list[OptimiseResult] = []

            def one_plan(m: CatalogueModel = m, q: str = q, hw: Hardware = hw, cfg: ServerConfig = cfg) -> None:
                make_plan(PlanInputs(build_spec(m, q), cfg, hw))

            def one_search(m: CatalogueModel = m, q: str = q, hw: Hardware = hw, mtp: list[str] = mtp,
                           targets: Targets = targets, res: list[OptimiseResult] = res) -> None:
                res.append(optimise(PlanInputs(build_spec(m, q), parse_server_args(mtp), hw), targets))

            pw, pc = _cold(one_plan, repeat)
            ow, oc = _cold(one_search, repeat)
            print(f"| {mid}:{q} | {spec.architecture} | {label} | {pw * 1000:.0f} / {pc * 1000:.0f} ms | "
                  f"{ow * 1000:.0f} / {oc * 1000:.0f} ms | {res[-1].evaluated} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def bench_cpu_server(repeat: int = 3) -> None:
    from llamarig.binary import find_binary
    from llamarig.gguf import load_spec
    from llamarig.plan.calibration.files import load_calibration
    from llamarig.plan.speed.host_probes import measure_host_bandwidth, measure_host_gflops
    from llamarig.plan.speed.speed_model import speed_report
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
    ap.add_argument("--catalogue", action="store_true", help="plan and optimise every catalogue model, cold")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    if a.catalogue:
        bench_catalogue(a.repeat)
        return
    bench_optimiser(a.repeat)
    if a.cpu_server:
        bench_cpu_server()


if __name__ == "__main__":
    main()
