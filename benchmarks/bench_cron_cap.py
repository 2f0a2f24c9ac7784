"""The 32 GB card field report's cron pitfall, measured: agents' decode with cron jobs holding
slots, without and with a cron cap, and with no cron jobs at all.

Method (everything on this machine, loopback only):
- one real llama-server (build 11434, the portable build, ``$LLAMARIG_SERVER_BIN`` or
  scripts/get-llama-server) on a synthetic llama model written by llamarig.testing.synth
  (``--embd``/``--layers``: matrix work dominates a token, so streams decoded together share
  the CPU, as they share a GPU's compute with speculative decoding), ``-c 32768 -np 4 -kvu``,
  ``-t --threads``;
- the gateway in this process (llamarig.gateway.server.Gateway), built-in tiers, cron jobs locked
  to 6000 tokens so they outlast the agents;
- four set-ups, each round running all four in turn (``--rounds``) so load drift on a shared
  machine hits each: *no cap* (four cron jobs: they take every slot, the first agent waits for
  one of them to end, then the agents decode beside three), *cap* (``cron.max_slots = 1``: one
  cron job runs, three wait, the agents decode beside one), *yield* (``cron.yields = true``,
  ``yield_after_s = 2``: four non-streamed cron jobs, each sent again as soon as it ends; the
  first agent preempts them, tests/gateway/test_real_yield.py ``cron_yield_and_agents``),
  *alone* (no cron job);
- each set-up: the same scenario tests/gateway/test_pool_real.py asserts on (its
  ``cron_and_agents``), ``--agents`` agent requests one after the other (``/completion``, 48
  tokens, ``ignore_eos``, tier C2 by the ``x-llamarig-agent`` header); an agent's decode rate is
  llama-server's own ``timings.predicted_per_second`` of its answer (what the field report's
  decode median is made of); the cron jobs' clients read their streams as they come.
Reported: per set-up the median and p10 of the agents' rates (NumPy-style linear percentile, N),
the cron jobs that were in flight beside each agent, and the medians' ratio to *alone*.

    .venv/bin/python benchmarks/bench_cron_cap.py [--rounds 5] [--agents 5] [--out cron.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.gateway.test_pool_real import AGENT, cron_and_agents  # noqa: E402
from tests.gateway.test_real_yield import cron_yield_and_agents  # noqa: E402

from llamarig.gateway.config import build_config, with_overrides  # noqa: E402
from llamarig.gateway.server import Gateway  # noqa: E402
from llamarig.testing.server import start_server  # noqa: E402
from llamarig.testing.synth import write_model  # noqa: E402


def server_bin() -> str:
    env = os.environ.get("LLAMARIG_SERVER_BIN")
    if env:
        return env
    out = subprocess.run([str(ROOT / "scripts" / "get-llama-server"), "--recipe", "portable"], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] + "/llama-server"


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo = int(k)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)


async def alone(gw: Gateway, agents: int) -> dict[str, Any]:
    out: dict[str, Any] = {"agent_decode_tok_s": [], "cron_beside_agents": []}
    async with aiohttp.ClientSession() as s:
        for _ in range(agents):
            async with s.post(gw.url + "/completion", headers=AGENT,  # type: ignore[attr-defined]
                              json={"prompt": "refactor this function", "n_predict": 48, "ignore_eos": True}) as r:
                data = await r.json()
            out["agent_decode_tok_s"].append(data["timings"]["predicted_per_second"])
            out["cron_beside_agents"].append(0)
    return out


async def main(a: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-cron-"))
    model = write_model(work / "m.gguf", "llama", n_embd=a.embd, n_layer=a.layers, n_ff=3 * a.embd, n_head=8,
                        n_head_kv=4, head_dim=a.embd // 8, n_ctx_train=65536)
    srv = start_server(server_bin(), model, ["-c", "32768", "-np", "4", "-kvu", "-t", str(a.threads)], log_dir=work)
    gws: dict[str, Gateway] = {}
    try:
        for name, cron in (("no cap", {}), ("cap", {"max_slots": 1}), ("yield", {"yields": True, "yield_after_s": 2}),
                           ("alone", {})):
            cfg = with_overrides(build_config({"cron": {"max_tokens": 6000, **cron}, "admission": {"keepalive_s": 0},
                                               "health": {"slots_interval_s": 0.5}}, "bench"),
                                 backends=[srv.url], port=0)
            gw = Gateway(cfg)
            await gw.start(port=0)
            gw.url = f"http://127.0.0.1:{gw.port}"  # type: ignore[attr-defined]
            gws[name] = gw
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in gws}
        load = [os.getloadavg()[0]]
        for rnd in range(a.rounds):
            for name, gw in gws.items():
                r = await (alone(gw, a.agents) if name == "alone" else cron_yield_and_agents(gw, a.agents)
                           if name == "yield" else cron_and_agents(gw, name == "cap", a.agents))
                runs[name].append(r)
                print(f"round {rnd + 1} {name}: agents {[round(x, 1) for x in r['agent_decode_tok_s']]} tok/s, "
                      f"cron jobs beside {r['cron_beside_agents']}", flush=True)
            load.append(os.getloadavg()[0])
    finally:
        for gw in gws.values():
            if gw.runner is not None:
                await gw.runner.cleanup()
        srv.stop()
    return summarize(runs, a, load)


def summarize(runs: dict[str, list[dict[str, Any]]], a: argparse.Namespace, load: list[float]) -> dict[str, Any]:
    out: dict[str, Any] = {"method": __doc__, "rounds": a.rounds, "agents": a.agents, "embd": a.embd,
                           "layers": a.layers, "threads": a.threads, "load_average": [min(load), max(load)],
                           "set_ups": {}}
    base = statistics.median(x for r in runs["alone"] for x in r["agent_decode_tok_s"])
    for name, rs in runs.items():
        xs = [x for r in rs for x in r["agent_decode_tok_s"]]
        med = statistics.median(xs)
        out["set_ups"][name] = {
            "n": len(xs), "median_tok_s": round(med, 1), "p10_tok_s": round(pct(xs, 0.1), 1),
            "round_medians": [round(statistics.median(r["agent_decode_tok_s"]), 1) for r in rs],
            "vs_alone": round(med / base, 3),
            "cron_beside": sorted({n for r in rs for n in r["cron_beside_agents"]}),
            "first_agent_waited": [bool(r.get("agent_waited")) for r in rs],
        }
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--agents", type=int, default=5)
    ap.add_argument("--embd", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    t0 = time.monotonic()
    res = asyncio.run(main(args))
    res["wall_s"] = round(time.monotonic() - t0, 1)
    text = json.dumps({k: v for k, v in res.items() if k != "method"}, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2))
