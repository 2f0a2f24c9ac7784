"""``llamarig top``: a live view of a llama-server or a llamarig gateway. The data comes from
llamarig.top (read-only GETs), the screen from cli/top_view.py; here: options, the terminal
(keys read without blocking in cbreak mode, restored on every way out) and the refresh loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

import click

from llamarig import api
from llamarig.cli.help import HelpCommand, lang_option
from llamarig.cli.lang import N_, _
from llamarig.errors import ExitCode, InputError, ServerError
from llamarig.i18n import os_error, set_language


@click.command("top", cls=HelpCommand, examples=(
    "llamarig top --url http://127.0.0.1:8080", "llamarig top --url http://127.0.0.1:8080 --once --json",
    "llamarig top --url http://127.0.0.1:8000", "llamarig top --url http://127.0.0.1:8080 --web 8088"))
@click.option("--url", required=True, metavar="URL", help="A llama-server, or a llamarig gateway (its backends are shown).")
@click.option("--interval", type=float, default=1.0, show_default=True, metavar="S",
              help="Seconds between refreshes (0.2 to 3600); rates are deltas over it.")
@click.option("--api-key", metavar="KEY", envvar="LLAMARIG_API_KEY", default=None,
              help="Bearer key for the server or the gateway (env LLAMARIG_API_KEY).")
@click.option("--once", is_flag=True, help="Print one snapshot and exit (takes two readings, --interval apart).")
@click.option("--json", "as_json", is_flag=True,
              help="JSON: with --once one object; without, one object per line per refresh.")
@click.option("--timeout", type=float, default=2.0, show_default=True, metavar="S", help="Timeout of each GET.")
@click.option("--no-metrics", is_flag=True,
              help="Do not read /metrics (each read resets llama-server's two averaging gauges).")
@click.option("--no-gpu", is_flag=True, help="Do not read the GPUs (NVML).")
@click.option("--pool", "pool", default=None, metavar="TOKENS|split",
              help="The server's KV pool: TOKENS cells shared by the slots (-kvu), or 'split' (each slot its own "
                   "n_ctx). Default: from the server's log or command line when it runs here, else one slot's n_ctx "
                   "taken as shared.")
@click.option("--web", "web", default=None, metavar="[HOST:]PORT",
              help="Serve a live web page instead of the screen (127.0.0.1 unless HOST says otherwise; docs/top.md).")
@click.option("--web-key", metavar="KEY", envvar="LLAMARIG_WEB_KEY", default=None,
              help="The admin key another machine needs to read the page (HTTP Basic password; env LLAMARIG_WEB_KEY).")
@click.option("--alert-power", type=float, default=None, metavar="W", help="--web: alert when a GPU draws W watts or more.")
@click.option("--alert-temp", type=float, default=85.0, show_default=True, metavar="C",
              help="--web: alert at C degrees or more.")
@click.option("--alert-pool", type=float, default=90.0, show_default=True, metavar="N",
              help="--web: alert when a KV pool is N % full or more.")
@lang_option(N_("Language of the screen."))
def top_cmd(url: str, interval: float, api_key: str | None, once: bool, as_json: bool, timeout: float,
            no_metrics: bool, no_gpu: bool, pool: str | None, web: str | None, web_key: str | None,
            alert_power: float | None, alert_temp: float, alert_pool: float, lang: str | None) -> None:
    """Watch a llama-server (or a llamarig gateway) live: slots, rates, pool, reservations, GPU,
    alerts. Read-only GETs with timeouts; keys: q quits, s sorts, v switches views, p pauses."""
    if lang is not None:
        set_language(lang)
    if not url.startswith(("http://", "https://")):
        raise InputError(_("--url {url}: expected http://HOST:PORT or https://HOST:PORT").format(url=url))
    if not 0.2 <= interval <= 3600:
        raise InputError(_("--interval {v}: expected 0.2 to 3600 seconds").format(v=interval))
    if not 0.1 <= timeout <= 600:
        raise InputError(_("--timeout {v}: expected 0.1 to 600 seconds").format(v=timeout))
    opts: dict[str, Any] = {"api_key": api_key, "timeout_s": timeout, "metrics": not no_metrics, "gpu": not no_gpu,
                            "pool": _pool_option(pool)}
    if web is not None:
        _web(url, web, web_key, interval, opts, alert_power, alert_temp, alert_pool)
    elif once:
        _once(url, interval, as_json, opts)
    elif as_json or not sys.stdout.isatty():
        asyncio.run(_stream(url, interval, opts, as_json))  # no terminal to draw on: one record per refresh
    else:
        _interactive(url, interval, opts)


def _pool_option(value: str | None) -> Any:
    """``--pool``: a number of cells (``1k`` = 1024) shared by the slots, or ``split``."""
    from llamarig.top.model import PoolHint

    if value is None:
        return None
    v = value.strip().lower()
    if v == "split":
        return PoolHint(None, False, "given")
    mult = 1024 if v.endswith("k") else 1
    try:
        n = int(float(v.removesuffix("k")) * mult)
    except ValueError:
        n = 0
    if n <= 0:
        raise InputError(_("--pool {value}: expected a number of tokens (1k = 1024) or 'split'").format(value=value))
    return PoolHint(n, True, "given")


def _web(url: str, bind: str, key: str | None, interval: float, opts: dict[str, Any], power: float | None,
         temp: float, pool_pct: float) -> None:
    from llamarig.web.alerts import Thresholds

    def ready(page: str) -> None:
        click.echo(_("llamarig top: the live page of {url} is on {page} (read-only; Ctrl-C stops)").format(
            url=url, page=page), err=True)

    try:
        api.serve_top_web(url, bind, key=key, interval_s=interval, thresholds=Thresholds(power, temp, pool_pct),
                          collector=opts, ready=ready)
    except OSError as e:
        raise ServerError(_("--web {bind}: cannot listen: {error}").format(bind=bind, error=os_error(e))) from None


def _all_down(snap: Any) -> bool:
    return (snap.mode == "gateway" and snap.gateway is None) or (bool(snap.servers) and all(s.state == "down" for s in snap.servers))


def _once(url: str, interval: float, as_json: bool, opts: dict[str, Any]) -> None:
    from llamarig.top.collect import once

    snap = asyncio.run(once(url, interval_s=interval, **opts))
    if as_json:
        click.echo(json.dumps(snap.to_json(), indent=2, ensure_ascii=False))
    else:
        from llamarig.cli.top_view import plain

        click.echo(plain(snap, width=_width()), nl=False)
    if _all_down(snap):
        sys.exit(ExitCode.ENVIRONMENT)


def _width() -> int:
    """The terminal's width (``COLUMNS`` first, as rich reads it), 100 for a pipe without it."""
    from llamarig.cli.layout import console_width

    return max(60, console_width(default=100))


async def _stream(url: str, interval: float, opts: dict[str, Any], as_json: bool) -> None:
    """One JSON object per line, or one text screen, per refresh (stdout is not a terminal)."""
    from llamarig.cli.top_view import plain
    from llamarig.top.collect import Collector

    async with Collector(url, **opts) as c:
        while True:
            snap = await c.snapshot()
            if as_json:
                click.echo(json.dumps(snap.to_json(), ensure_ascii=False))
            else:
                click.echo(plain(snap, width=100))
            await asyncio.sleep(interval)


def _interactive(url: str, interval: float, opts: dict[str, Any]) -> None:
    fd: int | None = None
    old: Any = None
    if sys.stdin.isatty():
        import termios  # lazy: POSIX terminals only
        import tty  # lazy: POSIX terminals only

        fd = sys.stdin.fileno()
        old = termios.tcgetattr(fd)
        tty.setcbreak(fd)  # keys arrive one by one, not echoed; Ctrl-C still interrupts
    try:
        asyncio.run(_live(url, interval, opts, fd))
    finally:
        if fd is not None:
            import termios  # lazy: POSIX terminals only

            termios.tcsetattr(fd, termios.TCSADRAIN, old)


def _on_keys(pressed: str, vs: Any) -> tuple[Any, bool, bool]:
    """The keys read at once: (view state, quit, refresh now)."""
    quit_ = refresh = False
    if pressed.startswith("\x1b"):
        return vs, quit_, refresh  # an escape sequence (arrows, function keys): not ours
    for k in pressed.lower():
        if k == "q":
            return vs, True, refresh
        if k == "s":
            vs = vs.next_sort()
        elif k == "v":
            vs = vs.next_view()
        elif k == "p":
            vs, refresh = vs.toggle_pause(), True
    return vs, quit_, refresh


async def _live(url: str, interval: float, opts: dict[str, Any], fd: int | None) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from llamarig.cli.top_view import ViewState, full_screen
    from llamarig.top.collect import Collector

    loop = asyncio.get_running_loop()
    keys: asyncio.Queue[str] = asyncio.Queue()
    if fd is not None:
        loop.add_reader(fd, lambda: keys.put_nowait(os.read(fd, 32).decode(errors="replace")))
    vs = ViewState()
    snap = None
    try:
        async with Collector(url, **opts) as c:
            with Live(Text(_("connecting to {url} ...").format(url=url)), console=Console(), screen=True,
                      auto_refresh=False, redirect_stdout=False, redirect_stderr=False) as live:
                next_at = loop.time()
                while True:
                    if not vs.paused and loop.time() >= next_at:
                        snap = await c.snapshot()
                        next_at = loop.time() + interval
                    if snap is not None:
                        live.update(full_screen(snap, vs), refresh=True)
                    try:
                        pressed = await asyncio.wait_for(keys.get(), timeout=max(0.05, next_at - loop.time()))
                    except asyncio.TimeoutError:
                        continue
                    vs, quit_, refresh = _on_keys(pressed, vs)
                    if quit_:
                        return
                    if refresh:
                        next_at = loop.time()
    finally:
        if fd is not None:
            with contextlib.suppress(Exception):
                loop.remove_reader(fd)
