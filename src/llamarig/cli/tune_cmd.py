"""``llamarig tune`` and ``llamarig quality`` (docs/tune.md, docs/quality.md)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from llamarig import api
from llamarig.app.tune import TuneInterrupted, TuneResult, TuneSettings
from llamarig.cli.lang import _, lang, localize
from llamarig.cli.options import CTX, hardware_of, input_options
from llamarig.errors import ExitCode, InputError


class _Progress:
    """Progress of the measurements on stderr: a rich progress bar when stderr is a terminal,
    else one plain line per measurement (logs, CI, pipes)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.con = Console(stderr=True, highlight=False)
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _Progress:
        if self.con.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(TextColumn("tune"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("{task.description}"), console=self.con)
            self.bar.start()
            self.task = self.bar.add_task("starting", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, done: int, total: int, msg: str) -> None:
        from rich.markup import escape

        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total, description=escape(msg))
        else:
            self.con.print(f"{done}/{total} {escape(msg)}")


@click.command("tune", context_settings=CTX)
@click.option("--try", "dims", multiple=True, metavar="FLAG=V1,V2,...",
              help="A dimension of the search (repeatable), e.g. --try -ub=64,128,256 --try -t=1,2. "
                   "Without --try: a default space built from the objective (docs/tune.md).")
@click.option("--objective", type=click.Choice(["decode", "prefill", "ttft", "weighted", "throughput"]),
              default="decode", show_default=True)
@click.option("--weight", type=float, default=0.5, show_default=True,
              help="weighted: decode^w x prefill^(1-w).")
@click.option("--min-ctx", type=int, default=None, help="Constraint: tokens per slot (from the plan).")
@click.option("--min-decode", type=float, default=None, help="Constraint: measured decode tok/s.")
@click.option("--headroom", type=str, default="0", show_default=True, help="Constraint: VRAM left free per GPU, e.g. 512M.")
@click.option("--quality-floor", type=float, default=None,
              help="Constraint: min top-1 agreement with f16 KV (llamarig quality) for a KV type, e.g. 0.95.")
@click.option("--min-runs", type=int, default=1, show_default=True, help="Requests per candidate at the first rung.")
@click.option("--max-runs", type=int, default=9, show_default=True, help="Requests per candidate at the last rung.")
@click.option("--eta", type=int, default=3, show_default=True, help="Keep the best 1/eta at each rung.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--n-predict", type=int, default=32, show_default=True, help="Tokens decoded per request.")
@click.option("--prompt-words", type=int, default=64, show_default=True, help="Prompt length in words.")
@click.option("--depth", type=int, default=None,
              help="Prompt of exactly N tokens (decode at depth N; replaces --prompt-words).")
@click.option("--exhaustive", is_flag=True, help="Measure every candidate with --max-runs (the reference).")
@click.option("--state", "state_file", type=str, default=None, help="Resumable state file (default: state dir).")
@click.option("--restart", is_flag=True, help="Discard a state file of a different or earlier search.")
@click.option("--calibration-out", type=str, default=None, help="Where to write the speed-model calibration.")
@click.option("--out", "-o", type=str, default=None, help="Write the winning bash launcher to FILE.")
@click.option("--json", "as_json", is_flag=True)
@input_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def tune_cmd(dims: tuple[str, ...], objective: str, weight: float, min_ctx: int | None, min_decode: float | None,
             headroom: str, quality_floor: float | None, min_runs: int, max_runs: int, eta: int, seed: int, n_predict: int, prompt_words: int,
             depth: int | None, exhaustive: bool, state_file: str | None, restart: bool, calibration_out: str | None,
             out: str | None, as_json: bool, from_script: str | None, invocation: int, server_bin: str | None,
             gpus: tuple[str, ...], ram: str | None, detect: bool, command: tuple[str, ...]) -> None:
    """Find the best settings by measurement: candidates pruned by the planner, then successive
    halving over real llama-server runs. Resumable (Ctrl-C, then the same command). Exit 0,
    2 bad input, 3 server problems, 130 interrupted (state kept)."""
    from llamarig.units import parse_size

    hw, notes = hardware_of(gpus, ram, detect)
    res = api.resolve_command(command, from_script=from_script, invocation=invocation, server_bin=server_bin,
                              hardware=hw, notes=notes, want_plan=False)
    settings = TuneSettings(dims=dims, objective=objective, weight=weight, min_ctx=min_ctx, min_decode=min_decode,
                            headroom=parse_size(headroom, "mib") if headroom != "0" else 0,
                            quality_floor=quality_floor, min_runs=min_runs, max_runs=max_runs, eta=eta, seed=seed,
                            n_predict=n_predict, prompt_words=prompt_words, depth=depth, exhaustive=exhaustive,
                            state_file=state_file, restart=restart, calibration_out=calibration_out)
    try:
        with _Progress() as progress:
            result = api.tune_command(res, settings, notify=lambda msg: click.echo(localize(msg), err=True),
                                      progress=progress, lang="en" if as_json else lang())
    except TuneInterrupted as e:
        click.echo(_("llamarig: interrupted; {n} measurement(s) kept in {path}: run the same command to resume").format(
            n=e.measurements, path=e.state_file), err=True)
        sys.exit(ExitCode.INTERRUPTED)
    _report(result, as_json)
    if out and result.search.winner is not None:
        Path(out).write_text(result.launcher)
        Path(out).chmod(0o755)
        click.echo(_("wrote the winning launcher to {path}").format(path=out), err=True)


def _report(res: TuneResult, as_json: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    result, objective, sp, counts = res.search, res.objective, res.state_file, res.counts
    winner = result.winner
    out = res.to_json()
    if as_json:
        click.echo(json.dumps(out, indent=1, default=str))
        return
    con = Console(highlight=False)
    unit = {"decode": _("decode tok/s"), "prefill": _("prefill tok/s"), "ttft": "-TTFT ms",
            "weighted": "decode^w·prefill^(1-w)", "throughput": _("aggregate tok/s")}[objective]
    t = Table(title="tune: " + localize(result.method), title_justify="left")
    t.add_column(_("candidate"))
    for i, b in enumerate(result.budgets[:len(result.rungs)]):
        t.add_column(_("rung {n} ({requests} req): {unit}").format(n=i + 1, requests=b, unit=unit), justify="right")
    t.add_column(_("decode tok/s"), justify="right")
    t.add_column(_("prefill tok/s"), justify="right")
    keys = [m.key for m in result.rungs[0]] if result.rungs else []
    for k in keys:
        cells = []
        last = None
        for r in result.rungs:
            mm = next((x for x in r if x.key == k), None)
            cells.append("" if mm is None else ("error: " + (mm.error or "")[:40] if mm.error else f"{mm.score:.1f}"))
            last = mm or last
        star = " ★" if winner is not None and k == winner.key else ""
        t.add_row(k + star, *cells, f"{last.metrics.get('decode_tok_s', math.nan):.1f}" if last and last.metrics else "",
                  f"{last.metrics.get('prefill_tok_s', math.nan):.1f}" if last and last.metrics else "")
    con.print(t)
    sent = _(", {n} completion requests sent, warm-ups included").format(n=counts["requests_sent"]) if counts else ""
    con.print(_("{total} measurement(s): {new} new ({starts} server start(s){sent}), {reused} read back from {path}; "
                "{cost} scored requests. Scores are medians of llama-server's own timings (predicted_per_second / "
                "prompt_per_second / prompt_ms; throughput: generated tokens of -np concurrent requests / wall "
                "time) after one warm-up request").format(
        total=result.measured + result.reused, new=result.measured, starts=result.launches, sent=sent,
        reused=result.reused, path=sp, cost=result.cost))
    if counts.get("calibration_server_starts"):
        con.print(_("the calibration's deep decode measurements: {starts} server start(s), {n} requests").format(
            starts=counts["calibration_server_starts"], n=counts.get("calibration_requests_sent", 0)))
    if winner is None:
        con.print("[red]" + _("no candidate ran successfully") + "[/]")
        return
    con.print("[bold]" + _("winner:") + f"[/] {winner.key}" + (" [yellow]" + _("(a tie)") + "[/]" if result.tied else ""))
    if result.decision:
        from rich.markup import escape  # lazy: rich only for the human report

        con.print(escape(localize(result.decision)), style="dim" if not result.tied else "yellow")
    if out.get("calibration") and "path" in out["calibration"]:
        c = out["calibration"]
    if out.get("calibration") and "path" in out["calibration"]:
        c = out["calibration"]
        con.print(_("speed-model calibration written to {path}: predicts {predicted:.1f} tok/s for the winner at "
                    "depth {depth} (measured {measured:.1f}); `llamarig plan` uses the state-directory file by "
                    "default (LLAMARIG_CALIBRATION=builtin ignores it)").format(
            path=c["path"], predicted=c["predicted_decode_tok_s"], depth=c["depth"], measured=c["measured_decode_tok_s"]))
        if c.get("deep"):
            con.print(_("the host's decode attention per KV cell is calibrated from decodes deeper in the context: "
                        "{points}").format(points=_(", ").join(
                            _("{measured:.1f} tok/s at depth {depth}").format(measured=x["measured_decode_tok_s"],
                                                                             depth=x["depth"]) for x in c["deep"])))
        if c.get("deep_error"):
            from rich.markup import escape  # lazy: rich only for the human report

            con.print("[yellow]" + _("the deep decode measurements stopped early: {error}").format(
                error=escape(c["deep_error"])) + "[/]")
    con.print(_("winning launcher (llamarig render):"))
    click.echo(out["launcher"], nl=False)


@click.command("quality", context_settings=CTX)
@click.option("--types", "types_", type=str, default="q8_0,q4_0", show_default=True,
              help="KV cache types to compare with f16 (K and V set alike; or K/V like q8_0/q4_0).")
@click.option("--prompts", "n_prompts", type=int, default=8, show_default=True, help="Prompts in the probe set.")
@click.option("--prompt-words", type=int, default=200, show_default=True, help="Words per prompt.")
@click.option("--top-k", type=int, default=10, show_default=True, help="n_probs: top-k returned per position.")
@click.option("--needle-words", type=int, default=400, show_default=True, help="Haystack length for the needle test.")
@click.option("--depths", type=str, default="0.1,0.5,0.9", show_default=True, help="Needle depths (fractions).")
@click.option("--json", "as_json", is_flag=True)
@input_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def quality_cmd(types_: str, n_prompts: int, prompt_words: int, top_k: int, needle_words: int, depths: str,
                as_json: bool, from_script: str | None, invocation: int, server_bin: str | None,
                gpus: tuple[str, ...], ram: str | None, detect: bool, command: tuple[str, ...]) -> None:
    """Measure what a quantized KV cache changes: next-token distributions against f16 KV
    (top-1 agreement, KL divergence over the returned top-k) and a needle at several depths."""
    from llamarig.tune.quality import parse_types, render_report

    hw, notes = hardware_of(gpus, ram, detect)
    res = api.resolve_command(command, from_script=from_script, invocation=invocation, server_bin=server_bin,
                              hardware=hw, notes=notes, want_plan=False)
    kv = parse_types(types_)
    try:
        ds = [float(x) for x in depths.split(",") if x.strip()]
    except ValueError:
        raise InputError(_("--depths {depths}: expected fractions like 0.1,0.5,0.9").format(depths=depths)) from None
    if not ds or any(not 0 <= d <= 1 for d in ds):
        raise InputError(_("--depths {depths}: fractions between 0 and 1").format(depths=depths))
    if n_prompts < 1 or top_k < 1 or prompt_words < 1:
        raise InputError(_("--prompts, --top-k and --prompt-words must be >= 1"))
    rep = api.quality_report(res, kv, n_prompts=n_prompts, prompt_words=prompt_words, top_k=top_k,
                             needle_words=needle_words, depths=ds, progress=lambda msg: click.echo(localize(msg), err=True))
    if as_json:
        click.echo(json.dumps(rep.to_json(), indent=1))
    else:
        render_report(rep, lang())
