"""What every renderer needs: the server argv split one flag per group, a short comment per flag
(from the installed build's --help via the flags schema), and the plan's figures as comments."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llamarig import __version__
from llamarig.units import fmt_bytes

_NUM = re.compile(r"^-\d+(\.\d+)?$")
#: --load-mode values that lock pages in RAM (common/arg.cpp --load-mode)
MLOCK_MODES = ("mlock", "mmap+mlock")


def is_flag(tok: str) -> bool:
    return tok.startswith("-") and tok != "-" and not _NUM.match(tok)


def _n_values(tok: str, schema: Any) -> int | None:
    if schema is None:
        return None
    hit = schema.lookup(tok.split("=", 1)[0])
    if hit is None:
        return None
    opt, _ = hit
    return 0 if "=" in tok else opt.n_values


def flag_groups(args: Sequence[str], schema: Any = None) -> list[list[str]]:
    """``["-m", "a.gguf", "-fa", "on", "--jinja"]`` -> ``[["-m", "a.gguf"], ["-fa", "on"], ["--jinja"]]``.

    The schema of the installed build says how many values an option takes; without it (or for
    an unknown option) every following non-flag token is taken as a value."""
    out: list[list[str]] = []
    i = 0
    args = list(args)
    while i < len(args):
        tok = args[i]
        n = _n_values(tok, schema)
        if n is not None:
            out.append(args[i:i + 1 + n])
            i += 1 + n
            continue
        grp = [tok]
        i += 1
        while i < len(args) and not is_flag(args[i]):
            grp.append(args[i])
            i += 1
        out.append(grp)
    return out


def flag_comment(tok: str, schema: Any) -> str:
    """One short line saying what a flag does (first sentence of the build's --help)."""
    if schema is None:
        return ""
    hit = schema.lookup(tok.split("=", 1)[0])
    if hit is None:
        return "(not a flag of this llama-server build)"
    opt, positive = hit
    text = opt.summary or opt.name
    text = re.sub(r"\s+", " ", text)
    if not positive:
        text = "disable: " + text
    return text if len(text) <= 72 else text[:71] + "…"


def get_value(args: Sequence[str], *names: str) -> str | None:
    """Last value of any of ``names`` (llama-server: the last occurrence wins)."""
    val = None
    for i, a in enumerate(args):
        key, eq, v = a.partition("=")
        if key in names:
            if eq:
                val = v
            elif i + 1 < len(args):
                val = args[i + 1]
    return val


def set_value(args: Sequence[str], names: Sequence[str], value: str) -> list[str]:
    """Replace every occurrence of the option (any spelling) by one ``names[0] value`` at the end."""
    out: list[str] = []
    i = 0
    args = list(args)
    while i < len(args):
        key, eq, _ = args[i].partition("=")
        if key in names:
            i += 1 if eq else 2
            continue
        out.append(args[i])
        i += 1
    return out + [names[0], value]


def uses_mlock(args: Sequence[str]) -> bool:
    lm = get_value(args, "-lm", "--load-mode")
    return lm in MLOCK_MODES


@dataclass(frozen=True)
class RenderSpec:
    """One llama-server deployment to render."""

    binary: str
    args: tuple[str, ...]  # what llama-server receives (program excluded)
    name: str = "llama-server"
    figures: tuple[str, ...] = ()  # plan/speed comment lines
    env: tuple[tuple[str, str], ...] = ()
    schema: Any = field(default=None, compare=False)
    version: str = __version__
    #: programs that run llama-server, kept from the input (`stdbuf -oL -eL`, `taskset -c 0-7`)
    wrappers: tuple[str, ...] = ()
    #: the directory the input ran it in (its `cd DIR`, WorkingDirectory=), absolute
    workdir: str | None = None

    @property
    def port(self) -> int:
        v = get_value(self.args, "--port")
        try:
            return int(v) if v else 8080  # llama-server's default port (common/common.h)
        except ValueError:
            return 8080

    @property
    def host(self) -> str:
        return get_value(self.args, "--host") or "127.0.0.1"  # default host (common/common.h)

    @property
    def mlock(self) -> bool:
        return uses_mlock(self.args)

    def groups(self) -> list[list[str]]:
        return flag_groups(self.args, self.schema)

    def header(self) -> list[str]:
        """Comment lines (without the comment marker) every output starts with."""
        lines = [f"rendered by llamarig {self.version} (llamarig render)"]
        if self.figures:
            lines.append("")
            lines.extend(self.figures)
        return lines

    def flag_table(self, arg_text: Any = None) -> list[str]:
        """Comment lines: each flag group with what it does, in command order."""
        fmt = arg_text or (lambda g: " ".join(g))
        rows = [(fmt(g), flag_comment(g[0], self.schema) if is_flag(g[0]) else "(argument)")
                for g in self.groups()]
        if not rows:
            return []
        width = min(40, max(len(a) for a, _ in rows))
        out = ["flags, one per line in the command below (same order):"]
        for a, c in rows:
            out.append(f"  {a:<{width}}  {c}".rstrip() if c else f"  {a}")
        return out


def plan_figures(plan: Any, speed: Any = None) -> list[str]:
    """The plan's memory (and speed) figures as short comment lines, each with its method."""
    out = ["plan (llamarig plan; weights/KV/recurrent exact from the GGUF header, compute modelled):"]
    out.append(f"  n_ctx {plan.n_ctx}, {plan.n_parallel} slot(s) x {plan.n_ctx_slot} tokens, "
               f"KV K {plan.cache_type_k} / V {plan.cache_type_v} = {plan.kv_bytes_per_token} B/token, "
               f"n_ubatch {plan.n_ubatch}, flash attention {'on' if plan.flash_attn else 'off'}")
    comps = ("weights", "kv", "recurrent", "compute", "mmproj", "draft", "other")
    for d in plan.devices:
        parts = [f"{c} {fmt_bytes(d.get(c))}" for c in comps if d.get(c)]
        cap = f" of {fmt_bytes(d.capacity)}" if d.capacity else ""
        out.append(f"  {d.name} ({d.label}): {', '.join(parts) or 'nothing'}; total {fmt_bytes(d.total)}{cap}")
    h = plan.host
    parts = [f"{c} {fmt_bytes(h.get(c))}" for c in ("weights", "kv", "recurrent", "compute", "output",
                                                     "mmproj", "draft", "checkpoints", "cache_ram") if h.get(c)]
    mm = " (weights mmap'd: page cache)" if h.mmap and h.get("weights") else ""
    out.append(f"  host RAM: {', '.join(parts)}; total {fmt_bytes(h.total)} worst case{mm}")
    out.append("  verdict: " + ("fits" if plan.fits else "DOES NOT FIT: " + "; ".join(plan.shortfalls())))
    if speed is not None:
        try:
            pf = speed.prefill
            line = (f"  speed (llamarig speed model, calibration: {speed.calibration}): decode "
                    f"{speed.decode_tok_s:.1f} tok/s at depth 0 (bandwidth limit {speed.decode_limit_tok_s:.1f})")
            if pf is not None:
                line += f", prefill {pf.tok_s:.0f} tok/s"
            out.append(line)
        except AttributeError:
            pass
    return out
