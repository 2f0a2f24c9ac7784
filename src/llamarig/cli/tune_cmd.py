"""``llamarig tune`` and ``llamarig quality`` (docs/tune.md, docs/quality.md)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from llamarig.cli.lang import _, lang, localize
from llamarig.cli.render_cmd import _CTX, _input_options, render_text, resolve
from llamarig.errors import ExitCode, InputError, LlamarigError
from llamarig.render.common import flag_groups


def _strip_host_port(args: list[str]) -> list[str]:
    out = []
    for g in flag_groups(args):
        if g[0].split("=", 1)[0] in ("--host", "--port"):
            continue
        out += g
    return out


def prune(cands: list[Any], base: list[str], gpus: tuple[str, ...], ram: str | None, detect: bool,
          headroom: int, min_ctx: int | None) -> tuple[list[Any], list[tuple[Any, str]]]:
    """Keep the candidates whose plan fits (with ``headroom`` bytes free per GPU) and gives every
    slot at least ``min_ctx`` tokens; nothing else is ever launched."""
    from llamarig.cli.render_cmd import _plan
    from llamarig.units import fmt_bytes

    kept, pruned = [], []
    for c in cands:
        args = c.apply(base)
        plan, _speed, note = _plan(args, gpus, ram, detect)
        if plan is None:
            if "no such file" in note or "not found" in note:  # the GGUF is missing (the note is English)
                raise InputError(note)
            pruned.append((c, note))
            continue
        if not plan.fits:
            pruned.append((c, "does not fit: " + "; ".join(plan.shortfalls())))
            continue
        short = [d for d in plan.devices if d.free is not None and d.capacity and d.free < headroom]
        if short:
            pruned.append((c, f"less than {fmt_bytes(headroom)} headroom on {', '.join(d.name for d in short)}"))
            continue
        if min_ctx and plan.n_ctx_slot < min_ctx:
            pruned.append((c, f"{plan.n_ctx_slot} tokens per slot < --min-ctx {min_ctx}"))
            continue
        kept.append(c)
    return kept, pruned


def _kv_pair(args: list[str]) -> tuple[str, str]:
    from llamarig.render.common import get_value

    return (get_value(args, "-ctk", "--cache-type-k") or "f16", get_value(args, "-ctv", "--cache-type-v") or "f16")


def quality_prune(cands: list[Any], base: list[str], binary: str, floor: float
                  ) -> tuple[list[Any], list[tuple[Any, str]], dict[str, Any]]:
    """Probe every KV type pair the candidates use against f16 (llamarig quality, next-token
    part only) and drop the candidates whose top-1 agreement is below ``floor``."""
    from llamarig.tune.quality import run_quality

    pairs = sorted({_kv_pair(c.apply(base)) for c in cands} - {("f16", "f16")})
    if not pairs:
        return cands, [], {"rows": [], "note": "no quantized KV type among the candidates"}
    rep = run_quality(binary, base, pairs, n_prompts=4, prompt_words=64, depths=(),
                      progress=lambda m: click.echo(_("quality probe: {message}").format(message=m), err=True))
    agree = {(r["type_k"], r["type_v"]): r["top1_agreement"] for r in rep["rows"]}
    kept, pruned = [], []
    for c in cands:
        k, v = _kv_pair(c.apply(base))
        a = agree.get((k, v), 1.0)
        if a < floor:
            pruned.append((c, f"KV {k}/{v}: top-1 agreement with f16 {a:.1%} < --quality-floor {floor:.1%}"))
        else:
            kept.append(c)
    return kept, pruned, rep


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


def _default_space(objective: str, base: list[str], gpus: tuple[str, ...], ram: str | None, detect: bool
                   ) -> tuple[list[Any], list[dict[str, Any]]]:
    from llamarig.cli.render_cmd import _plan
    from llamarig.gguf import load_spec
    from llamarig.plan.config import parse_server_args
    from llamarig.tune.space import candidates, default_dimensions, describe

    cfg = parse_server_args(["llama-server", *base], strict=False)
    if not cfg.model or not Path(cfg.model).is_file():
        raise InputError(_("tune: the default search space needs a GGUF file (-m MODEL.gguf); or give --try "
                           "dimensions"))
    spec = load_spec(cfg.model)
    plan, _fit, _why = _plan(base, gpus, ram, detect)
    dims = default_dimensions(objective, spec, cfg, plan)
    return candidates(dims), describe(dims)


@click.command("tune", context_settings=_CTX)
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
@_input_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def tune_cmd(dims: tuple[str, ...], objective: str, weight: float, min_ctx: int | None, min_decode: float | None,
             headroom: str, quality_floor: float | None, min_runs: int, max_runs: int, eta: int, seed: int, n_predict: int, prompt_words: int,
             depth: int | None, exhaustive: bool, state_file: str | None, restart: bool, calibration_out: str | None,
             out: str | None, as_json: bool, from_script: str | None, invocation: int, server_bin: str | None,
             gpus: tuple[str, ...], ram: str | None, detect: bool, command: tuple[str, ...]) -> None:
    """Find the best settings by measurement: candidates pruned by the planner, then successive
    halving over real llama-server runs. Resumable (Ctrl-C, then the same command). Exit 0,
    2 bad input, 3 server problems, 130 interrupted (state kept)."""
    from llamarig.paths import state_dir
    from llamarig.tune import search as S
    from llamarig.tune.measure import ServerMeasure
    from llamarig.units import parse_size

    res = resolve(command, from_script, invocation, server_bin, gpus, ram, detect, want_plan=False)
    if not 0 <= weight <= 1:
        raise InputError(_("--weight {weight}: must be in [0, 1]").format(weight=weight))
    if depth is not None and depth < 1:
        raise InputError(_("--depth {depth}: a number of prompt tokens >= 1").format(depth=depth))
    if n_predict < 1:
        raise InputError(_("--n-predict {n_predict}: must be >= 1").format(n_predict=n_predict))
    base = _strip_host_port(res.args)
    space_desc: list[dict[str, Any]] | None = None
    if dims:
        parsed_dims: list[Any] = [S.parse_dim(d) for d in dims]
        cands = S.space(parsed_dims)
    else:
        cands, space_desc = _default_space(objective, base, gpus, ram, detect)
        parsed_dims = [[d["dimension"], d["values"]] for d in space_desc]
        for d in space_desc:
            click.echo(_("search space: {dimension}: {values} ({why})").format(
                dimension=d["dimension"], values=", ".join(d["values"]), why=d["why"]), err=True)
        click.echo(_("search space: {n} candidate(s) (the default for --objective {objective}; --try replaces it)").format(
            n=len(cands), objective=objective), err=True)
    # a prompt of --depth tokens plus the generated ones must fit a slot
    need_ctx = depth + n_predict + 1 if depth else 0
    eff_min_ctx = max(min_ctx or 0, need_ctx) or None
    kept, pruned = prune(cands, base, gpus, ram, detect, parse_size(headroom, "mib") if headroom != "0" else 0,
                         eff_min_ctx)
    for c, why in pruned:
        click.echo(_("pruned by the planner: {candidate}: {why}").format(candidate=c.key, why=why), err=True)
    quality: dict[str, Any] | None = None
    if quality_floor is not None:
        if not 0 <= quality_floor <= 1:
            raise InputError(_("--quality-floor {quality_floor}: a share of positions in [0, 1]").format(quality_floor=quality_floor))
        kept, q_pruned, quality = quality_prune(kept, base, res.binary, quality_floor)
        for c, why in q_pruned:
            click.echo(_("pruned by quality: {candidate}: {why}").format(candidate=c.key, why=why), err=True)
        pruned += q_pruned
    fp = S.fingerprint(binary=res.binary, base=base, dims=parsed_dims, objective=objective, weight=weight,
                       n_predict=n_predict, prompt_words=prompt_words, depth=depth, seed=seed, eta=eta,
                       runs=(min_runs, max_runs), exhaustive=exhaustive, min_decode=min_decode,
                       quality_floor=quality_floor)
    sp = Path(state_file) if state_file else state_dir() / f"tune-{fp}.json"
    if restart and sp.exists():
        sp.unlink()
    state = S.TuneState(sp, fp)
    if state.resumed:
        click.echo(_("resuming: {n} measurement(s) read back from {path}").format(n=state.resumed, path=sp), err=True)
    if not kept:
        raise InputError(_("nothing to tune: every candidate was pruned"))
    measure = ServerMeasure(res.binary, base, objective, weight, prompt_words, n_predict, min_decode, depth=depth)
    try:
        with _Progress() as progress:
            if exhaustive:
                result = _exhaustive_resumable(kept, measure, max_runs, state, progress)
            else:
                result = S.successive_halving(kept, measure, min_budget=min_runs, max_budget=max_runs, eta=eta,
                                              seed=seed, state=state, progress=progress)
    except KeyboardInterrupt:
        click.echo(_("llamarig: interrupted; {n} measurement(s) kept in {path}: run the same command to resume").format(
            n=len(state.measurements), path=sp), err=True)
        sys.exit(ExitCode.INTERRUPTED)
    counts = {"server_starts": measure.launches, "requests_sent": measure.requests}
    report = _report(result, pruned, objective, res, base, gpus, ram, detect, calibration_out, sp, as_json, quality,
                     counts, space_desc, n_predict)
    if out and result.winner is not None:
        Path(out).write_text(report["launcher"])
        Path(out).chmod(0o755)
        click.echo(_("wrote the winning launcher to {path}").format(path=out), err=True)


def _exhaustive_resumable(cands: list[Any], measure: Any, budget: int, state: Any, progress: Any) -> Any:
    from llamarig.tune import search as S

    def cached(c: Any, b: int) -> Any:
        m = state.get(c.key, 0)
        if m is None or m.budget != b:
            m = measure(c, b)
            state.add(S.Measurement(c.key, 0, b, m.score, m.metrics, m.error, m.seconds))
        return m

    return S.exhaustive(cands, cached, budget, progress)


def _report(result: Any, pruned: list[Any], objective: str, res: Any, base: list[str], gpus: tuple[str, ...],
            ram: str | None, detect: bool, calibration_out: str | None, sp: Path, as_json: bool,
            quality: dict[str, Any] | None = None, counts: dict[str, int] | None = None,
            space_desc: list[dict[str, Any]] | None = None, n_predict: int = 0) -> dict[str, Any]:
    from rich.console import Console
    from rich.table import Table

    from llamarig.cli.render_cmd import Resolved, _plan
    from llamarig.paths import state_dir

    winner = result.winner
    final = {m.key: m for m in result.final()}
    out: dict[str, Any] = {"search": result.to_json(), "pruned": [{"candidate": c.key, "why": w} for c, w in pruned],
                           "objective": objective, "state_file": str(sp), "launcher": "", "calibration": None,
                           "quality": quality, "space": space_desc, "counts": counts}
    if winner is not None:
        args = winner.apply(base)
        plan, speed, note = _plan(args, gpus, ram, detect)
        # the launcher keeps every flag the user gave (--host/--port too: tune measured on its own
        # loopback ports) and changes only the searched ones
        launch_args = winner.apply(list(res.args))
        out["launcher"] = render_text(Resolved(res.binary, launch_args, res.env, plan, speed, note), "bash", None,
                                      comments_lang="en" if as_json else None)
        out["winner_args"] = args
        out["launcher_args"] = launch_args
        m = final[winner.key]
        if objective == "throughput":
            out["calibration"] = {"skipped": "throughput: per-request decode speeds of concurrent requests are not "
                                             "the single-stream speed the speed model predicts"}
        elif plan is not None and m.metrics.get("decode_tok_s"):
            try:
                from llamarig.gguf import load_spec
                from llamarig.plan.config import parse_server_args
                from llamarig.plan.inputs import PlanArgs, build_hardware
                from llamarig.tune.calibrate import fit_calibration, write_calibration

                hw = build_hardware(PlanArgs(gpus=list(gpus), detect=detect))
                cfg = parse_server_args(["llama-server", *args], strict=False)
                spec = load_spec(plan.model)
                host_bw = None
                if not hw.gpus:  # the CPU's bandwidth is this machine's: measure it and record it
                    from llamarig.plan.calibration import measure_host_bandwidth

                    host_bw = measure_host_bandwidth()
                # the mean depth while decoding: the prompt, then half the generated tokens
                d = int(m.metrics.get("prompt_tokens", 0)) + n_predict // 2
                data, pred = fit_calibration(spec, cfg, hw, m.metrics["decode_tok_s"], host_bandwidth_gbs=host_bw,
                                             depth=d)
                cp = Path(calibration_out) if calibration_out else state_dir() / "speed-calibration.json"
                write_calibration(cp, data)
                out["calibration"] = {"path": str(cp), "data": data, "predicted_decode_tok_s": pred,
                                      "measured_decode_tok_s": m.metrics["decode_tok_s"], "depth": d}
            except LlamarigError as e:
                out["calibration"] = {"error": str(e)}
    if as_json:
        click.echo(json.dumps(out, indent=1, default=str))
        return out
    con = Console(highlight=False)
    unit = {"decode": "decode tok/s", "prefill": "prefill tok/s", "ttft": "-TTFT ms", "weighted": "decode^w·prefill^(1-w)",
            "throughput": "aggregate tok/s"}[objective]
    t = Table(title=f"tune: {result.method}", title_justify="left")
    t.add_column("candidate")
    for i, b in enumerate(result.budgets[:len(result.rungs)]):
        t.add_column(f"rung {i + 1} ({b} req): {unit}", justify="right")
    t.add_column("decode tok/s", justify="right")
    t.add_column("prefill tok/s", justify="right")
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
    sent = f", {counts['requests_sent']} completion requests sent, warm-ups included" if counts else ""
    con.print(f"{result.measured + result.reused} measurement(s): {result.measured} new ({result.launches} server "
              f"start(s){sent}), {result.reused} read back from {sp}; {result.cost} scored requests. Scores are "
              "medians of llama-server's own timings (predicted_per_second / prompt_per_second / prompt_ms; "
              "throughput: generated tokens of -np concurrent requests / wall time) after one warm-up request")
    if winner is None:
        con.print("[red]no candidate ran successfully[/]")
        return out
    con.print(f"[bold]winner:[/] {winner.key}" + (" [yellow](a tie)[/]" if result.tied else ""))
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
    con.print(_("winning launcher (llamarig render):"))
    click.echo(out["launcher"], nl=False)
    return out


@click.command("quality", context_settings=_CTX)
@click.option("--types", "types_", type=str, default="q8_0,q4_0", show_default=True,
              help="KV cache types to compare with f16 (K and V set alike; or K/V like q8_0/q4_0).")
@click.option("--prompts", "n_prompts", type=int, default=8, show_default=True, help="Prompts in the probe set.")
@click.option("--prompt-words", type=int, default=200, show_default=True, help="Words per prompt.")
@click.option("--top-k", type=int, default=10, show_default=True, help="n_probs: top-k returned per position.")
@click.option("--needle-words", type=int, default=400, show_default=True, help="Haystack length for the needle test.")
@click.option("--depths", type=str, default="0.1,0.5,0.9", show_default=True, help="Needle depths (fractions).")
@click.option("--json", "as_json", is_flag=True)
@_input_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def quality_cmd(types_: str, n_prompts: int, prompt_words: int, top_k: int, needle_words: int, depths: str,
                as_json: bool, from_script: str | None, invocation: int, server_bin: str | None,
                gpus: tuple[str, ...], ram: str | None, detect: bool, command: tuple[str, ...]) -> None:
    """Measure what a quantized KV cache changes: next-token distributions against f16 KV
    (top-1 agreement, KL divergence over the returned top-k) and a needle at several depths."""
    from llamarig.tune.quality import parse_types, render_report, run_quality

    res = resolve(command, from_script, invocation, server_bin, gpus, ram, detect, want_plan=False)
    kv = parse_types(types_)
    try:
        ds = [float(x) for x in depths.split(",") if x.strip()]
    except ValueError:
        raise InputError(_("--depths {depths}: expected fractions like 0.1,0.5,0.9").format(depths=depths)) from None
    if not ds or any(not 0 <= d <= 1 for d in ds):
        raise InputError(_("--depths {depths}: fractions between 0 and 1").format(depths=depths))
    if n_prompts < 1 or top_k < 1 or prompt_words < 1:
        raise InputError(_("--prompts, --top-k and --prompt-words must be >= 1"))
    rep = run_quality(res.binary, _strip_host_port(res.args), kv, n_prompts=n_prompts, prompt_words=prompt_words,
                      top_k=top_k, needle_words=needle_words, depths=ds,
                      progress=lambda msg: click.echo(localize(msg), err=True))
    if as_json:
        click.echo(json.dumps(rep, indent=1))
    else:
        render_report(rep, lang())
