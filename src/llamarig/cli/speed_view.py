"""The plan command's speed views: the speed table under a plan, the optimiser's report for
``--target-*``, and the options that drive them (extracted before the llama-server flags).
Rendering and option parsing live here, the numbers in llamarig.plan.speed.speed_model / plan.optimise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.text import Text

from llamarig.cli.lang import N_, _, localize
from llamarig.cli.layout import Column, CommandText, Para, Sheet, labelled
from llamarig.errors import InputError
from llamarig.plan.optimise.search import GB, PlannedOption, Targets
from llamarig.plan.speed.speed_model import (
    DEFAULT_PROMPT,
    LOWEST_PUBLISHED_ACCEPTANCE,
    SpeedReport,
    kv_quality_short,
)
from llamarig.units import GiB, fmt_bytes

if TYPE_CHECKING:
    from llamarig.app.targets import TargetResult


def calibration_label(source: str) -> str:
    """A calibration's source in the user's language ("built-in (llamarig/data/...)" -> "内置（...）")."""
    import re

    m = re.fullmatch(r"built-in \((.*)\)", str(source))
    if m:
        return _("built-in ({path})").format(path=m.group(1))
    if "built-in" not in source:
        return source  # a catalogue Message (a calibration file) is written in the language by format()
    return source.replace("built-in", _("built-in"), 1)


def speed_table(rep: SpeedReport) -> Any:
    """A rich renderable for ``plan --why``: decode by depth, limit, prefill, speculative
    decoding (a table, stacked where the terminal is narrow), then the formulas and notes."""
    from rich.console import Group

    return Group(_depth_sheet(rep), *_speed_notes(rep))


def _depth_sheet(rep: SpeedReport) -> Sheet:
    cols = [Column(_("depth"), justify="right", key=True), Column(_("decode tok/s"), justify="right"),
            Column(_("limit tok/s"), justify="right"), Column(_("bytes per token"), justify="right")]
    if rep.speculative:
        cols.append(Column(_("with {kind} n={n}").format(kind=rep.speculative.kind.upper(), n=rep.speculative.n_max),
                           justify="right"))
    sheet = Sheet(cols, title=_("speed (predicted; limit = bandwidth / bytes at efficiency 1)"))
    for d in rep.by_depth:
        row = [str(d.depth), f"{d.decode_tok_s:.1f}", f"{d.limit_tok_s:.1f}", f"{d.bytes_per_token / GB:.2f} GB"]
        if rep.speculative:
            row.append(f"{d.decode_tok_s * rep.speculative.speedup:.1f}")
        sheet.add_row(*row)
    return sheet


def _speed_notes(rep: SpeedReport) -> list[Para]:
    """Prefill, the formulas, the KV and depth notes, the expected range, the warnings, the
    calibration: one paragraph each, wrapped at the terminal's width."""
    out = [Para.of(_("prefill: {rate:.0f} tok/s for a {n}-token prompt (-ub {ub})").format(
        rate=rep.prefill.tok_s, n=rep.prefill.prompt_tokens, ub=rep.prefill.n_ubatch))]
    dim = []
    if rep.prefill.prompt_tokens != DEFAULT_PROMPT and rep.prefill.prompt_note:
        dim.append(localize(rep.prefill.prompt_note))
    if rep.speculative:
        dim.append(_("speculative formula: ") + localize(rep.speculative.formula))
    dim += [_("decode formula: ") + localize(rep.formula), _("prefill formula: ") + localize(rep.prefill.formula),
            "KV" + _(": ") + localize(rep.kv_note)]
    if rep.depth_note:
        dim.append(localize(rep.depth_note))
    out += [Para.of(x, "dim") for x in dim]
    if rep.host_range:
        hr = rep.host_range
        line = _("expect decode {lo:.1f}-{hi:.1f} tok/s at depth 0").format(lo=hr.decode_tok_s[0], hi=hr.decode_tok_s[1])
        if hr.prefill_tok_s:
            line += _(", prefill {lo:.0f}-{hi:.0f} tok/s").format(lo=hr.prefill_tok_s[0], hi=hr.prefill_tok_s[1])
        out.append(Para.of(line + _(": ") + localize(hr.note), "yellow"))
    for w in rep.warnings:
        out.append(Para(labelled(_("warning:"), localize(w), "yellow")))
    out.append(Para.of(_("calibration: {source}").format(source=calibration_label(rep.calibration)), "dim"))
    return out


# ============================================================================ report


def _fmt_tok(v: float) -> str:
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def optimise_report(found: TargetResult, *, show: int = 8) -> Any:
    """The rich renderable of ``llamarig plan --target-*`` (``api.plan_targets``'s answer): the
    candidates, the winner, the verdict (``impossible``: above a physical bound, or nothing fits;
    ``unlikely``: predicted below the target, under the bound) and its reasons. The candidates
    are a table where the terminal is wide enough, one block each where it is not
    (cli/layout.py); every note wraps at the terminal's width."""
    from rich.console import Group

    res, targets = found.result, found.targets
    parts: list[Any] = [_candidates(res.candidates[:show], targets), Para.of(_(
        "decode tok/s at depth 0 / target depth / target context (with speculative decoding when the layout shows "
        "MTP n); prefill tok/s for an 8192-token prompt (shorter when a slot holds fewer tokens); free = free "
        "memory per GPU in device order (GiB); q = KV quality: ref = f16, ~ref = q8_0 (about +0.01-0.02 "
        "perplexity), V4 = 8-bit K with 4-5 bit V, 4bit = 4-5 bit K and V (measurable long-context recall loss); "
        "--json has the full note per candidate"), "dim")]
    parts += _assumed(res.candidates[:show])
    if res.best is not None:
        parts += _winner(res.best, res.verdict, targets)
    parts += _verdict(res.verdict, res.reasons)
    parts += [Text(""), Para.of(_("{n} configurations evaluated in {ms:.0f} ms; calibration: {source}").format(
        n=res.evaluated, ms=res.elapsed_s * 1000,
        source=calibration_label(res.best.speed.calibration) if res.best else ""), "dim")]
    return Group(*parts)


def _candidates(cands: Sequence[PlannedOption], t: Targets) -> Sheet:
    title = (_("llamarig plan: targets ctx {ctx} x {slots} slot(s)").format(ctx=t.ctx, slots=t.slots)
             + (_(", decode >= {rate:g} tok/s at depth {depth}").format(rate=t.decode_tok_s, depth=t.depth)
                if t.decode_tok_s else "")
             + _(", headroom {size}").format(size=fmt_bytes(t.headroom)))
    cols = [Column("#", justify="right", key=True), Column("KV", key=True), Column("q"), Column("-ub", justify="right"),
            Column(_("layout"), prose=True, min_width=9), Column(_("free"), justify="right"),
            Column("@0", justify="right"), Column(f"@{t.depth}", justify="right"),
            Column(f"@{t.ctx}", justify="right"), Column(_("prefill"), justify="right"), Column(_("ok"))]
    sheet = Sheet(cols, title=title)
    words = {"yes": _("yes"), "maybe": _("maybe"), "no fit": _("no fit"), "slow": _("slow")}
    for i, c in enumerate(cands, 1):
        s, cfg = c.speed, c.cfg
        frees = [d.free for d in c.plan.devices if d.free is not None and d.capacity]
        sheet.add_row(
            str(i), cfg.cache_type_k if cfg.cache_type_k == cfg.cache_type_v else f"{cfg.cache_type_k}/{cfg.cache_type_v}",
            localize(kv_quality_short(cfg.cache_type_k, cfg.cache_type_v)), str(c.plan.n_ubatch), _layout(c),
            ("/".join(f"{f / GiB:.1f}" for f in frees) + "G") if frees else "-",
            _fmt_range(*_at_zero(c)), _fmt_range(c.decode_low, c.decode_at_target),
            _fmt_range(*c.ctx_decode(t.ctx)), _fmt_tok(s.prefill.tok_s),
            words.get(c.verdict.word, c.verdict.word))
    return sheet


def _at_zero(c: PlannedOption) -> tuple[float, float]:
    """(low end, figure) at depth 0: no K/V read there, only an assumed draft acceptance scales it
    (the same factor at every depth: tokens per step)."""
    sp = c.speed.speculative
    fig = c.speed.by_depth[0].decode_tok_s * (sp.speedup if sp else 1.0)
    acc = next((a for a in c.depth_assumptions if a.code == "spec-acceptance" and a.decode_if_wrong), None)
    if acc is None or acc.decode_if_wrong is None or c.decode_at_target <= 0:
        return fig, fig
    return fig * acc.decode_if_wrong / c.decode_at_target, fig


def _fmt_range(low: float, figure: float) -> str:
    """A decode figure, as ``low-figure`` where it rests on an assumption that may fail."""
    return _fmt_tok(figure) if _fmt_tok(low) == _fmt_tok(figure) else f"{_fmt_tok(low)}-{_fmt_tok(figure)}"


def _assumed(cands: Sequence[PlannedOption]) -> list[Any]:
    """Beside the ranking: what the higher end of a shown range assumes ("maybe, if ..."), and
    that the ranking used the low end."""
    types: dict[str, None] = {}
    gpus: dict[str, None] = {}
    acceptance = False
    for c in cands:
        for a in (*c.depth_assumptions, *c.ctx_assumptions):
            if a.decode_if_wrong is None:
                continue
            if a.code == "kv-quant-read":
                types.setdefault(f"{c.cfg.cache_type_k}/{c.cfg.cache_type_v}", None)
                gpus.update(dict.fromkeys(x.label for x in c.speed.devices if x.backend != "CPU"))
            else:
                acceptance = True
    out: list[Any] = []
    if types:
        out.append(Para.of(_(
            "a-b: maybe b, if quantized K/V ({types}) reads as fast per byte as f16 on {gpus} (not measured "
            "there); a if as slowly as measured on an H200 (benchmarks/evidence). Ranked by a: the "
            "assumption lifts no candidate above a measured one; a GPU evidence file of this card "
            "(--calibration FILE, benchmarks/gpu_evidence_run.sh) replaces it").format(
            types=", ".join(types), gpus=", ".join(gpus)), "yellow"))
    if acceptance:
        out.append(Para.of(_(
            "a-b with MTP n: maybe b, if the draft acceptance is the family default (not measured); a at the "
            "lowest published acceptance ({low:.2f}). Ranked by a; --acceptance RATIO (llama-server's "
            "draft_n_accepted / draft_n) replaces it").format(low=LOWEST_PUBLISHED_ACCEPTANCE), "yellow"))
    return out


def _layout(c: PlannedOption) -> str:
    """A candidate's placement flags (-ts, --n-cpu-moe, -ngl), "default" without any, and MTP."""
    cfg, sp = c.cfg, c.speed.speculative
    parts = [("-ts " + ",".join(f"{x:g}" for x in cfg.tensor_split)) if cfg.tensor_split else "",
             f"--n-cpu-moe {cfg.n_cpu_moe}" if cfg.n_cpu_moe else "",
             f"-ngl {cfg.n_gpu_layers}" if cfg.n_gpu_layers >= 0 and "n_gpu_layers" in cfg.set_flags else ""]
    return (" ".join(p for p in parts if p) or _("default")) + (f" MTP n={sp.n_max}" if sp else "")


def _winner(best: PlannedOption, verdict: str, t: Targets) -> list[Any]:
    """The winning (or closest) command, its limit and notes, and the formulas."""
    speed = best.speed
    head = (_("Winning command ({layout}):") if verdict in ("ok", "maybe") else
            _("Closest command ({layout}):")).format(layout=best.layout)
    out: list[Any] = [Text(""), Para.of(head, "bold"), CommandText(" ".join(best.plan.command)),
                      Para.of(_("physical limit at depth 0: {limit:.0f} tok/s (bandwidth / bytes per token); "
                                "predicted {rate:.0f} tok/s").format(limit=speed.decode_limit_tok_s,
                                                                     rate=speed.decode_tok_s)),
                      Para.of("KV" + _(": ") + localize(speed.kv_note))]
    if speed.depth_note:
        out.append(Para.of(localize(speed.depth_note), "dim"))
    deep = speed.at_depth(t.ctx).decode_tok_s * (speed.speculative.speedup if speed.speculative else 1.0)
    if t.decode_tok_s and deep < t.decode_tok_s:
        out.append(Para.of(_("note: with the context full ({ctx} tokens) decode falls to about {rate:.0f} tok/s, "
                             "below the target; --target-depth N judges the target at depth N (now {depth})").format(
            ctx=t.ctx, rate=deep, depth=t.depth), "yellow"))
    out.append(Para.of(_("decode formula: ") + localize(speed.formula), "dim"))
    if speed.speculative:
        out.append(Para.of(_("speculative formula: ") + localize(speed.speculative.formula), "dim"))
    out.append(Para.of(_("prefill formula: ") + localize(speed.prefill.formula), "dim"))
    return out


def _verdict(verdict: str, reasons: Sequence[str]) -> list[Any]:
    heads = {"maybe": (_("Maybe: the targets are met only if this holds (not measured):"), "bold yellow"),
             "unlikely": (_("Not predicted as asked (possible, but the model says no):"), "bold yellow"),
             "impossible": (_("Impossible as asked:"), "bold red")}
    if verdict not in heads:
        return []
    head_text, style = heads[verdict]
    return [Text(""), Para.of(head_text, style)] + [Para.of("- " + localize(r), indent="    ", first_indent="  ") for r in reasons]


# ============================================================================ CLI glue


@dataclass(frozen=True)
class SpeedArgs:
    """The speed/optimiser options of ``llamarig plan`` (extracted before llama-server flags)."""

    target_ctx: int | None = None
    target_decode: float | None = None
    target_depth: int | None = None
    headroom: int | None = None
    slots: int | None = None
    vision: bool = False
    agent: bool = False
    acceptance: float | None = None
    calibration: str | None = None
    host_bandwidth_gbs: float | None = None

    @property
    def wants_optimiser(self) -> bool:
        return self.target_ctx is not None or self.target_decode is not None


#: plan's speed and optimiser options, for its help page (cli/plan_cmd.py)
SPEED_ROWS = (
    ("--target-ctx N", N_("tokens every slot must hold; searches KV types, -ub, -ts, -ngl, MTP")),
    ("--target-decode T", N_("decode tok/s wanted (at --target-depth, default the target context)")),
    ("--target-depth N", N_("context depth at which --target-decode is judged")),
    ("--headroom SIZE", N_("free memory to keep on every GPU (default 1GiB)")),
    ("--slots N", N_("parallel slots (-np N -kvu)")),
    ("--vision", N_("the mmproj must be loaded")),
    ("--agent", N_("rank by prefill speed (long prompts) before KV quality")),
    ("--acceptance R", N_("llama-server's draft acceptance, draft_n_accepted / draft_n, at --spec-draft-n-max "
                          "(default 3; default R per family)")),
    ("--calibration FILE", N_("speed calibration file (default: the one `llamarig tune` wrote, else built-in; "
                              "`--calibration builtin` ignores tune's file)")),
    ("--host-bandwidth GBS", N_("host memory bandwidth for layers in RAM / CPU-only plans")),
)

SPEED_VALUE = {"--target-ctx", "--target-decode", "--target-depth", "--headroom", "--slots",
                "--acceptance", "--calibration", "--host-bandwidth"}


def _num(flag: str, v: str, kind: type[float] | type[int]) -> float:
    try:
        x: float = kind(v)
    except ValueError:
        raise InputError((_("{flag} {value}: not a whole number") if kind is int else _("{flag} {value}: not a number")).format(flag=flag, value=v)) from None
    return x


def speed_option(key: str, val: str) -> tuple[str, Any]:
    """(SpeedArgs field, value) of one speed option with a value (``--target-ctx 105000``)."""
    from llamarig.units import parse_size

    if key == "--target-ctx":
        return "target_ctx", int(_num(key, val.replace("_", ""), int))
    if key == "--target-decode":
        return "target_decode", float(_num(key, val, float))
    if key == "--target-depth":
        return "target_depth", int(_num(key, val, int))
    if key == "--headroom":
        return "headroom", parse_size(val, "gib")
    if key == "--slots":
        return "slots", int(_num(key, val, int))
    if key == "--acceptance":
        return "acceptance", float(_num(key, val, float))
    if key == "--calibration":
        return "calibration", val
    bw = float(_num(key, val, float))  # --host-bandwidth
    if not 0 < bw < 100_000:
        raise InputError(_("--host-bandwidth {val}: expected GB/s, e.g. 40").format(val=val))
    return "host_bandwidth_gbs", bw


def speed_args(vals: dict[str, Any]) -> SpeedArgs:
    """SpeedArgs from the options read, checked."""
    sa = SpeedArgs(**vals)
    if sa.target_decode is not None and sa.target_decode <= 0:
        raise InputError(_("--target-decode {target_decode:g}: must be > 0 tok/s").format(target_decode=sa.target_decode))
    if sa.target_ctx is not None and sa.target_ctx <= 0:
        raise InputError(_("--target-ctx {target_ctx}: must be a positive number of tokens").format(target_ctx=sa.target_ctx))
    if sa.slots is not None and sa.slots <= 0:
        raise InputError(_("--slots {slots}: must be >= 1").format(slots=sa.slots))
    return sa
