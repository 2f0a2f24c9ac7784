"""Benchmark: planning a model on a hub from its header alone, over a throttled local hub.

Method: llamarig.testing.bigheader writes a Qwen3.6-27B-shaped GGUF (851 tensors, 151 936 tokens
+ 151 387 merges, sparse 13.8 GiB data section); llamarig.testing.hub.LocalHub serves it as
``acme/Qwen3.6-27B-like-GGUF`` on 127.0.0.1 with a bandwidth cap (bytes_per_s, a sleep after
each 64 KiB written) and an added latency before every answer (latency_s, one round trip).
``llamarig plan hf:acme/Qwen3.6-27B-like-GGUF:IQ4_NL --gpu rtx3090 -c 65536 --json`` runs as a
subprocess with HF_ENDPOINT pointed at the hub: once with an empty header cache (cold), then
again (warm: the header from the cache, one listing request), then with HF_HUB_OFFLINE=1. The
bytes the hub sent and the requests it saw are counted by the hub; wall time is the subprocess's
(Python start-up included, about 0.5 s of it). Each remote plan's JSON is checked to equal the
local file's plan, except where it names the model (-hf instead of -m).

Run:  .venv/bin/python benchmarks/bench_remote.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamarig.gguf import read_header
from llamarig.testing.bigheader import write_qwen36_like
from llamarig.testing.hub import LocalHub

REF = "hf:acme/Qwen3.6-27B-like-GGUF:IQ4_NL"
ARGS = ["--gpu", "rtx3090", "-c", "65536", "--json"]
LINKS = [("loopback", None, 0.0), ("100 Mbit/s, 50 ms", 12.5e6, 0.05), ("20 Mbit/s, 150 ms", 2.5e6, 0.15)]


def plan(model: str, env: dict[str, str]) -> tuple[dict, str, float]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "llamarig", "plan", model, *ARGS], env=env,
                       capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t
    if r.returncode not in (0, 1):
        raise SystemExit(r.stderr)
    return json.loads(r.stdout), r.stderr.strip(), wall


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        p = write_qwen36_like(Path(d) / "Qwen3.6-27B-like-IQ4_NL.gguf")
        size = p.stat().st_size
        header = read_header(p).header_bytes
        env = dict(os.environ)
        local, _e, local_wall = plan(str(p), env)
        print(f"file {size} bytes ({size / 2**30:.2f} GiB), header {header} bytes; local plan {local_wall:.2f} s")
        print("| link | run | bytes sent | % of file | requests | wall s | same plan |")
        print("|---|---|---|---|---|---|---|")
        for name, bps, lat in LINKS:
            with LocalHub() as hub:
                hub.add_repo("acme/Qwen3.6-27B-like-GGUF", {p.name: p})
                hub.bytes_per_s, hub.latency_s = bps, lat
                env = dict(os.environ, HF_ENDPOINT=hub.url, LLAMARIG_HEADER_CACHE=str(Path(d) / f"cache-{lat}"),
                           HF_HOME=str(Path(d) / "hf-home"))
                env.pop("HF_HUB_OFFLINE", None)
                for run in ("cold", "warm", "offline"):
                    if run == "offline":
                        env["HF_HUB_OFFLINE"] = "1"
                    sent0, req0 = hub.log.bytes_sent, len(hub.log.requests)
                    remote, err, wall = plan(REF, env)
                    r = json.loads(json.dumps(remote))
                    r["model"] = str(p)
                    r["command"][1:3] = ["-m", str(p)]
                    same = r == local
                    sent = hub.log.bytes_sent - sent0
                    print(f"| {name} | {run} | {sent} | {sent / size * 100:.4f} | "
                          f"{len(hub.log.requests) - req0} | {wall:.2f} | {'yes' if same else 'NO'} |")
                    print(f"<!-- {err} -->", file=sys.stderr)


if __name__ == "__main__":
    main()
