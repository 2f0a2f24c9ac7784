"""``logs`` with the launch script (and a plan): what the server settled on, set against what
the script's command gives and what the planner predicts for it.

The log shows what ran (``n_ctx_slot``, the reasoning budget, decode at depth); the script only
what was meant. Read through :func:`llamarig.app.check.what_runs`, the script gives the command
llama-server received and the one its author meant; priced by the planner (with ``--model`` and
``--gpu``), it gives the context ``--fit`` keeps, the memory and the decode of what ran. The
findings say which explains the log: a flag cut off, ``--fit`` lowering the context (and the free
memory that implies against the plan's), or neither. Hooked into ``bench.logs.logs_report`` as its
``compare`` (the one place)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from llamarig.app.check import CheckReport, SlotLayout, WhatRuns, check_file, slot_layout, what_runs
from llamarig.app.runs import Priced, deployment_of, loads_model, price_argv
from llamarig.bench.logparse import UNLIMITED_BUDGET, LogParse
from llamarig.bench.logs import LogsReport
from llamarig.bench.logs import logs_report as log_report
from llamarig.errors import InputError, LlamarigError
from llamarig.flags.argv import Command, int_of
from llamarig.hardware.types import GPU
from llamarig.i18n import _, join
from llamarig.plan.inputs import build_inputs
from llamarig.plan.planner import effective_inputs, make_plan
from llamarig.plan.speed import speed_report
from llamarig.units import fmt_bytes

#: the options that decide a slot's context; the cut-off explains n_ctx_slot only if one of
#: them was cut off
CONTEXT_OPTIONS = ("--ctx-size", "--parallel", "--kv-unified", "--kv-unified-per-slot")


@dataclass(frozen=True)
class Against:
    """What the log is set against: the script's command pair, and the plan inputs to price it
    (``model``: a GGUF or catalogue id instead of the script's -m; ``gpus``/``ram``: the machine
    it ran on). Without GPUs the comparison is the script's arithmetic only."""

    script: Path
    report: CheckReport
    pair: WhatRuns
    model: str | None = None
    gpus: tuple[GPU, ...] = ()
    ram: int | None = None

    def price(self, argv: Sequence[str]) -> Priced | None:
        """The plan of ``argv`` on the machine, or None without GPUs (the context --fit keeps
        and the memory need them)."""
        if not self.gpus:
            return None
        priced, _notes = price_argv(argv, model=self.model, gpus=self.gpus, ram=self.ram, base_dir=self.script.parent)
        return priced


def _cut(pair: WhatRuns) -> str:
    return _(" (cut off at line {line})").format(line=pair.cut_line) if pair.cut_line else ""


def _meant_layout(pair: WhatRuns) -> SlotLayout | None:
    """The meant command's context when the cut-off words change it (an option that decides the
    context never reached the server), else None."""
    got = Command.parse(list(pair.received), program=True)
    meant = Command.parse(list(pair.meant), program=True)
    if not any(meant.has(o) and not got.has(o) for o in CONTEXT_OPTIONS):
        return None
    lay, lay_m = slot_layout(list(pair.received)), slot_layout(list(pair.meant))
    return lay_m if lay_m is not None and lay is not None and lay_m.per_slot != lay.per_slot else None


def _gives(lay: SlotLayout) -> str:
    """How a command's context comes about, e.g. '-c 105000, 4 slots sharing one pool'."""
    pool = (_("{n} slots sharing one pool").format(n=lay.slots) if lay.unified and lay.slots > 1 else
            _("{n} slot(s), one pool each").format(n=lay.slots))
    return join(_(", "), [f"-c {lay.n_ctx}" if lay.n_ctx else _("-c unset"), pool])


def _fit_gap(a: Against, logged: int, lay: SlotLayout) -> list[str]:
    """--fit's context with -c unset, as the plan predicts it, and the free memory the log's
    context implies against the plan's."""
    argv = Command.parse(list(a.pair.received), program=True).without("--ctx-size").to_argv()
    fitted = a.price(argv)
    if fitted is None or fitted.plan is None:
        return []
    plan = fitted.plan
    predicted = plan.n_ctx_slot
    devs = ", ".join(f"{d.name} ({d.label})" for d in plan.devices)
    if predicted == logged:
        return [_("--fit's result: n_ctx_slot {logged}, as the plan predicts on {devs} (common/fit.cpp:373-457 "
                  "lowers the context when -c is unset)").format(logged=logged, devs=devs)]
    gap = (predicted - logged) * lay.streams * plan.kv_bytes_per_token
    capacity = sum(d.capacity or 0 for d in plan.devices)
    other = sum(d.get("other") for d in plan.devices)
    msg = (_("--fit's result: n_ctx_slot {logged} where the plan predicts {predicted} on {devs} (-c unset: "
             "common/fit.cpp:373-457 lowers the context until each GPU keeps --fit-target free): the server found "
             "about {gap} less free memory than the plan assumes ({cells} cells x {bpt} B of KV), about {free} for "
             "llama-server instead of {usable} ({capacity} less {other} of driver overhead): something else held "
             "it (a desktop, another process) or the overhead is larger") if gap > 0 else
           _("--fit's result: n_ctx_slot {logged} where the plan predicts {predicted} on {devs} (-c unset: "
             "common/fit.cpp:373-457): the server found about {gap} more free memory than the plan assumes "
             "({cells} cells x {bpt} B of KV), about {free} for llama-server instead of {usable} ({capacity} "
             "less {other} of driver overhead)"))
    return [msg.format(logged=logged, predicted=predicted, devs=devs, gap=fmt_bytes(abs(gap)),
                       cells=abs(predicted - logged) * lay.streams, bpt=plan.kv_bytes_per_token,
                       free=fmt_bytes(capacity - other - gap), usable=fmt_bytes(capacity - other),
                       capacity=fmt_bytes(capacity), other=fmt_bytes(other))]


def context_findings(p: LogParse, a: Against) -> list[str]:
    """The context the server settled on (the log's n_ctx_slot) against the script's command:
    equal, lowered by --fit (with the free memory that implies), or set otherwise."""
    if not p.ctx_slots:
        return []
    at, logged = p.ctx_slots[0]
    lay = slot_layout(list(a.pair.received))
    if lay is None:
        return []
    runs = a.price(a.pair.received)
    expected = runs.plan.n_ctx_slot if runs is not None and runs.plan is not None else lay.per_slot
    name, line = a.script, a.pair.line
    if expected and logged == expected:
        return [_("line {at}: n_ctx_slot = {logged}, as {script} (line {line}) gives it ({how})").format(
            at=at, logged=logged, script=name, line=line, how=_gives(lay))]
    out = [_("line {at}: the server ran n_ctx_slot = {logged}; {script} (line {line}) gives {expected} ({how})").format(
        at=at, logged=logged, script=name, line=line, expected=expected or _("the model's training context"),
        how=_gives(lay))]
    meant = _meant_layout(a.pair)
    if meant is not None:
        out.append(_("as meant ({how}) a slot holds {per_slot}, but the options that set it are cut off{cut}: "
                     "what ran is not what the script says").format(how=_gives(meant), per_slot=meant.per_slot,
                                                                    cut=_cut(a.pair)))
    elif lay.n_ctx:
        exact = (_("; -c {lo}-{hi} gives it exactly").format(lo=logged - 255, hi=logged) if lay.unified else "")
        out.append(_("-c {c} reaches the server, and --fit keeps a -c that is given (common/fit.cpp:455): neither "
                     "the cut-off nor --fit explains {logged}{exact}; --fit lowers the context only when -c is "
                     "unset").format(c=lay.n_ctx, logged=logged, exact=exact))
    out += _fit_gap(a, logged, lay)
    return out


def budget_findings(p: LogParse, a: Against) -> list[str]:
    """A --reasoning-budget the script sets against the budget the log shows."""
    if not any(b == UNLIMITED_BUDGET for _l, b in p.reasoning_budgets):
        return []
    meant = Command.parse(list(a.pair.meant), program=True).get("--reasoning-budget")
    got = Command.parse(list(a.pair.received), program=True).get("--reasoning-budget")
    if meant is None:
        return []
    if got is None:
        return [_("{script} sets --reasoning-budget {budget}, but the log shows an unlimited budget: the flag "
                  "never reached llama-server{cut}").format(script=a.script, budget=meant, cut=_cut(a.pair))]
    return [_("{script} passes --reasoning-budget {budget}, but the log shows an unlimited budget: this log is not "
              "from that command").format(script=a.script, budget=got)]


def _decode_at(a: Against, argv: Sequence[str], depth: int) -> float | None:
    """The modelled decode of ``argv`` at ``depth`` on the machine (after --fit), speculative
    decoding included."""
    try:
        d, _notes = deployment_of(argv, model=a.model, gpus=a.gpus, ram=a.ram, base_dir=a.script.parent)
        if d is None:
            return None
        inp = build_inputs(d)
        plan = make_plan(inp)
        eff = effective_inputs(inp, plan)
        rep = speed_report(eff.spec, eff.cfg, eff.hardware, depths=[depth], n_ctx=plan.n_ctx_slot)
    except LlamarigError:
        return None
    sp = rep.speculative.speedup if rep.speculative is not None else 1.0
    return rep.by_depth[0].decode_tok_s * sp


def ran_findings(p: LogParse, a: Against) -> list[str]:
    """What ran, priced: the received command at the log's context (its memory per device, its
    KV), and its modelled decode at the log's deepest request against the logged one."""
    lay = slot_layout(list(a.pair.received))
    if lay is None or not a.gpus:
        return []
    argv = Command.parse(list(a.pair.received), program=True)
    if p.ctx_slots:  # the context the log shows, whatever set it
        argv = argv.set("--ctx-size", str(p.ctx_slots[0][1] * lay.streams))
    priced = a.price(argv.to_argv())
    if priced is None or priced.plan is None:
        return []
    plan = priced.plan
    kv = priced.kv_bytes or 0
    devs = join(_("; "), [_("{dev} {used} of {cap}").format(dev=d.name, used=fmt_bytes(d.total),
                                                           cap=fmt_bytes(d.capacity or 0)) for d in plan.devices])
    out = [_("what ran ({script}, line {line}): K/V {tk}/{tv}, {how}; the plan at the log's context: {devs}, "
             "KV {kv}").format(script=a.script, line=a.pair.line, tk=plan.cache_type_k, tv=plan.cache_type_v,
                               how=_gives(lay), devs=devs, kv=fmt_bytes(kv))]
    never = [f"{o} {v}" for o in ("--cache-type-k", "--cache-type-v", "--parallel")
             if (v := Command.parse(list(a.pair.meant), program=True).get(o)) is not None and not argv.has(o)]
    if never:
        out.append(_("the script's {flags} never reached the server{cut}: they are not what ran").format(
            flags=" ".join(never), cut=_cut(a.pair)))
    meant_np = Command.parse(list(a.pair.meant), program=True).get("--parallel")
    top = max(p.requests, key=lambda r: r.slot, default=None)
    if top is not None and meant_np is not None and not argv.has("--parallel") and top.slot >= (int_of(meant_np) or 0):
        out.append(_("the log agrees: slot id {id} (line {line}) needs at least {n} slots, more than the script's "
                     "-np {np}").format(id=top.slot, line=top.line, n=top.slot + 1, np=meant_np))
    timed = [r for r in p.requests if r.eval_tok_s is not None and r.depth]
    if timed:
        r = max(timed, key=lambda x: x.depth or 0)
        pred = _decode_at(a, argv.to_argv(), r.depth or 0)
        if pred is not None:
            out.append(_("decode {logged:.2f} tok/s logged at depth {depth} (task {task}); the plan of what ran "
                         "predicts {pred:.1f} tok/s there (modelled)").format(
                logged=r.eval_tok_s, depth=r.depth, task=r.task, pred=pred))
    return out


def _as_the_file_had_it(report: CheckReport, pair: WhatRuns) -> tuple[WhatRuns, int | None]:
    """A pasted script whose command loads no model (a chat dropped the ``\\`` and ``#`` of
    its lines): the command as the author's file ran it, its prose lines being comments there,
    which end the command (the first one after it); the meant command when no prose line cuts
    it. Returns the pair to read the log against and the line where the text as pasted cuts."""
    cut = pair.cut_line
    reading = report.reading
    meant = next((i for i in reading.meant_each if i.line == pair.line), None) if reading is not None else None
    prose = sorted(n.line for n in reading.line_notes if n.kind == "paste-prose" and n.line > pair.line) \
        if reading is not None else []
    if meant is None or not prose:
        return WhatRuns(pair.index, pair.line, pair.meant, pair.meant), cut
    ran = (meant.program, *(w.text for w in meant.args if w.line < prose[0]))
    if not loads_model(ran) or ran == pair.meant:
        return WhatRuns(pair.index, pair.line, pair.meant, pair.meant), cut
    return WhatRuns(pair.index, pair.line, ran, pair.meant, prose[0]), cut


def script_compare(script: Path, *, model: str | None = None, gpus: Sequence[GPU] = (),
                   ram: int | None = None) -> Callable[[LogParse], list[str]]:
    """The findings of a log set against ``script`` (and the plan of its command on ``gpus``),
    as ``bench.logs.logs_report``'s ``compare``."""
    try:
        report = check_file(str(script))
    except InputError as e:
        raise InputError(_("--script {script}: {error}").format(script=script, error=e)) from None
    if not report.parsed.invocations:
        raise InputError(_("--script {script}: no llama-server command found").format(script=script))
    pair = what_runs(report, 0)
    head: list[str] = []
    if not loads_model(pair.received) and loads_model(pair.meant):
        # a log of a model serving is not from a command that loads none
        pair, line = _as_the_file_had_it(report, pair)
        head.append(_("{script}'s command as written loads no model (its -m is cut off at line {cut}), yet the log "
                      "shows one serving: it is read as the command meant").format(script=script, cut=line)
                    if pair.same else
                    _("{script}'s command as written loads no model (its -m is cut off at line {cut}), yet the log "
                      "shows one serving: read with its prose lines as the comments they were (a chat drops the "
                      "#), the command ends at line {end}").format(script=script, cut=line, end=pair.cut_line))
    a = Against(script, report, pair, model, tuple(gpus), ram)

    def compare(p: LogParse) -> list[str]:
        out = head + context_findings(p, a) + budget_findings(p, a) + ran_findings(p, a)
        if not a.gpus:
            out.append(_("give --gpu (and --model when the script's -m is not on this machine) to set the log "
                         "against the plan: the context --fit keeps, the memory and the decode of what ran"))
        return out

    return compare


def logs_report(path: Path, script: Path | None = None, *, model: str | None = None, gpus: Sequence[GPU] = (),
                ram: int | None = None) -> LogsReport:
    """``llamarig logs FILE [--script S --model M --gpu G]``: the log report (bench.logs; its
    ``to_json()`` is ``--json``), with the script's and the plan's comparison first when a script
    is given."""
    compare = script_compare(script, model=model, gpus=gpus, ram=ram) if script is not None else None
    return log_report(path, compare)
