"""``tune_command``: the best settings by measurement (docs/tune.md). Candidates are pruned by
the planner (nothing that cannot fit is launched) and, with a quality floor, by the KV-quality
probe; successive halving (or an exhaustive run) measures the rest on real llama-servers,
resumably; the winner gets a launcher and, for single-stream objectives, a speed calibration."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llamarig.app.command import Resolved
from llamarig.app.planning import plan_with_speed
from llamarig.app.render import render_command
from llamarig.detect import cpu_cores
from llamarig.errors import InputError, LlamarigError, ModelNotFoundError
from llamarig.flags.argv import Command
from llamarig.gguf import load_spec
from llamarig.hardware.types import Hardware
from llamarig.i18n import _
from llamarig.paths import state_dir
from llamarig.plan.config import ServerConfig
from llamarig.plan.deployment import deployment
from llamarig.plan.result import Plan
from llamarig.plan.speed.host_probes import measure_host_bandwidth
from llamarig.tune import search as S
from llamarig.tune.calibrate import (
    CALIBRATION_DEEP_RUNS,
    CALIBRATION_DEEP_SECONDS,
    calibration_ladder,
    fit_calibration,
    write_calibration,
)
from llamarig.tune.measure import DepthLadder, ServerMeasure, ladder_prefills
from llamarig.tune.quality import QualityReport, run_quality
from llamarig.tune.space import candidates, default_dimensions, describe
from llamarig.units import fmt_bytes

Notify = Callable[[str], None]
Progress = Callable[[int, int, str], None]


def _quiet(_msg: str) -> None:
    return None


class TuneInterrupted(Exception):
    """Ctrl-C during the measurements: what was measured is kept in ``state_file``; the same
    call resumes."""

    def __init__(self, measurements: int, state_file: Path) -> None:
        self.measurements = measurements
        self.state_file = state_file
        super().__init__(f"interrupted; {measurements} measurement(s) kept in {state_file}")


@dataclass(frozen=True)
class TuneSettings:
    """What to optimise and under which constraints (the options of ``llamarig tune``)."""

    dims: tuple[str, ...] = ()  # FLAG=V1,V2,... ; empty: the objective's default space
    objective: str = "decode"  # decode | prefill | ttft | weighted | throughput
    weight: float = 0.5
    min_ctx: int | None = None
    min_decode: float | None = None
    headroom: int = 0  # bytes free per GPU
    quality_floor: float | None = None
    min_runs: int = 1
    max_runs: int = 9
    eta: int = 3
    seed: int = 0
    n_predict: int = 32
    prompt_words: int = 64
    depth: int | None = None
    exhaustive: bool = False
    state_file: str | None = None
    restart: bool = False
    calibration_out: str | None = None

    def validate(self) -> None:
        if not 0 <= self.weight <= 1:
            raise InputError(_("--weight {weight}: must be in [0, 1]").format(weight=self.weight))
        if self.depth is not None and self.depth < 1:
            raise InputError(_("--depth {depth}: a number of prompt tokens >= 1").format(depth=self.depth))
        if self.n_predict < 1:
            raise InputError(_("--n-predict {n_predict}: must be >= 1").format(n_predict=self.n_predict))
        if self.quality_floor is not None and not 0 <= self.quality_floor <= 1:
            raise InputError(_("--quality-floor {quality_floor}: a share of positions in [0, 1]").format(
                quality_floor=self.quality_floor))


@dataclass
class TuneResult:
    """The search (every rung's measurements), what was pruned and why, the winner's launcher
    and args, the calibration written (or why not), the quality probe, the space, the counts."""

    search: S.SearchResult
    pruned: list[tuple[S.Candidate, str]]
    objective: str
    state_file: Path
    launcher: str = ""
    winner_args: list[str] | None = None
    launcher_args: list[str] | None = None
    calibration: dict[str, object] | None = None
    quality: QualityReport | None = None
    space: list[dict[str, object]] | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``llamarig tune --json`` (docs/tune.md)."""
        out: dict[str, Any] = {
            "search": self.search.to_json(), "pruned": [{"candidate": c.key, "why": w} for c, w in self.pruned],
            "objective": self.objective, "state_file": str(self.state_file), "launcher": self.launcher,
            "calibration": self.calibration, "quality": self.quality.to_json() if self.quality is not None else None,
            "space": self.space, "counts": self.counts}
        if self.winner_args is not None:
            out["winner_args"] = self.winner_args
            out["launcher_args"] = self.launcher_args
        return out


def base_args(res: Resolved) -> list[str]:
    """The command tune measures: the user's, without --host/--port (tune serves on its own
    loopback ports)."""
    return base_command(res).server_args()


def base_command(res: Resolved) -> Command:
    """:func:`base_args` as the resolved Command (not parsed again)."""
    return res.command().without("--host", "--port")


def _plan(args: Command | Sequence[str], hw: Hardware) -> Plan:
    """The plan of server args (a Command is planned as parsed) on ``hw``."""
    cmd = args.with_program("llama-server") if isinstance(args, Command) else ["llama-server", *args]
    return plan_with_speed(deployment(command=cmd, hardware=hw))


def prune(cands: Sequence[Any], base: Sequence[str], hw: Hardware, headroom: int, min_ctx: int | None
          ) -> tuple[list[Any], list[tuple[Any, str]]]:
    """Keep the candidates whose plan fits (with ``headroom`` bytes free per GPU) and gives every
    slot at least ``min_ctx`` tokens; nothing else is ever launched. A model that is not there
    is an error (ModelNotFoundError), not a pruned candidate."""
    kept, pruned = [], []
    for c in cands:
        try:
            plan = _plan(c.apply(list(base)), hw)
        except ModelNotFoundError:
            raise
        except LlamarigError as e:
            pruned.append((c, _("plan: not computed ({error})").format(error=e)))
            continue
        if not plan.fits:
            pruned.append((c, _("does not fit: {shortfalls}").format(shortfalls=_("; ").join(plan.shortfalls()))))
            continue
        short = [d for d in plan.devices if d.free is not None and d.capacity and d.free < headroom]
        if short:
            pruned.append((c, _("less than {headroom} headroom on {devices}").format(
                headroom=fmt_bytes(headroom), devices=", ".join(d.name for d in short))))
            continue
        if min_ctx and plan.n_ctx_slot < min_ctx:
            pruned.append((c, _("{n} tokens per slot < --min-ctx {min_ctx}").format(n=plan.n_ctx_slot, min_ctx=min_ctx)))
            continue
        kept.append(c)
    return kept, pruned


def kv_pair(args: Sequence[str]) -> tuple[str, str]:
    cmd = Command.parse(args, program=False)
    return cmd.get("--cache-type-k") or "f16", cmd.get("--cache-type-v") or "f16"


def quality_prune(cands: Sequence[Any], base: Sequence[str], binary: str, floor: float, notify: Notify = _quiet
                  ) -> tuple[list[Any], list[tuple[Any, str]], QualityReport]:
    """Probe every KV type pair the candidates use against f16 (llamarig quality, next-token
    part only) and drop the candidates whose top-1 agreement is below ``floor``."""
    pairs = sorted({kv_pair(c.apply(list(base))) for c in cands} - {("f16", "f16")})
    if not pairs:
        return list(cands), [], QualityReport((), note="no quantized KV type among the candidates")
    rep = run_quality(binary, list(base), pairs, n_prompts=4, prompt_words=64, depths=(),
                      progress=lambda m: notify(_("quality probe: {message}").format(message=m)))
    kept, pruned = [], []
    for c in cands:
        k, v = kv_pair(c.apply(list(base)))
        row = rep.row(k, v)
        a = row.top1_agreement if row is not None else 1.0
        if a < floor:
            pruned.append((c, _("KV {k}/{v}: top-1 agreement with f16 {a:.1%} < --quality-floor {floor:.1%}").format(
                k=k, v=v, a=a, floor=floor)))
        else:
            kept.append(c)
    return kept, pruned, rep


def default_space(objective: str, base: Command | Sequence[str], hw: Hardware) -> tuple[list[Any], list[dict[str, Any]]]:
    """The objective's default search space for this model and machine (tune/space.py); ``base``:
    the server args (a Command is read as parsed)."""
    base = Command.of(base, program=False)
    cfg = ServerConfig.from_command(base.with_program("llama-server"))
    if not cfg.model or not Path(cfg.model).is_file():
        raise InputError(_("tune: the default search space needs a GGUF file (-m MODEL.gguf); or give --try "
                           "dimensions"))
    spec = load_spec(cfg.model)
    try:
        plan: Plan | None = _plan(base, hw)
    except LlamarigError:
        plan = None
    dims = default_dimensions(objective, spec, cfg, plan)
    return candidates(dims), describe(dims)


def _exhaustive_resumable(cands: list[Any], measure: Any, budget: int, state: Any, progress: Any) -> Any:
    def cached(c: Any, b: int) -> Any:
        m = state.get(c.key, 0)
        if m is None or m.budget != b:
            m = measure(c, b)
            state.add(S.Measurement(c.key, 0, b, m.score, m.metrics, m.error, m.seconds))
        return m

    return S.exhaustive(cands, cached, budget, progress)


def _space(st: TuneSettings, base: Command, hw: Hardware, notify: Notify
           ) -> tuple[list[Any], list[Any], list[dict[str, Any]] | None]:
    """(candidates, the dimensions searched, the default space's description): --try's
    dimensions, else the objective's default space (each dimension and why, told to ``notify``)."""
    if st.dims:
        parsed_dims = [S.parse_dim(d) for d in st.dims]
        return S.space(parsed_dims), parsed_dims, None
    cands, space_desc = default_space(st.objective, base, hw)
    for d in space_desc:
        notify(_("search space: {dimension}: {values} ({why})").format(
            dimension=d["dimension"], values=", ".join(d["values"]), why=d["why"]))
    notify(_("search space: {n} candidate(s) (the default for --objective {objective}; --try replaces it)").format(
        n=len(cands), objective=st.objective))
    return cands, [[d["dimension"], d["values"]] for d in space_desc], space_desc


def tune_command(res: Resolved, settings: TuneSettings = TuneSettings(), *, notify: Notify | None = None,
                 progress: Progress | None = None, lang: str = "en") -> TuneResult:
    """`llamarig tune` on a resolved command: prune, measure, pick the winner, write its
    launcher and the speed calibration. ``notify``: the search space, pruned candidates,
    resumed measurements (one line each); ``progress(done, total, what)``: each measurement.
    Raises TuneInterrupted on Ctrl-C (the state is kept; the same call resumes). ``lang``: the
    language of the winning launcher's comments. Candidates are planned on ``res.hardware``."""
    notify = notify or _quiet
    st = settings
    st.validate()
    base_cmd = base_command(res)
    base = base_cmd.server_args()
    cands, parsed_dims, space_desc = _space(st, base_cmd, res.hardware, notify)
    # a prompt of --depth tokens plus the generated ones must fit a slot
    need_ctx = st.depth + st.n_predict + 1 if st.depth else 0
    eff_min_ctx = max(st.min_ctx or 0, need_ctx) or None
    kept, pruned = prune(cands, base, res.hardware, st.headroom, eff_min_ctx)
    for c, why in pruned:
        notify(_("pruned by the planner: {candidate}: {why}").format(candidate=c.key, why=why))
    quality: QualityReport | None = None
    if st.quality_floor is not None:
        kept, q_pruned, quality = quality_prune(kept, base, res.binary, st.quality_floor, notify)
        for c, why in q_pruned:
            notify(_("pruned by quality: {candidate}: {why}").format(candidate=c.key, why=why))
        pruned += q_pruned
    fp = S.fingerprint(binary=res.binary, base=base, dims=parsed_dims, objective=st.objective, weight=st.weight,
                       n_predict=st.n_predict, prompt_words=st.prompt_words, depth=st.depth, seed=st.seed,
                       eta=st.eta, runs=(st.min_runs, st.max_runs), exhaustive=st.exhaustive,
                       min_decode=st.min_decode, quality_floor=st.quality_floor)
    sp = Path(st.state_file) if st.state_file else state_dir() / f"tune-{fp}.json"
    if st.restart and sp.exists():
        sp.unlink()
    state = S.TuneState(sp, fp)
    if state.resumed:
        notify(_("resuming: {n} measurement(s) read back from {path}").format(n=state.resumed, path=sp))
    if not kept:
        raise InputError(_("nothing to tune: every candidate was pruned"))
    measure = ServerMeasure(res.binary, base, st.objective, st.weight, st.prompt_words, st.n_predict, st.min_decode,
                            depth=st.depth)
    prog = progress or (lambda done, total, msg: None)
    try:
        if st.exhaustive:
            result = _exhaustive_resumable(kept, measure, st.max_runs, state, prog)
        else:
            result = S.successive_halving(kept, measure, min_budget=st.min_runs, max_budget=st.max_runs, eta=st.eta,
                                          seed=st.seed, state=state, progress=prog)
    except KeyboardInterrupt:
        raise TuneInterrupted(len(state.measurements), sp) from None
    out = TuneResult(result, pruned, st.objective, sp, quality=quality, space=space_desc,
                     counts={"server_starts": measure.launches, "requests_sent": measure.requests})
    _finish(out, res, base, st, lang, state)
    return out


#: the tune state's rungs for the CPU calibration's deep decode measurements (the search's rungs
#: are 0, 1, ...; the ladder's are -1, -2, ...): a resumed tune reads them back instead of
#: measuring them again
DEEP_RUNG = -1


def _deep_rungs(out: TuneResult, res: Resolved, base: list[str], winner: Any, ladder: Sequence[int],
                st: TuneSettings, state: S.TuneState | None) -> tuple[list[S.Measurement], str | None]:
    """The winner's decode at each depth of ``ladder`` (llamarig.tune.measure.DepthLadder, one
    server start), read back from the tune state when it holds all of them; and the error that
    cut the ladder short, if any (the depths measured before it are used)."""
    if not ladder:
        return [], None
    kept = [state.get(winner.key, DEEP_RUNG - i) if state is not None else None for i in range(len(ladder))]
    if all(x is not None and x.metrics.get("depth_asked") == d for x, d in zip(kept, ladder, strict=True)):
        return [x for x in kept if x is not None], None
    dl = DepthLadder(res.binary, winner.apply(base), ladder, CALIBRATION_DEEP_RUNS, st.n_predict,
                     budget_s=4 * CALIBRATION_DEEP_SECONDS, key=winner.key)
    got, err = dl()
    got = [replace(x, rung=DEEP_RUNG - i) for i, x in enumerate(got)]
    if state is not None:
        for x in got:
            state.add(x)
    # counted apart from the search's: one more start and its requests
    out.counts["calibration_server_starts"] = dl.launches
    out.counts["calibration_requests_sent"] = dl.requests
    return got, err


def _finish(out: TuneResult, res: Resolved, base: list[str], st: TuneSettings, lang: str = "en",
            state: S.TuneState | None = None) -> None:
    """The winner's launcher (every flag the user gave, the searched ones changed) and the
    speed calibration fitted to its measured decode speed."""
    winner = out.search.winner
    if winner is None:
        return
    args = winner.apply(base)
    try:
        plan: Plan | None = _plan(args, res.hardware)
        note = ""
    except LlamarigError as e:
        plan, note = None, _("plan: not computed ({error})").format(error=e)
    # the launcher keeps every flag the user gave (--host/--port too: tune measured on its own
    # loopback ports) and changes only the searched ones
    launch_args = winner.apply(list(res.args))
    out.launcher = render_command(Resolved(res.binary, launch_args, res.env, plan, note), "bash", lang=lang)
    out.winner_args = args
    out.launcher_args = launch_args
    m = {x.key: x for x in out.search.final()}[winner.key]
    if st.objective == "throughput":
        out.calibration = {"skipped": "throughput: per-request decode speeds of concurrent requests are not "
                                      "the single-stream speed the speed model predicts"}
        return
    if plan is None or not m.metrics.get("decode_tok_s"):
        return

    try:
        hw = res.hardware
        cfg = ServerConfig.from_command(Command.parse(["llama-server", *args]))
        spec = load_spec(plan.model)
        host_bw = None
        deep: list[tuple[int, float]] = []
        deep_prefill: list[tuple[int, int, float]] = []
        deep_err = None
        if not hw.gpus:  # the CPU's bandwidth is this machine's: measure it and record it
            host_bw = measure_host_bandwidth()
            # decodes deeper in the context: the host's decode attention per KV cell, at several depths
            ladder = calibration_ladder(plan.n_ctx_slot, st.depth or int(m.metrics.get("prompt_tokens", 0)),
                                        st.n_predict, m.metrics.get("prefill_tok_s"))
            rungs, deep_err = _deep_rungs(out, res, base, winner, ladder, st, state)
            deep = [(int(x.metrics["depth_asked"]) + st.n_predict // 2, x.metrics["decode_tok_s_best"])
                    for x in rungs if x.metrics.get("decode_tok_s_best")]
            deep_prefill = ladder_prefills(rungs)
        # the mean depth while decoding: the prompt, then half the generated tokens
        d = int(m.metrics.get("prompt_tokens", 0)) + st.n_predict // 2
        # the fastest request of the winner's (other processes only slow a request down); older
        # state files have medians only
        dec = m.metrics.get("decode_tok_s_best") or m.metrics["decode_tok_s"]
        pre = m.metrics.get("prefill_tok_s_best") or m.metrics.get("prefill_tok_s")
        # on the CPU the measured prefill sets the host's compute figure too; the threads it ran
        # with are -tb/-t, else llama-server's default, this machine's cores
        data, pred = fit_calibration(spec, cfg, hw, dec, host_bandwidth_gbs=host_bw, depth=d,
                                     prefill_tok_s=pre,
                                     prompt_tokens=int(m.metrics.get("prompt_tokens") or 0) or None,
                                     host_threads=None if (cfg.threads > 0 or cfg.threads_batch > 0) else cpu_cores(),
                                     deep=deep, deep_prefill=deep_prefill)
        cp = Path(st.calibration_out) if st.calibration_out else state_dir() / "speed-calibration.json"
        write_calibration(cp, data)
        out.calibration = {"path": str(cp), "data": data, "predicted_decode_tok_s": pred,
                           "measured_decode_tok_s": dec, "depth": d}
        if deep:
            out.calibration["deep"] = [{"depth": d, "measured_decode_tok_s": v} for d, v in deep]
        if deep_err:
            out.calibration["deep_error"] = deep_err
    except LlamarigError as e:
        out.calibration = {"error": str(e)}
