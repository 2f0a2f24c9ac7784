"""Benchmark: `llamarig check` on a 200-line script, end to end, with a cached schema.

Run: .venv/bin/python benchmarks/bench_check.py [--runs N]

Two measurements:
  in-process  read file + load cached schema + parse + lint + JSON, timed with perf_counter
              (wall) and process_time (CPU, less sensitive to other work on the machine)
  process     `python -m llamarig.cli.main check FILE --json` as a subprocess (interpreter start,
              imports, everything a user waits for), wall time with perf_counter
The script is built from the seed-000 fixture (comment lines inside continuations, folklore
flags) repeated with variations until it has 200 lines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "tests" / "flags" / "fixtures" / "seed000_user_final.sh"


def make_script(n_lines: int = 200) -> str:
    base = SEED.read_text(encoding="utf-8").splitlines()
    out: list[str] = []
    k = 0
    while len(out) < n_lines:
        for line in base:
            out.append(line.replace("--port 12026", f"--port {12026 + k}"))
            if len(out) >= n_lines:
                break
        k += 1
    # never end inside a continuation
    while out and out[-1].rstrip().endswith("\\"):
        out[-1] = out[-1].rstrip()[:-1]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ns = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from llamarig.cli.check_cmd import get_schema, read_input, run_check, to_json

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "script.sh"
        path.write_text(make_script(), encoding="utf-8")
        n_lines = len(path.read_text().splitlines())
        schema = get_schema(None, False)  # warms the per-binary cache
        inproc = []
        cpu = []
        n_findings = n_inv = 0
        for _ in range(ns.runs):
            c0 = time.process_time()
            t0 = time.perf_counter()
            text, _ = read_input(str(path))
            s = get_schema(None, False)
            parsed, _, findings = run_check(text, s, cores=6)
            json.dumps(to_json(parsed, findings, s))
            inproc.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            n_findings, n_inv = len(findings), len(parsed.invocations)
        proc = []
        for _ in range(max(3, ns.runs // 4)):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "llamarig.cli.main", "check", str(path), "--json"],
                           capture_output=True, cwd=ROOT)
            proc.append(time.perf_counter() - t0)

    def row(name: str, xs: list[float]) -> str:
        return (f"| {name} | {min(xs) * 1000:.1f} ms | {statistics.median(xs) * 1000:.1f} ms | {len(xs)} |")

    print(f"script: {n_lines} lines, {n_inv} invocations, {n_findings} findings; schema: {schema.label()}")
    print("| measurement | min | median | runs |")
    print("|---|---|---|---|")
    print(row("in-process (read + cached schema + parse + lint + JSON), wall", inproc))
    print(row("in-process, CPU time (less sensitive to other load)", cpu))
    print(row("process (`llamarig check FILE --json`)", proc))
    try:
        import os

        print(f"load average: {os.getloadavg()[0]:.1f}")
    except OSError:
        pass


if __name__ == "__main__":
    main()
