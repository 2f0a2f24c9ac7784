"""Tuned configuration vs llama-server's defaults vs seed 000's chatbot flags (the part that is
valid on this build and machine), decode and prefill, against the memory-bandwidth roofline.

Run: .venv/bin/python benchmarks/bench_tune.py [--quick] [--json out.json]

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
from llamarig.plan.calibration_files import load_calibration
from llamarig.plan.config import parse_server_args
from llamarig.plan.host_probes import measure_host_bandwidth
from llamarig.plan.speed import speed_report
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer requests (noisier)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
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
