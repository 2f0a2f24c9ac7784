"""CPU decode and prefill: the speed model (uncalibrated, with the host measured, after tune's
calibration) against `llamarig bench` on the real llama-server (benchmarks/RESULTS.md, "CPU speed
model").

For each synthetic model and thread count:

1. **calibrate** as `llamarig tune` does: one tune measurement of the configuration
   (llamarig.tune.measure.ServerMeasure: its own server start, one warm-up, ``--tune-runs`` requests
   of a ``--tune-depth``-token prompt, llama-server's timings), tune's deeper decodes (a depth
   ladder in one more server start: llamarig.tune.calibrate.calibration_ladder,
   llamarig.tune.measure.DepthLadder, CALIBRATION_DEEP_RUNS requests per rung), then
   llamarig.tune.calibrate.fit_calibration on the fastest request of each, with the host
   bandwidth measured by llamarig.plan.calibration.constants.measure_host_bandwidth (what tune writes);
2. **bench**: a second server start with the same flags, ``llamarig bench -s prefill,depth``
   (llamarig.bench.runner.run_bench) at several prompt lengths and depths;
3. **plan**: llamarig.plan.speed.speed_model.speed_report for each bench point, with (a) the built-in
   calibration (what `plan` says on an unknown machine), (b) the built-in calibration with the
   measured host bandwidth (`plan --detect`), (c) the calibration of step 1.

Run: ``.venv/bin/python benchmarks/bench_cpu_speed.py [--json out.json] [--quick]`` with
LLAMARIG_SERVER_BIN set (scripts/get-llama-server --recipe portable). Needs no GPU. Prints a
Markdown table (error = planned / measured - 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from llamarig.app.tune import TuneSettings
from llamarig.bench.runner import BenchConfig, run_bench
from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.launch.server import start_server
from llamarig.plan.calibration.constants import Calibration, builtin, calibration_from_json
from llamarig.plan.config import parse_server_args
from llamarig.plan.speed.host_probes import measure_host_bandwidth
from llamarig.plan.speed.speed_model import speed_report
from llamarig.testing.synth import write_model
from llamarig.tune.calibrate import (
    CALIBRATION_DEEP_RUNS,
    CALIBRATION_DEEP_SECONDS,
    calibration_ladder,
    fit_calibration,
)
from llamarig.tune.measure import DepthLadder, ServerMeasure
from llamarig.tune.search import Candidate

#: synthetic models: (name, architecture, shape)
MODELS: list[tuple[str, str, dict[str, Any]]] = [
    ("llama-f16-182MB", "llama", dict(n_layer=8, n_embd=1024, n_head=16, n_head_kv=4, head_dim=64, n_ff=2816,
                                      n_ctx_train=8192)),
    ("llama-q8_0-97MB", "llama", dict(n_layer=8, n_embd=1024, n_head=16, n_head_kv=4, head_dim=64, n_ff=2816,
                                      n_ctx_train=8192, weight_type="q8_0")),
    ("llama-f16-31MB", "llama", dict(n_layer=8, n_embd=512, n_head=8, n_head_kv=2, head_dim=64, n_ff=1536,
                                     n_ctx_train=4096)),
    ("llama-f16-6MB", "llama", dict(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512,
                                    n_ctx_train=8192)),
    ("qwen3moe-f16", "qwen3moe", dict(n_layer=4, n_embd=512, n_head=8, n_head_kv=2, head_dim=64, n_ff=1024,
                                      n_expert=16, n_expert_used=2, n_ff_expert=1024, n_ctx_train=8192)),
]


def plan_points(spec: Any, args: list[str], cal: Calibration, prefill: dict[int, float],
                depth: dict[int, float], n_predict: int) -> dict[str, dict[int, float]]:
    cfg = parse_server_args(args)
    hw = Hardware(())
    out: dict[str, dict[int, float]] = {"prefill": {}, "decode": {}}
    for n, _m in prefill.items():
        out["prefill"][n] = speed_report(spec, cfg, hw, cal=cal, prompt_tokens=n, depths=[0]).prefill.tok_s
    for d, _m in depth.items():
        out["decode"][d] = speed_report(spec, cfg, hw, cal=cal, depths=[d + n_predict // 2]).by_depth[0].decode_tok_s
    return out


def figure(doc: dict[str, Any], name: str) -> float | None:
    for f in doc.get("figures", []):
        if f["name"] == name:
            return float(f["value"])
    return None


def run_case(binary: str, name: str, arch: str, shape: dict[str, Any], threads: int, a: argparse.Namespace,
             tmp: Path) -> dict[str, Any]:
    path = tmp / f"{name}.gguf"
    if not path.exists():
        write_model(path, arch, **shape)
    spec = load_spec(path)
    args = ["-c", str(a.ctx), "-np", "1", "-fa", "on", "-ub", str(a.ub), "-t", str(threads)]
    # 1. calibrate as tune does
    host_bw = measure_host_bandwidth()
    m = ServerMeasure(binary, ["-m", str(path), *args], objective="weighted", n_predict=a.n_predict, depth=a.tune_depth,
                      log_dir=str(tmp))(Candidate(()), a.tune_runs)
    if m.error:
        raise SystemExit(f"{name}: tune measurement failed: {m.error}")
    cfg = parse_server_args(args)
    d_tune = int(m.metrics["prompt_tokens"]) + a.n_predict // 2
    # tune's deep decode measurements, a depth ladder in one server start (llamarig.app.tune._finish)
    ladder = calibration_ladder(a.ctx, a.tune_depth, a.n_predict, m.metrics["prefill_tok_s"])
    rungs, err = DepthLadder(binary, ["-m", str(path), *args], ladder, CALIBRATION_DEEP_RUNS, a.n_predict,
                             budget_s=4 * CALIBRATION_DEEP_SECONDS, log_dir=str(tmp))()
    if err:
        raise SystemExit(f"{name}: deep tune measurement failed: {err}")
    deep = [{"metrics": x.metrics, "depth": int(x.metrics["depth_asked"]) + a.n_predict // 2} for x in rungs]
    tune = {"metrics": m.metrics, "depth": d_tune, "ladder": deep}
    data = calibrate(spec, cfg, tune, host_bw)
    cal_tuned = calibration_from_json(data, "tune calibration")
    # 2. bench (--bench-twice: again, from a fresh server start: how far the machine agrees with itself)
    benches = [bench_once(binary, path, args, a, tmp) for _ in range(2 if a.bench_twice else 1)]
    host_bw2 = measure_host_bandwidth()
    prefill, depth = benches[0]
    base = builtin()
    plans = {
        "builtin": plan_points(spec, args, base, prefill, depth, a.n_predict),
        "detect": plan_points(spec, args, replace(base, host_bandwidth_gbs=host_bw), prefill, depth, a.n_predict),
        "tuned": plan_points(spec, args, cal_tuned, prefill, depth, a.n_predict),
    }
    return {"model": name, "arch": arch, "bytes": spec.weights_bytes, "threads": threads, "args": args,
            "host_bw_gbs": [round(host_bw, 2), round(host_bw2, 2)], "load": os.getloadavg(),
            "tune": {**tune, "calibration": data},
            "measured": {"prefill": prefill, "decode": depth}, "planned": plans,
            **({"measured_again": {"prefill": benches[1][0], "decode": benches[1][1]}} if len(benches) > 1 else {})}


def bench_once(binary: str, path: Path, args: list[str], a: argparse.Namespace,
               tmp: Path) -> tuple[dict[int, float], dict[int, float]]:
    """One server start and `llamarig bench` on it: (prefill by prompt length, decode by depth), medians."""
    srv = start_server(binary, path, args, log_dir=tmp, threads=None)
    try:
        doc = run_bench(BenchConfig(url=srv.url, scenarios=("prefill", "depth"), prefill_lengths=tuple(a.lengths),
                                    depths=tuple(a.depths), repeats=a.runs, n_predict=a.n_predict, warmup=1,
                                    endpoint="completion")).to_json()
    finally:
        srv.stop()

    def _k(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)

    prefill = {n: v for n in a.lengths if (v := figure(doc, f"prefill_tok_s_{_k(n)}_median")) is not None}
    depth = {d: v for d in a.depths if (v := figure(doc, f"decode_tok_s_at_depth_{_k(d)}_median")) is not None}
    return prefill, depth


def calibrate(spec: Any, cfg: Any, tune: dict[str, Any], host_bw: float) -> dict[str, Any]:
    """The calibration tune writes from its measurements (llamarig.app.tune._finish): the fastest
    request of each (``*_best``; a recording without them: the medians). Recordings of tune's
    earlier one-deep-depth calibration (``deep``) are fitted with that one depth."""
    tm = tune["metrics"]
    rungs = tune.get("ladder") or ([tune["deep"]] if tune.get("deep") else [])
    deep = [(r["depth"], r["metrics"].get("decode_tok_s_best") or r["metrics"]["decode_tok_s"]) for r in rungs]
    deep_prefill = [(int(m["prefill_start"]), int(m["prefill_n"]), m["prefill_tok_s"])
                    for m in (r["metrics"] for r in tune.get("ladder") or []) if m.get("prefill_tok_s")]
    data, _pred = fit_calibration(
        spec, cfg, Hardware(()), tm.get("decode_tok_s_best") or tm["decode_tok_s"], host_bandwidth_gbs=host_bw,
        depth=tune["depth"], prefill_tok_s=tm.get("prefill_tok_s_best") or tm["prefill_tok_s"],
        prompt_tokens=int(tm["prompt_tokens"]), deep=deep, deep_prefill=deep_prefill)
    return data


def replan(rows: list[dict[str, Any]], tmp: Path) -> None:
    """Recompute every row's plans from its recorded measurements (the tune metrics and host
    bandwidth included): the speed model's constants can change without measuring again."""
    for r in rows:
        shape = next(m for m in MODELS if m[0] == r["model"])
        path = tmp / f"{r['model']}.gguf"
        if not path.exists():
            write_model(path, shape[1], **shape[2])
        spec = load_spec(path)
        cfg = parse_server_args(r["args"])
        tm = r["tune"]["metrics"]
        n_predict = r["tune"]["depth"] - int(tm["prompt_tokens"])
        data = calibrate(spec, cfg, r["tune"], r["host_bw_gbs"][0])
        r["tune"]["calibration"] = data
        meas = {k: {int(x): v for x, v in r["measured"][k].items()} for k in ("prefill", "decode")}
        r["measured"] = meas
        if "measured_again" in r:
            r["measured_again"] = {k: {int(x): v for x, v in r["measured_again"][k].items()} for k in ("prefill", "decode")}
        base = builtin()
        r["planned"] = {
            "builtin": plan_points(spec, r["args"], base, meas["prefill"], meas["decode"], n_predict * 2),
            "detect": plan_points(spec, r["args"], replace(base, host_bandwidth_gbs=r["host_bw_gbs"][0]),
                                  meas["prefill"], meas["decode"], n_predict * 2),
            "tuned": plan_points(spec, r["args"], calibration_from_json(data, "tune"), meas["prefill"],
                                 meas["decode"], n_predict * 2),
        }


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| model | -t | kind | point | measured tok/s | built-in | err | --detect | err | after tune | err |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        for kind, label in (("decode", "depth"), ("prefill", "prompt")):
            for k, meas in r["measured"][kind].items():
                cells = []
                for p in ("builtin", "detect", "tuned"):
                    v = r["planned"][p][kind][k]
                    cells += [f"{v:.1f}", f"{(v / meas - 1) * 100:+.0f} %"]
                out.append(f"| {r['model']} | {r['threads']} | {kind} | {label} {k} | {meas:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=[m[0] for m in MODELS])
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048])
    ap.add_argument("--depths", type=int, nargs="+", default=[0, 1024, 3072])
    ap.add_argument("--tune-depth", type=int, default=256)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3, help="bench repeats per point (medians)")
    ap.add_argument("--tune-runs", type=int, default=TuneSettings.max_runs,
                    help="requests of the tune measurement (tune's winner gets --max-runs, default %(default)s)")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--ub", type=int, default=512)
    ap.add_argument("--bench-twice", action="store_true",
                    help="bench each model again from a fresh server start (the machine's own agreement)")
    ap.add_argument("--replan", type=Path, nargs="+",
                    help="recompute the plans of --json files (no measurement); several: one summary of all")
    a = ap.parse_args()
    if a.replan:
        rows = [r for f in a.replan for r in json.loads(f.read_text())]
        with tempfile.TemporaryDirectory(prefix="bench-cpu-speed-") as td:
            replan(rows, Path(td))
        summary(rows)
        return 0
    binary = os.environ.get("LLAMARIG_SERVER_BIN")
    if not binary:
        print("set LLAMARIG_SERVER_BIN (scripts/get-llama-server --recipe portable)", file=sys.stderr)
        return 2
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-cpu-speed-") as td:
        # every model is written (and synced) before the first measurement: a model file written
        # just before a server maps it is still being flushed to disk while it is measured
        for name, arch, shape in MODELS:
            if name in a.models:
                write_model(Path(td) / f"{name}.gguf", arch, **shape)
        os.sync()
        for name, arch, shape in MODELS:
            if name not in a.models:
                continue
            for t in a.threads:
                r = run_case(binary, name, arch, shape, t, a, Path(td))
                rows.append(r)
                print(f"{name} -t {t}: done ({time.time() - t0:.0f} s, load {r['load'][0]:.1f})", file=sys.stderr)
                if a.json:
                    a.json.write_text(json.dumps(rows, indent=1, default=str))
    summary(rows)
    return 0


def summary(rows: list[dict[str, Any]]) -> None:
    print(table(rows))
    errs = {p: [abs(r["planned"][p][k][x] / v - 1) for r in rows for k in ("decode", "prefill")
                for x, v in r["measured"][k].items()] for p in ("builtin", "detect", "tuned")}
    for p, e in errs.items():
        if e:
            print(f"{p}: median |error| {statistics.median(e) * 100:.0f} %, max {max(e) * 100:.0f} %, "
                  f"{sum(x <= 0.15 for x in e)} of {len(e)} within 15 %")
    # the second bench from a fresh server start against the first: what no model can beat
    again = [abs(r["measured_again"][k][x] / v - 1) for r in rows if "measured_again" in r for k in ("decode", "prefill")
             for x, v in r["measured"][k].items() if x in r["measured_again"][k]]
    if again:
        print(f"bench again (a fresh server start) vs bench: median |difference| {statistics.median(again) * 100:.0f} %, "
              f"max {max(again) * 100:.0f} %, {sum(x <= 0.15 for x in again)} of {len(again)} within 15 %")
    # measured / planned per kind: what data/speed_calibration.json "host_uncalibrated" records
    for p in ("builtin", "detect", "tuned"):
        parts = []
        for k in ("decode", "prefill"):
            q = sorted(v / r["planned"][p][k][x] for r in rows for x, v in r["measured"][k].items())
            if q:
                parts.append(f"{k} x{q[0]:.2f} - x{statistics.median(q):.2f} - x{q[-1]:.2f}")
        print(f"{p}: measured / planned, min - median - max: " + ", ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
