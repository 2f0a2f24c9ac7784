"""What ``llamarig top``'s alerts and events say, as catalogue messages (llamarig.i18n): the
terminal screen and the web page (llamarig.web) write them in the reader's language."""

from __future__ import annotations

from llamarig.i18n import N_, _
from llamarig.top.model import Alert

#: an event's kind (llamarig.top.model.Event) in words
EVENT_KINDS = {"restart": N_("restart"), "down": N_("down"), "back": N_("back"), "foreign_work": N_("foreign work"),
               "reprocessed": N_("re-processed"), "context_exceeded": N_("context exceeded"),
               "cancelled": N_("cancelled"), "ended_early": N_("ended early")}


def event_kind(kind: str) -> str:
    """An event's kind in words (a Message; an unknown kind as it is)."""
    return _(EVENT_KINDS[kind]) if kind in EVENT_KINDS else kind


def alert_text(a: Alert) -> str:
    """One alert of a snapshot as a sentence (a Message)."""
    v = dict(a.values)
    f = {"server": a.server, **v}
    soon = v.get("full_in_s") is not None
    msg = {
        "foreign_work": _("{server}: {busy} slots busy but only {in_flight} requests in flight through the gateway: "
                          "work nobody here started (another client on the backend)"),
        "pool_near_full": _("{server}: KV pool near full: busy slots hold {used} of {total} cells ({pct} %)"),
        "pool_overflow_ahead": _("{server}: the busy slots need {needed} cells to finish but the KV pool has {total}: "
                                 "llama-server will end them all with 'Context size has been exceeded'"),
        "slot_near_full": _("{server}: slot {slot} context near full: {used} of {n_ctx} tokens ({pct} %)"),
        "reserved_near_full": _("{server}: gateway reservations near the pool: {reserved} of {pool} tokens ({pct} %)"),
        "restart": _("{server}: restarted {seconds} s ago"),
        "down": _("{server}: not answering for {seconds} s ({error})"),
        "checkpoint_thrash": _("{server}: slot {slot} re-processed a continued context {streak} times in a row "
                               "(checkpoints thrashing? estimated)"),
    }.get(a.kind)
    if msg is None:
        return f"{a.server}: {a.kind}"
    text = msg.format(**f)
    if a.kind == "pool_near_full" and soon:
        text += _(", full in about {s} s at their decode rate").format(s=v["full_in_s"])
    elif a.kind == "pool_overflow_ahead" and soon:
        text += _(" in about {s} s").format(s=v["full_in_s"])
    return text
