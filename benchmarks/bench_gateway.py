"""What ``llamarig gateway`` adds, measured against a fast local fake llama-server.

Method (all processes on this machine, loopback only):
- backend: ``python -m llamarig.gateway.fakebackend`` (aiohttp), one process, answers 64 "tok"
  chunks per request, SSE or JSON, with a fixed delay between tokens (``--interval-ms``);
- targets: the backend directly, ``llamarig gateway`` (one process, prompt tokens by local
  estimate, and a second run counting them with the backend's tokenizer endpoint), and, when
  available, LiteLLM's proxy (``--litellm BIN``: one worker, same backend as an openai/ model);
- non-streamed: ``--seq`` sequential requests, alternating one direct and one through the target
  (so load drift on a shared machine hits both); latency = request sent -> body read; added =
  p50/p99(target) - p50/p99(direct, same interleaved run);
- streamed: at each concurrency level, ``max(3 * level, 16)`` streams of ``--tokens`` tokens at
  ``--interval-ms``; TTFT = request sent -> first data chunk; added TTFT = p50/p99(target) -
  p50/p99(direct); throughput = tokens received / wall time of the level;
- CPU per 1000 streamed tokens = (CPU time of the proxy process and its descendants, every
  thread, from the scheduler's exact runtime in /proc/PID/task/TID/schedstat, over the level) /
  tokens * 1000; the user part (in brackets) comes from the tick-sampled utime in /proc/PID/stat.
  Also a full-rate run (interval 0).
The client runs in this process with aiohttp. On a 2-core machine the client, backend and proxy
share the cores, so absolute numbers are pessimistic; compare the rows.

    .venv/bin/python benchmarks/bench_gateway.py [--litellm /tmp/litellm-venv/bin/litellm] [--out results.json]
    .venv/bin/python benchmarks/bench_gateway.py --floor   # vs bare aiohttp and llamarig-http proxies
    .venv/bin/python benchmarks/bench_gateway.py --lone    # CPU per paced token: bare stream proxy vs gateway
    .venv/bin/python benchmarks/bench_gateway.py --replicas  # 1 gateway (in-process ledger) vs 3 sharing Valkey/Redis

``--replicas``: one fast fake backend, a real Valkey/Redis server on a loopback port (started and
stopped by pid, llamarig.testing.store), and three set-ups in the same run: one gateway with the
in-process ledger; one gateway with the ledger in the store (the store's cost alone); three
gateway processes sharing the ledger in the store. Rounds alternate the set-ups (``--reps``), each ``--seq`` non-streamed requests interleaved one direct / one through
the set-up (B: the three replicas in turn), so load drift hits both; added p50/p99 = target -
direct of the same round, the median over rounds; CPU per request = scheduler runtime
(/proc/PID/task/TID/schedstat) of the gateway processes over the round / requests, and of the
store process separately; idle CPU = the gateway processes' runtime over 3 s with no request
(health checks; heartbeats), which the per-request figure includes for the round's duration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
CLK = os.sysconf("SC_CLK_TCK")
#: sent to every target (LiteLLM refuses to start without a master key; the others ignore it)
KEY = "sk-bench-0123456789abcdef0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        kids.setdefault(int(raw[raw.rindex(")") + 2:].split()[1]), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu_s(pid: int | None) -> float:
    """CPU time of pid and its descendants (every thread), seconds (0 for None), from the
    scheduler's own runtime accounting (/proc/PID/task/TID/schedstat, nanoseconds): exact even
    for short bursts, unlike utime/stime, which are sampled at timer ticks."""
    if pid is None:
        return 0.0
    total = 0
    for p in _descendants(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                total += int(Path(f"/proc/{p}/task/{t}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def cpu_split(pid: int | None) -> tuple[float, float]:
    """(utime, stime) of pid and its descendants, seconds."""
    if pid is None:
        return 0.0, 0.0
    user = system = 0.0
    kids: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        f = raw[raw.rindex(")") + 2:].split()
        stats[int(d)] = f
        kids.setdefault(int(f[1]), []).append(int(d))
    todo = [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            user += int(stats[p][11]) / CLK
            system += int(stats[p][12]) / CLK
        todo.extend(kids.get(p, []))
    return user, system


def wait_http(url: str, timeout: float = 120) -> None:
    import urllib.request

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001 - polling until up
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def nonstream(url: str, n: int, model: str) -> list[float]:
    out: list[float] = []
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 64}
    async with aiohttp.ClientSession(headers=AUTH) as s:
        for i in range(n + 20):
            t0 = time.perf_counter()
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                await r.read()
                assert r.status == 200, r.status
            if i >= 20:  # warm-up
                out.append(time.perf_counter() - t0)
    return out


async def nonstream_paired(direct: str, target: str, n: int, model: str) -> tuple[list[float], list[float]]:
    """Alternate one request direct, one through the target: machine-load drift hits both."""
    return await nonstream_rotating(direct, [target], n, model)


async def streams(url: str, level: int, total: int, model: str) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 64, "stream": True}
    ttfts: list[float] = []
    durs: list[float] = []
    tokens = 0
    errors = 0
    sem = asyncio.Semaphore(level)

    async def one(s: aiohttp.ClientSession) -> None:
        nonlocal tokens, errors
        async with sem:
            t0 = time.perf_counter()
            first = None
            n = 0
            try:
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    if r.status != 200:
                        errors += 1
                        await r.read()
                        return
                    async for chunk in r.content.iter_any():
                        if first is None and b"data: {" in chunk:
                            first = time.perf_counter()
                        n += chunk.count(b'"content":"')
            except aiohttp.ClientError:
                errors += 1
                return
            ttfts.append((first or time.perf_counter()) - t0)
            durs.append(time.perf_counter() - t0)
            tokens += n

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, headers=AUTH, timeout=aiohttp.ClientTimeout(total=600)) as s:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(s) for _ in range(total)))
        wall = time.perf_counter() - t0
    return {"ttft": ttfts, "dur": durs, "tokens": tokens, "wall": wall, "errors": errors}


class Proc:
    def __init__(self, argv: list[str], health: str, env: dict[str, str] | None = None) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="bench-gw-", suffix=".log", delete=False)  # noqa: SIM115
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT))
        try:
            wait_http(health)
        except SystemExit:
            self.stop()
            print(Path(self.log.name).read_text()[-2000:], file=sys.stderr)
            raise

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()


def start_backend(port: int, interval_ms: float, tokens: int) -> Proc:
    return Proc([PY, "-m", "llamarig.gateway.fakebackend", "--port", str(port), "--tokens", str(tokens),
                 "--interval-ms", str(interval_ms), "--slots", "4096", "--n-ctx", "100000000"],
                f"http://127.0.0.1:{port}/health")


def start_gateway(port: int, backend: str, prompt_tokens: str, tmp: Path) -> Proc:
    cfg = tmp / f"gw-{prompt_tokens}-{port}.toml"
    cfg.write_text(f'[server]\nport = {port}\n[admission]\nprompt_tokens = "{prompt_tokens}"\nqueue_size = 4096\n'
                   f'[[backends]]\nurl = "{backend}"\n[tiers.B]\nmax_tokens = 64\n')
    return Proc([PY, "-m", "llamarig.cli.main", "gateway", "--config", str(cfg), "--log-level", "warning"],
                f"http://127.0.0.1:{port}/health")


def start_replica(port: int, backend: str, tmp: Path, ledger: str | None, replica: str) -> Proc:
    cfg = tmp / f"gw-{replica}-{port}.toml"
    led = f'[ledger]\nurl = "{ledger}"\nreplica = "{replica}"\n' if ledger else ""
    cfg.write_text(f'[server]\nport = {port}\n[admission]\nprompt_tokens = "estimate"\nqueue_size = 4096\n'
                   f'[[backends]]\nurl = "{backend}"\n[tiers.B]\nmax_tokens = 64\n{led}')
    return Proc([PY, "-m", "llamarig.cli.main", "gateway", "--config", str(cfg), "--log-level", "warning"],
                f"http://127.0.0.1:{port}/health")


async def nonstream_rotating(direct: str, targets: list[str], n: int,
                             model: str = "fake") -> tuple[list[float], list[float]]:
    """Alternate one request direct, one through a target, the targets in turn; the first 20
    pairs are a warm-up, not counted."""
    d: list[float] = []
    t: list[float] = []
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 64}
    async with aiohttp.ClientSession(headers=AUTH) as s:
        for i in range(n + 20):
            for url, out in ((direct, d), (targets[i % len(targets)], t)):
                t0 = time.perf_counter()
                async with s.post(url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    assert r.status == 200, r.status
                if i >= 20:
                    out.append(time.perf_counter() - t0)
    return d, t


def replicas_run(n: int, reps: int) -> dict[str, Any]:
    """One gateway with the in-process ledger vs three sharing a real Valkey/Redis, one run."""
    sys.path.insert(0, str(ROOT / "src"))
    from llamarig.testing.store import start_store

    tmp = Path(tempfile.mkdtemp(prefix="bench-gw-"))
    store = start_store()
    bp = free_port()
    procs: list[Proc] = [start_backend(bp, 0, 64)]
    burl = f"http://127.0.0.1:{bp}"
    names = ("1 gateway, in-process ledger", "1 gateway, shared ledger (Valkey/Redis)",
             "3 gateways, shared ledger (Valkey/Redis)")
    rows: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    try:
        pa, p1 = free_port(), free_port()
        a = [start_replica(pa, burl, tmp, None, "solo")]
        one = [start_replica(p1, burl, tmp, store.url, "alone")]
        pbs = [free_port() for _ in range(3)]
        b = [start_replica(p, burl, tmp, store.url, f"r{i}") for i, p in enumerate(pbs)]
        procs += a + one + b
        setups = {names[0]: ([f"http://127.0.0.1:{pa}"], a), names[1]: ([f"http://127.0.0.1:{p1}"], one),
                  names[2]: ([f"http://127.0.0.1:{p}" for p in pbs], b)}
        time.sleep(2)
        print(f"store: {store.binary}; load average {os.getloadavg()}", flush=True)
        idle: dict[str, float] = {}
        for name, (_urls, ps) in setups.items():  # background work (health checks, heartbeats)
            c0 = sum(cpu_s(p.p.pid) for p in ps)
            time.sleep(3)
            idle[name] = (sum(cpu_s(p.p.pid) for p in ps) - c0) / 3 * 1000
            print(f"{name}: idle CPU {idle[name]:.2f} ms/s", flush=True)
        for _ in range(reps):
            for name, (urls, ps) in setups.items():
                c0 = sum(cpu_s(p.p.pid) for p in ps)
                s0 = cpu_s(store.proc.pid)
                d, t = asyncio.run(nonstream_rotating(burl, urls, n))
                c1 = sum(cpu_s(p.p.pid) for p in ps)
                s1 = cpu_s(store.proc.pid)
                row = {"added_p50": pct(t, 50) - pct(d, 50), "added_p99": pct(t, 99) - pct(d, 99),
                       "direct_p50": pct(d, 50), "p50": pct(t, 50),
                       "gw_cpu_ms_per_req": (c1 - c0) / len(t) * 1000,
                       "store_cpu_ms_per_req": (s1 - s0) / len(t) * 1000}
                rows[name].append(row)
                print(f"{name}: added p50 {fmt_ms(row['added_p50'])} ms, p99 {fmt_ms(row['added_p99'])} ms, "
                      f"gateway CPU {row['gw_cpu_ms_per_req']:.3f} ms/request, store CPU "
                      f"{row['store_cpu_ms_per_req']:.3f} ms/request", flush=True)
    finally:
        for p in procs:
            p.stop()
        store.stop()

    def med(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    lines = ["| set-up | added p50 ms | added p99 ms | gateway CPU ms/request | store CPU ms/request | rounds "
             "| gateways' idle CPU ms/s |", "|---|---|---|---|---|---|---|"]
    for name, rs in rows.items():
        lines.append(f"| {name} | {fmt_ms(med([r['added_p50'] for r in rs]))} | "
                     f"{fmt_ms(med([r['added_p99'] for r in rs]))} | "
                     f"{med([r['gw_cpu_ms_per_req'] for r in rs]):.3f} | "
                     f"{med([r['store_cpu_ms_per_req'] for r in rs]):.3f} | {len(rs)} | {idle[name]:.2f} |")
    print("\n".join(lines))
    return {"rows": rows, "idle_cpu_ms_per_s": idle, "table": lines}


def start_litellm(binary: str, port: int, backend: str, tmp: Path) -> Proc:
    cfg = tmp / "litellm.yaml"
    cfg.write_text("model_list:\n  - model_name: fake\n    litellm_params:\n      model: openai/fake\n"
                   f"      api_base: {backend}/v1\n      api_key: none\n"
                   "litellm_settings:\n  drop_params: true\n  turn_off_message_logging: true\n")
    env = dict(os.environ, LITELLM_LOG="ERROR", LITELLM_MASTER_KEY=KEY)
    return Proc([binary, "--config", str(cfg), "--port", str(port), "--num_workers", "1"],
                f"http://127.0.0.1:{port}/health/liveliness", env=env)


#: the floor: a bare aiohttp proxy (no parsing, no admission) for non-streamed requests
MIN_PROXY = """
import sys, aiohttp
from aiohttp import web
UP = sys.argv[2]
async def on_start(app):
    app["s"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
async def h(req):
    body = await req.read()
    async with req.app["s"].post(UP + req.path, data=body, headers={"Content-Type": "application/json"}) as r:
        return web.Response(status=r.status, body=await r.read(), headers={"Content-Type": r.headers["Content-Type"]})
async def health(req):
    return web.Response(text="ok")
app = web.Application()
app.on_startup.append(on_start)
app.router.add_post("/v1/chat/completions", h)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


#: the floor of llamarig's own HTTP layers: its server and upstream client, no gateway logic
LEAN_PROXY = """
import asyncio, sys
from llamarig.gateway.http import HttpServer, Response
from llamarig.gateway.upstream import UpstreamPool
UP = sys.argv[2]
async def main():
    pool = UpstreamPool()
    async def h(req):
        r = await pool.post(UP + req.path, req.body, {"Content-Type": "application/json"})
        data = await r.read()
        r.release()
        return Response(status=r.status, body=data, headers={"Content-Type": r.headers["Content-Type"]})
    async def health(req):
        return Response(text="ok")
    async def nf(req):
        return Response(status=404)
    srv = HttpServer(fallback=nf, max_body=lambda: 1 << 20, too_large=lambda c, l: Response(status=413))
    srv.add("POST", "/v1/chat/completions", h)
    srv.add("GET", "/health", health)
    await srv.start("127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()
try:
    import uvloop
    uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""


#: a bare streaming proxy on llamarig's HTTP layers: the CPU floor per streamed token
LEAN_STREAM_PROXY = LEAN_PROXY.replace(
    """        data = await r.read()
        r.release()
        return Response(status=r.status, body=data, headers={"Content-Type": r.headers["Content-Type"]})""",
    """        from llamarig.gateway.http import StreamResponse
        resp = StreamResponse(status=r.status, headers={"Content-Type": r.headers["Content-Type"]})
        await resp.prepare(req)
        async for c in r.iter_any():
            await resp.write(c)
        r.release()
        return resp""")


def lone_run(levels: tuple[int, ...] = (1, 16)) -> list[str]:
    """CPU per 1000 paced streamed tokens: a bare streaming proxy vs the gateway."""
    assert LEAN_STREAM_PROXY != LEAN_PROXY
    tmp = Path(tempfile.mkdtemp(prefix="bench-gw-"))
    bp, pl, pg = free_port(), free_port(), free_port()
    be = start_backend(bp, 20, 64)
    burl = f"http://127.0.0.1:{bp}"
    (tmp / "leanstream.py").write_text(LEAN_STREAM_PROXY)
    bare = Proc([PY, str(tmp / "leanstream.py"), str(pl), burl], f"http://127.0.0.1:{pl}/health")
    gw = start_gateway(pg, burl, "estimate", tmp)
    out: list[str] = []
    try:
        time.sleep(2)
        for lv in levels:
            for name, port, proc in (("bare llamarig-http stream proxy", pl, bare), ("llamarig gateway", pg, gw)):
                c0 = cpu_s(proc.p.pid)
                r = asyncio.run(streams(f"http://127.0.0.1:{port}", lv, max(3 * lv, 16), "fake"))
                c1 = cpu_s(proc.p.pid)
                out.append(f"{lv} stream(s), {name}: {(c1 - c0) / max(r['tokens'], 1) * 1e6:.1f} ms CPU per 1000 "
                           f"tokens ({r['tokens']} tokens, errors {r['errors']})")
                print(out[-1], flush=True)
    finally:
        for p in (bare, gw, be):
            p.stop()
    return out


def floor_run(n: int, reps: int = 3) -> list[str]:
    """Interleaved non-streamed added p50: bare aiohttp proxy vs the gateway, ``reps`` rounds."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-gw-"))
    bp, pm, pl, pg = free_port(), free_port(), free_port(), free_port()
    be = start_backend(bp, 0, 64)
    burl = f"http://127.0.0.1:{bp}"
    (tmp / "minproxy.py").write_text(MIN_PROXY)
    (tmp / "leanproxy.py").write_text(LEAN_PROXY)
    procs = [be, Proc([PY, str(tmp / "minproxy.py"), str(pm), burl], f"http://127.0.0.1:{pm}/health"),
             Proc([PY, str(tmp / "leanproxy.py"), str(pl), burl], f"http://127.0.0.1:{pl}/health"),
             start_gateway(pg, burl, "estimate", tmp)]
    out: list[str] = []
    try:
        time.sleep(2)
        for _ in range(reps):
            for name, port in (("bare aiohttp proxy", pm), ("bare llamarig-http proxy", pl), ("llamarig gateway", pg)):
                d, t = asyncio.run(nonstream_paired(burl, f"http://127.0.0.1:{port}", n, "fake"))
                out.append(f"{name}: direct p50 {fmt_ms(pct(d, 50))} ms, through it {fmt_ms(pct(t, 50))} ms, "
                           f"added {fmt_ms(pct(t, 50) - pct(d, 50))} ms")
                print(out[-1], flush=True)
    finally:
        for p in procs:
            p.stop()
    return out


def fmt_ms(x: float) -> str:
    return f"{x * 1000:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--seq", type=int, default=300)
    ap.add_argument("--litellm", default=None, help="path of the litellm CLI (separate venv)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--lone", action="store_true",
                    help="only CPU per paced streamed token at 1 and 16 streams: bare streaming proxy vs the gateway")
    ap.add_argument("--replicas", action="store_true",
                    help="only 1 gateway (in-process ledger) vs 3 replicas sharing a real Valkey/Redis ledger")
    ap.add_argument("--reps", type=int, default=3, help="--replicas: alternating rounds")
    ap.add_argument("--floor", action="store_true",
                    help="only compare the gateway with a bare aiohttp proxy (non-streamed, interleaved)")
    a = ap.parse_args()
    if a.lone:
        lone_run()
        return
    if a.floor:
        floor_run(a.seq)
        return
    if a.replicas:
        res = replicas_run(a.seq, a.reps)
        if a.out:
            Path(a.out).write_text(json.dumps(res, indent=2))
        return
    levels = [int(x) for x in a.levels.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-gw-"))
    try:
        import uvloop  # noqa: F401
        loop = os.environ.get("LLAMARIG_GATEWAY_LOOP", "auto").replace("auto", "uvloop")
    except ImportError:
        loop = "asyncio"
    results: dict[str, Any] = {"method": __doc__, "args": vars(a), "gateway_loop": loop,
                               "nonstream": {}, "stream": {}, "fullrate": {}}
    print(f"gateway event loop: {loop}; load average {os.getloadavg()}", flush=True)
    procs: list[Proc] = []
    try:
        # fast backend (no token delay) for non-streamed latency and full-rate CPU
        bfast_port, bslow_port = free_port(), free_port()
        procs.append(start_backend(bfast_port, 0, a.tokens))
        procs.append(start_backend(bslow_port, a.interval_ms, a.tokens))
        bfast, bslow = f"http://127.0.0.1:{bfast_port}", f"http://127.0.0.1:{bslow_port}"
        starters: dict[str, Any] = {"direct": None}
        for mode in ("estimate", "backend"):
            starters[f"llamarig-{mode}"] = (lambda m: lambda pf, ps: (
                start_gateway(pf, bfast, m, tmp), start_gateway(ps, bslow, m, tmp)))(mode)
        if a.litellm:
            starters["litellm"] = lambda pf, ps: (start_litellm(a.litellm, pf, bfast, tmp),
                                                 start_litellm(a.litellm, ps, bslow, tmp))
        for name, starter in starters.items():
            # only this target's proxy processes run during its measurements
            model = "fake"
            if starter is None:
                fast, slow, pid_fast, pid_slow = bfast, bslow, None, None
                here: tuple[Proc, ...] = ()
            else:
                pf, ps = free_port(), free_port()
                t0 = time.monotonic()
                here = starter(pf, ps)
                procs.extend(here)
                results.setdefault("start_s", {})[name] = round(time.monotonic() - t0, 1)
                fast, slow = f"http://127.0.0.1:{pf}", f"http://127.0.0.1:{ps}"
                pid_fast, pid_slow = here[0].p.pid, here[1].p.pid
                time.sleep(2)  # let start-up work settle before measuring CPU
            c0 = cpu_s(pid_fast) if pid_fast else 0.0
            if starter is None:
                lat = asyncio.run(nonstream(fast, a.seq, model))
                dlat = lat
            else:
                dlat, lat = asyncio.run(nonstream_paired(bfast, fast, a.seq, model))
            c1 = cpu_s(pid_fast) if pid_fast else 0.0
            results["nonstream"][name] = {"p50": pct(lat, 50), "p99": pct(lat, 99), "n": len(lat),
                                          "paired_direct_p50": pct(dlat, 50), "paired_direct_p99": pct(dlat, 99),
                                          "cpu_per_req_ms": (c1 - c0) / len(lat) * 1000 if pid_fast else None}
            print(f"[nonstream] {name}: p50 {fmt_ms(pct(lat, 50))} ms p99 {fmt_ms(pct(lat, 99))} ms", flush=True)
            # full-rate streaming CPU (no token delay), 16 streams
            r = asyncio.run(streams(fast, 16, 64, model))
            c2 = cpu_s(pid_fast) if pid_fast else 0.0
            results["fullrate"][name] = {"tokens": r["tokens"], "wall": r["wall"], "errors": r["errors"],
                                         "tok_per_s": r["tokens"] / r["wall"],
                                         "cpu_per_1k_tokens_ms": (c2 - c1) / max(r["tokens"], 1) * 1e6 if pid_fast else None}
            print(f"[fullrate] {name}: {r['tokens'] / r['wall']:.0f} tok/s", flush=True)
            for lv in levels:
                u0, _ = cpu_split(pid_slow)
                c0 = cpu_s(pid_slow)
                r = asyncio.run(streams(slow, lv, max(3 * lv, 16), model))
                u1, _ = cpu_split(pid_slow)
                c1 = cpu_s(pid_slow)
                results["stream"].setdefault(name, {})[str(lv)] = {
                    "ttft_p50": pct(r["ttft"], 50), "ttft_p99": pct(r["ttft"], 99), "dur_p50": pct(r["dur"], 50),
                    "tokens": r["tokens"], "wall": r["wall"], "errors": r["errors"],
                    "tok_per_s": r["tokens"] / r["wall"],
                    "cpu_per_1k_tokens_ms": (c1 - c0) / max(r["tokens"], 1) * 1e6 if pid_slow else None,
                    "user_cpu_per_1k_tokens_ms": (u1 - u0) / max(r["tokens"], 1) * 1e6 if pid_slow else None,
                }
                print(f"[stream {lv}] {name}: ttft p50 {fmt_ms(pct(r['ttft'], 50))} ms, "
                      f"{r['tokens'] / r['wall']:.0f} tok/s, errors {r['errors']}", flush=True)
            for p in here:
                p.stop()
    finally:
        for p in procs:
            p.stop()

    # report
    lines = ["| target | non-stream p50 ms | p99 ms | direct p50 / p99 ms (interleaved) | added p50 ms | added p99 ms | CPU ms/request |",
             "|---|---|---|---|---|---|---|"]
    for name, v in results["nonstream"].items():
        cpu = f"{v['cpu_per_req_ms']:.2f}" if v["cpu_per_req_ms"] is not None else "-"
        lines.append(f"| {name} | {fmt_ms(v['p50'])} | {fmt_ms(v['p99'])} | {fmt_ms(v['paired_direct_p50'])} / "
                     f"{fmt_ms(v['paired_direct_p99'])} | {fmt_ms(v['p50'] - v['paired_direct_p50'])} | "
                     f"{fmt_ms(v['p99'] - v['paired_direct_p99'])} | {cpu} |")
    lines += ["", "| target | streams | TTFT p50 ms | TTFT p99 ms | added TTFT p50 ms | added p99 ms | stream p50 s | tok/s | errors | CPU ms / 1000 tok (user part) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name, per in results["stream"].items():
        for lv, v in per.items():
            dd = results["stream"]["direct"][lv]
            cpu = (f"{v['cpu_per_1k_tokens_ms']:.1f} ({v['user_cpu_per_1k_tokens_ms']:.1f})"
                   if v["cpu_per_1k_tokens_ms"] is not None else "-")
            lines.append(f"| {name} | {lv} | {fmt_ms(v['ttft_p50'])} | {fmt_ms(v['ttft_p99'])} | "
                         f"{fmt_ms(v['ttft_p50'] - dd['ttft_p50'])} | {fmt_ms(v['ttft_p99'] - dd['ttft_p99'])} | "
                         f"{v['dur_p50']:.3f} | {v['tok_per_s']:.0f} | {v['errors']} | {cpu} |")
    lines += ["", "| target | full-rate tok/s (16 streams, no token delay) | CPU ms / 1000 tok |", "|---|---|---|"]
    for name, v in results["fullrate"].items():
        cpu = f"{v['cpu_per_1k_tokens_ms']:.1f}" if v["cpu_per_1k_tokens_ms"] is not None else "-"
        lines.append(f"| {name} | {v['tok_per_s']:.0f} | {cpu} |")
    lines += ["", f"gateway event loop: {loop}; load average at the end {os.getloadavg()}"]
    table = "\n".join(lines)
    print(table)
    results["table"] = table
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
