"""Benchmark: `llamarig check` on a 200-line script, end to end, with a cached schema; and the
size curve (`--curve`): files of repeated flags at 1, 2 and 4 MiB (4 MiB is the largest input
check reads), time and peak memory of the whole process.

Run: .venv/bin/python benchmarks/bench_check.py [--runs N]
     .venv/bin/python benchmarks/bench_check.py --curve [--sizes 1,2,4] [--timeout 300]
                                                [--shape repeated|one-line] [--repeat N]

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
import contextlib
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


MIB = 1024 * 1024


def repeated_flags(size: int) -> str:
    """One llama-server command continued over `size` bytes of `--temp` lines (the issue's
    "3.6 MB script of repeated --temp lines"): every --temp but the last is a duplicate."""
    head, tail = "llama-server -m model.gguf \\\n", "  --port 8080\n"
    out = [head]
    n = len(head) + len(tail)
    i = 0
    while True:
        line = f"  --temp 0.{i % 10} \\\n"
        if n + len(line) > size:
            break
        out.append(line)
        n += len(line)
        i += 1
    out.append(tail)
    return "".join(out)


def many_commands(size: int) -> str:
    """`size` bytes of one-line llama-server commands, each with a duplicated flag."""
    line = "llama-server -m model.gguf --temp 0.7 --temp 0.8 --port 8080\n"
    return line * (size // len(line))


def child_usage(cmd: list[str], timeout: float) -> tuple[float, float, int, int]:
    """Run ``cmd`` in a fresh helper process and return (wall s, CPU s, peak RSS KiB, exit code)
    of ``cmd`` alone (resource.getrusage(RUSAGE_CHILDREN) of a helper with one child)."""
    helper = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "try:\n"
        "    rc = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,"
        " timeout=float(sys.argv[1])).returncode\n"
        "except subprocess.TimeoutExpired:\n"
        "    rc = -9\n"
        "wall = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps([wall, u.ru_utime + u.ru_stime, u.ru_maxrss, rc]))\n")
    p = subprocess.run([sys.executable, "-c", helper, str(timeout), *cmd], capture_output=True, text=True,
                       cwd=ROOT)
    wall, cpu, rss, rc = json.loads(p.stdout)
    return wall, cpu, rss, rc


def curve(sizes: list[float], timeout: float, only: str | None = None, repeat: int = 1) -> None:
    """Each cell the median of ``repeat`` fresh processes (wall, CPU; peak RSS the largest)."""
    import os

    shapes = [("one command, repeated --temp lines", repeated_flags, ["--json", None]),
              ("one-line commands, each with a duplicate", many_commands, ["--json"])]
    if only is not None:
        shapes = [s for s in shapes if only in s[0]]
    print("| input | size | output | wall | CPU | peak RSS | findings | exit |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name, make, modes in shapes:
            for mib in sizes:
                path = Path(d) / "script.sh"
                text = make(int(mib * MIB))
                path.write_text(text, encoding="utf-8")
                for mode in modes:
                    cmd = [sys.executable, "-m", "llamarig.cli.main", "check", str(path)] + ([mode] if mode else [])
                    runs = [child_usage(cmd, timeout) for _ in range(repeat)]
                    wall = statistics.median(r[0] for r in runs)
                    cpu = statistics.median(r[1] for r in runs)
                    rss, rc = max(r[2] for r in runs), runs[-1][3]
                    nf = "–"
                    if mode == "--json" and rc in (0, 1):
                        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout
                        nf = str(len(json.loads(out)["findings"]))
                    shown = "timed out" if rc == -9 else f"{wall:.1f} s"
                    print(f"| {name} | {len(text) / MIB:.2f} MiB ({text.count(chr(10))} lines) | "
                          f"{mode or 'text'} | {shown} | {cpu:.1f} s | {rss / 1024:.0f} MiB | {nf} | {rc} |")
    with contextlib.suppress(OSError):
        print(f"load average: {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--curve", action="store_true", help="time and memory at 1, 2 and 4 MiB of repeated flags")
    ap.add_argument("--sizes", default="1,2,4", help="sizes in MiB for --curve")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run for --curve")
    ap.add_argument("--shape", choices=["repeated", "one-line"], default=None,
                    help="--curve: only this input (repeated --temp lines, or one-line commands)")
    ap.add_argument("--repeat", type=int, default=1, help="--curve: runs per cell (the median is shown)")
    ns = ap.parse_args()
    if ns.curve:
        curve([float(x) for x in ns.sizes.split(",")], ns.timeout, ns.shape, ns.repeat)
        return
    sys.path.insert(0, str(ROOT / "src"))
    from llamarig.app.check import check, get_schema, read_input

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
            report = check(text, schema=s, cores=6)
            parsed, findings = report.parsed, report.findings
            json.dumps(report.to_json())
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
