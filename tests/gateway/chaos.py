"""What the chaos tests share (tests/gateway/test_chaos.py: one gateway; test_chaos_replicas.py:
three replicas on one ledger): seeded request bodies and headers, and the client that may hang
up on a request before it ends."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import aiohttp

#: per request: far above any legitimate wait (the chaos configs' queue timeouts are under 1 s)
REQUEST_TIMEOUT_S = 30.0
PATHS = ("/v1/chat/completions", "/v1/completions", "/completion")
KEYS = ("sk-chaos-alice", "sk-chaos-bob-1")  # bob: 20 % of the requests, a small in-flight limit


def body(rnd: random.Random, path: str, stream: bool) -> dict[str, Any]:
    """A request body for ``path``: a short prompt; 60 % ask for 1-9000 tokens, 10 % of the
    /completion ones for -1 (until the context is full)."""
    b: dict[str, Any] = {"stream": stream}
    if path == "/v1/chat/completions":
        b["messages"] = [{"role": "user", "content": "hello " * rnd.randint(1, 40)}]
    else:
        b["prompt"] = "once upon a time " * rnd.randint(1, 40)
    r = rnd.random()
    field = "n_predict" if path == "/completion" else "max_tokens"
    if r < 0.6:
        b[field] = rnd.randint(1, 9000)
    elif r < 0.7 and path == "/completion":
        b[field] = -1
    return b


def headers(rnd: random.Random, tiers: Sequence[str | None]) -> dict[str, str]:
    """A key (bob 20 %), a tier header from ``tiers`` (None: no header), cron 15 %."""
    h = {"Authorization": f"Bearer {KEYS[1] if rnd.random() < 0.2 else KEYS[0]}"}
    tier = rnd.choice(tiers)
    if tier is not None:
        h["x-llamarig-tier"] = tier
    if rnd.random() < 0.15:
        h["x-llamarig-source"] = "cron-nightly"
    return h


async def finish(task: asyncio.Future[None], p: dict[str, Any], outcomes: dict[int, str]) -> None:
    """Wait for one request's ``task``; a plan with ``cut == "soon"`` hangs up after
    ``cut_after_s`` when it has not ended. The outcome is recorded: "cut", "hang" (past
    REQUEST_TIMEOUT_S) or the client error; the request's own coroutine records the rest."""
    if p["cut"] == "soon":
        done, _ = await asyncio.wait({task}, timeout=p["cut_after_s"])
        if not done:
            task.cancel()
            outcomes[p["i"]] = "cut"
    try:
        await asyncio.wait_for(task, REQUEST_TIMEOUT_S)
    except asyncio.CancelledError:
        if outcomes.get(p["i"]) != "cut":
            raise
    except asyncio.TimeoutError:
        outcomes[p["i"]] = "hang"
    except (aiohttp.ClientError, OSError) as e:
        outcomes[p["i"]] = f"client_error:{type(e).__name__}"
