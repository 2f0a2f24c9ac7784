"""CPU decode time per token against depth, one server per model: where the host's decode
attention cost per KV cell stays flat and where it bends (benchmarks/RESULTS.md, "CPU speed
model", the depth sweeps).

For each model: one llama-server (`-c 8192 -np 1 -fa on -ub 512 -t 1` by default), a warm-up,
then ``--rounds`` rounds over the depths; each request is a prompt of exactly ``depth`` token ids
(one varying first token, then the tokens of a fixed text repeated) and 32 decoded tokens
(``ignore_eos``, ``cache_prompt`` false); the figure is llama-server's ``predicted_ms /
predicted_n`` of the fastest round (other processes only ever slow a request down). The last
column is the cost per query head and KV cell of each depth step: the step's extra milliseconds
per token over (cells x query heads x layers).

Run: ``LLAMARIG_SERVER_BIN=... .venv/bin/python benchmarks/bench_cpu_depth.py [--models ...]``.
Needs no GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_cpu_speed import MODELS

from llamarig.launch.server import start_server
from llamarig.testing.synth import write_model

#: the bench_cpu_speed models and K/V layouts that separate the attention's shape from the weights
LAYOUTS: list[tuple[str, str, dict[str, Any]]] = [
    *MODELS,
    ("kv4x64-56MB", "llama", dict(n_layer=8, n_embd=1024, n_head=16, n_head_kv=4, head_dim=64, n_ff=256,
                                  n_ctx_train=8192)),
    ("kv8x32-56MB", "llama", dict(n_layer=8, n_embd=1024, n_head=32, n_head_kv=8, head_dim=32, n_ff=256,
                                  n_ctx_train=8192)),
    ("kv2x128-56MB", "llama", dict(n_layer=8, n_embd=1024, n_head=8, n_head_kv=2, head_dim=128, n_ff=256,
                                   n_ctx_train=8192)),
    ("kv2x64-212MB", "llama", dict(n_layer=8, n_embd=512, n_head=8, n_head_kv=2, head_dim=64, n_ff=8192,
                                   n_ctx_train=8192)),
]


def sweep(binary: str, path: Path, args: list[str], depths: list[int], rounds: int, log_dir: Path) -> dict[int, float]:
    srv = start_server(binary, path, args, log_dir=log_dir, threads=None)
    try:
        toks = srv.post("/tokenize", {"content": "alpha bravo charlie delta echo " * 50, "add_special": False})["tokens"]

        def one(i: int, d: int) -> float:
            prompt = [toks[i % len(toks)]] + (toks * (d // len(toks) + 1))[: max(0, d - 1)]
            r = srv.post("/completion", {"prompt": prompt, "n_predict": 32, "ignore_eos": True, "cache_prompt": False,
                                         "temperature": 0}, timeout=600)["timings"]
            return float(r["predicted_ms"]) / float(r["predicted_n"])

        one(0, depths[0])  # warm-up
        best: dict[int, float] = {}
        for rnd in range(rounds):
            for i, d in enumerate(depths):
                ms = one(i + rnd + 1, d)
                best[d] = min(best.get(d, ms), ms)
        return best
    finally:
        srv.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=[m[0] for m in LAYOUTS])
    ap.add_argument("--depths", type=int, nargs="+", default=[0, 1024, 2048, 3072, 4096, 6144])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    a = ap.parse_args()
    binary = os.environ.get("LLAMARIG_SERVER_BIN")
    if not binary:
        print("set LLAMARIG_SERVER_BIN (scripts/get-llama-server --recipe portable)", file=sys.stderr)
        return 2
    print("| model | KV heads x dim | " + " | ".join(str(d) for d in a.depths) + " | ns per query head and cell, per step |")
    print("|---|---|" + "---:|" * len(a.depths) + "---|")
    with tempfile.TemporaryDirectory(prefix="bench-cpu-depth-") as td:
        for name, arch, shape in LAYOUTS:
            if name not in a.models:
                continue
            path = Path(td) / f"{name}.gguf"
            write_model(path, arch, **shape)
            ctx = min(a.ctx, int(shape.get("n_ctx_train", a.ctx)))
            depths = [d for d in a.depths if d + 33 < ctx]
            args = ["-c", str(ctx), "-np", "1", "-fa", "on", "-ub", "512", "-t", "1"]
            ms = sweep(binary, path, args, depths, a.rounds, Path(td))
            heads = shape["n_head"] * shape["n_layer"]
            steps = [(ms[b] - ms[p]) / (b - p) / heads * 1e6 for p, b in zip(depths, depths[1:], strict=False)]
            cells = [f"{ms[d]:.3f}" if d in ms else "" for d in a.depths]
            print(f"| {name} | {shape['n_head_kv']} x {shape['head_dim']} | " + " | ".join(cells) + " | "
                  + ", ".join(f"{x:.0f}" for x in steps) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
