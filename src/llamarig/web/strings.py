"""The page's words, from the one message catalogue (llamarig.i18n): the labels the page's script
shows (served as JSON, ``/ui/strings.json?lang=zh``), the verdicts and the threshold alerts."""

from __future__ import annotations

import json

from llamarig.hardware.telemetry import GpuReading
from llamarig.i18n import N_, _, translate
from llamarig.top.model import GpuView
from llamarig.web.alerts import Crossed

VERDICTS = {
    "down": N_("not answering: see the alerts"),
    "too_hot": N_("too hot: a GPU is over its power or temperature threshold"),
    "near_overflow": N_("near overflow: the KV pool is filling up"),
    "restarted": N_("restarted: llama-server is another process than before"),
    "foreign_work": N_("foreign work: slots busy that nobody here started"),
    "busy_queue": N_("queue long: requests are waiting for admission"),
    "healthy": N_("healthy"),
}

CROSSED = {
    "power": N_("{subject}: drawing {value:.0f} W, threshold {limit:.0f} W"),
    "temperature": N_("{subject}: {value:.0f} °C, threshold {limit:.0f} °C"),
    "pool": N_("{subject}: KV pool {value:.0f} % full, threshold {limit:.0f} %"),
    "queue": N_("{subject}: {value:.0f} requests queued, threshold {limit:.0f}"),
}

#: the labels of the page (its script fills them in; keys are the page's)
LABELS = {
    "title": N_("llamarig live"),
    "gpus": N_("GPUs"),
    "memory": N_("memory"),
    "memory_nvml": N_("memory used of total (NVML)"),
    "memory_plan": N_("as planned"),
    "plan_unknown": N_("the plan is not known to this page: compare with llamarig plan"),
    "power": N_("power"),
    "temperature": N_("temperature"),
    "tpj": N_("tokens per joule"),
    "slots": N_("slots"),
    "slot": N_("slot"),
    "phase": N_("phase"),
    "tokens": N_("tokens"),
    "tok_s": N_("tok/s"),
    "tier": N_("tier"),
    "key": N_("key"),
    "pool": N_("KV pool"),
    "shared": N_("shared by the slots (-kvu)"),
    "per_slot": N_("one per slot"),
    "cells": N_("cells in use"),
    "needed": N_("needed to finish"),
    "full_in": N_("full in"),
    "gateway": N_("gateway"),
    "in_flight": N_("in flight"),
    "queued": N_("queued"),
    "reserved": N_("reserved"),
    "requests": N_("requests"),
    "rejected": N_("429 rejections"),
    "per_min": N_("per minute"),
    "retry_after": N_("Retry-After now"),
    "cron": N_("cron's share"),
    "events": N_("last events"),
    "no_events": N_("nothing happened yet"),
    "charts": N_("the last hour"),
    "chart_decode": N_("decode tok/s"),
    "chart_pool": N_("pool %"),
    "chart_power": N_("power W"),
    "chart_temp": N_("temperature °C"),
    "alerts": N_("alerts"),
    "thresholds": N_("thresholds"),
    "notify": N_("notify me"),
    "notify_on": N_("notifications on"),
    "connecting": N_("connecting ..."),
    "lost": N_("connection lost: retrying"),
    "updated": N_("updated"),
    "none": N_("none"),
    "idle": N_("idle"),
    "prefill": N_("prefill"),
    "decode": N_("decode"),
    "unavailable": N_("not available"),
    "method": N_("how"),
    "server": N_("server"),
    "up": N_("up"),
    "loading": N_("loading"),
    "down": N_("down"),
    "read_only": N_("read-only: this page changes nothing"),
    "m_memory": N_("NVML memory used of total, at the last reading"),
    "m_power": N_("NVML power draw; the threshold is the page's (power_w)"),
    "m_temp": N_("NVML GPU temperature"),
    "m_pool": N_("cells in use (the slots' n_prompt_tokens summed, GET /slots) over the pool's cells"),
    "m_reserved": N_("prompt + max_tokens of each admitted request (the gateway's ledger)"),
    "m_retry": N_("the Retry-After a 429 would carry now (/gateway/status retry_after_s)"),
    "m_cron": N_("tokens reserved and requests in flight of cron jobs (/gateway/status shares.cron)"),
    "m_chart": N_("one point per update: decode tok/s summed over the slots, the fullest pool, the GPUs' power "
                  "summed and the hottest GPU"),
}


def labels(lang: str) -> dict[str, str]:
    """The page's labels in ``lang`` (the catalogue's text; English where ``lang`` is ``en``)."""
    return {k: translate(v, lang) for k, v in LABELS.items()}


def verdict_text(kind: str) -> str:
    return _(VERDICTS.get(kind, VERDICTS["healthy"]))


def crossed_text(c: Crossed) -> str:
    return _(CROSSED[c.kind]).format(subject=c.subject, value=c.value, limit=c.limit)


def gpu_reason(g: GpuView | GpuReading) -> str:
    """Why the page shows no GPU figure (the terminal screen's words)."""
    why = g.library_error or g.reason
    msg = {
        "no_nvml": _("GPU: no NVML and no nvidia-smi on this machine ({reason})"),
        "remote": _("GPU: the server runs on another machine; this machine's GPUs are not shown"),
        "off": _("GPU: not read (--no-gpu)"),
    }.get(g.reason_kind, _("GPU: not available ({reason})"))
    return msg.format(reason=why)


def lang_of(query: str | None, accept: str) -> str:
    """The page's language: ``?lang=`` first, else the browser's (``Accept-Language``)."""
    if query in ("en", "zh"):
        return query
    first = accept.split(",")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def strings_body(lang: str) -> bytes:
    return json.dumps({"lang": lang, "labels": labels(lang)}, ensure_ascii=False).encode()
