"""Tuned configuration vs llama-server's defaults vs seed 000's chatbot flags (the part that is
valid on this build and machine), decode and prefill, against the memory-bandwidth roofline.

Run: .venv/bin/python benchmarks/bench_tune.py [--quick] [--json out.json]
     .venv/bin/python benchmarks/bench_tune.py --exhaustive [--json out.json]

``--exhaustive``: tune against the measured best. Every candidate of a grid that matters on the
CPU rig (threads, -ub, flash attention, the K type, -np, MTP on/off) on a synthetic qwen35 with
one MTP (nextn) layer is measured with the same method as tune (llamarig.tune.measure.
ServerMeasure, the same budget as tune's last rung), the best of them repeated to see the
repeat-to-repeat spread; then ``llamarig tune --try ...`` runs on the same space, once for decode
and once for prefill, and so does llamarig.tune.search.coordinate_descent with the same
measurement; each pick is looked up in the exhaustive table (benchmarks/RESULTS.md "tune against
the measured best"). ``--reuse JSON`` takes the exhaustive table and tune's runs from an earlier
``--json`` and runs only what it lacks.

Model: a synthetic qwen35 (hybrid gated-delta-net + attention, like Qwen3.6-27B), q8_0
weights, ~30 MB, written by llamarig.testing.synth. Every configuration is measured with the
same llamarig.tune.measure.ServerMeasure: one warm-up, then N requests of a 48-word (~300-token) prompt
(cache_prompt false) decoding 32 tokens (ignore_eos), medians of llama-server's own
timings. The roofline is llamarig's speed model with the measured host bandwidth
(calibration.measure_host_bandwidth, a single-threaded numpy copy) and efficiency 1: bytes read
per decoded token / bandwidth.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from llamarig.binary import find_binary
from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.plan.calibration.files import load_calibration
from llamarig.plan.config import parse_server_args
from llamarig.plan.speed.host_probes import measure_host_bandwidth
from llamarig.plan.speed.speed_model import speed_report
from llamarig.testing.synth import write_model
from llamarig.tune import search as S
from llamarig.tune.measure import ServerMeasure

SHAPE = dict(n_layer=4, n_embd=768, n_head=6, n_head_kv=2, head_dim=128, n_ff=2048, n_rot=32,
             ssm_state_size=64, ssm_group_count=2, ssm_time_step_rank=8, weight_type="q8_0", n_ctx_train=65536)

#: seed 000 (tests/flags/fixtures/seed000_original.sh) minus what is invalid or inapplicable here:
#: killall / LLAMA_SET_ROWS=0 (dead env var) / --no-mmap (removed: --load-mode none) / --mmproj
#: (no projector for a synthetic model) / --host 0.0.0.0 / --port / --log-file / -ngl 99 (no GPU)
SEED000 = ["--fit", "on", "--ctx-size", "65000", "-n", "-1", "--batch-size", "4096", "--ubatch-size", "2048",
           "--cache-type-k", "q4_0", "--cache-type-v", "q4_0", "--cache-reuse", "1024", "--parallel", "1",
           "--threads", "4", "--temp", "0.95", "--top_p", "0.95", "--top_k", "20", "--repeat_penalty", "1.02",
           "--metrics", "--jinja", "--seed", "42", "--cont-batching", "--threads-batch", "4",
           "--reasoning-budget", "512", "--reasoning", "on", "-fa", "on", "--reasoning-format", "deepseek",
           "--load-mode", "none"]


#: the --exhaustive model: small enough that a 64-candidate grid runs on 2 shared cores, with
#: one MTP layer so that --spec-type draft-mtp is a real choice
MTP_SHAPE = dict(n_layer=4, n_embd=512, n_head=4, n_head_kv=2, head_dim=128, n_ff=1536, nextn_layers=1,
                 ssm_state_size=64, ssm_group_count=2, ssm_time_step_rank=8, weight_type="q8_0", n_ctx_train=8192)
#: the --exhaustive grid, as llamarig tune's --try dimensions: 2 x 2 x 2 x 2 x 2 x 2 = 64 candidates
#: (a quantized K needs no flash attention; a quantized V would, so only K is varied)
GRID = ["-t=1,2", "-ub=64,256", "-fa=on,off", "-ctk=f16,q8_0", "-np=1,2", "--spec-type=-,draft-mtp"]
#: requests per measurement: the budget of tune's last rung in the runs compared (--max-runs)
BUDGET = 3


#: --reduced: threads fixed at 1 in the base command (on 2 cores shared with other work, -t 2 ran
#: 10-100x slower than -t 1 and a 64-candidate pass did not fit the session), the other five
#: dimensions: 32 candidates
REDUCED_BASE = ["-t", "1"]


def _grid(a: argparse.Namespace) -> list[str]:
    return GRID[1:] if a.reduced else GRID


def _base(model: Path, a: argparse.Namespace) -> list[str]:
    return ["-m", str(model), "-c", "4096", *(REDUCED_BASE if a.reduced else [])]


def _exhaustive(binary: str, base: list[str], grid: list[str], work: Path, prompt_words: int, n_predict: int,
                first: dict[str, dict[str, float]]) -> dict[str, object]:
    """Every candidate once with BUDGET requests (those not in ``first`` already), then the 8
    best by decode and by prefill again."""
    meas = ServerMeasure(binary, base, "decode", 0.5, prompt_words, n_predict, log_dir=str(work))
    cands = S.space([S.parse_dim(d) for d in grid])
    for i, c in enumerate(cands):
        if c.key in first:
            continue
        m = meas(c, BUDGET)
        first[c.key] = dict(m.metrics) if m.error is None else {"error": 1.0}
        print(f"  exhaustive {i + 1}/{len(cands)} {c.key}: {m.metrics.get('decode_tok_s', 0):.1f} / "
              f"{m.metrics.get('prefill_tok_s', 0):.1f}" + (f" error {m.error}" if m.error else ""), flush=True)
    ok = {k: v for k, v in first.items() if "error" not in v}
    top = {k for f in ("decode_tok_s", "prefill_tok_s") for k in sorted(ok, key=lambda k: -ok[k][f])[:8]}
    again: dict[str, dict[str, float]] = {}
    for c in cands:
        if c.key in top:
            m = meas(c, BUDGET)
            print(f"  again {c.key}: {m.metrics.get('decode_tok_s', 0):.1f} / {m.metrics.get('prefill_tok_s', 0):.1f}",
                  flush=True)
            if m.error is None:
                again[c.key] = dict(m.metrics)
    return {"first": first, "again": again, "launches": meas.launches, "requests": meas.requests}


def _tune(model: Path, objective: str, work: Path, prompt_words: int, n_predict: int, a: argparse.Namespace
          ) -> dict[str, object]:
    """``llamarig tune`` on the same space and method (its CLI, --json)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "llamarig", "tune", "--json", "--objective", objective,
           "--min-runs", "1", "--max-runs", str(BUDGET), "--eta", "3", "--prompt-words", str(prompt_words),
           "--n-predict", str(n_predict), "--state", str(work / f"tune-{objective}.json"), "--restart",
           "--calibration-out", str(work / f"cal-{objective}.json")]
    for d in _grid(a):
        cmd.append(f"--try={d}")
    cmd += ["--", "llama-server", *_base(model, a)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"llamarig tune failed ({r.returncode}): {r.stderr[-800:]}")
    out: dict[str, object] = json.loads(r.stdout)
    out["wall_s"] = time.time() - t0
    return out


def _both(ex: dict[str, object], key: str, field: str) -> float | None:
    """A candidate's figure in the exhaustive table: the mean of its passes."""
    first, again = ex["first"], ex["again"]
    assert isinstance(first, dict) and isinstance(again, dict)
    vals = [d[key][field] for d in (first, again) if key in d and field in d[key]]
    return sum(vals) / len(vals) if vals else None


def _coordinate(binary: str, model: Path, objective: str, work: Path, prompt_words: int, n_predict: int,
                a: argparse.Namespace) -> dict[str, object]:
    """llamarig.tune.search.coordinate_descent with tune's measurement, on the same grid."""
    meas = ServerMeasure(binary, _base(model, a), objective, 0.5, prompt_words, n_predict, log_dir=str(work))
    t0 = time.time()
    cd = S.coordinate_descent([S.parse_dim(d) for d in _grid(a)], meas, budget=BUDGET)
    return {"search": cd.to_json(), "wall_s": time.time() - t0}


def _row(ex: dict[str, object], search: str, objective: str, res: dict[str, object],
         spreads: dict[str, list[float]]) -> dict[str, object]:
    field = f"{objective}_tok_s"
    first = ex["first"]
    assert isinstance(first, dict)
    keys = [k for k in first if "error" not in first[k]]
    best = max(keys, key=lambda k: _both(ex, k, field) or 0.0)
    s = res["search"]
    assert isinstance(s, dict)
    pick = str(s["winner"])
    sp = spreads[field]
    return {"search": search, "objective": objective, "best": best, "best_value": _both(ex, best, field),
            "pick": pick, "pick_value": _both(ex, pick, field), "launches": s["launches"],
            "requests": s["cost_requests"], "wall_s": res["wall_s"], "exhaustive_launches": len(first),
            "exhaustive_requests": BUDGET * len(first), "spread_median": sp[len(sp) // 2] if sp else None,
            "spread_max": sp[-1] if sp else None}


def _f(x: object) -> float:
    return float(x) if isinstance(x, (int, float)) else 0.0


def exhaustive_main(a: argparse.Namespace) -> None:
    binary = str(find_binary("llama-server"))
    work = Path(tempfile.mkdtemp(prefix="llamarig-bench-tune-x-"))
    model = write_model(work / "qwen35-mtp-bench.gguf", "qwen35", **MTP_SHAPE)  # type: ignore[arg-type]
    prompt_words, n_predict = 32, 16
    load0 = os.getloadavg()
    prev: dict[str, object] = json.loads(Path(a.reuse).read_text()) if a.reuse else {}
    t0 = time.time()
    ex = prev.get("exhaustive")
    if not isinstance(ex, dict) or not ex.get("again"):
        got = ex.get("first", {}) if isinstance(ex, dict) else {}
        assert isinstance(got, dict)
        ex = _exhaustive(binary, _base(model, a), _grid(a), work, prompt_words, n_predict, got)
    ex_s = _f(prev.get("exhaustive_s")) or time.time() - t0
    tunes = prev.get("tune") or {o: _tune(model, o, work, prompt_words, n_predict, a) for o in ("decode", "prefill")}
    assert isinstance(tunes, dict)
    coords = prev.get("coordinate") or {o: _coordinate(binary, model, o, work, prompt_words, n_predict, a)
                                        for o in ("decode", "prefill")}
    assert isinstance(coords, dict)
    load1 = os.getloadavg()
    first, again = ex["first"], ex["again"]
    assert isinstance(first, dict) and isinstance(again, dict)
    spreads = {f: sorted(abs(again[k][f] - first[k][f]) / first[k][f] for k in again if first[k].get(f))
               for f in ("decode_tok_s", "prefill_tok_s")}
    rows = [_row(ex, name, o, res[o], spreads) for name, res in (("tune (successive halving)", tunes),
                                                                 ("coordinate descent", coords))
            for o in ("decode", "prefill")]
    out = {"model": MTP_SHAPE, "grid": _grid(a), "base": _base(model, a)[2:], "reduced": a.reduced, "budget": BUDGET, "prompt_words": prompt_words, "n_predict": n_predict,
           "exhaustive": ex, "exhaustive_s": ex_s, "tune": tunes, "coordinate": coords, "rows": rows,
           "loadavg_before": prev.get("loadavg_before", load0), "loadavg_after": load1, "cores": os.cpu_count()}
    print("\n| search | objective | measured best | pick | pick / best | launches, requests | exhaustive: "
          "launches, requests | repeat spread (median, max) |\n|---|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        ratio = (_f(r["pick_value"]) or 0) / (_f(r["best_value"]) or 1)
        print(f"| {r['search']} | {r['objective']} | {r['best']} ({(_f(r['best_value']) or 0):.1f}) | {r['pick']} "
              f"({(_f(r['pick_value']) or 0):.1f}) | {ratio:.3f} | {r['launches']}, {r['requests']} | "
              f"{r['exhaustive_launches']}, {r['exhaustive_requests']} | {100 * (_f(r['spread_median']) or 0):.1f} %, "
              f"{100 * (_f(r['spread_max']) or 0):.1f} % |")
    print(f"\nload average {load0[0]:.1f} -> {load1[0]:.1f} ({os.cpu_count()} cores); exhaustive {_f(ex_s):.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, default=str))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer requests (noisier)")
    ap.add_argument("--exhaustive", action="store_true", help="tune against the measured best of a grid")
    ap.add_argument("--reduced", action="store_true", help="--exhaustive: threads fixed at 1 (32 candidates)")
    ap.add_argument("--reuse", default=None, metavar="JSON",
                    help="--exhaustive: take the exhaustive table (and tune's runs) from an earlier --json")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.exhaustive:
        exhaustive_main(a)
        return
    binary = str(find_binary("llama-server"))
    work = Path(tempfile.mkdtemp(prefix="llamarig-bench-tune-"))
    model = write_model(work / "qwen35-bench.gguf", "qwen35", **SHAPE)
    reps = 2 if a.quick else 3
    prompt_words, n_predict = 48, 32
    cores = os.cpu_count() or 1
    base = ["-m", str(model), "-c", "8192", "-np", "1"]
    t0 = time.time()
    # 1. tune: threads x ubatch x KV type, weighted decode/prefill
    dims = [("-t", sorted({str(max(1, cores // 2)), str(cores)})), ("-ub", ["128", "512"]),
            ("-ctk", ["f16", "q8_0"])]
    cands = S.space(dims)
    meas = ServerMeasure(binary, base, "weighted", 0.5, prompt_words, n_predict, log_dir=str(work))
    sh = S.successive_halving(cands, meas, min_budget=1, max_budget=3, eta=2, seed=0,
                              state=S.TuneState(work / "state.json", "bench"),
                              progress=lambda d, t, m: print(f"  tune {d}/{t} {m}", flush=True))
    assert sh.winner is not None
    tune_s = time.time() - t0
    configs = {
        "llama-server defaults (-m only)": ["-m", str(model)],
        "seed 000 chatbot flags (valid subset)": ["-m", str(model)] + SEED000,
        f"tuned ({sh.winner.key})": base + sh.winner.args(),
    }
    bw = measure_host_bandwidth()
    cal = load_calibration()
    cal = replace(cal, backends={**cal.backends, "CPU": replace(cal.backends["CPU"], weights=1.0, overhead_ms=0.0)})
    spec = load_spec(model)
    rows = []
    for name, args in configs.items():
        m = ServerMeasure(binary, args, "decode", prompt_words=prompt_words, n_predict=n_predict, log_dir=str(work))
        r = m(S.Candidate(()), reps)
        cfg = parse_server_args(["llama-server", *args], strict=False)
        roof = speed_report(spec, cfg, Hardware(), cal=cal, host_bandwidth_gbs=bw).decode_limit_tok_s
        rows.append({"config": name, "decode_tok_s": r.metrics.get("decode_tok_s"),
                     "prefill_tok_s": r.metrics.get("prefill_tok_s"), "roofline_decode_tok_s": roof,
                     "error": r.error})
        print(json.dumps(rows[-1]), flush=True)
    out = {"model": {"path": str(model), "bytes": spec.weights_bytes, "shape": SHAPE},
           "host_bandwidth_gbs": bw, "cores": cores, "tune": sh.to_json(), "tune_seconds": tune_s,
           "requests_per_config": reps, "prompt_words": prompt_words, "n_predict": n_predict, "rows": rows}
    print("\n| configuration | decode tok/s | prefill tok/s | decode roofline tok/s |\n|---|---:|---:|---:|")
    for r in rows:
        if r["error"]:
            print(f"| {r['config']} | error: {r['error'][:60]} | | {r['roofline_decode_tok_s']:.0f} |")
        else:
            print(f"| {r['config']} | {r['decode_tok_s']:.1f} | {r['prefill_tok_s']:.1f} | {r['roofline_decode_tok_s']:.0f} |")
    print(f"\nhost bandwidth {bw:.1f} GB/s (numpy copy); weights {spec.weights_bytes / 1e6:.1f} MB; "
          f"tune: {sh.launches} launches, {sh.cost} requests, {tune_s:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
