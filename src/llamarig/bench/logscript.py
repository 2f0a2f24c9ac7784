"""``llamarig logs --script``: what the launch script says against what the log shows ran."""

from __future__ import annotations

from pathlib import Path

from llamarig.bench.logparse import UNLIMITED_BUDGET, LogParse
from llamarig.errors import InputError
from llamarig.flags.argv import int_of, read_invocation
from llamarig.flags.readers import parse_text
from llamarig.flags.schema import load_bundled
from llamarig.i18n import _


def script_findings(p: LogParse, script: Path) -> list[str]:
    """What the launch script says against what the log shows ran: the per-slot context
    llama-server would have with the script's -c/-np/-kvu (server.cpp:168-186: -np unset means 4
    unified slots; llama-context.cpp:290-305 pads to 256), and a reasoning budget it sets."""
    try:
        text = script.read_text(errors="replace")
    except OSError as e:
        raise InputError(_("--script {script}: cannot read: {error}").format(script=script, error=e.strerror or e)) from None
    parsed = parse_text(text)
    if not parsed.invocations:
        raise InputError(_("--script {script}: no llama-server command found").format(script=script))
    inv = parsed.invocations[0]
    # what the script *says*, cut-off words included (the reading of check, flags.argv)
    r = read_invocation(inv, load_bundled(), 0)
    uses = {u.opt.name: u for u in r.uses if u.opt is not None}  # the last use of each option wins
    c_use, np_use, kvu = uses.get("--ctx-size"), uses.get("--parallel"), uses.get("--kv-unified")
    c = int_of(c_use.value) if c_use else None
    n_par_set = int_of(np_use.value) if np_use else None
    out: list[str] = []
    if c and p.ctx_slots:
        unified = (kvu.positive if kvu else False) if n_par_set and n_par_set > 0 else True
        n_par = n_par_set if n_par_set and n_par_set > 0 else 4
        n_ctx = -(-c // 256) * 256
        per_slot = n_ctx if unified else -(-(n_ctx // n_par) // 256) * 256
        logged = p.ctx_slots[0][1]
        if logged != per_slot:
            out.append(_("line {line}: the server ran n_ctx_slot = {logged}, but {script} (line {at}) says {args}, "
                         "which gives {per_slot}: what ran is not what the script says").format(
                line=p.ctx_slots[0][0], logged=logged, script=script, at=inv.line,
                args=f"-c {c}" + (f" -np {n_par_set}" if n_par_set else ""), per_slot=per_slot)
                + (_(" (the script cuts its command off at line {line})").format(line=inv.cut_line)
                   if inv.orphans else ""))
    b_use = uses.get("--reasoning-budget")
    budget_flag = b_use.value if b_use else None
    if budget_flag is not None and any(b == UNLIMITED_BUDGET for _, b in p.reasoning_budgets):
        out.append(_("{script} sets --reasoning-budget {budget}, but the log shows an unlimited budget: the flag "
                     "never reached llama-server").format(script=script, budget=budget_flag)
                   + (_(" (cut off at line {line})").format(line=inv.cut_line) if inv.orphans else ""))
    return out
