"""``llamarig gateway``: run the tiered, KV-pool-aware gateway; ``llamarig gateway status``."""

from __future__ import annotations

import json
import logging
import math
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

import click

from llamarig.cli.help import Group
from llamarig.cli.lang import _, lang, localize
from llamarig.errors import InputError, ServerError
from llamarig.i18n import error_text, os_error


class _LocalizedLog(logging.Filter):
    """The gateway's log lines in the chosen language (their catalogue messages localized)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(localize(a) if isinstance(a, str) else a for a in record.args)
        return True


@click.group("gateway", cls=Group, invoke_without_command=True, examples=(
    "llamarig gateway --backend http://127.0.0.1:8080 --port 8000", "llamarig gateway --config gateway.toml",
    "llamarig gateway --backend http://10.0.0.5:8080 --ledger redis://10.0.0.9:6379/0",
    "llamarig gateway status --url http://127.0.0.1:8000"))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="TOML (.toml) or YAML config file; reloaded on SIGHUP or when it changes.")
@click.option("--backend", "backends", multiple=True, metavar="URL",
              help="llama-server URL (repeatable); replaces the config's backends.")
@click.option("--host", metavar="HOST", default=None, help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8000).")
@click.option("--ledger", default=None, metavar="redis://HOST:PORT/DB",
              help="Share the admission ledger with other replicas through Valkey/Redis (default: in process).")
@click.option("--replica", default=None, metavar="NAME",
              help="This replica's name in the shared ledger (default HOST-PID).")
@click.option("--check", is_flag=True, help="Validate the configuration, print it as JSON and exit.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, help="How much the gateway logs on stderr.")
@click.pass_context
def gateway_cmd(ctx: click.Context, config_path: str | None, backends: tuple[str, ...], host: str | None,
                port: int | None, ledger: str | None, replica: str | None, check: bool, log_level: str) -> None:
    """Run the OpenAI-compatible gateway in front of llama-server. See docs/gateway.md for the config
    reference."""
    if ctx.invoked_subcommand is not None:
        return
    from llamarig.gateway.config import build_config, dataclass_dict, load_config, with_overrides

    if port is not None and not 0 <= port <= 65535:
        raise InputError(_("--port: {port} is not a port number").format(port=port))
    base = load_config(config_path) if config_path else build_config(None, "built-in defaults")
    overrides: dict[str, Any] = {"backends": list(backends) or None, "host": host, "port": port,
                                 "ledger": ledger, "replica": replica}
    cfg = with_overrides(base, **overrides)
    if check:
        click.echo(json.dumps(dataclass_dict(cfg), indent=2, ensure_ascii=False))
        return
    logging.basicConfig(level=getattr(logging, log_level.upper()), format="%(asctime)s %(levelname)s %(message)s")
    for h in logging.getLogger().handlers:
        h.addFilter(_LocalizedLog())
    from llamarig.gateway.server import serve

    def ready(gw: Any) -> None:
        # what the first health check found, one line per backend, then where it listens
        for line in gw.backends.startup_lines():
            click.echo(localize(line), err=True)
        names = ", ".join(f"{b.name}={b.url}" for b in cfg.backends)
        click.echo(_("llamarig gateway listening on {url} (backends: {backends}; tiers: {tiers})").format(
            url=f"http://{cfg.server.host}:{gw.port}", backends=names, tiers=", ".join(cfg.tiers)), err=True)

    try:
        serve(cfg, config_path=config_path, overrides=overrides, ready=ready, lang=lang())
    except OSError as e:
        raise ServerError(_("cannot listen on {host}:{port}: {error}").format(host=cfg.server.host, port=cfg.server.port, error=os_error(e))) from None


@gateway_cmd.command("status")
@click.option("--url", metavar="URL", default="http://127.0.0.1:8000", show_default=True, help="The gateway's URL.")
@click.option("--api-key", metavar="KEY", envvar="LLAMARIG_GATEWAY_KEY", default=None, help="Key, if the gateway has keys (env LLAMARIG_GATEWAY_KEY).")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON.")
def status_cmd(url: str, api_key: str | None, as_json: bool) -> None:
    """Show the live state of a running gateway: backends, pools, reservations, queue."""
    req = urllib.request.Request(url.rstrip("/") + "/gateway/status")
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            st = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise ServerError(_("{url}: gateway answered {status}: {body}").format(
            url=url, status=e.code, body=e.read()[:200].decode("utf-8", "replace"))) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ServerError(_("{url}: cannot reach the gateway: {error}").format(
            url=url, error=error_text(_reason(e)))) from None
    if as_json:
        click.echo(json.dumps(st, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    con.print(status_table(url, st, Table))
    for line in status_footer(st):
        con.print(line, markup=False, highlight=False)


def _reason(e: BaseException) -> BaseException:
    """urllib's URLError carries the OSError that says why."""
    reason = getattr(e, "reason", None)
    return reason if isinstance(reason, BaseException) else e


def pool_cell(b: Mapping[str, Any], safety: float) -> str:
    """Reserved / pool tokens and where the pool comes from: /props, the config, or both. A
    backend never reached shows the configured pool (``pool_tokens`` × ``safety``), if any."""
    from llamarig.gateway.reasons import source_label

    reserved = b.get("reserved_tokens", 0)
    if b.get("pool_tokens"):
        if (b.get("pool") or {}).get("exact") is False:
            return _("{reserved} / at least {pool} ({source})").format(
                reserved=reserved, pool=b["pool_tokens"], source=source_label(b.get("pool_source")))
        return _("{reserved} / {pool} ({source})").format(reserved=reserved, pool=b["pool_tokens"],
                                                          source=source_label(b.get("pool_source")))
    conf = (b.get("configured") or {}).get("pool_tokens")
    if conf:
        usable = max(1, math.floor(conf * safety))
        return _("{reserved} / {pool} (config; the backend has not answered /props yet)").format(
            reserved=reserved, pool=usable)
    return _("{reserved} / ? (from /props, once the backend answers)").format(reserved=reserved)


def _known_or_configured(b: Mapping[str, Any], field: str) -> str:
    if b.get(field):
        return str(b[field])
    conf = (b.get("configured") or {}).get(field)
    return _("{value} (config)").format(value=conf) if conf else "?"


def status_table(url: str, st: Mapping[str, Any], table_cls: Any) -> Any:
    """The backends table of ``llamarig gateway status`` (``table_cls``: rich's Table)."""
    from rich.text import Text

    from llamarig.gateway.reasons import problem_text

    t = table_cls(title=_("llamarig gateway {url} (up {uptime} s, served {served})").format(
        url=url, uptime=st["uptime_s"], served=st["served"]))
    for col in (_("backend"), _("url"), _("health"), _("reserved / pool tokens"), _("in flight / slots"),
                _("slot ctx"), _("problem")):
        t.add_column(col, overflow="fold")  # at 80 columns a long URL or error folds, never cut with "…"
    safety = float(st.get("safety") or 1.0)
    timeout = float((st.get("health") or {}).get("timeout_s") or 0)
    for b in st["backends"]:
        health = _("up") if b["healthy"] else _("EJECTED")
        if b.get("removed"):
            health += " " + _("(draining)")
        slots = f"{b['in_flight']} / {_known_or_configured(b, 'slots')}"
        problem = problem_text(b["problem"], b.get("problem_detail") or "", timeout) if b.get("problem") else ""
        cells = (b["name"], b["url"], health, pool_cell(b, safety), slots, _known_or_configured(b, "slot_ctx"),
                 problem or b.get("last_error") or "")
        t.add_row(*(Text(str(localize(c))) for c in cells))  # no rich markup in names, URLs, errors
    return t


def _yield_lines(st: Mapping[str, Any]) -> list[str]:
    """Holds, slot pins, cron jobs in flight and the prompt cache per tier."""
    out = []
    holds = st.get("holds") or {}
    if holds:
        out.append(_("held: {holds}").format(holds=", ".join(f"{g} {s:.0f} s" for g, s in sorted(holds.items()))))
    for backend, pins in sorted((st.get("pins") or {}).items()):
        out.append(_("pinned slots on {backend}: {pins}").format(backend=backend, pins=", ".join(
            _("slot {slot} (tier {tier}, {left:.0f} s left)").format(slot=p["slot"], tier=p["tier"], left=p["ttl_left_s"])
            for p in pins)))
    cron = sum(1 for r in st.get("requests") or () if r.get("cron"))
    if cron:
        out.append(_("cron jobs in flight: {n}").format(n=cron))
    for tier, c in sorted((st.get("cache") or {}).items()):
        if c.get("requests"):
            out.append(_("prompt cache, tier {tier}: {hits} of {n} requests hits, {frac} of their prompt tokens "
                         "from the cache").format(tier=tier, hits=c["hits"], n=c["requests"],
                                                  frac=f"{c['cached_frac']:.0%}" if c.get("cached_frac") is not None else "?"))
    return out


def _mismatch_lines(st: Mapping[str, Any]) -> list[str]:
    """A config value the server contradicts, per backend (clamped when larger, kept when smaller)."""
    out = []
    for m in st.get("mismatches") or ():
        if m.get("action") == "clamped":
            out.append(_("! {backend}: the config's {field} {configured} is larger than the server's {server}: "
                         "admission uses {server}").format(**m))
        else:
            out.append(_("{backend}: the config's {field} {configured} is below the server's {server} (kept)").format(**m))
    return out


def _cells_lines(st: Mapping[str, Any]) -> list[str]:
    """The KV cells each backend's slots hold, of the server's pool (or of a lower bound of it),
    how full that is and one slot's context: the figures top and /metrics show (llamarig.serverpool)."""
    out = []
    for b in st.get("backends") or ():
        p = b.get("pool") or {}
        if p.get("cells_in_use") is None or p.get("server_tokens") is None:
            continue
        msg = (_("{backend}: {cells} of at least {tokens} KV cells in use (at most {pct}; {slot_ctx} per slot; "
                 "GET /slots)") if p.get("server_bound") == "at_least" else
               _("{backend}: {cells} of {tokens} KV cells in use ({pct}; {slot_ctx} per slot; GET /slots)"))
        cells, tokens = p["cells_in_use"], p["server_tokens"]
        out.append(msg.format(backend=b["name"], cells=cells, tokens=tokens, slot_ctx=p.get("server_slot_ctx") or "?",
                              pct=f"{100 * cells / tokens:.0f} %" if tokens else "?"))  # as top's headline
    return out


def _share_lines(st: Mapping[str, Any]) -> list[str]:
    """Tiers and cron with a cap: what they hold of it."""
    parts = []
    for name, g in (st.get("shares") or {}).items():
        if g.get("max_slots") is None and g.get("max_pool_share") is None:
            continue
        cap = ", ".join(f"{k} {g[k]}" for k in ("max_slots", "max_pool_share") if g.get(k) is not None)
        parts.append(_("{group} {in_flight} in flight, {queued} queued ({cap})").format(
            group=name.removeprefix("tier:"), in_flight=g.get("in_flight", 0), queued=g.get("queued", 0), cap=cap))
    return [_("caps: {parts}").format(parts="; ".join(parts))] if parts else []


def status_footer(st: Mapping[str, Any]) -> list[str]:
    """The lines under the table: queue, rejections by reason (readable), the pool rule."""
    from llamarig.gateway.reasons import label

    q = st["queue"]
    by = ", ".join(f"{k}={v}" for k, v in q["by_tier"].items()) or "-"
    counts: Mapping[str, int] = st.get("rejected_by_reason") or st.get("rejected") or {}
    rejected = ", ".join(f"{localize(label(k))} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    lines = [
        _("queue: {length}/{size} waiting (by tier: {by}); deadline {timeout} s; Retry-After now {retry} s").format(
            length=q["length"], size=q["size"], by=by, timeout=q["timeout_s"], retry=st["retry_after_s"]),
        _("rejected (429/503) by reason: {counts}").format(counts=rejected or _("none")),
        *_cells_lines(st), *_mismatch_lines(st), *_share_lines(st), *_yield_lines(st),
        _("reserved = prompt tokens + max_tokens of every admitted request; the pool comes from /props, the "
          "server's log or the config (pool_tokens)"),
    ]
    led = st.get("ledger") or {}
    if led.get("kind") not in (None, "local"):
        lines.append(_("shared ledger {url} ({state}); this replica: {replica}; lease {lease} s").format(
            url=led.get("url"), state=_("reachable") if led.get("reachable") else
            _("UNREACHABLE: {error}").format(error=led.get("last_error")), replica=led.get("replica"),
            lease=led.get("lease_s")))
        for h in led.get("replicas") or ():
            by = ", ".join(f"{b} {v.get('reserved_tokens', 0)}" for b, v in sorted((h.get("by_backend") or {}).items()))
            lines.append("  " + _("replica {replica}: {n} requests, {tokens} tokens reserved ({by}), {q} queued").format(
                replica=h.get("replica"), n=h.get("requests", 0), tokens=h.get("reserved_tokens", 0), by=by or "-",
                q=h.get("queued", 0)))
    safety = st.get("safety")
    if safety is not None and float(safety) < 1.0:
        lines.append(_("usable pool = pool × admission.safety ({safety})").format(safety=safety))
    return lines
