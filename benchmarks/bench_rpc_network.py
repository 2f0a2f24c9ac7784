"""The RPC network model against ``llamarig bench`` on the loopback rig, with a link's latency and
rate added by a proxy (benchmarks/RESULTS.md, "RPC network model").

Two rpc-servers on 127.0.0.1, each behind a llamarig.testing.netproxy.DelayProxy (one-way delay
d, optional rate), and a llama-server on them (``-c 4096 -np 1 -ngl 99 --cache-ram 0 -ub 512
-t 1``, a synthetic llama of n_embd 1024). For each link setting:

- ``llamarig bench`` (the library's bench_server: decode, -n 32, k 8; cold prefill of 512
  tokens, 5 repeats) measures decode ms per token and prefill ms; the table takes the fastest
  samples (bench's max, else p90, of tok/s), since other processes only slow a request down;
- the proxies count the bytes of one decode step (two requests that differ by 16 generated
  tokens) and of the 512-token prefill.

The model (llamarig.plan.network) predicts, per decode step and per prefill ubatch, the bytes and
the round trips; the time a link adds is bytes / rate + round trips x 2 d. The table compares
the added time (measured against the d = 0, no-rate run) with that prediction.

Run: ``LLAMARIG_SERVER_BIN=... .venv/bin/python benchmarks/bench_rpc_network.py [--delays 0,2,5]
[--rate-mbit 100]``. Needs no GPU and no root.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from llamarig.api import bench_server
from llamarig.bench.runner import BenchConfig
from llamarig.launch.rpc import rpc_server_binary, start_rpc_servers
from llamarig.launch.server import start_server
from llamarig.plan.inputs import build_inputs
from llamarig.plan.network import Link, step_traffic
from llamarig.plan.planner import make_plan
from llamarig.testing.netproxy import DelayProxy
from llamarig.testing.plans import deployment_of
from llamarig.testing.synth import write_model

SHAPE = dict(n_layer=8, n_embd=1024, n_head=8, n_head_kv=4, head_dim=128, n_ff=2048, n_ctx_train=8192)
FLAGS = ["-c", "4096", "-np", "1", "-ngl", "99", "--cache-ram", "0", "-ub", "512", "--metrics"]


def _fast(doc: dict[str, Any], base: str) -> float:
    """The fastest samples' figure of ``base`` (its max, else p90, else median tok/s): other
    processes on the machine only ever slow a request down."""
    figs = {f.get("name"): f.get("value") for f in doc.get("figures", [])}
    for st in ("max", "p90", "median"):
        v = figs.get(f"{base}_{st}")
        if v:
            return float(v)
    raise KeyError(base)


def measure(binary: str, model: Path, delay_ms: float, rate_mbit: float | None, log_dir: Path) -> dict[str, Any]:
    rigs = start_rpc_servers(rpc_server_binary(binary), 2, log_dir=log_dir)
    rate = rate_mbit * 1e6 / 8 if rate_mbit else None
    proxies = [DelayProxy(r.port, delay_ms / 1e3, rate) for r in rigs]
    try:
        for p in proxies:
            p.start()
        eps = ",".join(p.endpoint for p in proxies)
        srv = start_server(binary, model, ["--rpc", eps, *FLAGS], log_dir=log_dir, threads=1, timeout=600)
        try:
            doc = bench_server(BenchConfig(url=srv.url, scenarios=("decode", "prefill"), n_predict=32, k=8, warmup=1,
                                           endpoint="completion", prefill_lengths=(512,), repeats=5, temperature=0.0))
            per_tok, late_ms = _decode_bytes(srv, proxies)
        finally:
            srv.stop()
        inp = build_inputs(deployment_of(str(model), ["--rpc", eps, *FLAGS[:-1]],
                                         rpc_devices=[f"{p.endpoint}=20G" for p in proxies]))
    finally:
        for p in proxies:
            p.stop()
        for r in rigs:
            r.stop()
    plan = make_plan(inp)
    cfg = plan.effective_cfg or inp.cfg
    dec = step_traffic(inp.spec, cfg, plan, 1, 64)
    pre = step_traffic(inp.spec, cfg, plan, 512, 0)
    return {"delay_ms": delay_ms, "rate_mbit": rate_mbit, "bench": doc, "decode_bytes_measured": per_tok,
            "proxy_late_ms_per_token": late_ms,
            "decode_bytes_model": [(s.up, s.down) for s in dec.stages], "decode_trips": dec.round_trips,
            "prefill_bytes_model": pre.up + pre.down + pre.graph_bytes, "prefill_trips": pre.round_trips,
            "decode_bytes_total": dec.up + dec.down}


def _decode_bytes(srv: Any, proxies: list[DelayProxy]) -> tuple[list[tuple[float, float]], float]:
    """Bytes per decode step per device (up, down), and the proxies' own lateness per step (ms)."""
    def run(n: int) -> tuple[int, list[Any]]:
        before = [p.snapshot() for p in proxies]
        r = srv.post("/completion", {"prompt": "count the bytes", "n_predict": n, "cache_prompt": False,
                                     "temperature": 0, "ignore_eos": True})
        return int(r["tokens_predicted"]), [p.snapshot() - b for p, b in zip(proxies, before, strict=True)]

    run(4)  # the prompt's shapes once: the allocator's size queries are cached per shape
    n1, t1 = run(8)
    n2, t2 = run(24)
    k = n2 - n1
    late = sum(b.late_s - a.late_s for a, b in zip(t1, t2, strict=True)) / k * 1e3
    return [((b.up - a.up) / k, (b.down - a.down) / k) for a, b in zip(t1, t2, strict=True)], late


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delays", default="0,5,10", help="one-way delays in ms (0 is the baseline)")
    ap.add_argument("--rate-mbit", type=float, default=100.0, help="a rate-limited run at d = 0 (0: none)")
    ap.add_argument("--json", type=Path, default=None, help="write every run here")
    a = ap.parse_args(argv)
    binary = os.environ.get("LLAMARIG_SERVER_BIN")
    if not binary:
        print("set LLAMARIG_SERVER_BIN", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-rpc-net-"))
    model = write_model(tmp / "llama-1024.gguf", "llama", **SHAPE)
    settings = [(float(d), None) for d in a.delays.split(",")] + ([(0.0, a.rate_mbit)] if a.rate_mbit else [])
    runs = []
    for d, r in settings:
        runs.append(measure(binary, model, d, r, tmp))
        if a.json:  # kept as they come: a run takes minutes
            a.json.write_text(json.dumps(runs, indent=1, default=str))
    base = runs[0]
    b_dec = 1000 / _fast(base["bench"], "decode_tok_s")
    b_pre = 512e3 / _fast(base["bench"], "prefill_tok_s_512")
    print("link                 decode ms/token  +measured  +model  proxy late   prefill ms  +measured  +model   "
          "bytes/token (measured = model)")
    for r in runs:
        lk = Link("x", (r["rate_mbit"] or 1e12) * 1e6 / 8, 2 * r["delay_ms"] / 1e3)
        dec = 1000 / _fast(r["bench"], "decode_tok_s")
        model_dec = (r["decode_bytes_total"] / lk.rate + r["decode_trips"] * lk.rtt_s) * 1e3
        pre = 512e3 / _fast(r["bench"], "prefill_tok_s_512")
        model_pre = (r["prefill_bytes_model"] / lk.rate + r["prefill_trips"] * lk.rtt_s) * 1e3
        same = r["decode_bytes_measured"] == [tuple(x) for x in r["decode_bytes_model"]]
        name = f"d={r['delay_ms']:g} ms" + (f", {r['rate_mbit']:g} Mbit/s" if r["rate_mbit"] else "")
        print(f"{name:20s} {dec:15.2f} {dec - b_dec:+10.2f} {model_dec:+7.2f} {r['proxy_late_ms_per_token']:10.2f}   {pre:10.1f} "
              f"{pre - b_pre:+10.1f} {model_pre:+7.1f}   {r['decode_bytes_measured']} {'=' if same else '!='}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
