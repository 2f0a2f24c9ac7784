"""Benchmark: plan vs the real multi-device rig, per device (the table of benchmarks/RESULTS.md
"Several devices: plan vs the RPC rig").

Method: for every case of the grid (llamarig.testing.rpc_grid.GRID: synthetic models of every
architecture plan replays, 2 or 3 rpc-servers on loopback, llama-server build 11434 portable),
start the rpc-servers (llamarig.testing.rpc, one thread each), start llama-server with ``-lv 4
--rpc ...`` and the case's flags, wait for /health, stop it, parse its memory lines (per device:
every rpc-server's buffers are named RPC0[HOST:PORT], so the endpoint names the device) and plan
the same command with the same CPU features (the log's system_info). Every device's weights, KV,
recurrent state, compute and MTP context (KV + compute) are listed planned vs logged, beside the
compute the plan gave before the scheduled replay (the calibrated phase model plus pipeline copies,
``--before``: recomputed with the replay switched off, not a stored figure). A case with a
separate draft model (-md) lists its weights, KV and context compute under the MTP/draft column.

Run:  .venv/bin/python benchmarks/bench_rpc_grid.py [--before] [--out FILE]
(LLAMARIG_SERVER_BIN, else scripts/get-llama-server --recipe portable)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.hardware.cpu import from_system_info, system_info_line
from llamarig.plan import planner
from llamarig.plan.config import parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.testing.rpc import rpc_argument, rpc_server_binary, start_rpc_servers
from llamarig.testing.rpc_grid import GRID, SHAPES, DeviceRow, device_rows, draft_shapes
from llamarig.testing.server import start_server
from llamarig.testing.synth import write_model

ROOT = Path(__file__).resolve().parents[1]


def _server_bin() -> Path:
    env = os.environ.get("LLAMARIG_SERVER_BIN")
    if env:
        return Path(env)
    out = subprocess.run([str(ROOT / "scripts" / "get-llama-server"), "--recipe", "portable"], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1]) / "llama-server"


def _model(work: Path, shape: str) -> Path:
    arch, kw = SHAPES[shape]
    path = work / f"{shape}.gguf"
    if not path.exists():
        write_model(path, arch, **kw)
    return path


def run_case(binary: Path, work: Path, shape: str, n_rpc: int, args: str, before: bool
             ) -> tuple[list[DeviceRow], dict[tuple[str, str], float]]:
    path = _model(work, shape)
    drafts = {name: _model(work, name) for name in draft_shapes(args)}
    rigs = start_rpc_servers(rpc_server_binary(binary), n_rpc, log_dir=work)
    try:
        argv = [*args.format(**{k: str(v) for k, v in drafts.items()}).split(), "--rpc", rpc_argument(rigs)]
        srv = start_server(binary, path, ["-lv", "4", *argv], log_dir=work)
        srv.stop()
    finally:
        for r in rigs:
            r.stop()
    line = system_info_line(srv.log)
    inp = PlanInputs(load_spec(path), parse_server_args(argv), Hardware(cpu=from_system_info(line) if line else None),
                     draft=load_spec(next(iter(drafts.values()))) if drafts else None)
    rows = device_rows(make_plan(inp), srv.log)
    old: dict[tuple[str, str], float] = {}
    if before:
        with mock.patch.object(planner, "replayed_buffers", return_value=None):
            old = {(r.device, r.component): r.planned_mib for r in device_rows(make_plan(inp), srv.log)}
    return rows, old


def _before(old: dict[tuple[str, str], float], dev: str, comp: str) -> str:
    v = old.get((dev, comp))
    return "" if v is None else f"{v:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", action="store_true", help="also plan with the replay switched off")
    ap.add_argument("--out", type=Path, help="write the markdown table here (default: stdout)")
    a = ap.parse_args()
    binary = _server_bin()
    lines = ["| case | device | weights | KV | RS | compute plan / log | MTP ctx plan / log |"
             + (" compute before | MTP ctx before |" if a.before else ""),
             "|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if a.before else "")]
    n_dev = n_exact = n_ok = 0
    with tempfile.TemporaryDirectory(prefix="llamarig-rpc-grid-") as tmp:
        for shape, n_rpc, args in GRID:
            rows, old = run_case(binary, Path(tmp), shape, n_rpc, args, a.before)
            labels = {r.device: ("host" if r.index < 0 else f"RPC{r.index}") for r in rows}
            for dev in sorted(labels, key=lambda d: (labels[d] == "host", labels[d])):
                by = {r.component: r for r in rows if r.device == dev}
                comp = by.get("compute")
                if comp is not None:
                    n_dev += 1
                    n_ok += comp.ok
                    n_exact += abs(comp.planned_mib - comp.logged_mib) <= 0.0051

                def cell(name: str, by: dict[str, DeviceRow] = by) -> str:
                    r = by.get(name)
                    return "" if r is None else (f"{r.planned_mib:.2f}" if r.ok and name in ("weights", "kv", "recurrent")
                                                 else f"{r.planned_mib:.2f} / {r.logged_mib:.2f}" + ("" if r.ok else " **miss**"))
                lines.append(f"| {shape}, {n_rpc} dev, `{args}` | {labels[dev]} | {cell('weights')} | "
                             f"{cell('kv')} | {cell('recurrent')} | {cell('compute')} | {cell('draft')} |"
                             + (f" {_before(old, dev, 'compute')} | {_before(old, dev, 'draft')} |" if a.before else ""))
            print(f"{shape} {n_rpc} {args}: done", file=sys.stderr)
    lines += ["", f"{n_dev} compute buffers (devices and hosts) in {len(GRID)} runs: {n_exact} equal to the log's "
              f"0.01 MiB rounding, {n_ok} within the plan's tolerance."]
    text = "\n".join(lines) + "\n"
    if a.out:
        a.out.write_text(text)
    else:
        print(text)
    return 0 if n_ok == n_dev else 1


if __name__ == "__main__":
    sys.exit(main())
