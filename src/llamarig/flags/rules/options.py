"""Options as written: removed and deprecated options, options given twice, ``_`` spellings."""

from __future__ import annotations

import re

from llamarig.flags.argv import Use
from llamarig.flags.findings import Finding, Fix, Severity, finding
from llamarig.flags.rules.context import Subject
from llamarig.i18n import _


def removed_deprecated(s: Subject) -> list[Finding]:
    """removed-flag, deprecated-flag."""
    r, k = s.reading, s.k
    # removed options are still registered and throw with a hint (common/arg.cpp, --draft etc.);
    # -dt/--defrag-thold is a no-op that only warns
    out = []
    for u in r.uses:
        if u.opt is None:
            continue
        if u.opt.removed:
            hint = u.opt.summary
            m = re.search(r"use (--[\w-]+)", u.opt.help.replace("\n", " "))
            new = m.group(1) if m else None
            out.append(finding("removed-flag", Severity.ERROR, u.line, u.spelling,
                               _("`{flag}` has been removed from llama-server: {hint} (error while handling "
                                 "argument)").format(flag=u.spelling, hint=hint),
                               _("use `{fixed}`").format(fixed=new) if new else _("remove it"), k, u.passed,
                               Fix("rename", (new,)) if new else Fix("drop"), u.index))
        elif u.opt.deprecated:
            out.append(finding("deprecated-flag", Severity.WARNING, u.line, u.spelling,
                               _("`{flag}` is deprecated and does nothing in this build ({summary})").format(
                                   flag=u.spelling, summary=u.opt.summary),
                               _("remove it"), k, u.passed, Fix("drop"), u.index))
    return out


#: at most this many line numbers are listed in one duplicate-flag message (the first ones and
#: the last), and at most this many earlier uses of one option get a finding of their own; the
#: rest are counted in one more finding, so that the output stays linear in the input
DUP_LINES_SHOWN = 6
DUP_FINDINGS_PER_OPTION = 20


def line_list(lines: list[int], shown: int = DUP_LINES_SHOWN) -> str:
    """``2, 3, 4`` or, for many lines, ``2, 3, 4, 5, 6, … 9001`` (bounded length)."""
    if len(lines) <= shown:
        return ", ".join(map(str, lines))
    return ", ".join(map(str, lines[:shown - 1])) + f", … {lines[-1]}"


def duplicates(s: Subject) -> list[Finding]:
    """duplicate-flag."""
    r, k = s.reading, s.k
    # common/arg.cpp parse_cli_args: "argument specified multiple times ... only last value will
    # be used"; handlers that push_back keep every value
    out = []
    groups: dict[str, list[Use]] = {}
    for u in r.uses:
        if u.opt is not None:
            groups.setdefault(u.opt.name, []).append(u)
    for name, uses in groups.items():
        if len(uses) < 2:
            continue
        opt = uses[0].opt
        assert opt is not None
        lines = line_list([u.line for u in uses])
        shown = " ".join([uses[-1].spelling] + [v.text for v in uses[-1].values])
        if opt.appending:
            out.append(finding("duplicate-flag", Severity.INFO, uses[-1].line, name,
                               _("`{flag}` is given {n} times (lines {lines}); this option appends, so every "
                                 "value is kept").format(flag=name, n=len(uses), lines=lines), None, k, uses[-1].passed))
            continue
        same = len({tuple(v.text for v in u.values) + (str(u.positive),) for u in uses}) == 1
        msg = (_("`{flag}` is given {n} times (lines {lines}); only the last one counts: `{last}`").format(
            flag=name, n=len(uses), lines=lines, last=shown) + (_(" (same value)") if same else ""))
        earlier = uses[:-1]
        for u in earlier[:DUP_FINDINGS_PER_OPTION]:
            out.append(finding("duplicate-flag", Severity.WARNING, u.line, u.spelling, msg,
                               _("remove the earlier one"), k, u.passed, Fix("drop"), u.index))
        rest = earlier[DUP_FINDINGS_PER_OPTION:]
        if rest:
            # one finding for the others (--fix keeps only the last use of the option anyway)
            out.append(finding("duplicate-flag", Severity.WARNING, rest[0].line, rest[0].spelling,
                               msg + _("; {n} more earlier uses on lines {lines} are not listed one by one").format(
                                   n=len(rest), lines=line_list([u.line for u in rest])),
                               _("remove the earlier ones"), k, rest[0].passed, Fix("drop"), rest[0].index))
    return out


def underscore_spelling(s: Subject) -> list[Finding]:
    """underscore-spelling."""
    r, k = s.reading, s.k
    out = []
    for u in r.uses:
        if u.opt is not None and u.spelling.startswith("--") and "_" in u.spelling:
            good = u.spelling.replace("_", "-")
            out.append(finding("underscore-spelling", Severity.INFO, u.line, u.spelling,
                               _("`{flag}` works only because llama-server turns `_` into `-` in `--` options "
                                 "(common/arg.cpp); the documented spelling is `{good}`").format(flag=u.spelling,
                                                                                                 good=good),
                               _("write `{fixed}`").format(fixed=good), k, u.passed, Fix("rename", (good,)), u.index))
    return out
