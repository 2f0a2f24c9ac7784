"""Benchmark: reading the spec of a GGUF shaped like a real 27B hybrid release.

Method: write a Qwen3.6-27B-like header (64-layer qwen35 tensor table, 851 tensors, 151 936
tokens + 151 387 merges + token types; sparse data section) with
llamarig.testing.bigheader, then time ``llamarig.gguf.load_spec`` (cold process cache is not
controlled: the file's header pages are in the OS page cache after the first run) R times with
time.perf_counter and report min / median. For comparison, time gguf.GGUFReader (the
``gguf`` package's reader, which decodes every array element) a few times.

Run:  .venv/bin/python benchmarks/bench_inspect.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from llamarig.gguf import load_spec
from llamarig.testing.bigheader import write_qwen36_like


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--gguf-reader", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        p = write_qwen36_like(Path(d) / "qwen36-like.gguf")
        spec = load_spec(p)
        ts = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            load_spec(p)
            ts.append(time.perf_counter() - t)
        print(f"file: {os.path.getsize(p) / 2**30:.2f} GiB apparent, header "
              f"{spec.tensor_count} tensors, n_vocab {spec.n_vocab}")
        print(f"llamarig load_spec: min {min(ts) * 1e3:.1f} ms, median "
              f"{statistics.median(ts) * 1e3:.1f} ms over {len(ts)} runs")
        if args.gguf_reader:
            from gguf import GGUFReader

            gs = []
            for _ in range(3):
                t = time.perf_counter()
                GGUFReader(str(p))
                gs.append(time.perf_counter() - t)
            print(f"gguf.GGUFReader:    min {min(gs) * 1e3:.1f} ms, median "
                  f"{statistics.median(gs) * 1e3:.1f} ms over {len(gs)} runs")
        print(f"load average during the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
