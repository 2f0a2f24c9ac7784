"""Values: each option's value as its handler in common/arg.cpp reads it (``std::stoi``,
``std::stof``, enum tables, KV cache types, ranges the handlers check)."""

from __future__ import annotations

import difflib
import re

from llamarig.flags.argv import INT_RE, Use
from llamarig.flags.findings import Finding, Fix, Severity, finding
from llamarig.flags.knowledge import KV_TYPE_FIXES
from llamarig.flags.rules.context import Subject
from llamarig.flags.schema import Option
from llamarig.i18n import _

FLOAT_RE = re.compile(r"^\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf(inity)?|nan)", re.I)


def check_values(s: Subject) -> list[Finding]:
    """invalid-value, value-truncated: each value as the option's handler reads it."""
    r, k = s.reading, s.k
    out: list[Finding] = []
    for u in r.uses:
        opt = u.opt
        if opt is None or not u.values:
            continue
        for v in u.values[:1] if opt.kind == "value" else u.values:
            out.extend(_check_value(u, opt, v.text, k))
    return out


def _check_value(u: Use, opt: Option, v: str, k: int | None) -> list[Finding]:
    # common/arg.cpp: handler_int -> std::stoi, float -> std::stof, enums compare exactly,
    # kv types: kv_cache_type_from_str (exact ggml_type_name), spec types: speculative.cpp
    if opt.removed or "$" in v:  # `$VAR`, `$(cmd)`, llama-swap `${PORT}`: known only at run time
        return []
    check = _BY_KIND.get(opt.value_kind or "string")
    return check(u, opt, v, k) if check else []


def _bad(u: Use, v: str, k: int | None, msg: str, fix: str | None, action: Fix | None) -> Finding:
    sp = u.spelling
    return finding("invalid-value", Severity.ERROR, u.line, sp,
                   _("`{given}`: {problem}").format(given=f"{sp} {v}", problem=msg), fix, k, u.passed, action, u.index)


def _kvtype(u: Use, opt: Option, v: str, k: int | None) -> list[Finding]:
    allowed = opt.allowed or ()
    if v in allowed:
        return []
    sug = KV_TYPE_FIXES.get(v.lower()) or (v.lower() if v.lower() in allowed else None)
    return [_bad(u, v, k, _("unsupported cache type (error while handling argument: Unsupported cache type: "
                            "{value}); allowed: {allowed}").format(value=v, allowed=_values(allowed)),
                 _("use `{fixed}`").format(fixed=f"{u.spelling} {sug}") if sug
                 else _("use one of {allowed}").format(allowed=_values(allowed)),
                 Fix("set-value", (sug or "q8_0",)))]


def _enum(u: Use, opt: Option, v: str, k: int | None) -> list[Finding]:
    allowed = opt.allowed or ()
    if v in allowed:
        return []
    near = difflib.get_close_matches(v, allowed, n=1, cutoff=0.5)
    return [_bad(u, v, k, _("invalid value; allowed: {allowed}").format(allowed=_values(allowed)),
                 _("use `{fixed}`").format(fixed=f"{u.spelling} {near[0]}") if near
                 else _("use one of {allowed}").format(allowed=_values(allowed)),
                 Fix("set-value", (near[0],)) if near else Fix("drop"))]


def _csv_enum(u: Use, opt: Option, v: str, k: int | None) -> list[Finding]:
    allowed = opt.allowed or ()
    badv = [p for p in v.split(",") if p.strip() not in allowed]
    if not badv:
        return []
    return [_bad(u, v, k, _("unknown value(s) {values}; allowed: {allowed}").format(values=", ".join(badv),
                                                                                 allowed=_values(allowed)),
                 _("use values from {allowed}").format(allowed=_values(allowed)), Fix("drop"))]


def _int(u: Use, opt: Option, v: str, k: int | None) -> list[Finding]:
    sp = u.spelling
    if opt.value_kind == "int_auto_all" and v in ("auto", "all"):
        return []
    m = INT_RE.match(v)
    if not m:
        return [_bad(u, v, k, _("not an integer (std::stoi fails: error while handling argument)"),
                     _("give a number after `{flag}`").format(flag=sp), Fix("drop"))]
    n = int(m.group(0))
    if abs(n) > 2**31 - 1:
        return [_bad(u, v, k, _("out of int range (std::stoi throws out_of_range)"), _("use a smaller number"),
                     Fix("drop"))]
    res: list[Finding] = []
    if m.end() != len(v):
        res.append(finding("value-truncated", Severity.WARNING, u.line, sp,
                           _("`{given}`: std::stoi reads the leading digits and ignores the rest "
                             "without an error (common/arg.cpp:859 `opt.handler_int(params, "
                             "std::stoi(val))`), so llama-server uses {n}").format(given=f"{sp} {v}", n=n),
                           _("write `{fixed}`").format(fixed=f"{sp} {_expand(v) or n}"),
                           k, u.passed, Fix("set-value", (_expand(v) or str(n),)), u.index))
    return res + _int_limits(u, opt, n, k)


def _float(u: Use, opt: Option, v: str, k: int | None) -> list[Finding]:
    sp = u.spelling
    m = FLOAT_RE.match(v)
    if not m:
        return [_bad(u, v, k, _("not a number (std::stof fails: error while handling argument)"),
                     _("give a number after `{flag}`").format(flag=sp), Fix("drop"))]
    if m.end() == len(v.rstrip()):
        return []
    read = m.group(0).strip()
    return [finding("value-truncated", Severity.WARNING, u.line, sp,
                    _("`{given}`: std::stof reads the leading number and ignores the rest "
                      "without an error (the option's handler in common/arg.cpp calls "
                      "std::stof(value)), so llama-server uses {n}").format(given=f"{sp} {v}", n=read),
                    _("write `{fixed}`").format(fixed=f"{sp} {read}"), k, u.passed,
                    Fix("set-value", (read,)), u.index)]


_BY_KIND = {"kvtype": _kvtype, "enum": _enum, "csv_enum": _csv_enum, "int": _int, "int_auto_all": _int,
            "float": _float}


def _expand(v: str) -> str | None:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kKmM])", v)
    if not m:
        return None
    mult = 1024 if m.group(2) in "kK" else 1024 * 1024
    return str(int(float(m.group(1)) * mult))


def _int_limits(u: Use, opt: Option, n: int, k: int | None) -> list[Finding]:
    # value ranges the handlers check (common/arg.cpp)
    sp = u.spelling
    if opt.name == "--parallel" and n == 0:
        return [finding("invalid-value", Severity.ERROR, u.line, sp,
                        _("`{given}`: the server rejects 0 slots (common/arg.cpp: error while handling "
                          "argument)").format(given=f"{sp} 0"), _("use `{fixed}` or more").format(fixed=f"{sp} 1"),
                        k, u.passed, Fix("set-value", ("1",)), u.index)]
    if opt.name == "--reasoning-budget" and n < -1:
        return [finding("invalid-value", Severity.ERROR, u.line, sp,
                        _("`{given}`: must be -1 (unlimited), 0 or a positive budget (error while handling "
                          "argument: invalid value)").format(given=f"{sp} {n}"),
                        _("use `{fixed}`").format(fixed=f"{sp} -1"),
                        k, u.passed, Fix("set-value", ("-1",)), u.index)]
    if opt.name == "--ctx-size" and n < 0:
        # the parser takes it (common/arg.cpp handler_int); cparams.n_ctx wraps around as uint32 and
        # the first graph reserve aborts (plan rejects it too: llamarig.plan.config)
        return [finding("server-aborts", Severity.ERROR, u.line, sp,
                        _("`{given}`: the server takes it, then aborts while loading the model with "
                          "GGML_ASSERT(n_outputs >= 1) (src/llama-context.cpp:2529)").format(given=f"{sp} {n}"),
                        _("use `{sp} 0` (the model's training context) or a positive size").format(sp=sp),
                        k, u.passed, Fix("set-value", ("0",)), u.index)]
    return []


def _values(allowed: tuple[str, ...] | list[str]) -> str:
    """llama-server's accepted values, each as code (words such as `enabled` stay as they are
    in a Chinese sentence)."""
    return ", ".join(f"`{a}`" for a in allowed)
