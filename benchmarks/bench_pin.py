"""An agent's second-turn TTFT with a large prefix after competing web and cron requests, with
and without a slot pin (docs/gateway.md, "Slot pins").

Method (loopback only): one real llama-server (``$LLAMARIG_SERVER_BIN``, build 11434) on a
synthetic llama (llamarig.testing.synth: n_embd 512, 4 layers), ``-c 24576 -np 3 -kvu -t 1`` plus
the extra server arguments given (e.g. ``--cache-ram 0``); the gateway in this process with tier
C2 pinned (``pin_ttl_s = 2700``) or not. Per round and set-up: the agent's first turn (a system
prompt of LINES rules, about 48 tokens each, and a question; streamed, 8 tokens), four competing
requests (web, cron, web, cron: different prompts of about 500 tokens), then the agent's second
turn. Printed per run: the server's ``cache_n``/``prompt_n``/``prompt_ms`` of the second turn and
its TTFT (request sent to the first streamed chunk).

    .venv/bin/python benchmarks/bench_pin.py LINES ROUNDS [llama-server args...]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from llamarig.gateway.config import build_config, with_overrides  # noqa: E402
from llamarig.gateway.server import Gateway  # noqa: E402
from llamarig.testing.server import start_server  # noqa: E402
from llamarig.testing.synth import write_model  # noqa: E402

PREFIX = " ".join(f"rule {i}: keep functions short and name things well." for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 300))

async def turn(s: aiohttp.ClientSession, url: str, msgs: list[dict[str, str]],
               headers: dict[str, str]) -> tuple[float, dict[str, Any]]:
    t0 = time.monotonic()
    first: float | None = None
    last = b""
    async with s.post(url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 8, "stream": True, "ignore_eos": True}, headers=headers) as r:
        async for chunk in r.content.iter_any():
            if first is None:
                first = time.monotonic()
            last = (last + chunk)[-4000:]
    final = [json.loads(x[6:]) for x in last.split(b"\n\n") if x.startswith(b"data: {")][-1]
    return ((first or time.monotonic()) - t0) * 1000, final["timings"]


async def run(srv: Any, pin: bool, extra: str) -> dict[str, Any]:
    cfg = with_overrides(build_config({"tiers": {"C2": {"max_tokens": 64, "reasoning_budget": 16, **({"pin_ttl_s": 2700} if pin else {})}}}, "b"), backends=[srv.url], port=0)
    gw = Gateway(cfg)
    runner = await gw.start(port=0)
    url = f"http://127.0.0.1:{gw.port}"
    agent = {"x-llamarig-agent": "1"}
    try:
        async with aiohttp.ClientSession() as s:
            sys_ = {"role": "system", "content": PREFIX + extra}
            m1 = [sys_, {"role": "user", "content": "turn one"}]
            _, t1 = await turn(s, url, m1, agent)
            for i, h in enumerate([{}, {"x-llamarig-source": "cron-digest"}, {}, {"x-llamarig-source": "cron-x"}]):
                await turn(s, url, [{"role": "user", "content": f"competing request {i} " + "web chat text " * 40}], h)
            m2 = m1 + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "turn two"}]
            ttft, t2 = await turn(s, url, m2, agent)
            st = gw.status()
            return {"pin": pin, "turn1_prompt_n": t1["prompt_n"], "turn2_cache_n": t2["cache_n"], "turn2_prompt_n": t2["prompt_n"],
                    "turn2_prompt_ms": t2["prompt_ms"], "turn2_ttft_ms": round(ttft, 1), "pins": st["pins"]}
    finally:
        await runner.cleanup()


async def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="pin-"))
    model = write_model(work / "m.gguf", "llama", n_embd=512, n_layer=4, n_ff=1536, n_head=8, n_head_kv=4, head_dim=64, n_ctx_train=65536)
    args = ["-c", "24576", "-np", "3", "-kvu", "-t", "1"] + sys.argv[3:]
    srv = start_server(os.environ["LLAMARIG_SERVER_BIN"], model, args, log_dir=work)
    try:
        rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1
        for r in range(rounds):
            for pin in (False, True):
                print(json.dumps(await run(srv, pin, f" round {r} pin {pin}")), flush=True)
    finally:
        srv.stop()


if __name__ == "__main__":
    asyncio.run(main())
