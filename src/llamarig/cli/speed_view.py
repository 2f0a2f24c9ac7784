"""The plan command's speed views: the speed table under a plan, the optimiser's report for
``--target-*``, and the options that drive them (extracted before the llama-server flags).
Rendering and option parsing live here, the numbers in llamarig.plan.speed / plan.optimise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llamarig.cli.lang import _, localize
from llamarig.errors import InputError
from llamarig.plan.calibration import Calibration
from llamarig.plan.calibration_files import load_calibration
from llamarig.plan.optimise import GB, Targets, optimise
from llamarig.plan.result import PlanInputs
from llamarig.plan.speed import DEFAULT_PROMPT, SpeedReport, kv_quality_short
from llamarig.units import GiB, fmt_bytes


def calibration_label(source: str) -> str:
    """A calibration's source in the user's language ("built-in (llamarig/data/...)" -> "内置 (...)")."""
    if "built-in" not in source:
        return source  # a catalogue Message (a calibration file) is written in the language by format()
    return source.replace("built-in", _("built-in"), 1)


def speed_table(rep: SpeedReport) -> Any:
    """A rich renderable for the human ``plan`` output: decode by depth, limit, prefill,
    speculative decoding, and the formulas."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    t = Table(title=_("speed (predicted; limit = bandwidth / bytes at efficiency 1)"), title_justify="left",
              show_edge=False)
    for c in (_("depth"), _("decode tok/s"), _("limit tok/s"), _("bytes per token")):
        t.add_column(c, justify="right")
    if rep.speculative:
        t.add_column(_("with {kind} n={n}").format(kind=rep.speculative.kind.upper(), n=rep.speculative.n_max),
                     justify="right")
    for d in rep.by_depth:
        row = [str(d.depth), f"{d.decode_tok_s:.1f}", f"{d.limit_tok_s:.1f}", f"{d.bytes_per_token / GB:.2f} GB"]
        if rep.speculative:
            row.append(f"{d.decode_tok_s * rep.speculative.speedup:.1f}")
        t.add_row(*row)
    parts: list[Any] = [t, Text(_("prefill: {rate:.0f} tok/s for a {n}-token prompt (-ub {ub})").format(
        rate=rep.prefill.tok_s, n=rep.prefill.prompt_tokens, ub=rep.prefill.n_ubatch))]
    if rep.prefill.prompt_tokens != DEFAULT_PROMPT and rep.prefill.prompt_note:
        parts.append(Text(rep.prefill.prompt_note, style="dim"))
    if rep.speculative:
        parts.append(Text(localize("speculative: " + rep.speculative.formula), style="dim"))
    parts.append(Text(localize("decode: " + rep.formula), style="dim"))
    parts.append(Text(localize("prefill: " + rep.prefill.formula), style="dim"))
    parts.append(Text(localize("KV: " + rep.kv_note), style="dim"))
    if rep.depth_note:
        parts.append(Text(localize(rep.depth_note), style="dim"))
    if rep.host_range:
        hr = rep.host_range
        line = _("expect decode {lo:.1f}-{hi:.1f} tok/s at depth 0").format(lo=hr.decode_tok_s[0], hi=hr.decode_tok_s[1])
        if hr.prefill_tok_s:
            line += _(", prefill {lo:.0f}-{hi:.0f} tok/s").format(lo=hr.prefill_tok_s[0], hi=hr.prefill_tok_s[1])
        parts.append(Text(line + _(": ") + localize(hr.note), style="yellow"))
    for w in rep.warnings:
        warning = _("warning:")
        parts.append(Text.from_markup(f"[yellow]{escape(warning)}[/] {escape(localize(w))}"))
    parts.append(Text(_("calibration: {source}").format(source=calibration_label(rep.calibration)), style="dim"))
    return Group(*parts)



# ============================================================================ report


def _fmt_tok(v: float) -> str:
    return f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def optimise_report(inp: PlanInputs, targets: Targets, *, cal: Calibration | None = None,
                    host_bandwidth_gbs: float | None = None, show: int = 8) -> tuple[Any, dict[str, Any], int]:
    """(rich renderable, JSON dict, exit code) for ``llamarig plan --target-*``. Exit 0 when the
    winner meets every target, 1 when it does not: verdict ``impossible`` (above a physical bound, or
    nothing fits) or ``unlikely`` (predicted below the target, under the bound); an answer, not an
    error."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    res = optimise(inp, targets, cal=cal, host_bandwidth_gbs=host_bandwidth_gbs)
    t = targets
    title = (_("llamarig plan: targets ctx {ctx} x {slots} slot(s)").format(ctx=t.ctx, slots=t.slots)
             + (_(", decode >= {rate:g} tok/s at depth {depth}").format(rate=t.decode_tok_s, depth=t.depth)
                if t.decode_tok_s else "")
             + _(", headroom {size}").format(size=fmt_bytes(t.headroom)))
    from rich import box

    tab = Table(title=title, show_lines=False, pad_edge=False, box=box.SIMPLE_HEAD, collapse_padding=True)
    layout = _("layout")
    cols = (("#", "right"), ("KV", "left"), ("q", "left"), ("-ub", "right"), (layout, "left"), (_("free"), "right"),
            ("@0", "right"), (f"@{t.depth}", "right"), (f"@{t.ctx}", "right"), (_("prefill"), "right"),
            (_("ok"), "left"))
    for col, just in cols:
        tab.add_column(col, justify=just, no_wrap=col != layout, overflow="fold",  # type: ignore[arg-type]
                       min_width=9 if col == layout else None)
    default = _("default")
    words = {"yes": _("yes"), "maybe": _("maybe"), "no fit": _("no fit"), "slow": _("slow")}
    for i, c in enumerate(res.candidates[:show], 1):
        s = c.speed
        sp = s.speculative
        eff = sp.speedup if sp else 1.0
        ts = ("-ts " + ",".join(f"{x:g}" for x in c.cfg.tensor_split)) if c.cfg.tensor_split else ""
        extra = f" --n-cpu-moe {c.cfg.n_cpu_moe}" if c.cfg.n_cpu_moe else ""
        if c.cfg.n_gpu_layers >= 0 and "n_gpu_layers" in c.cfg.set_flags:
            extra += f" -ngl {c.cfg.n_gpu_layers}"
        frees = [d.free for d in c.plan.devices if d.free is not None and d.capacity]
        tab.add_row(
            str(i), c.cfg.cache_type_k if c.cfg.cache_type_k == c.cfg.cache_type_v else f"{c.cfg.cache_type_k}/{c.cfg.cache_type_v}",
            kv_quality_short(c.cfg.cache_type_k, c.cfg.cache_type_v),
            str(c.plan.n_ubatch),
            ((ts + extra).strip() or default) + (f" MTP n={sp.n_max}" if sp else ""),
            ("/".join(f"{f / GiB:.1f}" for f in frees) + "G") if frees else "-",
            _fmt_tok(s.by_depth[0].decode_tok_s * eff), _fmt_tok(s.at_depth(t.depth).decode_tok_s * eff),
            _fmt_tok(s.at_depth(t.ctx).decode_tok_s * eff), _fmt_tok(s.prefill.tok_s),
            words.get(c.verdict.word, c.verdict.word),
        )
    parts: list[Any] = [tab, Text(_("decode tok/s at depth 0 / target depth / target context (with speculative "
                                    "decoding when the layout shows MTP n); prefill tok/s for an 8192-token prompt (shorter when a slot "
                                    "holds fewer tokens); "
                                    "free = free memory per GPU in device order (GiB); q = KV quality: ref = f16, "
                                    "~ref = q8_0 (about +0.01-0.02 perplexity), V4 = 8-bit K with 4-5 bit V, "
                                    "4bit = 4-5 bit K and V (measurable long-context recall loss); --json has the "
                                    "full note per candidate"), style="dim")]
    best = res.best
    if best is not None:
        head = (_("Winning command ({layout}):") if res.verdict in ("ok", "maybe") else
                _("Closest command ({layout}):")).format(layout=best.layout)
        parts.append(Text("\n" + head, style="bold"))
        parts.append(Text(" ".join(best.plan.command)))
        parts.append(Text(_("physical limit at depth 0: {limit:.0f} tok/s (bandwidth / bytes per token); predicted "
                            "{rate:.0f} tok/s").format(limit=best.speed.decode_limit_tok_s, rate=best.speed.decode_tok_s)))
        parts.append(Text(localize("KV: " + best.speed.kv_note)))
        if best.speed.depth_note:
            parts.append(Text(localize(best.speed.depth_note), style="dim"))
        if t.decode_tok_s:
            sp = best.speed.speculative
            deep = best.speed.at_depth(t.ctx).decode_tok_s * (sp.speedup if sp else 1.0)
            if deep < t.decode_tok_s:
                parts.append(Text(_("note: with the context full ({ctx} tokens) decode falls to about {rate:.0f} "
                                    "tok/s, below the target; --target-depth N judges the target at depth N (now "
                                    "{depth})").format(ctx=t.ctx, rate=deep, depth=t.depth), style="yellow"))
        parts.append(Text(_("decode formula: ") + localize(best.speed.formula), style="dim"))
        if best.speed.speculative:
            parts.append(Text(localize("speculative: " + best.speed.speculative.formula), style="dim"))
        parts.append(Text(_("prefill formula: ") + localize(best.speed.prefill.formula), style="dim"))
    heads = {"maybe": (_("Maybe: the targets are met only if this holds (not measured):"), "bold yellow"),
             "unlikely": (_("Not predicted as asked (possible, but the model says no):"), "bold yellow"),
             "impossible": (_("Impossible as asked:"), "bold red")}
    if res.verdict in heads:
        head_text, style = heads[res.verdict]
        parts.append(Text("\n" + head_text, style=style))
        parts += [Text("  - " + localize(r)) for r in res.reasons]
    parts.append(Text("\n" + _("{n} configurations evaluated in {ms:.0f} ms; calibration: {source}").format(
        n=res.evaluated, ms=res.elapsed_s * 1000, source=calibration_label(best.speed.calibration) if best else ""),
        style="dim"))
    return Group(*parts), res.to_json(), 0 if res.verdict in ("ok", "maybe") else 1


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

    def calibration_obj(self) -> Calibration:
        return load_calibration(self.calibration)

    def targets(self, inp: PlanInputs) -> Targets:
        """Targets for these inputs; contradictions with the given llama-server flags are errors."""
        cfg = inp.cfg
        if self.slots is not None and "n_parallel" in cfg.set_flags and cfg.n_parallel != self.slots:
            raise InputError(_("--slots {slots} contradicts -np {n_parallel}: give one of them").format(slots=self.slots, n_parallel=cfg.n_parallel))
        slots = self.slots or (cfg.n_parallel if "n_parallel" in cfg.set_flags and cfg.n_parallel > 0 else 1)
        ctx = self.target_ctx
        if ctx is None:
            ctx = (cfg.n_ctx // max(1, slots)) if "n_ctx" in cfg.set_flags and cfg.n_ctx else 8192
        elif "n_ctx" in cfg.set_flags and cfg.n_ctx and cfg.n_ctx < ctx * slots:
            raise InputError(_("--target-ctx {ctx} x {slots} slot(s) contradicts -c {n_ctx}: give one of them").format(ctx=ctx, slots=slots, n_ctx=cfg.n_ctx))
        return Targets(ctx=ctx, decode_tok_s=self.target_decode, decode_depth=self.target_depth,
                       headroom=GiB if self.headroom is None else self.headroom, slots=slots,
                       vision=self.vision, agent=self.agent, acceptance=self.acceptance)


SPEED_HELP = """\
Speed and optimiser options (docs/speed.md):
  --target-ctx N            tokens every slot must hold; searches KV types, -ub, -ts, -ngl, MTP
  --target-decode T         decode tok/s wanted (at --target-depth, default the target context)
  --target-depth N          context depth at which --target-decode is judged
  --headroom SIZE           free memory to keep on every GPU (default 1GiB)
  --slots N                 parallel slots (-np N -kvu)
  --vision                  the mmproj must be loaded
  --agent                   rank by prefill speed (long prompts) before KV quality
  --acceptance R            llama-server's draft acceptance, draft_n_accepted / draft_n, at
                            --spec-draft-n-max (default 3; default R per family)
  --calibration FILE        speed calibration file (default: the one `llamarig tune` wrote, else
                            built-in; `--calibration builtin` ignores tune's file)
  --host-bandwidth GBS      host memory bandwidth for layers in RAM / CPU-only plans
"""

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
