"""``llamarig bench`` (measure a running llama-server), ``llamarig bench compare`` and
``llamarig logs`` (parse llama-server logs). Every figure carries its method."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from llamarig import api
from llamarig.cli.help import Group, HelpCommand
from llamarig.cli.lang import N_, _, lang
from llamarig.cli.layout import print_wrapped
from llamarig.errors import ExitCode, InputError
from llamarig.i18n import os_error, unknown_name

EXIT_DOC = N_("Exit codes: 0 ok; 1 requests failed, run aborted, or --strict saw interference; 2 bad input; 3 server unreachable.")


def _int_list(value: str, what: str, ctx: bool = False) -> tuple[int, ...]:
    """Comma-separated integers (1k = 1024); with ``ctx``, the words ``ctx``/``max`` stand for
    the largest point that fits the slot context (resolved when the run starts)."""
    from llamarig.bench.runner import FIT_CTX

    out = []
    for part in value.split(","):
        p = part.strip().lower()
        if not p:
            continue
        if ctx and p in ("ctx", "max"):
            out.append(FIT_CTX)
            continue
        mult = 1
        if p.endswith("k"):
            mult, p = 1024, p[:-1]
        try:
            out.append(int(float(p) * mult))
        except ValueError:
            words = _(" or 'ctx'") if ctx else ""
            raise InputError(_("{what} {value!r}: expected comma-separated integers (1k = 1024){words}").format(what=what, value=value, words=words)) from None
    if not out or any(x < 0 and not (ctx and x == FIT_CTX) for x in out):
        raise InputError(_("{what} {value!r}: expected comma-separated non-negative integers").format(what=what, value=value))
    return tuple(out)


def _write_outputs(doc: dict[str, Any], json_path: Path | None, md_path: Path | None, html_path: Path | None) -> None:
    from llamarig.bench.html import render_html
    from llamarig.bench.report import markdown, write_json

    if json_path:
        write_json(doc, json_path)
    for path, text in ((md_path, markdown(doc, lang()) if md_path else ""),
                       (html_path, render_html(doc, lang()) if html_path else "")):
        if path:
            try:
                path.write_text(text, encoding="utf-8")
            except OSError as e:
                raise InputError(_("{path}: cannot write: {error}").format(path=path, error=os_error(e))) from e


@click.group("bench", cls=Group, invoke_without_command=True, epilog=EXIT_DOC, examples=(
    "llamarig bench --url http://127.0.0.1:8080 --json run.json",
    "llamarig bench --url http://127.0.0.1:8080 -s decode,prefill,depth --lengths 1k,8k --html run.html",
    "llamarig bench compare ub2048.json ub4096.json"))
@click.option("--url", metavar="URL", help="Base URL of the llama-server (or OpenAI-compatible server), e.g. http://127.0.0.1:8080.")
@click.option("--scenario", "-s", "scenarios", metavar="LIST", multiple=True,
              help="decode, prefill, ttft, depth, concurrency, spec, workload (comma-separated or repeated). Default: decode.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the full report (figures, requests, interference) as JSON.")
@click.option("--md", "md_path", type=click.Path(dir_okay=False, path_type=Path), help="Write a Markdown report: the headline, then the figure table with numbered method footnotes (指标 | 数值 | 测法 with --lang zh).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), help="Write a self-contained HTML report: the headline, plots, then the figure table with method footnotes.")
@click.option("--k", type=int, default=5, show_default=True, help="Measured requests per decode/spec run.")
@click.option("--n-predict", "-n", type=int, default=128, show_default=True, help="Tokens generated per request (ignore_eos).")
@click.option("--prompts", "prompt_set", metavar="NAME|FILE", default="synthetic", show_default=True,
              help="Prompt set: synthetic, tetris (the RTX 3090 field report's), notes (summarisation), mixed, or a FILE.jsonl of chat requests.")
@click.option("--endpoint", type=click.Choice(["chat", "completion"]), default="chat", show_default=True,
              help="chat: /v1/chat/completions (template applied); completion: raw /completion (contents joined).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for prompts and sampling.")
@click.option("--temperature", type=float, default=None, help="Sampling temperature sent with chat requests (default: the server's).")
@click.option("--warmup", type=int, default=1, show_default=True, help="Warm-up requests run first and excluded.")
@click.option("--lengths", metavar="LIST", default="1k,8k,32k", show_default=True,
              help="Cold prefill prompt lengths in tokens (1k = 1024); 'ctx' (or 'max') = the longest prompt that fits the slot "
                   "context. Lengths that do not fit are skipped, and the output says which and why.")
@click.option("--repeats", "-r", type=int, default=3, show_default=True, help="Repeats per prefill length / depth / warm TTFT.")
@click.option("--depths", metavar="LIST", default="0,8k,32k", show_default=True,
              help="Context depths for the depth scenario; 'ctx' (or 'max') = the deepest that fits the slot context with "
                   "-n generated tokens. Depths that do not fit are skipped, and the output says which and why.")
@click.option("--concurrency", "conc", metavar="LIST", default="1,2,4", show_default=True, help="Parallel stream counts.")
@click.option("--ttft-prefix", type=int, default=2048, show_default=True, help="Shared prefix length (tokens) for warm TTFT.")
@click.option("--slot", metavar="ID", default="0", show_default=True, help="Pin serial scenarios to this slot (id_slot), or 'none'.")
@click.option("--baseline-url", metavar="URL", help="spec: the same model without speculation, for the speed-up.")
@click.option("--workload", type=click.Path(dir_okay=False, path_type=Path), help="JSONL of chat requests to replay (scenario workload).")
@click.option("--strict", is_flag=True, help="Abort (exit 1) as soon as a slot is busy with work llamarig did not start.")
@click.option("--wait-ready", type=float, default=60.0, show_default=True, help="Seconds to wait while the server answers 503 (loading).")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True, help="Per-request timeout in seconds.")
@click.option("--poll-interval", type=float, default=0.2, show_default=True, help="Seconds between /slots polls.")
@click.option("--api-key", metavar="KEY", envvar="LLAMARIG_API_KEY", help="Bearer token (or $LLAMARIG_API_KEY).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no table (files only).")
@click.option("--hold", metavar="LIST", default=None,
              help="Through a llamarig gateway: hold these tiers (e.g. cron,B) while the bench runs "
                   "(POST /gateway/hold, released at the end).")
@click.pass_context
def bench_cmd(ctx: click.Context, url: str | None, scenarios: tuple[str, ...], json_path: Path | None, md_path: Path | None,
              html_path: Path | None, k: int, n_predict: int, prompt_set: str, endpoint: str, seed: int, temperature: float | None, warmup: int, lengths: str,
              repeats: int, depths: str, conc: str, ttft_prefix: int, slot: str, baseline_url: str | None,
              workload: Path | None, strict: bool, wait_ready: float, timeout_s: float, poll_interval: float,
              api_key: str | None, quiet: bool, hold: str | None) -> None:
    """Measure a running llama-server: decode, cold prefill, warm TTFT, depth, concurrency,
    speculative acceptance, workload replay; with interference detection and the method on
    every number."""
    if ctx.invoked_subcommand is not None:
        return
    from llamarig.bench.prompts import PROMPT_SETS
    from llamarig.bench.runner import BenchConfig
    from llamarig.cli import report_view

    if not url:
        raise InputError(_("--url is required (e.g. --url http://127.0.0.1:8080)"))
    if prompt_set not in PROMPT_SETS and not (prompt_set.endswith(".jsonl") or "/" in prompt_set):
        raise unknown_name(_("prompt set"), prompt_set, list(PROMPT_SETS))
    names = tuple(s.strip() for part in (scenarios or ("decode",)) for s in part.split(",") if s.strip())
    if slot.lower() in ("none", "-1", ""):
        slot_v: int | None = None
    else:
        try:
            slot_v = int(slot)
        except ValueError:
            raise InputError(_("--slot {slot!r}: expected a slot number or 'none'").format(slot=slot)) from None
    cfg = BenchConfig(
        url=url, scenarios=names, seed=seed, temperature=temperature, warmup=warmup, k=k, n_predict=n_predict, prompt_set=prompt_set, endpoint=endpoint,
        prefill_lengths=_int_list(lengths, "--lengths", ctx=True), repeats=repeats, depths=_int_list(depths, "--depths", ctx=True),
        concurrency=tuple(c for c in _int_list(conc, "--concurrency") if c > 0), ttft_prefix=ttft_prefix, slot=slot_v,
        baseline_url=baseline_url, workload=workload, strict=strict, wait_ready_s=wait_ready, request_timeout_s=timeout_s,
        poll_interval_s=poll_interval, api_key=api_key,
    )
    out = Console()
    err = Console(stderr=True)
    held = tuple(t.strip() for t in (hold or "").split(",") if t.strip())
    if held:
        api.gateway_hold(url, "hold", held, api_key=api_key)
    try:
        if quiet or not err.is_terminal:
            doc = api.bench_server(cfg).to_json()
        else:
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=err, transient=True) as prog:
                task = prog.add_task("starting", total=None)

                def progress(label: str, done: int, total: int) -> None:
                    prog.update(task, description=label[:40], completed=done, total=total)

                doc = api.bench_server(cfg, progress=progress).to_json()
    finally:
        if held:
            api.gateway_hold(url, "release", held, api_key=api_key)
    if held:
        doc["gateway_hold"] = list(held)
    _write_outputs(doc, json_path, md_path, html_path)
    if not quiet:
        report_view.render(doc, out, lang())
    if doc.get("errors") or doc.get("aborted"):
        sys.exit(ExitCode.PROBLEMS)


@bench_cmd.command("compare", epilog="Exit codes: 0 ok; 2 unreadable or non-llamarig JSON.")
@click.argument("a", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("b", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write the comparison as JSON.")
def compare_cmd(a: Path, b: Path, json_path: Path | None) -> None:
    """Compare two bench (or logs) JSON files figure by figure, with a noise band from each
    figure's spread: "ubatch 2048 vs 4096" answered with evidence."""
    import json

    from llamarig.cli import report_view

    result = api.compare_bench(a, b)
    report_view.comparison(list(result.rows), Console(highlight=False), str(a), str(b))
    if json_path:
        try:
            json_path.write_text(json.dumps(result.to_json(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        except OSError as e:
            raise InputError(_("{json_path}: cannot write: {error}").format(json_path=json_path, error=os_error(e))) from e


@click.command("logs", cls=HelpCommand, epilog="Exit codes: 0 ok; 2 unreadable, empty or non-llama-server file.",
               examples=("llamarig logs /tmp/llama-server.log --html log.html",
                         "llamarig logs server.log --script start.sh --model qwen3.6-27b:iq4_nl --gpu rtx3090"))
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), help="Write figures, timeline and findings as JSON.")
@click.option("--md", "md_path", type=click.Path(dir_okay=False, path_type=Path), help="Write a Markdown report: the headline, then the figure table with numbered method footnotes (指标 | 数值 | 测法 with --lang zh).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), help="Write a self-contained HTML report: the headline, plots, then the figure table with method footnotes.")
@click.option("--quiet", "-q", is_flag=True, help="Files only.")
@click.option("--script", "script", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The launch script that started this server: say where the log shows something else ran.")
@click.option("--model", metavar="MODEL", type=str, default=None,
              help="With --script: GGUF or catalogue id to plan instead of the script's -m (the slots, context and "
                   "K/V types are its plan's).")
@click.option("--gpu", "gpus", metavar="GPU", multiple=True,
              help="With --script: GPU the server ran on (repeatable): set the log against the plan.")
@click.option("--ram", metavar="SIZE", type=str, default=None, help="With --script: host RAM of that machine, e.g. 64G.")
def logs_cmd(file: Path, json_path: Path | None, md_path: Path | None, html_path: Path | None, quiet: bool,
             script: Path | None, model: str | None, gpus: tuple[str, ...], ram: str | None) -> None:
    """Parse a llama-server log (pinned and older formats, pasted fragments, a journal with
    restarts: each run of the server its own section) into a per-request timeline, decode vs
    depth, checkpoint RAM and plain-language findings."""
    from llamarig.cli import report_view

    # English: the JSON's words never change with the language
    from llamarig.cli.options import hardware_of

    hw, _notes = hardware_of(gpus, ram)
    doc = api.logs_report(file, script, model=model, gpus=hw.gpus, ram=hw.ram_bytes).to_json()
    _write_outputs(doc, json_path, md_path, html_path)
    if quiet:
        return
    con = Console(highlight=False)
    src = doc["source"]
    head = _("{path}: {lines} lines, {recognised} recognised, {skipped} skipped, {requests} requests").format(
        path=src["path"], lines=src["lines"], recognised=src["recognised"], skipped=src["skipped"],
        requests=src["requests"])
    if src.get("build"):
        head += _(", build {build}").format(build=src["build"])
    if (src.get("runs") or 1) > 1:
        head += _("; {n} runs of llama-server (restarts): each has its own section, the headline is the last "
                  "run's").format(n=src["runs"])
    print_wrapped(con, head, indent="  ")
    report_view.render(doc, con, lang())  # the headline first, then the per-request timeline
