"""Overhead of the `llamarig bench` client itself (run on demand, not a test).

1. CPU time per streamed token: a synthetic SSE server in a *separate process* streams tokens as
   fast as it can (llama-server's /completion chunk shape, timings on the final chunk); the
   client process's CPU time (time.process_time) is divided by the tokens received.
2. Highest concurrency one process drives: C parallel streams, each paced by the server at a
   fixed inter-token gap (default 20 ms = 50 tok/s, a realistic per-stream decode rate). A level
   counts as driven when the client-clock decode rate of the median stream is within 5 % of the
   server-side rate (timings) and the client process used < 90 % of one core.

Usage: .venv/bin/python benchmarks/bench_harness.py [--tokens 2000] [--gap-ms 20]
       [--levels 1,8,32,64,128,256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import statistics
import time

from aiohttp import web

from llamarig.bench.client import BenchClient, RequestSample


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(port: int) -> None:
    async def completion(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body.get("n_predict", 16))
        gap = float(body.get("gap_ms", 0.0)) / 1000.0
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        t0 = time.perf_counter()
        t_first = None
        for i in range(n):
            await resp.write(b'data: {"content":"tok","tokens":[%d],"stop":false}\n\n' % i)
            if t_first is None:
                t_first = time.perf_counter()
            if gap:
                await asyncio.sleep(gap)
            elif i % 64 == 0:
                await asyncio.sleep(0)
        t_end = time.perf_counter()
        final = {"content": "", "stop": True, "id_slot": 0,
                 "timings": {"cache_n": 0, "prompt_n": 1, "prompt_ms": (t_first - t0) * 1000, "predicted_n": n,
                             "predicted_ms": (t_end - (t_first or t0)) * 1000}}
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/completion", completion)
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=False)


async def cpu_per_token(url: str, tokens: int, reps: int) -> dict[str, float]:
    async with BenchClient(url) as c:
        await c.stream("/completion", {"prompt": "x", "n_predict": 8}, RequestSample(0, "warm"))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        got = 0
        for i in range(reps):
            s = await c.stream("/completion", {"prompt": "x", "n_predict": tokens}, RequestSample(i, "cpu"))
            got += s.n_token_chunks
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {"tokens": got, "cpu_s": cpu, "wall_s": wall, "cpu_us_per_token": 1e6 * cpu / max(got, 1),
            "tokens_per_s_received": got / wall}


async def concurrency_level(url: str, c: int, tokens: int, gap_ms: float) -> dict[str, float]:
    async with BenchClient(url) as cl:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        samples = await asyncio.gather(*(
            cl.stream("/completion", {"prompt": "x", "n_predict": tokens, "gap_ms": gap_ms}, RequestSample(i, "conc"))
            for i in range(c)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    ok = [s for s in samples if s.ok and s.client_decode_tok_s and s.server_decode_tok_s]
    ratio = statistics.median(s.client_decode_tok_s / s.server_decode_tok_s for s in ok) if ok else 0.0
    worst = min((s.client_decode_tok_s / s.server_decode_tok_s for s in ok), default=0.0)
    paced = statistics.median(s.server_decode_tok_s for s in ok) if ok else 0.0
    return {"streams": c, "ok": len(ok), "server_paced_tok_s": paced, "client_over_server_median": ratio, "client_over_server_worst": worst,
            "client_cpu_share": cpu / wall, "aggregate_tok_s": sum(s.predicted_n or 0 for s in ok) / wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--conc-tokens", type=int, default=100)
    ap.add_argument("--levels", default="1,8,32,64,128,256")
    a = ap.parse_args()
    port = _free_port()
    proc = mp.Process(target=_serve, args=(port,), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        r = asyncio.run(cpu_per_token(url, a.tokens, a.reps))
        print(f"cpu per streamed token: {r['cpu_us_per_token']:.1f} µs ({r['tokens']} tokens, {r['cpu_s']:.3f} s CPU, "
              f"{r['tokens_per_s_received']:.0f} tok/s received)")
        best = 0
        for c in (int(x) for x in a.levels.split(",")):
            lv = asyncio.run(concurrency_level(url, c, a.conc_tokens, a.gap_ms))
            paced = lv["server_paced_tok_s"] >= 0.9 * 1000 / a.gap_ms  # else the fake server, not the client, is the limit
            driven = lv["ok"] == c and abs(lv["client_over_server_median"] - 1) <= 0.05 and lv["client_cpu_share"] < 0.9
            best = c if driven and paced else best
            print(f"streams {c:4d}: ok {lv['ok']:4d}, client/server decode median {lv['client_over_server_median']:.3f} "
                  f"worst {lv['client_over_server_worst']:.3f}, client CPU {100 * lv['client_cpu_share']:.0f} %, "
                  f"aggregate {lv['aggregate_tok_s']:.0f} tok/s, server paced {lv['server_paced_tok_s']:.0f} tok/s/stream -> "
                  f"{'driven' if driven and paced else 'NOT driven' if paced else 'server could not pace (not a client limit)'}")
        print(f"highest concurrency driven from one process at {1000 / a.gap_ms:.0f} tok/s per stream: {best}")
    finally:
        proc.terminate()
        proc.join(5)


if __name__ == "__main__":
    main()
