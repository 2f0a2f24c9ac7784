"""``llamarig gateway``: run the tiered, KV-pool-aware gateway; ``llamarig gateway status``."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any

import click

from llamarig.errors import InputError, ServerError


@click.group("gateway", invoke_without_command=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="TOML (.toml) or YAML config file; reloaded on SIGHUP or when it changes.")
@click.option("--backend", "backends", multiple=True, metavar="URL",
              help="llama-server URL (repeatable); replaces the config's backends.")
@click.option("--host", default=None, help="Bind address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default 8000).")
@click.option("--check", is_flag=True, help="Validate the configuration, print it as JSON and exit.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@click.pass_context
def gateway_cmd(ctx: click.Context, config_path: str | None, backends: tuple[str, ...], host: str | None,
                port: int | None, check: bool, log_level: str) -> None:
    """Run the OpenAI-compatible gateway in front of llama-server.

    \b
    llamarig gateway --backend http://127.0.0.1:8080 --port 8000
    llamarig gateway --config gateway.toml
    llamarig gateway status --url http://127.0.0.1:8000

    See docs/gateway.md for the config reference.
    """
    if ctx.invoked_subcommand is not None:
        return
    from llamarig.gateway.config import build_config, dataclass_dict, load_config, with_overrides

    if port is not None and not 0 <= port <= 65535:
        raise InputError(f"--port: {port} is not a port number")
    base = load_config(config_path) if config_path else build_config(None, "built-in defaults")
    overrides: dict[str, Any] = {"backends": list(backends) or None, "host": host, "port": port}
    cfg = with_overrides(base, **overrides)
    if check:
        click.echo(json.dumps(dataclass_dict(cfg), indent=2, ensure_ascii=False))
        return
    logging.basicConfig(level=getattr(logging, log_level.upper()), format="%(asctime)s %(levelname)s %(message)s")
    from llamarig.gateway.server import serve

    def ready(gw: Any) -> None:
        names = ", ".join(f"{b.name}={b.url}" for b in cfg.backends)
        click.echo(f"llamarig gateway listening on http://{cfg.server.host}:{gw.port} "
                   f"(backends: {names}; tiers: {', '.join(cfg.tiers)})", err=True)

    try:
        serve(cfg, config_path=config_path, overrides=overrides, ready=ready)
    except OSError as e:
        raise ServerError(f"cannot listen on {cfg.server.host}:{cfg.server.port}: {e.strerror or e}") from None


@gateway_cmd.command("status")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="The gateway's URL.")
@click.option("--api-key", envvar="LLAMARIG_GATEWAY_KEY", default=None, help="Key, if the gateway has keys (env LLAMARIG_GATEWAY_KEY).")
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
        raise ServerError(f"{url}: gateway answered {e.code}: {e.read()[:200].decode('utf-8', 'replace')}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ServerError(f"{url}: cannot reach the gateway: {getattr(e, 'reason', e)}") from None
    if as_json:
        click.echo(json.dumps(st, indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    con = Console()
    t = Table(title=f"llamarig gateway {url} (up {st['uptime_s']} s, served {st['served']})")
    for col in ("backend", "url", "health", "reserved / pool tokens", "in flight / slots", "slot ctx", "last error"):
        t.add_column(col)
    for b in st["backends"]:
        health = "up" if b["healthy"] else "EJECTED"
        if b.get("removed"):
            health += " (draining)"
        pool = f"{b['reserved_tokens']} / {b['pool_tokens']}" if b["pool_tokens"] else f"{b['reserved_tokens']} / ?"
        slots = f"{b['in_flight']} / {b['slots'] if b['slots'] else '?'}"
        t.add_row(b["name"], b["url"], health, pool, slots, str(b["slot_ctx"] or "?"), b["last_error"] or "")
    con.print(t)
    q = st["queue"]
    by = ", ".join(f"{k}={v}" for k, v in q["by_tier"].items()) or "-"
    con.print(f"queue: {q['length']}/{q['size']} waiting (by tier: {by}); deadline {q['timeout_s']} s; "
              f"rejected so far: {st['rejected'] or 0}; Retry-After now {st['retry_after_s']} s")
    con.print("reserved = prompt tokens + max_tokens of every admitted request (pool from /props or config)")
