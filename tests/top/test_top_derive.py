"""``llamarig.top.derive`` on hand-made rounds of GETs: the faults and states a quiet test server
does not show (counters going back, a context re-processed, 429s, a full pool, GPU energy),
plus the CLI's errors. The real server's behaviour is in test_top_server.py."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from llamarig.cli.top_view import ViewState, plain
from llamarig.hardware.telemetry import GpuRaw, GpuReading, GpuTelemetry, Nvml, is_local
from llamarig.testing.server import free_port
from llamarig.top.derive import build
from llamarig.top.model import PoolHint, Raw, ServerRaw, Snapshot

NO_GPU = GpuReading(False, "test", "no_nvml")
NO_HINT = PoolHint()


def slot(sid: int, *, busy: bool = False, task: int = 1, dec: int = 0, ctx: int = 0, cached: int = 0,
         processed: int = 0, n_ctx: int = 4096, remain: int = -1, has_next: bool = True) -> dict[str, Any]:
    """A slot of /slots as build 11434 writes it (server-context.cpp:724)."""
    return {"id": sid, "n_ctx": n_ctx, "is_processing": busy, "id_task": task, "n_prompt_tokens": ctx,
            "n_prompt_tokens_cache": cached, "n_prompt_tokens_processed": processed,
            "next_token": [{"n_decoded": dec, "n_remain": remain, "has_next_token": has_next}]}


def raw(t: float, slots: list[dict[str, Any]] | None = None, *, metrics: dict[str, float] | None = None,
        start: float | None = 5.0, reachable: bool = True, gpu: GpuReading = NO_GPU, status: Any = None,
        name: str = "server", hint: PoolHint = NO_HINT, checkpoints: bool | None = True) -> Raw:
    srv = ServerRaw(name, "http://127.0.0.1:1", reachable, health=200 if reachable else None,
                    error="" if reachable else "connection refused",
                    slots=tuple(slots) if slots is not None else None, metrics=metrics, start_time=start,
                    props={"build_info": "b11434", "model_alias": "m.gguf", "total_slots": 2}, pool_hint=hint,
                    checkpoints=checkpoints)
    return Raw("http://127.0.0.1:1", "gateway" if status is not None else "server", t, 1000.0 + t, (srv,), gpu, status)


def run(*raws: Raw) -> list[Snapshot]:
    out: list[Snapshot] = []
    prev = None
    for r in raws:
        prev = build(prev, r)
        out.append(prev)
    return out


def test_rates_from_slot_deltas_of_the_same_task() -> None:
    a, b, c = run(raw(0, [slot(0, busy=True, task=7, dec=10, ctx=110), slot(1)]),
                  raw(2, [slot(0, busy=True, task=7, dec=50, ctx=150), slot(1)]),
                  raw(3, [slot(0, busy=True, task=8, dec=3, ctx=20), slot(1)]))
    assert a.slots[0].decode_tok_s is None and a.dt is None  # one reading: no rate yet
    assert b.slots[0].decode_tok_s == pytest.approx(20.0) and b.slots[0].phase == "decode"
    assert b.servers[0].decode_tok_s == pytest.approx(20.0) and b.dt == pytest.approx(2.0)
    assert c.slots[0].decode_tok_s is None  # another task: no delta across tasks
    assert b.slots[1].phase == "idle" and b.slots[1].decode_tok_s is None
    j = b.to_json()
    assert [s["state"] for s in j["slots"]] == ["busy", "idle"] and j["slots"][0]["decode_tok_s"] == 20.0


def test_prefill_phase_and_rate() -> None:
    _, b = run(raw(0, [slot(0, busy=True, task=3, processed=100, ctx=100)]),
               raw(1, [slot(0, busy=True, task=3, processed=612, ctx=612)]))
    s = b.slots[0]
    assert s.phase == "prefill" and s.prefill_tok_s == pytest.approx(512.0) and s.decode_tok_s is None


def test_restart_from_counters_going_back_and_start_time() -> None:
    m1 = {"n_decode_total": 500.0, "tokens_predicted_total": 400.0, "prompt_tokens_total": 90.0}
    m2 = {"n_decode_total": 3.0, "tokens_predicted_total": 2.0, "prompt_tokens_total": 1.0}
    a, b = run(raw(0, [slot(0)], metrics=m1, start=None), raw(1, [slot(0)], metrics=m2, start=None))
    assert b.servers[0].restarts == 1 and [e.kind for e in b.events] == ["restart"]
    assert "n_decode_total went down" in b.events[0].detail
    assert b.servers[0].finished_gen_tok_s is None  # no rate across a restart
    _, d = run(raw(0, [slot(0)], start=5.0), raw(1, [slot(0)], start=9.0))
    assert d.servers[0].restarts == 1 and "Process-Start-Time-Unix" in d.events[0].detail
    assert [a.kind for a in d.alerts] == ["restart"]


def test_down_then_back_said_once() -> None:
    snaps = run(raw(0, [slot(0)]), raw(1, reachable=False), raw(2, reachable=False), raw(3, [slot(0)], start=6.0))
    assert [s.servers[0].state for s in snaps] == ["up", "down", "down", "up"]
    assert [e.kind for e in snaps[-1].events] == ["down", "back", "restart"]
    assert snaps[2].servers[0].down_s == pytest.approx(1.0)
    text = plain(snaps[2], width=80)
    assert text.splitlines()[0].startswith("llama-server down for 1s")


def test_checkpoint_thrash_alert_after_two_reprocessed_continuations() -> None:
    held = 2000
    snaps = run(
        raw(0, [slot(0, task=1, ctx=held)]),
        raw(1, [slot(0, busy=True, task=2, ctx=held + 100, cached=10, processed=held + 90)]),  # reused 10 of 2000
        raw(2, [slot(0, task=2, ctx=held + 200, cached=10)]),
        raw(3, [slot(0, busy=True, task=3, ctx=held + 300, cached=5, processed=held + 295)]),
    )
    assert [e.kind for e in snaps[1].events] == ["reprocessed"]
    assert not [a for a in snaps[1].alerts if a.kind == "checkpoint_thrash"]
    assert [a.kind for a in snaps[3].alerts] == ["checkpoint_thrash"]
    # a model without checkpoints (plain attention: report 004's llama) re-processes too, but
    # that is an event (its prefix was lost), never the checkpoint alarm
    plain = run(*(dataclasses.replace(r, servers=(dataclasses.replace(r.servers[0], checkpoints=False),))
                  for r in (raw(0, [slot(0, task=1, ctx=held)]),
                            raw(1, [slot(0, busy=True, task=2, ctx=held + 100, cached=10, processed=held + 90)]),
                            raw(2, [slot(0, task=2, ctx=held + 200, cached=10)]),
                            raw(3, [slot(0, busy=True, task=3, ctx=held + 300, cached=5, processed=held + 295)]))))
    assert [e.kind for e in plain[1].events] == ["reprocessed"] and not plain[3].alerts
    # a continuation served from the cache breaks the streak
    ok = run(raw(0, [slot(0, task=1, ctx=held)]), raw(1, [slot(0, busy=True, task=2, ctx=held + 50, cached=held)]))
    assert not ok[1].events


def test_split_slots_near_full() -> None:
    """More cells in use than one slot's n_ctx: the slots do not share one pool of that size, so
    each is judged against its own context (split KV, llama-server -np N without -kvu)."""
    (s,) = run(raw(0, [slot(0, busy=True, ctx=3900, n_ctx=4096), slot(1, busy=True, ctx=3800, n_ctx=4096)]))
    assert sorted(a.kind for a in s.alerts) == ["slot_near_full", "slot_near_full"]
    pool = s.servers[0].pool
    assert pool is not None and (pool.tokens, pool.unified, pool.source) == (8192, False, "slots")
    assert s.servers[0].pool_frac == pytest.approx(7700 / 8192)
    assert "slot 0 context near full: 3900 of 4096 tokens (95 %)" in plain(s)
    # the same contexts kept by idle slots (their last task's cache): shown, no alert
    (idle,) = run(raw(0, [slot(0, ctx=3900, n_ctx=4096), slot(1, ctx=3800, n_ctx=4096)]))
    assert idle.alerts == () and idle.servers[0].pool_frac == pytest.approx(7700 / 8192)


def test_shared_pool_cells_in_use_and_alerts_before_the_overflow() -> None:
    """-c 4096 -np 4 -kvu: every slot reports n_ctx 4096 (the pool), so the old reading (each
    slot's context over the sum of the n_ctx) said 25 % while the pool was full. The cells in use
    count against the one pool; the alert comes while the busy slots still decode, from what they
    still need (n_remain) and from how fast they fill it."""
    log = PoolHint(4096, True, "log", "server.log")
    busy = [slot(i, busy=True, task=i, dec=900, ctx=1000, remain=1100) for i in (1, 2, 3)]
    a, b = run(raw(0, [slot(0), *busy], hint=log),
               raw(1, [slot(0), *(slot(i, busy=True, task=i, dec=1250, ctx=1350, remain=750) for i in (1, 2, 3))],
                   hint=log))
    pool = b.servers[0].pool
    assert pool is not None and (pool.tokens, pool.cells, pool.cells_busy) == (4096, 4050, 4050)
    assert pool.cells_needed == 4050 + 3 * 750 and pool.fill_tok_s == pytest.approx(1050.0)
    assert b.servers[0].pool_frac == pytest.approx(4050 / 4096)
    assert {x.kind for x in a.alerts} == {"pool_overflow_ahead"}  # the first reading already: 6300 > 4096
    assert {x.kind for x in b.alerts} == {"pool_overflow_ahead", "pool_near_full"}
    text = plain(b, width=200)
    assert text.splitlines()[0].startswith("llama-server up") and "pool 99 %" in text.splitlines()[0]
    assert "the busy slots need 6300 cells to finish but the KV pool has 4096" in text
    assert "KV pool near full: busy slots hold 4050 of 4096 cells (99 %), full in about 0 s" in text
    assert "pool 4050 of 4096 cells (shared by the slots; the server's log), busy slots 4050" in text
    j = b.to_json()["servers"][0]["pool"]
    assert j["tokens"] == 4096 and j["cells_used"] == 4050 and j["source"] == "log" and j["unified"] is True


def test_unknown_pool_taken_as_one_slots_context() -> None:
    """No hint (a server on another machine): one slot's n_ctx is taken as the shared pool (the
    reading that warns first), and the source says it is assumed."""
    (s,) = run(raw(0, [slot(0, busy=True, ctx=1500, remain=600), slot(1, busy=True, ctx=1500, remain=600)]))
    pool = s.servers[0].pool
    assert pool is not None and (pool.tokens, pool.unified, pool.source) == (4096, True, "assumed")
    assert [a.kind for a in s.alerts] == ["pool_overflow_ahead"]
    assert "assumed: one slot's n_ctx, -kvu" in plain(s, width=200)
    split = PoolHint(None, False, "given")
    (t,) = run(raw(0, [slot(0, busy=True, ctx=1500, remain=600), slot(1, busy=True, ctx=1500, remain=600)], hint=split))
    assert t.alerts == () and t.servers[0].pool is not None and t.servers[0].pool.tokens == 8192


def test_how_tasks_ended_from_two_readings() -> None:
    """A task that left its slot: has_next_token false = done; still true with its cache kept =
    cancelled; true with the cache cleared, on several slots at once = the pool overflowed (all
    busy slots end and are cleared together, server-context.cpp:4040-4048)."""
    log = PoolHint(4096, True, "log")
    before = [slot(0, busy=True, task=7, dec=50, ctx=90, remain=10),
              slot(1, busy=True, task=4, dec=1300, ctx=1360), slot(2, busy=True, task=1, dec=1300, ctx=1360),
              slot(3, busy=True, task=9, dec=600, ctx=700)]
    after = [slot(0, task=7, ctx=99, has_next=False), slot(1, task=4, ctx=0), slot(2, task=1, ctx=0),
             slot(3, task=9, ctx=700)]
    a, b = run(raw(0, before, hint=log), raw(1, after, hint=log))
    kinds = [e.kind for e in b.events]
    assert kinds == ["cancelled", "context_exceeded"], kinds
    assert dict(b.servers[0].endings) == {"done": 1, "cancelled": 1, "context_exceeded": 2}
    ev = b.events[1]
    assert ev.values["slots"] == [1, 2] and ev.values["tasks"] == [4, 1]
    assert "2 requests ended with 'Context size has been exceeded' (slots 1, 2)" in ev.detail
    assert "task 9 cancelled after 600 generated tokens" in b.events[0].detail
    text = plain(b, width=200)
    assert "tasks ended (seen by top): cancelled 1 · context exceeded 2 · done 1" in text
    assert b.to_json()["events"][1]["slots"] == [1, 2]
    # one slot cleared alone with no pool alert up: ended early (a cancel whose cache a new task
    # cleared, or another error), not called an overflow
    _, c = run(raw(0, [slot(0, busy=True, task=3, dec=5, ctx=50)], hint=log), raw(1, [slot(0, task=3, ctx=0)], hint=log))
    assert [e.kind for e in c.events] == ["ended_early"]


def test_gateway_rejections_per_minute_and_reservations() -> None:
    def status(n429: int, requests: list[dict[str, Any]]) -> dict[str, Any]:
        return {"uptime_s": 5, "in_flight": len(requests), "reserved_tokens": sum(r["reserved_tokens"] for r in requests),
                "queue": {"length": 1, "by_tier": {"B": 1}, "by_priority": {"5": 1}},
                "rejected_by_status": {"429": n429}, "requests": requests,
                "backends": [{"name": "b0", "healthy": True, "pool_tokens": 8192, "reserved_tokens": 3000, "in_flight": 1}]}

    req = {"id": 4, "backend": "b0", "tier": "B", "priority": 5, "key": "alice", "reserved_tokens": 3000, "age_s": 1.5}
    _, b = run(raw(0, [slot(0, busy=True)], status=status(2, [req]), name="b0"),
               raw(30, [slot(0, busy=True)], status=status(7, [req]), name="b0"))
    g = b.gateway
    assert g is not None and g.rejected_429_per_min == pytest.approx(10.0) and g.window_s == pytest.approx(30)
    assert g.requests[0].key == "alice" and g.requests[0].reserved_tokens == 3000
    assert b.servers[0].reserved_tokens == 3000 and b.servers[0].pool_tokens == 8192
    text = plain(b, width=80)
    assert text.startswith("gateway: 1/1 up") and "alice" in text and "3000" in text
    assert "(by priority 5: 1)" in " ".join(text.split())
    # the gateway has the request in flight on b0's busy slot: not foreign work
    assert not [a for a in b.alerts if a.kind == "foreign_work"]


def test_tokens_per_joule_from_the_energy_counter() -> None:
    def gpu(e: float) -> GpuReading:
        return GpuReading(True, "", "", (GpuRaw(0, "RTX 3090", power_w=300.0, energy_j=e, mem_used_mib=20000.0,
                                                 mem_total_mib=24576.0, temp_c=60.0, sm_clock_mhz=1800.0),))

    _, b = run(raw(0, [slot(0, busy=True, task=1, dec=0)], gpu=gpu(1000.0)),
               raw(1, [slot(0, busy=True, task=1, dec=30)], gpu=gpu(1300.0)))
    assert b.gpu.tokens_per_joule == pytest.approx(30 / 300) and b.gpu.joule_source == "energy"
    text = plain(b, width=120)
    assert "GPU0 RTX 3090" in text and "VRAM 19.5/24.0 GiB" in text and "tokens per joule 0.10" in text


def test_screens_fit_80_columns_in_both_languages() -> None:
    from rich.cells import cell_len

    from llamarig import i18n

    _, b = run(raw(0, [slot(0, busy=True, task=1, dec=5, ctx=70000, n_ctx=131072), slot(1)]),
               raw(1, [slot(0, busy=True, task=1, dec=95, ctx=70090, n_ctx=131072), slot(1)]))
    try:
        for lang in ("en", "zh"):
            i18n.set_language(lang)
            for view in ("all", "slots", "gateway", "events"):
                text = plain(b, 80, ViewState(view=view))
                assert all(cell_len(ln) <= 80 for ln in text.splitlines()), (lang, view, text)
                assert text.splitlines()[0].startswith("llama-server")
    finally:
        i18n.set_language(None)


def test_nvml_absent_is_one_line_and_local_urls() -> None:
    r = Nvml().read()
    assert r.available or (r.reason and "\n" not in r.reason and r.reason_kind == "no_nvml")
    # one telemetry source for top and bench: NVML, else nvidia-smi, else one line saying both
    t = GpuTelemetry().read()
    assert t.available or (t.reason and "\n" not in t.reason and ("NVML" in t.reason or "nvml" in t.reason.lower()))
    assert is_local("http://127.0.0.1:8080") and is_local("http://localhost:1") and is_local("http://[::1]:8080")
    assert not is_local("http://192.0.2.7:8080")  # TEST-NET-1 (RFC 5737): never this machine


def test_nvml_reading_units(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML's units (bytes, mW, mJ) become MiB, W and J; a figure a board does not support is
    absent, not an error. (A stand-in module: this machine has no NVIDIA driver; the functions
    and constants are those of nvidia-ml-py.)"""
    import sys
    import types

    class NotSupported(Exception):
        pass

    def unsupported(h: Any) -> Any:
        raise NotSupported("Not Supported")

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"NVIDIA GeForce RTX 3090",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=12 * 1024**3, total=24 * 1024**3),
        nvmlDeviceGetPowerUsage=lambda h: 285_500, nvmlDeviceGetTemperature=lambda h, k: 71,
        nvmlDeviceGetClockInfo=lambda h, k: {0: 1695, 2: 9751}[k], nvmlDeviceGetUtilizationRates=unsupported,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: 123_456_789, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=0,
        NVML_CLOCK_MEM=2)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    r = Nvml().read()
    assert r.available and len(r.gpus) == 1
    g = r.gpus[0]
    assert (g.name, g.mem_used_mib, g.mem_total_mib, g.power_w, g.temp_c) == ("NVIDIA GeForce RTX 3090", 12288.0, 24576.0, 285.5, 71.0)
    assert (g.sm_clock_mhz, g.mem_clock_mhz, g.util_pct, g.energy_j) == (1695.0, 9751.0, None, pytest.approx(123456.789))


def test_cli_errors_are_one_line(cli: Any) -> None:
    code, _, err = cli("top", "--url", "127.0.0.1:8080", "--once")
    assert code == 2 and err.count("\n") == 1 and "expected http://HOST:PORT" in err
    code, _, err = cli("top", "--url", "http://127.0.0.1:8080", "--interval", "0")
    assert code == 2 and "--interval 0.0" in err
    # nothing listens there: the snapshot says so, and the exit code is 3 (docs/exit-codes.md)
    url = f"http://127.0.0.1:{free_port()}"
    code, out, _ = cli("top", "--url", url, "--once", "--json", "--interval", "0.2")
    doc = json.loads(out)
    assert code == 3 and doc["servers"][0]["state"] == "down" and doc["slots"] == []
    assert doc["servers"][0]["error"] == "connection refused" and doc["alerts"][0]["kind"] == "down"


def test_names_from_a_server_are_never_markup() -> None:
    """A backend or key named like rich markup shows as written (rows showed '[yellow]![2][/]')."""
    req = {"id": "req-[b]7[/b]", "backend": "[red]b0[/]", "tier": "B", "priority": 0, "key": "[bold]k[/]",
           "reserved_tokens": 10, "age_s": 1.0, "slot": 0}
    status = {"in_flight": 1, "reserved_tokens": 10, "requests": [req],
              "backends": [{"name": "[red]b0[/]", "healthy": True, "pool_tokens": 4096, "in_flight": 1}]}
    (snap,) = run(raw(0, [slot(0, busy=True)], status=status, name="[red]b0[/]"))
    text = plain(snap, width=160)
    assert "[red]b0[/]" in text and "req-[b]7[/b]" in text and "[bold]k[/]" in text
