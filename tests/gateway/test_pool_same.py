"""The same KV pool everywhere (issue 34 part 1), against the real llama-server (build 11434, a
synthetic llama model trained to 16384 tokens, ``-np 4 -kvu`` on a 49152-token pool, so /props
shows each slot capped at 16384): the pool's tokens, exact or at least, and the cells in use as
``/gateway/status``, ``llamarig gateway status``, the gateway's ``/metrics`` and ``llamarig top
--once --json`` (directly against the server and through the gateway) report them. They are
equal; where a reader cannot know the pool (no log, no ``-c`` on the command line) it says "at
least" with the bound the gateway gives. Asserted on values once the requests are done (idle
slots keep their cells), never on timing."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from llamarig.bench.monitor import parse_metrics

pytestmark = pytest.mark.server

#: a slot capped at the model's n_ctx_train: /props shows 16384, the pool is 49152
TRAIN, POOL, SLOTS = 16384, 49152, 4


class Seen(NamedTuple):
    """What one reader says of the pool: its tokens, ``exact`` or ``at_least``, the cells in use."""

    tokens: int
    bound: str
    cells: int


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read().decode()
    return body if url.endswith("/metrics") else json.loads(body)


def complete(url: str, prompt: str) -> None:
    req = urllib.request.Request(url + "/completion", data=json.dumps(
        {"prompt": prompt, "n_predict": 40, "ignore_eos": True}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        assert json.loads(r.read())["tokens_predicted"] == 40


def server_cells(url: str) -> int:
    """The truth: the server's own /slots, the sum of n_prompt_tokens (server-context.cpp:738)."""
    return sum(s["n_prompt_tokens"] for s in get(url + "/slots") if "n_prompt_tokens" in s)


def gateway_readers(gw: str, cli: Any) -> dict[str, Seen]:
    """/gateway/status (the backend's pool and the whole), `gateway status` and /metrics."""
    st = get(gw + "/gateway/status")
    p = st["backends"][0]["pool"]
    code, text, err = cli("gateway", "status", "--url", gw)
    assert code == 0, err
    m = re.search(r"b0: (\d+) of (at least )?(\d+) KV cells in use", text)
    assert m is not None, text
    cell = re.search(r"0 / (at least )?(\d+) \(", text)  # the reserved / pool column
    assert cell is not None and cell.group(1) == m.group(2), text
    met = parse_metrics(get(gw + "/metrics"))

    def metric(name: str) -> float:
        return met[f'llamarig_gateway_{name}{{backend="b0"}}']

    return {
        "status backend": Seen(p["server_tokens"], p["server_bound"], p["cells_in_use"]),
        "status admission": Seen(p["tokens"], "exact" if p["exact"] else "at_least", p["cells_in_use"]),
        "status total": Seen(st["pool"]["tokens"], "exact" if st["pool"]["exact"] else "at_least",
                             st["pool"]["cells_in_use"]),
        "gateway status": Seen(int(m.group(3)), "at_least" if m.group(2) else "exact", int(m.group(1))),
        "gateway status pool": Seen(int(cell.group(2)), "at_least" if cell.group(1) else "exact", int(m.group(1))),
        "metrics server": Seen(int(metric("server_pool_tokens")),
                               "exact" if metric("server_pool_exact") else "at_least",
                               int(metric("kv_cells_in_use"))),
        "metrics admission": Seen(int(metric("pool_tokens")), "exact" if metric("pool_exact") else "at_least",
                                  int(metric("kv_cells_in_use"))),
    }


def top_reader(url: str, cli: Any) -> tuple[Seen, str]:
    code, text, err = cli("top", "--url", url, "--once", "--json", "--interval", "0.2", "--no-gpu")
    assert code == 0, err
    pool = json.loads(text)["servers"][0]["pool"]
    return Seen(pool["tokens"], pool["bound"], pool["cells_used"]), pool["source"]


def test_the_same_pool_in_the_gateway_its_status_metrics_and_top(
        lt: Any, synth_model: Any, llama_server: Any, cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool the server's log shows (49152, the slots capped at 16384): with the log the
    gateway's four readers and top, directly and through it, say 49152 exact; a gateway without
    the log says at least 16384, and so does top through it; the cells in use are the server's."""
    monkeypatch.setenv("COLUMNS", "200")  # `gateway status`: no wrapped table cells
    srv = llama_server(synth_model("llama", n_ctx_train=TRAIN), "-c", str(POOL), "-np", str(SLOTS), "-kvu",
                       "--metrics")
    with_log = lt.gateway({"backends": [{"url": srv.url, "log": str(srv.log_path)}]})
    props_only = lt.gateway({}, backends=[srv.url])
    for i in range(3):  # cells in use: each request leaves its prompt and answer in a slot
        complete(with_log.url, f"request {i}: " + "tell me about the shared pool " * (5 + 10 * i))
    cells = server_cells(srv.url)
    assert cells > 3 * 40

    exact = Seen(POOL, "exact", cells)
    seen = gateway_readers(with_log.url, cli)
    assert seen == dict.fromkeys(seen, exact), seen
    direct, source = top_reader(srv.url, cli)
    assert (direct, source) == (exact, "log")  # top found the server's log through /proc
    through, source = top_reader(with_log.url, cli)
    assert (through, source) == (exact, "gateway")

    bound = Seen(TRAIN, "at_least", cells)
    seen = gateway_readers(props_only.url, cli)
    assert seen == dict.fromkeys(seen, bound), seen
    through, source = top_reader(props_only.url, cli)
    assert (through, source) == (bound, "gateway")
    assert server_cells(srv.url) == cells  # nothing ran in between: the cells compared are the same


def test_top_without_the_log_says_at_least_the_gateways_bound(
        lt: Any, synth_model: Any, llama_server: Any, cli: Any, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """The same pool set through the environment (``LLAMA_ARG_CTX_SIZE``, as container images do)
    with the log off: neither the gateway nor top can see 49152. Both say "at least 16384" (top
    from /props with /v1/models' n_ctx_train, and the command line's layout, -kvu without -c)."""
    monkeypatch.setenv("COLUMNS", "200")
    srv = llama_server(synth_model("llama", n_ctx_train=TRAIN), "-np", str(SLOTS), "-kvu", "--metrics",
                       "--log-disable", env={"LLAMA_ARG_CTX_SIZE": str(POOL)})
    assert "initializing, n_slots" not in srv.log
    gw = lt.gateway({}, backends=[srv.url])
    complete(gw.url, "one request " * 20)
    cells = server_cells(srv.url)
    bound = Seen(TRAIN, "at_least", cells)
    seen = gateway_readers(gw.url, cli)
    assert seen == dict.fromkeys(seen, bound), seen
    direct, source = top_reader(srv.url, cli)
    assert (direct, source) == (bound, "command")
    through, source = top_reader(gw.url, cli)
    assert (through, source) == (bound, "gateway")
    code, text, _ = cli("top", "--url", srv.url, "--once", "--interval", "0.2", "--no-gpu")
    assert code == 0 and f"pool {cells} of at least {TRAIN} cells" in text and "pool ≤" in text.splitlines()[0]


# ------------------------------------------------------------------------------ in flight

#: a model slow enough that three requests of ~1000 tokens still decode while every reader reads
#: (tens of seconds at one thread; the readers take about one)
SLOW = {"n_embd": 1024, "n_layer": 8, "n_ff": 4096, "n_head": 16, "n_head_kv": 4, "head_dim": 64}


def busy_tasks(url: str) -> tuple[dict[int, int], int]:
    """The server's busy slots (slot id -> its task) and its cells in use, in one /slots reading."""
    slots = get(url + "/slots")
    tasks = {s["id"]: s["id_task"] for s in slots if s.get("is_processing")}
    return tasks, sum(s.get("n_prompt_tokens", 0) for s in slots)


def decoding(url: str, n: int) -> dict[int, int]:
    """Wait for the event: ``n`` slots busy, each with a token generated (a deadline only against a hang)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        slots = get(url + "/slots")
        busy = [s for s in slots if s.get("is_processing") and s["next_token"][0]["n_decoded"] > 0]
        if len(busy) == n:
            return {s["id"]: s["id_task"] for s in busy}
        time.sleep(0.05)
    raise AssertionError(f"the server never had {n} slots decoding: {get(url + '/slots')}")


def send(url: str, prompt: str, n_predict: int) -> threading.Thread:
    def run() -> None:
        with contextlib.suppress(Exception):  # ended by the server's stop at the end of the test
            req = urllib.request.Request(url + "/completion", data=json.dumps(
                {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True}).encode(),
                headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=600).read()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


class Figures(NamedTuple):
    """The figures every reader shows: the pool's tokens, exact or at least, the slots' layout,
    one slot's context."""

    tokens: int
    bound: str
    unified: bool
    slot_ctx: int


def top_pool(url: str, cli: Any) -> dict[str, Any]:
    code, text, err = cli("top", "--url", url, "--once", "--json", "--interval", "0.2", "--no-gpu")
    assert code == 0, err
    pool: dict[str, Any] = json.loads(text)["servers"][0]["pool"]
    return pool


@pytest.mark.parametrize(("args", "figures", "n_predict"), [
    (("-kvu",), Figures(4096, "exact", True, 4096), 1150),  # one pool of 4096 the slots share
    ((), Figures(4096, "exact", False, 1024), 900),  # four slots of 1024 each
], ids=["unified", "per-slot"])
def test_in_flight_every_reader_shows_the_same_pool(
        lt: Any, synth_model: Any, llama_server: Any, cli: Any, monkeypatch: pytest.MonkeyPatch,
        args: tuple[str, ...], figures: Figures, n_predict: int) -> None:
    """``-c 4096 -np 4`` with and without ``-kvu``, three requests decoding through the gateway.
    The gateway's readers (/gateway/status, `gateway status`, /metrics) and top through it show
    one reading of /slots: the same pool, slot context, cells in use and share full. top straight
    at the server reads its own /slots a moment later: the same pool and slot context, and cells
    between the server's before and after, while the same three tasks ran throughout (the
    requests decode tens of seconds; every reader is done in about one)."""
    monkeypatch.setenv("COLUMNS", "200")
    srv = llama_server(synth_model("llama", n_ctx_train=16384, **SLOW), "-c", "4096", "-np", "4", *args,
                       "--metrics", threads=1)
    # /slots read only when a reader asks (top's /gateway/slots), so the gateway's readers show that reading
    gw = lt.gateway({"backends": [{"url": srv.url, "log": str(srv.log_path)}],
                     "health": {"slots_interval_s": 3600}})
    threads = [send(gw.url, f"request {i}: " + "the shared pool " * (4 + 4 * i), n_predict) for i in range(3)]
    tasks = decoding(srv.url, 3)
    before_tasks, before = busy_tasks(srv.url)

    through = top_pool(gw.url, cli)
    st = get(gw.url + "/gateway/status")["backends"][0]["pool"]
    met = parse_metrics(get(gw.url + "/metrics"))
    code, text, err = cli("gateway", "status", "--url", gw.url)
    direct = top_pool(srv.url, cli)
    after_tasks, after = busy_tasks(srv.url)
    assert tasks == before_tasks == after_tasks, "a request ended while the readers read: the model is too fast"

    def metric(name: str) -> float:
        return met[f'llamarig_gateway_{name}{{backend="b0"}}']

    assert code == 0, err
    line = re.search(r"b0: (\d+) of (\d+) KV cells in use \((\d+) %; (\d+) per slot", text)
    assert line is not None, text
    cells = st["cells_in_use"]
    assert before <= cells <= after and before < after
    frac = round(cells / figures.tokens, 4)
    assert (Figures(st["server_tokens"], st["server_bound"], st["unified"], st["server_slot_ctx"]),
            cells, st["used_frac"]) == (figures, cells, frac), st
    assert (Figures(through["tokens"], through["bound"], through["unified"], through["slot_ctx"]),
            through["cells_used"], through["used_frac"], through["source"]) == (figures, cells, frac, "gateway")
    assert (int(metric("server_pool_tokens")), int(metric("server_slot_ctx_tokens")),
            int(metric("kv_cells_in_use")), metric("kv_pool_used_ratio"), metric("server_pool_exact")) == (
        figures.tokens, figures.slot_ctx, cells, frac, 1)
    # the percent of the exact share, as printed (not of the 4-place fraction: 307/4096 is 7 %, 0.075 would say 8)
    assert tuple(int(g) for g in line.groups()) == (cells, figures.tokens, int(f"{100 * cells / figures.tokens:.0f}"),
                                                     figures.slot_ctx)
    assert (Figures(direct["tokens"], direct["bound"], direct["unified"], direct["slot_ctx"]), direct["source"]) == (
        figures, "log")
    assert cells <= direct["cells_used"] <= after  # top read the server after the gateway did
    assert direct["used_frac"] == round(direct["cells_used"] / figures.tokens, 4)
    srv.stop()  # the requests end with an error; the threads return
    for t in threads:
        t.join(120)
