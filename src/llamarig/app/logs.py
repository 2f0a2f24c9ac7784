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
from dataclasses import dataclass, replace
from pathlib import Path

from llamarig.app.check import CheckReport, WhatRuns, check_file, what_runs
from llamarig.app.runs import deployment_of, loads_model, price_argv
from llamarig.bench.logparse import UNLIMITED_BUDGET, LogParse
from llamarig.bench.logs import LogComparison, LogsReport
from llamarig.bench.logs import logs_report as log_report
from llamarig.errors import InputError, LlamarigError
from llamarig.flags.argv import Command, int_of
from llamarig.hardware.types import GPU
from llamarig.i18n import _, join
from llamarig.plan.inputs import build_inputs
from llamarig.plan.planner import effective_inputs, make_plan
from llamarig.plan.result import Plan
from llamarig.plan.speed.speed_model import speed_report
from llamarig.units import fmt_bytes

#: the options that decide a slot's context; the cut-off explains n_ctx_slot only if one of
#: them was cut off
CONTEXT_OPTIONS = ("--ctx-size", "--parallel", "--kv-unified", "--kv-unified-per-slot")


@dataclass(frozen=True)
class Against:
    """What the log is set against: the script's command pair (each command parsed once), and
    the plan inputs to price it (``model``: a GGUF or catalogue id instead of the script's -m;
    ``gpus``/``ram``: the machine it ran on). The slots, the context per slot, the KV types and
    what --fit does come from the plan of the command (what ``plan --from-script`` shows), never
    from argv arithmetic; without a model to plan, the comparison is the command's flags alone."""

    script: Path
    report: CheckReport
    pair: WhatRuns
    received: Command
    meant: Command
    model: str | None = None
    gpus: tuple[GPU, ...] = ()
    ram: int | None = None
    #: the plan of what llama-server received, on the GPUs when given (None: no model to plan)
    runs: Plan | None = None

    def plan(self, cmd: Command, *, on_gpus: bool = True) -> Plan | None:
        """The plan of ``cmd`` on the machine (``on_gpus`` False: on the host alone, the
        command's arithmetic without --fit), or None without a model to plan or when the
        planner refuses it."""
        priced, _notes = price_argv(cmd, model=self.model, gpus=self.gpus if on_gpus else (), ram=self.ram,
                                    base_dir=self.script.parent)
        return priced.plan


def _cut(pair: WhatRuns) -> str:
    return _(" (cut off at line {line})").format(line=pair.cut_line) if pair.cut_line else ""


def _streams(plan: Plan) -> int:
    """KV streams: one shared pool, or one per slot (src/llama-context.cpp:292-298)."""
    return 1 if plan.kv_unified else plan.n_parallel


def _gives(cmd: Command, plan: Plan) -> str:
    """How a command's context comes about, e.g. '-c 105000, 4 slots sharing one pool': -c as
    written, the slots and pool as the plan has them."""
    c = cmd.get("--ctx-size")
    pool = (_("{n} slots sharing one pool").format(n=plan.n_parallel) if plan.kv_unified and plan.n_parallel > 1 else
            _("{n} slot(s), one pool each").format(n=plan.n_parallel))
    return join(_(", "), [f"-c {c}" if c else _("-c unset"), pool])


def _meant_plan(a: Against) -> Plan | None:
    """The plan of the meant command when the cut-off words change the context (an option that
    decides it never reached the server), else None."""
    if not any(a.meant.has(o) and not a.received.has(o) for o in CONTEXT_OPTIONS):
        return None
    runs, meant = a.runs, a.plan(a.meant)
    return meant if meant is not None and runs is not None and meant.n_ctx_slot != runs.n_ctx_slot else None


def _fit_acts(a: Against) -> bool:
    """Whether --fit runs for the received command (on unless --fit off, common/arg.cpp)."""
    return (a.received.get("--fit") or "on") != "off"


def _fit_gap(a: Against, logged: int) -> str | None:
    """--fit's context with -c unset, as the plan predicts it on the GPUs, and the free memory
    the log's context implies against the plan's; None without GPUs or a plan."""
    if not a.gpus or not _fit_acts(a):
        return None
    plan = a.plan(a.received.without("--ctx-size"))
    if plan is None:
        return None
    predicted = plan.n_ctx_slot
    devs = ", ".join(f"{d.name} ({d.label})" for d in plan.devices)
    if predicted == logged:
        return _("{logged} is --fit's result with -c unset, as the plan predicts on {devs} (common/fit.cpp:373-457 "
                 "lowers the context until each GPU keeps --fit-target free)").format(logged=logged, devs=devs)
    gap = (predicted - logged) * _streams(plan) * plan.kv_bytes_per_token
    capacity = sum(d.capacity or 0 for d in plan.devices)
    other = sum(d.get("other") for d in plan.devices)
    msg = (_("{logged} is --fit's result with -c unset (common/fit.cpp:373-457 lowers the context until each GPU "
             "keeps --fit-target free) when the server finds about {gap} less free memory than the plan assumes: "
             "the plan predicts {predicted} on {devs} ({cells} cells x {bpt} B of KV), so about {free} was left for "
             "llama-server instead of {usable} ({capacity} less {other} of driver overhead): something else held it "
             "(a desktop, another process) or the overhead is larger") if gap > 0 else
           _("{logged} is --fit's result with -c unset (common/fit.cpp:373-457) when the server finds about {gap} "
             "more free memory than the plan assumes: the plan predicts {predicted} on {devs} ({cells} cells x "
             "{bpt} B of KV), about {free} for llama-server instead of {usable} ({capacity} less {other} of driver "
             "overhead)"))
    return msg.format(logged=logged, predicted=predicted, devs=devs, gap=fmt_bytes(abs(gap)),
                      cells=abs(predicted - logged) * _streams(plan), bpt=plan.kv_bytes_per_token,
                      free=fmt_bytes(capacity - other - gap), usable=fmt_bytes(capacity - other),
                      capacity=fmt_bytes(capacity), other=fmt_bytes(other))


def context_findings(p: LogParse, a: Against) -> list[str]:
    """The context the server settled on (the log's n_ctx_slot) against the plan of the script's
    command, as one chain: equal; or set by the cut-off; or not what a given -c gives, and then
    what does give it (--fit with -c unset and the free memory that implies, or another -c)."""
    runs = a.runs
    if not p.ctx_slots or runs is None:
        return []
    at, logged = p.ctx_slots[0]
    expected = runs.n_ctx_slot
    name, line, how = a.script, a.pair.line, _gives(a.received, runs)
    if logged == expected:
        return [_("line {at}: n_ctx_slot = {logged}, as {script} (line {line}) gives it ({how})").format(
            at=at, logged=logged, script=name, line=line, how=how)]
    meant = _meant_plan(a)
    if meant is not None:
        return [_("line {at}: the server ran n_ctx_slot = {logged}; {script} (line {line}) gives {expected} ({how}); "
                  "as meant ({meant_how}) a slot holds {per_slot}, but the options that set it are cut off{cut}: what "
                  "ran is not what the script says").format(
            at=at, logged=logged, script=name, line=line, expected=expected, how=how,
            meant_how=_gives(a.meant, meant), per_slot=meant.n_ctx_slot, cut=_cut(a.pair))]
    fit = _fit_gap(a, logged)
    c = a.received.get("--ctx-size")
    if c is None:
        head = _("line {at}: the server ran n_ctx_slot = {logged}; the plan of {script} (line {line}) gives {expected} "
                 "({how})").format(at=at, logged=logged, script=name, line=line, expected=expected, how=how)
        return [head] if fit is None else [head, fit]
    head = _("line {at}: the server ran n_ctx_slot = {logged}, not the {expected} that {script} (line {line}) gives "
             "({how}); --fit keeps a -c that is given (common/fit.cpp:455), so the run that wrote this log did not get "
             "-c {c}").format(at=at, logged=logged, expected=expected, script=name, line=line, how=how, c=c)
    if fit is not None:
        return [head, fit]
    exact = (_("-c {lo}-{hi} gives it exactly").format(lo=logged - 255, hi=logged) if runs.kv_unified else
             _("another -c gives it"))
    hint = (_("; {exact}, or --fit with -c unset (common/fit.cpp:373-457): give --gpu to tell which").format(exact=exact)
            if _fit_acts(a) else _("; {exact}").format(exact=exact))
    return [head + hint]


def budget_findings(p: LogParse, a: Against) -> list[str]:
    """A --reasoning-budget the script sets against the budget the log shows."""
    if not any(b == UNLIMITED_BUDGET for _l, b in p.reasoning_budgets):
        return []
    meant, got = a.meant.get("--reasoning-budget"), a.received.get("--reasoning-budget")
    if meant is None:
        return []
    if got is None:
        return [_("{script} sets --reasoning-budget {budget}, but the log shows an unlimited budget: the flag "
                  "never reached llama-server{cut}").format(script=a.script, budget=meant, cut=_cut(a.pair))]
    return [_("{script} passes --reasoning-budget {budget}, but the log shows an unlimited budget: this log is not "
              "from that command").format(script=a.script, budget=got)]


def _decode_at(a: Against, cmd: Command, depth: int) -> float | None:
    """The modelled decode of ``cmd`` at ``depth`` on the machine (after --fit), speculative
    decoding included."""
    try:
        d, _notes = deployment_of(cmd, model=a.model, gpus=a.gpus, ram=a.ram, base_dir=a.script.parent)
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


def never_findings(p: LogParse, a: Against) -> list[str]:
    """The script's KV types and slots that never reached the server, and the log's own evidence
    of the slots (a slot id above the script's -np)."""
    never = [f"{o} {v}" for o in ("--cache-type-k", "--cache-type-v", "--parallel")
             if (v := a.meant.get(o)) is not None and not a.received.has(o)]
    out: list[str] = []
    if never:
        out.append(_("the script's {flags} never reached the server{cut}: they are not what ran").format(
            flags=" ".join(never), cut=_cut(a.pair)))
    meant_np = a.meant.get("--parallel")
    top = max(p.requests, key=lambda r: r.slot, default=None)
    if top is not None and meant_np is not None and not a.received.has("--parallel") \
            and top.slot >= (int_of(meant_np) or 0):
        out.append(_("the log agrees: slot id {id} (line {line}) needs at least {n} slots, more than the script's "
                     "-np {np}").format(id=top.slot, line=top.line, n=top.slot + 1, np=meant_np))
    return out


def ran_findings(p: LogParse, a: Against) -> list[str]:
    """What ran, priced: the received command at the log's context (its KV types, slots and
    pool as the plan has them, its memory per device, its KV), and its modelled decode at the
    log's deepest request against the logged one."""
    runs = a.runs
    if runs is None or not a.gpus:
        return []
    cmd = a.received
    ctx = p.ctx_slots[0][1] if p.ctx_slots else runs.n_ctx_slot
    if p.ctx_slots:  # the context the log shows, whatever set it
        cmd = cmd.set("--ctx-size", str(ctx * _streams(runs)))
    plan = a.plan(cmd)
    if plan is None:
        return []
    kv = sum(d.get("kv") for d in plan.devices) + plan.host.get("kv")
    devs = join(_("; "), [_("{dev} {used} of {cap}").format(dev=d.name, used=fmt_bytes(d.total),
                                                           cap=fmt_bytes(d.capacity or 0)) for d in plan.devices])
    slots = (_("{n} slots sharing one pool of {ctx} cells").format(n=plan.n_parallel, ctx=ctx)
             if plan.kv_unified and plan.n_parallel > 1 else
             _("{n} slot(s) of {ctx} cells each").format(n=plan.n_parallel, ctx=ctx))
    out = [_("what ran ({script}, line {line}, at the log's context): K/V {tk}/{tv}, {slots}; its plan: {devs}, "
             "KV {kv}").format(script=a.script, line=a.pair.line, tk=plan.cache_type_k, tv=plan.cache_type_v,
                               slots=slots, devs=devs, kv=fmt_bytes(kv))]
    timed = [r for r in p.requests if r.eval_tok_s is not None and r.depth]
    if timed:
        r = max(timed, key=lambda x: x.depth or 0)
        pred = _decode_at(a, cmd, r.depth or 0)
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
    as_meant = WhatRuns(pair.index, pair.line, pair.meant, pair.meant, None, pair.meant_command, pair.meant_command)
    if meant is None or not prose:
        return as_meant, cut
    ran = (meant.program, *(w.text for w in meant.args if w.line < prose[0]))
    if ran == pair.meant:
        return as_meant, cut
    ran_cmd = Command.parse(ran, pair.meant_command.schema, program=True)  # words no reading parsed as one command
    if not loads_model(ran_cmd):
        return as_meant, cut
    return WhatRuns(pair.index, pair.line, ran, pair.meant, prose[0], ran_cmd, pair.meant_command), cut


def script_compare(script: Path, *, model: str | None = None, gpus: Sequence[GPU] = (),
                   ram: int | None = None) -> Callable[[LogParse], LogComparison]:
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
    if not loads_model(pair.received_command) and loads_model(pair.meant_command):
        # a log of a model serving is not from a command that loads none
        pair, line = _as_the_file_had_it(report, pair)
        head.append(_("{script}'s command as written loads no model (its -m is cut off at line {cut}), yet the log "
                      "shows one serving: it is read as the command meant").format(script=script, cut=line)
                    if pair.same else
                    _("{script}'s command as written loads no model (its -m is cut off at line {cut}), yet the log "
                      "shows one serving: read with its prose lines as the comments they were (a chat drops the "
                      "#), the command ends at line {end}").format(script=script, cut=line, end=pair.cut_line))
    received, meant = pair.received_command, pair.meant_command  # parsed once, by what_runs
    a = Against(script, report, pair, received, meant, model, tuple(gpus), ram)
    a = replace(a, runs=a.plan(received))

    def compare(p: LogParse) -> LogComparison:
        context, budget = context_findings(p, a), budget_findings(p, a)
        out = head + context + never_findings(p, a) + budget + ran_findings(p, a)
        if not a.gpus:
            out.append(_("give --gpu (and --model when the script's -m is not on this machine) to set the log "
                         "against the plan: the context --fit keeps, the memory and the decode of what ran"))
        told = frozenset(f for f, said in (("context", context), ("budget", budget)) if said)
        return LogComparison(tuple(out), told)

    return compare


def log_hint(script: str) -> str:
    """What ``check`` and ``plan --from-script`` say of a script, that a log would tell more:
    the command to run with it (a catalogue message; English, localized where printed)."""
    return _("with the server's log, `llamarig logs LOG --script {script} --model MODEL --gpu GPU` says what it "
             "really ran: the flags that never reached it, the context --fit chose and the memory that implies").format(
        script=script)


def logs_report(path: Path, script: Path | None = None, *, model: str | None = None, gpus: Sequence[GPU] = (),
                ram: int | None = None) -> LogsReport:
    """``llamarig logs FILE [--script S --model M --gpu G]``: the log report (bench.logs; its
    ``to_json()`` is ``--json``), with the script's and the plan's comparison first when a script
    is given."""
    compare = script_compare(script, model=model, gpus=gpus, ram=ram) if script is not None else None
    return log_report(path, compare)
