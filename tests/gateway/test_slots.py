"""The slot table (llamarig.gateway.slots): pins, their end, a named slot moved off a busy one."""

from __future__ import annotations

from llamarig.gateway.slots import SlotTable


def test_a_pin_keeps_its_slot_expires_and_gives_way_when_the_pool_needs_it() -> None:
    t = SlotTable()
    a = t.choose(3, 1, 0.0, session="agent", tier="C2", pin_ttl_s=100)
    assert a.pinned and [e.why for e in a.events] == ["pinned"]
    t.release(1)
    others = [t.choose(3, 10 + i, 1.0 + i, session=f"web{i}") for i in range(2)]
    assert a.slot not in {o.slot for o in others}  # the two other slots, never the pinned one
    back = t.choose(3, 2, 5.0, session="agent", tier="C2", pin_ttl_s=100)
    assert (back.slot, back.pinned) == (a.slot, True)
    t.release(2)
    need = t.choose(3, 20, 6.0, session="web9")  # every other slot busy: the pin goes
    assert need.slot == a.slot and [e.why for e in need.events] == ["pool_needed"] and not t.pins
    t.release(20)
    t.choose(3, 3, 7.0, session="agent", tier="C2", pin_ttl_s=100)
    t.release(3)
    assert [e.why for e in t.expire(200.0)] == ["expired"]


def test_a_named_slot_that_is_busy_or_pinned_is_moved() -> None:
    t = SlotTable()
    p = t.choose(2, 1, 0.0, session="agent", tier="C2", pin_ttl_s=100)
    t.release(1)
    moved = t.choose(2, 2, 1.0, session="bench", asked=p.slot)
    assert moved.slot is not None and moved.slot != p.slot
    unmanaged = SlotTable().choose(2, 3, 0.0, asked=1, manage=False)
    assert unmanaged.slot == 1
