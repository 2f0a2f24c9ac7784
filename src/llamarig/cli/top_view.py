"""The screen of ``llamarig top``: a snapshot (llamarig.top.model) -> rich renderables. Pure: the
terminal, keys and timing live in cli/top_cmd.py. Answer first: the headline line says the
server's state, slots busy, pool use and decode rate; derived numbers name their method."""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llamarig.cli.lang import _, localize
from llamarig.cli.layout import Para
from llamarig.top import text
from llamarig.top.model import Alert, ServerView, SlotView, Snapshot

SORTS = ("id", "busy", "rate")
VIEWS = ("all", "slots", "gateway", "events")


@dataclass(frozen=True)
class ViewState:
    sort: str = "id"
    view: str = "all"
    paused: bool = False

    def next_sort(self) -> ViewState:
        return ViewState(SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)], self.view, self.paused)

    def next_view(self) -> ViewState:
        return ViewState(self.sort, VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)], self.paused)

    def toggle_pause(self) -> ViewState:
        return ViewState(self.sort, self.view, not self.paused)


def _dur(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _rate(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def _pct(a: int | None, b: int | None) -> str:
    if a is None or not b:
        return "-"
    return f"{100 * a / b:.0f} %"


def _pool_total(snap: Snapshot) -> tuple[int, int, bool]:
    """Cells in use and the pools' cells over the servers whose pool is known, and whether one of
    those is only a lower bound (the share is then at most that)."""
    # a known pool counts from the start: no cells in use yet (no slot holds tokens) is 0, not "?"
    pools = [s.pool for s in snap.servers if s.pool is not None and s.pool.tokens
             and (s.pool.cells is not None or s.slots)]
    return (sum(p.cells or 0 for p in pools), sum(p.tokens or 0 for p in pools),
            any(p.bound == "at_least" for p in pools))


def headline(snap: Snapshot) -> Text:
    """One line: state, slots busy, pool use, decode rate (the alerts follow, one per line)."""
    busy = sum(1 for s in snap.slots if s.busy)
    n = len(snap.slots)
    used, tot, at_most = _pool_total(snap)
    rate = snap.decode_tok_s
    if snap.mode == "gateway":
        up = sum(1 for s in snap.servers if s.state == "up")
        if snap.gateway is None:
            state = _("gateway not answering")
            style = "bold red"
        else:
            state = _("gateway: {up}/{n} up").format(up=up, n=len(snap.servers))
            style = "bold green" if up == len(snap.servers) and up else "bold yellow"
    else:
        srv = snap.servers[0] if snap.servers else None
        if srv is None or srv.state == "down":
            state = _("llama-server down for {t}").format(t=_dur(srv.down_s if srv else None))
            style = "bold red"
        elif srv.state == "loading":
            state, style = _("llama-server loading"), "bold yellow"
        else:
            state = _("llama-server up {t}").format(t=_dur(srv.uptime_s)) if srv.uptime_s is not None else _("llama-server up")
            style = "bold green"
    parts = [
        _("{busy}/{n} slots busy").format(busy=busy, n=n) if n else _("slots unknown (no /slots)"),
        (_("pool ≤{pct}") if at_most else _("pool {pct}")).format(pct=_pct(used, tot)) if tot else _("pool ?"),
        _("decode {rate} tok/s").format(rate=_rate(rate)) if rate is not None else _("decode: next refresh"),
    ]
    if snap.gateway is not None:
        parts.append(_("queue {n}").format(n=snap.gateway.queue_length))
    t = Text(state, style=style)
    t.append(" · " + " · ".join(parts))
    return t


def alert_text(a: Alert) -> str:
    return str(localize(text.alert_text(a)))


def _slot_rows(slots: Sequence[SlotView], sort: str) -> list[SlotView]:
    if sort == "busy":
        return sorted(slots, key=lambda s: (not s.busy, s.server, s.id))
    if sort == "rate":
        return sorted(slots, key=lambda s: (-(s.decode_tok_s or 0.0), -(s.prefill_tok_s or 0.0), s.server, s.id))
    return sorted(slots, key=lambda s: (s.server, s.id))


def slots_table(snap: Snapshot, sort: str) -> Table:
    gw = snap.mode == "gateway"
    t = Table(box=None, pad_edge=False, show_edge=False, expand=False, header_style="bold")
    if gw:
        t.add_column(_("backend"), no_wrap=True, max_width=12, overflow="ellipsis")
    t.add_column(_("slot"), justify="right")
    t.add_column(_("state"))
    t.add_column(_("phase"))
    t.add_column(_("context"), justify="right", no_wrap=True)
    t.add_column(_("gen"), justify="right")
    t.add_column(_("tok/s"), justify="right")
    t.add_column(_("task"), justify="right")
    phases = {"idle": _("idle"), "prefill": _("prefill"), "decode": _("decode")}
    for s in _slot_rows(snap.slots, sort):
        ctx = f"{s.ctx_used}/{s.n_ctx}" if s.ctx_used is not None and s.n_ctx else (f"-/{s.n_ctx}" if s.n_ctx else "-")
        rate = s.decode_tok_s if s.phase == "decode" else s.prefill_tok_s
        row = [str(s.id), _("busy") if s.busy else _("idle"), phases.get(s.phase, s.phase), ctx,
               str(s.n_decoded) if s.n_decoded is not None and s.busy else "-", _rate(rate) if s.busy else "-",
               str(s.id_task) if s.id_task is not None and s.busy else "-"]
        # Text cells: a name from a server is never read as markup
        t.add_row(*(Text(c) for c in [*([s.server] if gw else []), *row]), style="bold" if s.busy else "dim")
    return t


def _server_lines(srv: ServerView) -> list[Text]:
    head = Text(srv.name if srv.name != "server" else _("server"), style="bold")
    if srv.state == "down":
        head.append("  " + _("down for {t}: {error}").format(t=_dur(srv.down_s), error=srv.error), style="red")
        return [head]
    bits = [_("build {b}").format(b=srv.build or "?"), _("model {m}").format(m=srv.model or "?")]
    if srv.uptime_s is not None:
        bits.append(_("up {t}").format(t=_dur(srv.uptime_s)))
    bits.append(_("restarts {n}").format(n=srv.restarts))
    head.append("  " + " · ".join(bits))
    out = [head]
    line = [_("processing {n}").format(n=_num(srv.requests_processing)),
            _("deferred {n}").format(n=_num(srv.requests_deferred)),
            _("prefill {r} tok/s").format(r=_rate(srv.prefill_tok_s)),
            _("decode {r} tok/s").format(r=_rate(srv.decode_tok_s))]
    out.append(Text("  " + " · ".join(line)))
    if srv.finished_gen_tok_s is not None or srv.finished_prompt_tok_s is not None:
        out.append(Text("  " + _("finished requests (/metrics): prompt {p} tok/s, generated {g} tok/s").format(
            p=_rate(srv.finished_prompt_tok_s), g=_rate(srv.finished_gen_tok_s)), style="dim"))
    out += _pool_lines(srv)
    if srv.reserved_tokens is not None:
        out.append(Text("  " + _("gateway: {n} in flight, {r} of {p} tokens reserved").format(
            n=srv.in_flight if srv.in_flight is not None else "?", r=srv.reserved_tokens,
            p=srv.pool_tokens if srv.pool_tokens is not None else "?")))
    for err in (srv.slots_error, srv.metrics_error):
        if err:
            out.append(Text("  " + localize(err), style="yellow"))
    return out


def _pool_lines(srv: ServerView) -> list[Text]:
    """The pool: cells in use of how many, shared or not and how that is known, how fast the busy
    slots fill it; then how the tasks seen ending ended."""
    out: list[Text] = []
    p = srv.pool
    if p is not None and p.tokens and p.cells is not None:
        kind = _("shared by the slots") if p.unified else _("each slot its own")
        source = {"given": _("--pool"), "log": _("the server's log"), "command": _("its command line"),
                  "gateway": _("the gateway"), "assumed": _("assumed: one slot's n_ctx, -kvu"),
                  "slots": _("more cells in use than one slot's n_ctx")}.get(p.source, p.source)
        line = (_("pool {cells} of at least {tokens} cells ({kind}; {source}), busy slots {busy}")
                if p.bound == "at_least" else
                _("pool {cells} of {tokens} cells ({kind}; {source}), busy slots {busy}")).format(
            cells=p.cells, tokens=p.tokens, kind=kind, source=source, busy=p.cells_busy)
        if p.full_in_s is not None:
            line += _(", full in about {s} s").format(s=f"{p.full_in_s:.0f}")
        out.append(Text("  " + line))
    early = [s for s in srv.slots if s.stopped_early]
    if early:
        cleared = [s for s in early if not s.ctx_used]
        line = _("idle slots whose last task stopped before its answer was complete: {slots}").format(
            slots=", ".join(str(s.id) for s in early))
        if cleared:
            line += _(" ({n} with the cache cleared: by an error such as a full pool, or since, for a new task)").format(
                n=len(cleared))
        out.append(Text("  " + line, style="yellow"))
    if srv.endings:
        words = {"done": _("done"), "cancelled": _("cancelled"), "context_exceeded": _("context exceeded"),
                 "ended_early": _("ended early")}
        bits = [f"{words.get(k, k)} {n}" for k, n in sorted(srv.endings.items())]
        out.append(Text("  " + _("tasks ended (seen by top): {list}").format(list=" · ".join(bits)), style="dim"))
    return out


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def gateway_part(snap: Snapshot, full: bool) -> list[Any]:
    g = snap.gateway
    if g is None:
        return []
    prio = ", ".join(f"{p}: {n}" for p, n in g.queue_by_priority.items()) or "-"
    r429 = _rate(g.rejected_429_per_min) if g.rejected_429_per_min is not None else "-"
    out: list[Any] = [Para.of(_("gateway  {n} in flight · {r}/{p} tokens reserved · queue {q} (by priority {prio}) · 429s {r429}/min").format(
        n=g.in_flight, r=g.reserved_tokens, p=g.pool_tokens if g.pool_tokens is not None else "?", q=g.queue_length,
        prio=prio, r429=r429), style="bold")]
    if g.requests:
        t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for c in (_("request"), _("backend"), _("slot"), _("tier"), _("cron"), _("priority"), _("key"), _("reserved"),
                  _("age")):
            t.add_column(c, no_wrap=True, overflow="ellipsis", max_width=14)
        rows = g.requests if full else g.requests[:8]
        for r in rows:
            slot = "-" if r.slot is None else str(r.slot)
            t.add_row(*(Text(c) for c in (r.id, r.backend, slot, r.tier, _("yes") if r.cron else "-", str(r.priority),
                                          r.key or "-", str(r.reserved_tokens), _dur(r.age_s))))
        out.append(t)
        if len(rows) < len(g.requests):
            out.append(Text(_("... and {n} more (v: gateway view)").format(n=len(g.requests) - len(rows)), style="dim"))
    else:
        out.append(Text("  " + _("no request in flight"), style="dim"))
    if g.ledger != "local":
        out.extend(replicas_part(g))
    return out


def replicas_part(g: Any) -> list[Any]:
    """The shared ledger: every replica, what it holds per backend, its lease (gone: reaped)."""
    out: list[Any] = [Text(_("shared ledger ({kind}), seen from replica {replica}: {n} replicas").format(
        kind=g.ledger, replica=g.replica or "?", n=len(g.replicas)), style="bold")]
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for c in (_("replica"), _("requests"), _("reserved"), _("by backend"), _("lease")):
        t.add_column(c, no_wrap=True, overflow="ellipsis")
    for r in g.replicas:
        by = ", ".join(f"{b} {n}" for b, n in sorted(r.by_backend.items())) or "-"
        lease = _("{s} s left").format(s=f"{r.lease_left_s:.1f}") if r.lease_left_s is not None else _("expired")
        t.add_row(*(Text(c) for c in (r.replica, str(r.requests), str(r.reserved_tokens), by, lease)))
    out.append(t)
    return out


def gpu_part(snap: Snapshot) -> list[Any]:
    g = snap.gpu
    if not g.available:
        reason = {
            "no_nvml": _("GPU: no NVML and no nvidia-smi on this machine ({reason})"),
            "remote": _("GPU: the server runs on another machine; this machine's GPUs are not shown"),
            "off": _("GPU: not read (--no-gpu)"),
        }.get(g.reason_kind, _("GPU: not available ({reason})"))
        return [Text(reason.format(reason=g.library_error or g.reason), style="dim")]
    out: list[Any] = []
    for d in g.gpus:
        bits = [f"GPU{d.index} {d.name}"]
        if d.mem_used_mib is not None and d.mem_total_mib:
            bits.append(_("VRAM {u:.1f}/{t:.1f} GiB").format(u=d.mem_used_mib / 1024, t=d.mem_total_mib / 1024))
        if d.power_w is not None:
            bits.append(f"{d.power_w:.0f} W")
        if d.temp_c is not None:
            bits.append(f"{d.temp_c:.0f} °C")
        if d.sm_clock_mhz is not None:
            bits.append(_("SM {c:.0f} MHz").format(c=d.sm_clock_mhz))
        if d.mem_clock_mhz is not None:
            bits.append(_("mem {c:.0f} MHz").format(c=d.mem_clock_mhz))
        if d.util_pct is not None:
            bits.append(_("util {u:.0f} %").format(u=d.util_pct))
        out.append(Text(" · ".join(bits)))
    if g.tokens_per_joule is not None:
        out.append(Text(_("tokens per joule {v:.2f}").format(v=g.tokens_per_joule)))
    return out


def method_lines(snap: Snapshot) -> list[Para]:
    dt = f"{snap.dt:.1f}" if snap.dt else "?"
    lines = [
        _("tok/s: delta of n_decoded (prefill: n_prompt_tokens_processed) of the same task between two GET /slots, over {dt} s").format(dt=dt),
        _("context: n_prompt_tokens of /slots; pool: the slots' contexts summed (cells in use) over the pool's cells"),
    ]
    if snap.gpu.tokens_per_joule is not None:
        src = _("NVML energy counter") if snap.gpu.joule_source == "energy" else _("NVML power x time")
        lines.append(_("tokens per joule: tokens generated and prompt tokens processed over the GPUs' energy ({src}), same {dt} s").format(src=src, dt=dt))
    if snap.gateway is not None:
        lines.append(_("reserved: prompt + max_tokens of each admitted request (the gateway's ledger); 429s/min over the last {w} s").format(
            w=f"{snap.gateway.window_s:.0f}" if snap.gateway.window_s else "?"))
    else:
        lines.append(_("interference alerts need the gateway: it knows which requests are its own"))
    return [Para.of(ln, style="dim") for ln in lines]  # wrapped at the width, never mid-word


def event_lines(snap: Snapshot, n: int) -> list[Text]:
    out = []
    for e in snap.events[-n:]:
        stamp = time.strftime("%H:%M:%S", time.localtime(e.wall))
        red = e.kind in ("restart", "down", "context_exceeded")
        out.append(Text(_("{stamp} {server}: {kind}: {detail}").format(
            stamp=stamp, server=localize(e.server), kind=localize(text.event_kind(e.kind)), detail=localize(e.detail)),
            style="red" if red else ""))
    return out


def keys_line(vs: ViewState) -> Text:
    t = Text(_("q quit · s sort: {sort} · v view: {view} · p {pause}").format(
        sort=vs.sort, view=vs.view, pause=_("resume") if vs.paused else _("pause")), style="reverse")
    return t


def full_screen(snap: Snapshot, vs: ViewState) -> Any:
    """The interactive screen: the body on top, the keys pinned to the bottom line."""
    from rich.layout import Layout

    root = Layout()
    root.split_column(Layout(screen(snap, vs, keys=False)), Layout(keys_line(vs), size=1))
    return root


def screen(snap: Snapshot, vs: ViewState, *, keys: bool = True) -> Group:
    """The whole screen for one snapshot."""
    parts: list[Any] = [headline(snap)]
    parts += [Text("! " + alert_text(a), style="bold red") for a in snap.alerts]
    if vs.paused:
        parts.append(Text(_("paused: p resumes"), style="bold yellow"))
    if vs.view in ("all", "slots"):
        parts.append(slots_table(snap, vs.sort))
    if vs.view == "all":
        for srv in snap.servers:
            parts += _server_lines(srv)
        parts += gateway_part(snap, full=False)
        parts += gpu_part(snap)
        recent = event_lines(snap, 3)
        if recent:
            parts += recent
    elif vs.view == "gateway":
        parts += gateway_part(snap, full=True) or [Text(_("not a gateway: no reservations to show"), style="dim")]
    elif vs.view == "events":
        parts += event_lines(snap, 20) or [Text(_("no events yet"), style="dim")]
    parts += method_lines(snap)
    if keys:
        parts.append(keys_line(vs))
    return Group(*parts)


def plain(snap: Snapshot, width: int = 100, vs: ViewState | None = None) -> str:
    """The screen as plain text (for --once without --json), without the key line."""
    from rich.console import Console

    c = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    c.print(screen(snap, vs or ViewState(), keys=False))
    return c.export_text()

