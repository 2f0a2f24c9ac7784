"""Retry-After by replaying admission forward (llamarig.gateway.retry) and the progress it reads
(llamarig.gateway.progress): pure, with the shapes of build 11434's /slots and timings."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from llamarig.gateway.pool import Cap
from llamarig.gateway.progress import BackendProgress, read_slots
from llamarig.gateway.retry import Room, Running, Want, wait_for_room
from llamarig.serverpool import cells_in_use


def room(name: str = "a", pool: int = 4096, slots: int = 4, rate: float | None = 100.0, **kw: object) -> Room:
    return Room(name, pool, slots, pool, kw.pop("reserved", 0), kw.pop("in_flight", 0), rate, **kw)  # type: ignore[arg-type]


def test_fits_now_or_after_the_requests_that_must_end() -> None:
    assert wait_for_room(Want(100, 90), [room()], []).method == "now"
    # pool 4096, two requests hold 2000 each; one ends in 3 s, the other in 8 s: 2000 fits after 3 s
    running = [Running("a", 2000, (), 3.0), Running("a", 2000, (), 8.0)]
    est = wait_for_room(Want(2000, 1900), [room(reserved=4000, in_flight=2)], running)
    assert (est.seconds, est.method, est.waits_for, est.rate) == (3.0, "in_flight", 1, 100.0)
    # 3000 needs both gone
    assert wait_for_room(Want(3000, 2900), [room(reserved=4000, in_flight=2)], running).seconds == 8.0
    # all slots busy: the first end frees a slot
    est = wait_for_room(Want(10, 5), [room(slots=2, reserved=200, in_flight=2)],
                        [Running("a", 100, (), 5.0), Running("a", 100, (), 2.0)])
    assert est.seconds == 2.0


def test_the_queue_ahead_goes_first_and_holds_for_its_own_length() -> None:
    # one slot; the running request ends at 2 s; a waiter ahead (400 tokens at 100 tok/s = 4 s) takes it
    est = wait_for_room(Want(10, 10), [room(slots=1, reserved=100, in_flight=1)], [Running("a", 100, (), 2.0)],
                        ahead=[Want(400, 400)])
    assert est.seconds == pytest.approx(6.0) and est.waits_for == 2


def test_caps_and_routes() -> None:
    caps = {"cron": Cap(slots=1)}
    r = room(reserved=300, in_flight=2, caps=caps, group_reserved={"cron": 100}, group_in_flight={"cron": 1})
    running = [Running("a", 200, ("tier:B",), 1.0), Running("a", 100, ("tier:B", "cron"), 5.0)]
    # a cron job waits for the cron job (5 s), not for the first end (1 s)
    assert wait_for_room(Want(10, 10, groups=("tier:B", "cron")), [r], running).seconds == 5.0
    assert wait_for_room(Want(10, 10, groups=("tier:B",)), [r], running).method == "now"
    # routed to b only
    est = wait_for_room(Want(10, 10, backends=frozenset({"b"})), [room("a"), room("b", slots=1, in_flight=1)],
                        [Running("b", 10, (), 7.0)])
    assert est.seconds == 7.0


def test_no_rate_no_estimate() -> None:
    est = wait_for_room(Want(10, 10), [room(slots=1, in_flight=1, rate=None)], [Running("a", 10, (), None)])
    assert (est.seconds, est.method) == (None, "unmeasured")
    est = wait_for_room(Want(10_000, 10), [room(pool=100)], [])
    assert (est.seconds, est.method) == (None, "never")


#: GET /slots of build 11434 (server-context.cpp:724-751), two slots decoding
SLOTS = [
    {"id": 0, "n_ctx": 1024, "speculative": False, "is_processing": True, "id_task": 7, "n_prompt_tokens": 140,
     "n_prompt_tokens_processed": 12, "n_prompt_tokens_cache": 0, "params": {"n_predict": 300, "seed": 1},
     "next_token": [{"has_next_token": True, "has_new_line": False, "n_remain": 172, "n_decoded": 128}]},
    {"id": 1, "n_ctx": 1024, "speculative": False, "is_processing": True, "id_task": 9, "n_prompt_tokens": 40,
     "params": {"n_predict": 300}, "next_token": [{"n_decoded": 28, "n_remain": 272}]},
    {"id": 2, "n_ctx": 1024, "speculative": False, "is_processing": False},
]


@dataclass
class R:
    id: int
    max_tokens: int
    prompt_tokens: int
    admitted_at: float
    t_first: float | None = None


def test_progress_matches_slots_by_n_predict_and_order() -> None:
    slots = read_slots(SLOTS)
    assert slots is not None and [s.id_task for s in slots] == [7, 9, None]
    assert read_slots({"error": "x"}) is None
    bp = BackendProgress()
    first, second, other = R(1, 300, 12, 0.0), R(2, 300, 12, 0.5), R(3, 50, 5, 0.6)
    bp.observe(slots, 10.0, [second, other, first], cells_in_use(SLOTS))
    assert (bp.slot_of(1), bp.slot_of(2), bp.slot_of(3)) == (0, 1, None)  # oldest request, oldest task
    assert bp.cells == 180 and bp.rate(10.0).value is None  # one reading: no rate yet
    later = read_slots([{**SLOTS[0], "next_token": [{"n_decoded": 178}]}, {**SLOTS[1], "next_token": [{"n_decoded": 78}]}])
    assert later is not None
    bp.observe(later, 11.0, [first, second])
    assert bp.rate(11.0).value == pytest.approx(50.0) and bp.rate(11.0).source == "slots"
    assert bp.generated(first, 12.0) == (228, "slots")  # read 178 at 11 s, 50 tok/s since
    assert bp.ends_in(first, 12.0) == pytest.approx((300 - 228) / 50.0)
    # the slot runs another task now: the match goes
    bp.observe(read_slots([{**SLOTS[0], "id_task": 12}]) or (), 13.0, [first, second])
    assert bp.slot_of(1) is None
    bp.finished({"predicted_n": 11, "predicted_ms": 1000.0})  # a finished request decoded at 10 tok/s
    assert bp.rate(14.0).value == pytest.approx(50.0)  # the live rate while its readings are recent
    assert bp.rate(17.0).value == pytest.approx(10.0)  # then the finished requests'
    # without a slot: from the first byte at the measured rate
    assert bp.generated(R(4, 1000, 10, 0.0, t_first=20.0), 22.0) == (20, "first_byte")


def test_rates_from_answer_timings() -> None:
    bp = BackendProgress()
    assert bp.generated(R(1, 100, 10, 0.0), 5.0) == (0, "") and bp.ends_in(R(1, 100, 10, 0.0), 5.0) is None
    bp.finished({"prompt_n": 500, "prompt_ms": 250.0, "predicted_n": 201, "predicted_ms": 2000.0})
    assert bp.decode.value == pytest.approx(100.0) and bp.decode.source == "timings"  # (n - 1) / t
    assert bp.prefill.value == pytest.approx(2000.0)
    bp.finished({"predicted_n": 1})  # too short to measure: ignored
    assert bp.decode.samples == 1


@pytest.mark.parametrize("seconds", [6.0004, 6.0, 5.9999999, 0.0001, 12.3456])
def test_the_body_estimate_rounds_so_the_header_is_its_ceiling(seconds: float) -> None:
    """The 429 body's seconds and the Retry-After header agree: the header is the body's ceiling
    (a 6.0004 s estimate was written 6.0 beside a header of 7)."""
    from llamarig.gateway.retry import Estimate

    shown = Estimate(seconds, "in_flight", 1, 100.0).to_json()["seconds"]
    assert isinstance(shown, float) and shown >= seconds - 1e-12
    assert math.ceil(shown) == math.ceil(seconds)
