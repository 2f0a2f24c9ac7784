"""Lint rules for a llama-server invocation, checked against the schema of the installed build.

The argument walk copies common/arg.cpp ``parse_cli_args``: ``--`` spellings get ``_`` -> ``-``,
an unknown token is ``error: invalid argument`` (there is no ``--opt=value`` syntax and no
positional argument), a value option takes the next word whatever it looks like, a repeated
option warns and the last value wins (handlers that append keep all), a bad value is ``error
while handling argument``. Each rule below cites the source file it is grounded in.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llamarig.flags.history import history_note
from llamarig.flags.knowledge import (
    CUDA_FA_KV_TYPES,
    CUDA_FA_VEC_PAIRS,
    DEAD_ENV,
    FOLKLORE,
    KV_TYPE_FIXES,
    LIVE_GGML_ENV,
    LIVE_GGML_PREFIXES,
    LIVE_LLAMA_ENV,
    LOCAL_HOSTS,
)
from llamarig.flags.parsed import Invocation, Note, Parsed, Word
from llamarig.flags.schema import Option, Schema
from llamarig.hardware.cpu import detect_cpu
from llamarig.hardware.cpu_buffers import AMX_TILE_TYPES, host_weight_buffer

SEVERITIES = ("error", "warning", "info")

#: rules whose findings mean llama-server refuses the argv while parsing it (exit 1 before
#: any model loading); the corpus test compares exactly these with the real binary.
PARSE_RULES = frozenset({
    "unknown-flag", "equals-syntax", "stray-argument", "flag-takes-no-value", "missing-value",
    "invalid-value", "removed-flag",
})


@dataclass(frozen=True)
class Fix:
    """A machine-readable repair for --fix."""

    action: str  # drop | replace | set-value | drop-value | rename | add | split-equals
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    line: int
    flag: str | None
    message: str
    fix: str | None = None
    invocation: int | None = None
    passed: bool = True  # False: on a cut-off line, llama-server never sees it today
    action: Fix | None = None
    use: int | None = None  # index into the invocation's uses

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "line": self.line, "flag": self.flag,
                "message": self.message, "fix": self.fix, "invocation": self.invocation,
                "passed": self.passed}


@dataclass
class Use:
    """One option as written: the spelling, its values and where."""

    opt: Option | None  # None: unknown flag / stray word
    spelling: str
    values: list[Word]
    line: int
    positive: bool = True
    passed: bool = True
    index: int = 0

    @property
    def value(self) -> str | None:
        return self.values[0].text if self.values else None


@dataclass
class Reading:
    """The options of one invocation as llama-server would parse them."""

    uses: list[Use] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def last(self, name: str) -> Use | None:
        for u in reversed(self.uses):
            if u.opt is not None and u.opt.name == name:
                return u
        return None

    def all(self, name: str) -> list[Use]:
        return [u for u in self.uses if u.opt is not None and u.opt.name == name]

    def has(self, name: str) -> bool:
        return self.last(name) is not None


@dataclass(frozen=True)
class Context:
    """What the rules may know beyond the argv."""

    physical_cores: int | None = None
    cores_source: str = "this machine"
    gpus: tuple[str, ...] = ()  # `check --gpu NAME[:GB]`, for the memory plan
    ram_bytes: int | None = None
    model_ref: str | None = None  # `check --model` (GGUF path or catalogue id)
    need_ctx: int | None = None  # `check --need-ctx`: tokens one request needs (prompt + output)
    model_spec: Any = None  # llamarig.gguf.spec.ModelSpec of -m when readable
    model_error: str | None = None
    #: (model_ref, mmproj_arg, gpus, ram_bytes, argv) -> Plan, for the memory rule (check --gpu)
    planner: Callable[..., Any] | None = None


# ----------------------------------------------------------------------------- helpers

_INT_RE = re.compile(r"^\s*[+-]?\d+")
_FLOAT_RE = re.compile(r"^\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf(inity)?|nan)", re.I)
_TRUTHY = ("on", "enabled", "true", "1")
_FALSY = ("off", "disabled", "false", "0")


def closest(schema: Schema, token: str, n: int = 3) -> list[str]:
    """Closest real spellings (difflib ratio >= 0.6), memoised per schema."""
    key = token.replace("_", "-") if token.startswith("--") else token
    hit = schema.memo.get(("closest", key, n))
    if hit is None:
        long_ = key.startswith("--")
        cands = [c for c in schema.spellings if c.startswith("--") == long_
                 and abs(len(c) - len(key)) <= max(4, len(key) // 2)]
        hit = difflib.get_close_matches(key, cands, n=n, cutoff=0.6)
        schema.memo[("closest", key, n)] = hit
    return list(hit)


def _int_of(text: str | None) -> int | None:
    if text is None:
        return None
    m = _INT_RE.match(text)
    if not m:
        return None
    try:
        return int(m.group(0))
    except ValueError:
        return None


def _is_number(text: str) -> bool:
    return bool(re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)", text))


def _looks_like_value(text: str) -> bool:
    return not text.startswith("-") or _is_number(text)


def _fa_mode(r: Reading) -> str:
    u = r.last("--flash-attn")
    v = (u.value or "auto") if u else "auto"
    if v in _TRUTHY:
        return "on"
    if v in _FALSY:
        return "off"
    return "auto"


def physical_cores() -> int | None:
    """Physical cores of this machine (unique core ids in /sys), or None."""
    try:
        base = "/sys/devices/system/cpu"
        seen = set()
        for d in os.listdir(base):
            if re.fullmatch(r"cpu\d+", d):
                p = os.path.join(base, d, "topology")
                try:
                    with open(os.path.join(p, "core_id")) as f:
                        core = f.read().strip()
                    with open(os.path.join(p, "physical_package_id")) as f:
                        pkg = f.read().strip()
                except OSError:
                    continue
                seen.add((pkg, core))
        return len(seen) or None
    except OSError:
        return None


# ----------------------------------------------------------------------------- reading


def read_invocation(inv: Invocation, schema: Schema, k: int | None = None) -> Reading:
    """Walk the intended argv (received + cut-off words) like common/arg.cpp parse_cli_args."""
    r = Reading()
    words = inv.intended_args
    n_passed = len(inv.args)
    i = 0
    while i < len(words):
        w = words[i]
        t = w.text
        passed = i < n_passed
        look = schema.lookup(t)
        if look is None:
            use = Use(None, t, [], w.line, passed=passed, index=len(r.uses))
            prev = r.uses[-1] if r.uses else None
            if t.startswith("-") and not _is_number(t) and len(t) > 1:
                name, eq, val = t.partition("=")
                if eq and schema.lookup(name):
                    opt, _ = schema.lookup(name)  # type: ignore[misc]
                    r.findings.append(_f(
                        "equals-syntax", "error", w.line, t,
                        f"`{t}`: llama-server has no `--opt=value` syntax, the whole word is an "
                        "unknown argument (error: invalid argument)",
                        f"write `{name} {val}`", k, passed, Fix("split-equals", (name, val)), use.index))
                    use.opt = None
                else:
                    lore = FOLKLORE.get(t) or FOLKLORE.get(t.replace("_", "-"))
                    takes = lore.takes_value if lore else (
                        i + 1 < len(words) and _looks_like_value(words[i + 1].text)
                        and schema.lookup(words[i + 1].text) is None)
                    if takes and i + 1 < len(words) and _looks_like_value(words[i + 1].text):
                        use.values = [words[i + 1]]
                        i += 1
                    r.findings.append(_unknown(schema, t, use, lore, k, passed))
            elif prev is not None and prev.opt is not None and prev.opt.kind in ("flag", "bool_pair"):
                r.findings.append(_f(
                    "flag-takes-no-value", "error", w.line, prev.spelling,
                    f"`{prev.spelling}` takes no value, so `{t}` is read as a separate argument: "
                    f"error: invalid argument: {t}",
                    f"write `{prev.spelling}` alone" + _neg_hint(prev, t), k, passed,
                    Fix("drop-value", (t,)), prev.index))
                use.opt = None
            else:
                r.findings.append(_f(
                    "stray-argument", "error", w.line, t,
                    f"`{t}` is not an option and llama-server takes no positional arguments "
                    f"(error: invalid argument: {t})", "remove it, or put the option it belongs to "
                    "before it", k, passed, Fix("drop"), use.index))
            r.uses.append(use)
            i += 1
            continue
        opt, positive = look
        n = opt.n_values
        vals = words[i + 1:i + 1 + n]
        if n and vals and opt.value_kind not in (None, "string") and not _is_number(vals[0].text) \
                and schema.lookup(vals[0].text) is not None:
            # the handler gets the next option as its value and throws (common/arg.cpp):
            # report it once, and read the swallowed option normally to avoid a cascade
            use = Use(opt, t, [], w.line, positive, passed, len(r.uses))
            r.uses.append(use)
            hint = opt.value_hint or "VALUE"
            r.findings.append(_f(
                "missing-value", "error", w.line, t,
                f"`{t}` needs a value ({hint}) but is followed by the option `{vals[0].text}`, which it "
                f"takes as its value: error while handling argument \"{t}\" (older builds accepted "
                f"a bare `{t}`)", f"write `{t} {_default_for(opt)}`", k, passed,
                Fix("add-value", (_default_for(opt),)), use.index))
            i += 1
            continue
        use = Use(opt, t, list(vals), w.line, positive, passed, len(r.uses))
        r.uses.append(use)
        if n and vals and schema.lookup(vals[0].text) is not None and not _is_number(vals[0].text):
            r.findings.append(_f(
                "value-looks-like-flag", "warning", w.line, t,
                f"`{t}` takes `{vals[0].text}` as its value (it looks like an option)",
                f"give `{t}` a value", k, passed))
        if len(vals) < n:
            r.findings.append(_f(
                "missing-value", "error", w.line, t, f"`{t}` needs a value and none follows "
                "(expected value for argument)", f"give `{t} {opt.value_hint or 'VALUE'}`", k, passed,
                Fix("drop"), use.index))
        i += 1 + n
    return r


def _default_for(opt: Option) -> str:
    if opt.allowed and "on" in opt.allowed:
        return "on"
    if opt.allowed:
        return opt.allowed[0]
    return opt.default or "VALUE"


def _neg_hint(prev: Use, value: str) -> str:
    opt = prev.opt
    if opt is None:
        return ""
    if value.lower() in _FALSY:
        if opt.negations:
            return f"; to switch it off write `{opt.negations[-1]}`"
        return "; to leave it off, drop the flag"
    return ""


def _f(rule: str, sev: str, line: int, flag: str | None, msg: str, fix: str | None,
       k: int | None, passed: bool = True, action: Fix | None = None, use: int | None = None) -> Finding:
    if not passed:
        msg += " [on a cut-off line: llama-server does not receive it today, but will once the " \
               "continuation is fixed]"
    return Finding(rule, sev, line, flag, msg, fix, k, passed, action, use)


def _unknown(schema: Schema, t: str, use: Use, lore: Any, k: int | None, passed: bool) -> Finding:
    near = closest(schema, t)
    # when other bundled builds accept the spelling, say when it came or went (flags/history.py)
    when = history_note(schema, t)
    when = f"; {when}" if when else ""
    if lore is not None:
        msg = (f"`{t}` does not exist in this llama-server (error: invalid argument: {t}){when}; "
               f"intent: {lore.intent}. Real way: {lore.real}")
        if lore.replace:
            v = use.value or ""
            new = tuple(a.replace("{v}", v) for a in lore.replace)
            return _f("unknown-flag", "error", use.line, t, msg, f"replace with `{' '.join(new)}`",
                      k, passed, Fix("replace", new), use.index)
        return _f("unknown-flag", "error", use.line, t, msg, "remove it", k, passed, Fix("drop"), use.index)
    hint = f"; closest real spellings: {', '.join(near)}" if near else ""
    msg = f"`{t}` does not exist in this llama-server (error: invalid argument: {t}){when}{hint}"
    if near and difflib.SequenceMatcher(None, t, near[0]).ratio() >= 0.85:
        return _f("unknown-flag", "error", use.line, t, msg, f"did you mean `{near[0]}`?", k, passed,
                  Fix("rename", (near[0],)), use.index)
    return _f("unknown-flag", "error", use.line, t, msg, "remove it", k, passed, Fix("drop"), use.index)


# ----------------------------------------------------------------------------- value checks


def check_values(r: Reading, k: int | None) -> list[Finding]:
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
    kind = opt.value_kind or "string"
    sp = u.spelling
    res: list[Finding] = []

    def bad(msg: str, fix: str | None, action: Fix | None) -> None:
        res.append(_f("invalid-value", "error", u.line, sp, f"`{sp} {v}`: {msg}", fix, k, u.passed,
                      action, u.index))

    if opt.removed or "$" in v:  # `$VAR`, `$(cmd)`, llama-swap `${PORT}`: known only at run time
        return res
    if kind == "kvtype":
        allowed = opt.allowed or ()
        if v not in allowed:
            sug = KV_TYPE_FIXES.get(v.lower()) or (v.lower() if v.lower() in allowed else None)
            bad(f"unsupported cache type (error while handling argument: Unsupported cache type: {v}); "
                f"allowed: {', '.join(allowed)}",
                f"use `{sp} {sug}`" if sug else f"use one of {', '.join(allowed)}",
                Fix("set-value", (sug or "q8_0",)))
    elif kind == "enum":
        allowed = opt.allowed or ()
        if v not in allowed:
            near = difflib.get_close_matches(v, allowed, n=1, cutoff=0.5)
            bad(f"invalid value; allowed: {', '.join(allowed)}",
                f"use `{sp} {near[0]}`" if near else f"use one of {', '.join(allowed)}",
                Fix("set-value", (near[0],)) if near else Fix("drop"))
    elif kind == "csv_enum":
        allowed = opt.allowed or ()
        badv = [p for p in v.split(",") if p.strip() not in allowed]
        if badv:
            bad(f"unknown value(s) {', '.join(badv)}; allowed: {', '.join(allowed)}",
                f"use values from {', '.join(allowed)}", Fix("drop"))
    elif kind in ("int", "int_auto_all"):
        if kind == "int_auto_all" and v in ("auto", "all"):
            return res
        m = _INT_RE.match(v)
        if not m:
            bad("not an integer (std::stoi fails: error while handling argument)",
                f"give a number after `{sp}`", Fix("drop"))
        else:
            n = int(m.group(0))
            if abs(n) > 2**31 - 1:
                bad("out of int range (std::stoi throws out_of_range)", "use a smaller number", Fix("drop"))
            elif m.end() != len(v):
                res.append(_f("value-truncated", "warning", u.line, sp,
                              f"`{sp} {v}`: std::stoi reads the leading integer only, so this is {n}",
                              f"write `{sp} {_expand(v)}`" if _expand(v) else f"write `{sp} {n}`",
                              k, u.passed, Fix("set-value", (_expand(v) or str(n),)), u.index))
            res.extend(_int_limits(u, opt, n, k))
    elif kind == "float":
        m = _FLOAT_RE.match(v)
        if not m:
            bad("not a number (std::stof fails: error while handling argument)",
                f"give a number after `{sp}`", Fix("drop"))
        elif m.end() != len(v.rstrip()):
            res.append(_f("value-truncated", "warning", u.line, sp,
                          f"`{sp} {v}`: std::stof reads the leading number only ({m.group(0).strip()})",
                          f"write `{sp} {m.group(0).strip()}`", k, u.passed,
                          Fix("set-value", (m.group(0).strip(),)), u.index))
    return res


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
        return [_f("invalid-value", "error", u.line, sp, f"`{sp} 0`: the server rejects 0 slots "
                   "(common/arg.cpp: error while handling argument)", f"use `{sp} 1` or more",
                   k, u.passed, Fix("set-value", ("1",)), u.index)]
    if opt.name == "--reasoning-budget" and n < -1:
        return [_f("invalid-value", "error", u.line, sp, f"`{sp} {n}`: must be -1 (unlimited), 0 or a "
                   "positive budget (error while handling argument: invalid value)", f"use `{sp} -1`",
                   k, u.passed, Fix("set-value", ("-1",)), u.index)]
    return []


# ----------------------------------------------------------------------------- per-invocation rules


def lint_invocation(inv: Invocation, schema: Schema, k: int | None = None,
                    ctx: Context | None = None) -> tuple[Reading, list[Finding]]:
    ctx = ctx or Context()
    r = read_invocation(inv, schema, k)
    out = list(r.findings)
    out += check_values(r, k)
    out += _removed_deprecated(r, k)
    out += _duplicates(r, k)
    out += _spelling_notes(r, k)
    out += _combos(r, k, ctx)
    out += _env_rules(inv, schema, r, k)
    out += _safety(inv, r, k)
    out += _model_rules(r, k, ctx)
    out += _memory_hook(inv, r, k, ctx)
    return r, out


def _removed_deprecated(r: Reading, k: int | None) -> list[Finding]:
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
            out.append(_f("removed-flag", "error", u.line, u.spelling,
                          f"`{u.spelling}` has been removed from llama-server: {hint} "
                          "(error while handling argument)",
                          f"use `{new}`" if new else "remove it", k, u.passed,
                          Fix("rename", (new,)) if new else Fix("drop"), u.index))
        elif u.opt.deprecated:
            out.append(_f("deprecated-flag", "warning", u.line, u.spelling,
                          f"`{u.spelling}` is deprecated and does nothing in this build ({u.opt.summary})",
                          "remove it", k, u.passed, Fix("drop"), u.index))
    return out


def _duplicates(r: Reading, k: int | None) -> list[Finding]:
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
        lines = ", ".join(str(u.line) for u in uses)
        shown = " ".join([uses[-1].spelling] + [v.text for v in uses[-1].values])
        if opt.appending:
            out.append(_f("duplicate-flag", "info", uses[-1].line, name,
                          f"`{name}` is given {len(uses)} times (lines {lines}); this option "
                          "appends, so every value is kept", None, k, uses[-1].passed))
            continue
        vals = {tuple(v.text for v in u.values) + (str(u.positive),) for u in uses}
        same = len(vals) == 1
        for u in uses[:-1]:
            out.append(_f("duplicate-flag", "warning", u.line, u.spelling,
                          f"`{name}` is given {len(uses)} times (lines {lines}); only the last one "
                          f"counts: `{shown}`" + (" (same value)" if same else ""),
                          "remove the earlier one", k, u.passed, Fix("drop"), u.index))
    return out


def _spelling_notes(r: Reading, k: int | None) -> list[Finding]:
    out = []
    for u in r.uses:
        if u.opt is not None and u.spelling.startswith("--") and "_" in u.spelling:
            good = u.spelling.replace("_", "-")
            out.append(_f("underscore-spelling", "info", u.line, u.spelling,
                          f"`{u.spelling}` works only because llama-server turns `_` into `-` in "
                          f"`--` options (common/arg.cpp); the documented spelling is `{good}`",
                          f"write `{good}`", k, u.passed, Fix("rename", (good,)), u.index))
    return out


def _combos(r: Reading, k: int | None, ctx: Context) -> list[Finding]:
    out: list[Finding] = []
    c_use = r.last("--ctx-size")
    n_ctx = _int_of(c_use.value) if c_use else None
    np_use = r.last("--parallel")
    n_par = _int_of(np_use.value) if np_use else None
    kvu = r.last("--kv-unified")
    unified = (kvu.positive if kvu else (np_use is None))  # auto slots -> unified (server.cpp)

    # --cache-reuse: forced to 0 with an mmproj (tools/server/server-context.cpp) and useless
    # when >= the context (reuses only chunks of at least N tokens)
    cr = r.last("--cache-reuse")
    cr_n = _int_of(cr.value) if cr else None
    mm = r.last("--mmproj")
    if cr and cr_n and cr_n > 0:
        if mm is not None:
            out.append(_f("cache-reuse-mmproj", "warning", cr.line, cr.spelling,
                          f"`{cr.spelling} {cr.value}` does nothing: with `--mmproj` loaded the "
                          "server logs \"cache_reuse is not supported by multimodal, it will be "
                          "disabled\" (server-context.cpp)",
                          "remove it (or run a text-only instance without --mmproj)", k, cr.passed,
                          Fix("drop"), cr.index))
        if n_ctx and cr_n >= n_ctx:
            out.append(_f("cache-reuse-ge-ctx", "info" if mm is not None else "warning", cr.line, cr.spelling,
                          f"`{cr.spelling} {cr_n}` >= context {n_ctx}: it reuses only identical "
                          "runs of at least that many tokens, i.e. never; it is a minimum chunk "
                          "size, not something to match to -c", f"use `{cr.spelling} 256`", k,
                          cr.passed, None if mm is not None else Fix("set-value", ("256",)), cr.index))
        elif n_ctx and cr_n > 4096 and mm is None:
            out.append(_f("cache-reuse-large", "info", cr.line, cr.spelling,
                          f"`{cr.spelling} {cr_n}`: only chunks of >= {cr_n} identical tokens are "
                          "reused by KV shifting; typical values are 64-512", None, k, cr.passed))
    # --cache-idle-slots needs --cache-ram != 0 (server-context.cpp)
    idle = r.last("--cache-idle-slots")
    cram = r.last("--cache-ram")
    if idle is not None and idle.positive and cram is not None and _int_of(cram.value) == 0:
        out.append(_f("cache-idle-slots-no-ram", "warning", idle.line, idle.spelling,
                      "`--cache-idle-slots` needs the prompt cache, but `--cache-ram 0` disables it: "
                      "the server logs \"--cache-idle-slots requires --cache-ram, disabling\"",
                      "give --cache-ram a size in MiB (default 8192)", k, idle.passed))
    # KV types vs flash attention (src/llama-context.cpp; ggml/src/ggml-cuda/fattn.cu)
    tk_u, tv_u = r.last("--cache-type-k"), r.last("--cache-type-v")
    tk = tk_u.value if tk_u else "f16"
    tv = tv_u.value if tv_u else "f16"
    fa = _fa_mode(r)
    quant = {"q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}
    if tv in quant and fa == "off":
        fu = r.last("--flash-attn")
        out.append(_f("quantized-v-fa-off", "error", fu.line if fu else (tv_u.line if tv_u else 0),
                      fu.spelling if fu else "--flash-attn",
                      f"quantized V cache ({tv}) needs flash attention, but it is off: "
                      "\"quantized V cache requires flash_attn to be enabled\" and the model "
                      "fails to load (src/llama-context.cpp)",
                      "use `-fa on` (or an f16 V cache)", k, fu.passed if fu else True,
                      Fix("set-value", ("on",)), fu.index if fu else None))
    if tk in KNOWN_KV and tv in KNOWN_KV and fa != "off":
        if tk not in CUDA_FA_KV_TYPES or tv not in CUDA_FA_KV_TYPES:
            u = tv_u if tv not in CUDA_FA_KV_TYPES else tk_u
            bad = tv if tv not in CUDA_FA_KV_TYPES else tk
            out.append(_f("kv-type-no-cuda-fa", "warning", u.line if u else 0, u.spelling if u else None,
                          f"on CUDA the flash-attention kernels do not support {bad} K/V "
                          "(ggml-cuda/fattn.cu): with V quantized FA is forced on, so attention "
                          "runs on the CPU every step (very slow, not an error)",
                          "use q8_0 or q4_0 for K and V on CUDA", k, u.passed if u else True,
                          Fix("set-value", ("q4_0",)), u.index if u else None))
        elif (tk, tv) not in CUDA_FA_VEC_PAIRS and (tk != "f16" or tv != "f16") and (tk_u or tv_u):
            u = tv_u or tk_u
            out.append(_f("kv-pair-no-vec-kernel", "info", u.line if u else 0, u.spelling if u else None,
                          f"K={tk}, V={tv}: a default CUDA build compiles the decode FA kernel only "
                          "for q4_0-q4_0, q8_0-q8_0, f16-f16, bf16-bf16 (GGML_CUDA_FA_QUANTS); "
                          "other pairs are converted to f16 during decode (slow)",
                          "use the same type for K and V (q8_0/q8_0 or q4_0/q4_0)", k,
                          u.passed if u else True))
    # -ub > -b is clamped (src/llama-context.cpp: n_ubatch = min(n_batch, n_ubatch))
    b_u, ub_u = r.last("--batch-size"), r.last("--ubatch-size")
    b = _int_of(b_u.value) if b_u else 2048
    ub = _int_of(ub_u.value) if ub_u else 512
    if ub_u and b is not None and ub is not None and ub > b:
        out.append(_f("ubatch-gt-batch", "warning", ub_u.line, ub_u.spelling,
                      f"`-ub {ub}` > `-b {b}`: the physical batch is silently clamped to {b} "
                      "(src/llama-context.cpp)", f"use `-ub {b}` or raise -b", k, ub_u.passed,
                      Fix("set-value", (str(b),)), ub_u.index))
    if b_u and b and n_ctx and b > n_ctx:
        out.append(_f("batch-gt-ctx", "info", b_u.line, b_u.spelling,
                      f"`-b {b}` > context {n_ctx}: n_batch = min(n_ctx, -b) = {n_ctx} "
                      "(src/llama-context.cpp)", None, k, b_u.passed))
    # context padding (src/llama-context.cpp: GGML_PAD(n_ctx, 256))
    if c_use and n_ctx and n_ctx > 0 and n_ctx % 256:
        padded = math.ceil(n_ctx / 256) * 256
        out.append(_f("ctx-padded", "info", c_use.line, c_use.spelling,
                      f"`-c {n_ctx}` is rounded up to {padded} (a multiple of 256)", None, k, c_use.passed))
    # slots partition the pool unless unified (server.cpp, llama-context.cpp)
    if n_par and n_par > 1 and n_ctx and not unified:
        per = math.ceil(n_ctx / n_par / 256) * 256
        need = ctx.need_ctx or 16384
        basis = (f"the workload needs {need} (--need-ctx)" if ctx.need_ctx
                 else "below 16384, too small for agent prompts (pass --need-ctx N for your workload)")
        sev = "warning" if per < need else "info"
        out.append(_f("per-slot-ctx", sev, np_use.line if np_use else 0, "--parallel",
                      f"`-np {n_par}` without `--kv-unified` splits `-c {n_ctx}` into {n_par} slots "
                      f"of {per} tokens each (GGML_PAD(n_ctx/n_parallel, 256)); a request longer "
                      "than that fails or is truncated" + (f"; {basis}" if sev == "warning" else ""),
                      "add `--kv-unified` to share one pool, or raise -c" if sev == "warning" else None,
                      k, np_use.passed if np_use else True))
    if ctx.need_ctx and n_ctx and (unified or not n_par or n_par == 1) and n_ctx < ctx.need_ctx and c_use:
        out.append(_f("per-slot-ctx", "warning", c_use.line, c_use.spelling,
                      f"`-c {n_ctx}` is below the {ctx.need_ctx} tokens the workload needs (--need-ctx)",
                      f"use `-c {ctx.need_ctx}` or more", k, c_use.passed))
    # --split-mode tensor needs flash attention (src/llama-context.cpp)
    sm = r.last("--split-mode")
    if sm and sm.value == "tensor" and fa == "off":
        out.append(_f("split-tensor-fa-off", "error", sm.line, sm.spelling,
                      "`-sm tensor` requires flash attention: \"SPLIT_MODE_TENSOR requires "
                      "flash_attn to be enabled\", the context is not created (src/llama-context.cpp)",
                      "use `-fa on` (or `-sm layer`)", k, sm.passed))
    # -t above physical cores with everything offloaded (common/common.cpp picks physical cores)
    t_u = r.last("--threads")
    ngl = r.last("--gpu-layers")
    full = ngl is not None and (ngl.value == "all" or (_int_of(ngl.value) or 0) >= 99)
    if t_u and ctx.physical_cores and full:
        t = _int_of(t_u.value)
        if t and t > ctx.physical_cores:
            out.append(_f("threads-above-cores", "warning", t_u.line, t_u.spelling,
                          f"`-t {t}` > {ctx.physical_cores} physical cores ({ctx.cores_source}) with "
                          "every layer on the GPU: extra threads only contend (the default, -1, already uses the "
                          "physical cores: common/common.cpp cpu_get_num_math)",
                          f"use `-t {ctx.physical_cores}` or leave -t out", k, t_u.passed,
                          Fix("set-value", (str(ctx.physical_cores),)), t_u.index))
    # MTP draft types are not inherited (common/speculative.cpp)
    st = [v for u in r.all("--spec-type") for v in (u.value or "").split(",")]
    if "draft-mtp" in st and (tk_u or tv_u) and not (r.has("--spec-draft-type-k") or r.has("--spec-draft-type-v")):
        u = r.all("--spec-type")[-1]
        out.append(_f("mtp-draft-kv-f16", "info", u.line, u.spelling,
                      f"the MTP draft context keeps its own KV types (-ctkd/-ctvd, default f16); "
                      f"`-ctk {tk} -ctv {tv}` does not apply to it (common/speculative.cpp)",
                      f"add `-ctkd {tk} -ctvd {tv}` to shrink it", k, u.passed))
    # redundant defaults
    for name, default_vals in (("--cont-batching", None), ("--predict", ("-1",))):
        u = r.last(name)
        if u is None:
            continue
        if (default_vals is None and u.positive) or (default_vals and u.value in default_vals):
            out.append(_f("default-value", "info", u.line, u.spelling,
                          f"`{' '.join([u.spelling] + [v.text for v in u.values])}` is already the default",
                          None, k, u.passed))
    return out


KNOWN_KV = frozenset({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})


def _env_rules(inv: Invocation, schema: Schema, r: Reading, k: int | None) -> list[Finding]:
    # common/arg.cpp: LLAMA_ARG_* are read before the CLI, the CLI overrides them
    out = []
    for name, value, line in inv.env:
        if name in DEAD_ENV:
            out.append(_f("dead-env-var", "warning", line, name,
                          f"`{name}={value}` has no effect: {DEAD_ENV[name]}", f"remove `{name}={value}`",
                          k, True, Fix("drop-env", (name,))))
        elif name.startswith("LLAMA_ARG_"):
            opt = schema.by_env.get(name)
            if opt is None:
                near = difflib.get_close_matches(name, list(schema.by_env), n=2, cutoff=0.7)
                out.append(_f("unknown-env-var", "warning", line, name,
                              f"`{name}` is not read by this llama-server" +
                              (f"; closest: {', '.join(near)}" if near else ""),
                              f"use `{near[0]}`" if near else "remove it", k, True, Fix("drop-env", (name,))))
            elif r.has(opt.name):
                out.append(_f("env-overridden", "info", line, name,
                              f"`{name}` is overridden by `{r.last(opt.name).spelling}` on the command "  # type: ignore[union-attr]
                              "line (the CLI wins)", None, k))
        elif name.startswith("LLAMA_") and name not in LIVE_LLAMA_ENV:
            out.append(_f("dead-env-var", "warning", line, name,
                          f"`{name}` is not read anywhere in llama.cpp build {schema.build or '?'} "
                          "(no getenv in src/, common/, tools/server/)", f"remove `{name}={value}`",
                          k, True, Fix("drop-env", (name,))))
        elif name.startswith("GGML_") and name not in LIVE_GGML_ENV and not name.startswith(LIVE_GGML_PREFIXES):
            out.append(_f("dead-env-var", "info", line, name,
                          f"`{name}` is not read at run time by ggml in this build (often a CMake "
                          "option, which must be set when compiling)", None, k))
    return out


def _safety(inv: Invocation, r: Reading, k: int | None) -> list[Finding]:
    out = []
    h = r.last("--host")
    hosts = [x.strip() for x in (h.value or "").split(",")] if h else []
    public = [x for x in hosts if x and x not in LOCAL_HOSTS and not x.endswith(".sock")]
    has_key = r.has("--api-key") or r.has("--api-key-file") or any(
        n in ("LLAMA_API_KEY", "LLAMA_ARG_API_KEY_FILE") for n, _, _ in inv.env)
    if public and not has_key:
        assert h is not None
        out.append(_f("public-no-api-key", "warning", h.line, h.spelling,
                      f"`--host {h.value}` listens on the network with no `--api-key`: anyone who "
                      "can reach the port can use the model, read /slots and, with --tools, run "
                      "commands (tools/server/server-http.cpp checks keys only when set)",
                      "add `--api-key-file FILE` (or `--api-key KEY`), or bind to 127.0.0.1", k, h.passed))
    tools = r.last("--tools")
    if tools and public:
        out.append(_f("public-tools", "error" if not has_key else "warning", tools.line, tools.spelling,
                      "`--tools` lets the model run shell commands and edit files, and the server "
                      "is reachable from the network", "bind to 127.0.0.1 or drop --tools", k, tools.passed))
    return out


def _model_rules(r: Reading, k: int | None, ctx: Context) -> list[Finding]:
    spec = ctx.model_spec
    if spec is None:
        return []
    out: list[Finding] = []
    st = [v for u in r.all("--spec-type") for v in (u.value or "").split(",")]
    if "draft-mtp" in st and not r.has("--spec-draft-model") and getattr(spec, "nextn_layers", 0) == 0:
        u = r.all("--spec-type")[-1]
        out.append(_f("mtp-without-nextn", "error", u.line, u.spelling,
                      f"`--spec-type draft-mtp` but {spec.path} has no MTP (nextn) layers: "
                      "\"context type MTP requested but model doesn't contain MTP layers\", the "
                      "server fails to load (src/llama-context.cpp, server-context.cpp)",
                      "remove `--spec-type draft-mtp` or use a GGUF with nextn layers", k, u.passed,
                      Fix("drop"), u.index))
    c_use = r.last("--ctx-size")
    n_ctx = _int_of(c_use.value) if c_use else None
    np_use = r.last("--parallel")
    n_par = _int_of(np_use.value) if np_use else None
    kvu = r.last("--kv-unified")
    unified = kvu.positive if kvu else np_use is None
    train = getattr(spec, "n_ctx_train", None)
    if n_ctx and train:
        per = n_ctx if unified or not n_par else math.ceil(n_ctx / n_par / 256) * 256
        per = math.ceil(per / 256) * 256
        if per > train:
            out.append(_f("slot-ctx-above-train", "warning", c_use.line if c_use else 0, "--ctx-size",
                          f"per-slot context {per} > the model's training context {train}: each slot "
                          "is capped at n_ctx_train (\"the slot context exceeds the training context "
                          "of the model - capping\", server-context.cpp) while KV is still allocated "
                          "for the whole -c", f"use `-c {train * (n_par or 1) if not unified else train}` "
                          "or add RoPE scaling on purpose", k, c_use.passed if c_use else True))
    out += _amx_rule(r, k, spec)
    cr = r.last("--cache-reuse")
    if cr and (_int_of(cr.value) or 0) > 0 and not r.has("--mmproj"):
        arch = getattr(spec, "architecture", "")
        if arch in ("qwen35", "qwen35moe", "qwen2vl", "qwen3vl", "qwen3vlmoe") or getattr(spec, "swa_window", None):
            out.append(_f("cache-reuse-no-shift", "warning", cr.line, cr.spelling,
                          f"`{cr.spelling}` is disabled for {arch}: its memory cannot be shifted "
                          "(M-RoPE/IMRoPE or sliding-window cache; server-context.cpp, llama-kv-cache.cpp)",
                          "remove it", k, cr.passed, Fix("drop"), cr.index))
    return out


def _amx_rule(r: Reading, k: int | None, spec: Any) -> list[Finding]:
    """amx-tile-crash: on a CPU with AMX, a native llama-server build puts quantized matrices
    into the AMX buffer when they stay on the CPU (no GPU, -ngl 0, -dev none, --no-host); their
    AMX tile kernels crashed in warm-up on an AMX Xeon (docs/plan.md "CPU buffer types")."""
    if r.has("--repack") and not r.last("--repack").positive:  # type: ignore[union-attr]
        return []
    ngl = r.last("--gpu-layers")
    dev = r.last("--device")
    cpu_only = (ngl is not None and _int_of(ngl.value) == 0) or (dev is not None and (dev.value or "").lower() == "none") \
        or r.has("--no-host") or shutil.which("nvidia-smi") is None
    if not cpu_only:
        return []
    cpu = detect_cpu()
    if cpu is None or not cpu.amx:
        return []
    types = sorted({t.ggml_type.lower() for t in getattr(spec, "tensors", ())
                    if t.ggml_type.lower() in AMX_TILE_TYPES
                    and host_weight_buffer(t.name, t.ggml_type, tuple(t.shape), t.n_bytes, cpu, extra_bufts=True).buffer == "AMX"})
    if not types:
        return []
    u = r.last("--model")
    return [_f("amx-tile-crash", "warning", u.line if u else 0, u.spelling if u else None,
               f"this CPU has AMX: a native llama-server build puts the model's {', '.join(types)} matrices into "
               "the AMX buffer, whose tile kernels crashed with SIGSEGV in warm-up on an AMX Xeon "
               "(ggml-cpu/amx/mmq.cpp; https://github.com/ggml-org/llama.cpp/issues/20824)",
               "if llama-server crashes at start, add `--no-repack` (keeps the weights out of AMX)", k,
               u.passed if u else True)]


def _memory_hook(inv: Invocation, r: Reading, k: int | None, ctx: Context) -> list[Finding]:
    """The memory verdict of ``llamarig plan`` when GPUs are given (``check --gpu``) and the model
    is known (``-m`` GGUF, or ``--model`` GGUF/catalogue id). The planner sits a layer above the
    flag rules, so the caller passes it in (``Context.planner``, llamarig.plan.inputs.plan_for_check);
    if it fails, check goes on without it."""
    if not ctx.gpus or ctx.planner is None:
        return []
    argv = ["llama-server"] + [w.text for w in inv.intended_args]
    mm = r.last("--mmproj")
    mm_note = ""
    mm_arg = None
    if mm is not None and mm.value and not os.path.isfile(os.path.expanduser(mm.value)) and ctx.model_ref \
            and not ctx.model_ref.endswith(".gguf"):
        mm_arg, mm_note = "catalogue", f" (mmproj {mm.value} not found here: the catalogue's mmproj is used)"
    try:
        plan = ctx.planner(ctx.model_ref, mm_arg, list(ctx.gpus), ctx.ram_bytes, argv)
    except Exception as e:  # an unknown model / a flag the planner rejects: say so, don't fail
        return [_f("memory", "info", inv.line, None, f"no memory plan: {e}", None, k)]
    try:
        from llamarig.units import fmt_bytes

        parts = []
        for d in plan.devices:
            used = getattr(d, "total", None)
            free = getattr(d, "free", None)
            label = f"{d.name} ({getattr(d, 'label', '')})"
            if used is not None:
                parts.append(f"{label}: {fmt_bytes(used)} needed" + (f", {fmt_bytes(free)} left" if free is not None else ""))
        detail = "; ".join(parts)
    except Exception:  # pragma: no cover - result shape changed
        detail = ""
    if plan.fits:
        return [_f("memory", "info", inv.line, None,
                   f"memory plan (llamarig plan): fits. {detail}{mm_note} (formulas: `llamarig plan --gpu ... -- <command>`)",
                   None, k)]
    return [_f("memory", "warning", inv.line, None,
               f"memory plan (llamarig plan): does not fit: {'; '.join(plan.shortfalls())}. {detail}{mm_note}",
               "lower -c, quantize the KV cache (-ctk/-ctv q8_0 or q4_0), or offload fewer layers", k)]


# ----------------------------------------------------------------------------- whole input


def note_to_finding(n: Note) -> Finding:
    return Finding(n.kind, n.severity, n.line, None, n.message,
                   _NOTE_FIX.get(n.kind), n.invocation, True)


_NOTE_FIX = {
    "continuation-broken": "move comment lines above the command and end every line but the last "
                           "with `\\` (see --fix)",
    "orphan-flags": "join these lines to the llama-server command with `\\` (see --fix)",
    "kill-by-name": "stop your own server by pid (`kill $(cat llama.pid)`) or `pkill -x NAME -u $USER`, "
                    "and wait for it to exit instead of sleeping",
    "shell-syntax": "fix the quoting",
}


def lint(parsed: Parsed, schema: Schema, ctx: Context | None = None,
         model_loader: Any = None) -> tuple[list[Reading], list[Finding]]:
    """All findings for a parsed input, sorted by line."""
    findings: list[Finding] = [note_to_finding(n) for n in parsed.notes]
    readings = []
    for k, inv in enumerate(parsed.invocations):
        c = ctx or Context(physical_cores=physical_cores())
        if model_loader is not None:
            c = model_loader(inv, c)
        r, fs = lint_invocation(inv, schema, k, c)
        readings.append(r)
        findings.extend(fs)
        if inv.background and not any(u.opt and u.opt.name == "--log-file" for u in r.uses):
            where = _log_destination(inv.redirects)
            if where != "file":
                why = ("its log is thrown away (stderr goes to /dev/null)" if where == "null" else
                       "its log (stderr) goes to the terminal that started it")
                findings.append(Finding("background-no-log", "info", inv.end_line, None,
                                        f"the server runs in the background (`&`) and {why}; add "
                                        "--log-file (or `> FILE 2>&1`) to keep it", None, k))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (f.line, order.get(f.severity, 9), f.rule))
    return readings, findings


def _log_destination(redirects: list[str]) -> str:
    """Where a backgrounded llama-server's log ends up: "file", "null" or "terminal".
    common/log.cpp writes log lines to stderr (stdout only for level NONE), so what matters is
    fd 2, following bash's left-to-right redirection order (`> f 2>&1` sends both to f)."""
    fds = {1: "terminal", 2: "terminal"}
    for r in redirects:
        m = re.match(r"^(\d*|&)(>&|>>|>\||>)\s*(.*)$", r.strip())
        if not m:
            continue
        fd, op, target = m.groups()
        target = target.strip("'\"")
        dest = "null" if target == "/dev/null" else "file"
        if op == ">&" and target.isdigit():
            fds[int(fd or 1)] = fds.get(int(target), "terminal")
        elif fd == "&" or op == ">&":  # &> f, >& f: both
            fds[1] = fds[2] = dest
        else:
            fds[int(fd or 1)] = dest
    return fds[2]
