"""What every renderer needs: the server argv split one flag per group, a short comment per flag
(from the installed build's --help via the flags schema), and the plan's figures as comments."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llamarig import __version__
from llamarig.flags.argv import Command, looks_like_option
from llamarig.i18n import N_, _, join, localize, server_text
from llamarig.plan.optimise.verdict import decode_headline, fit_qualifier
from llamarig.plan.speed.speed_model import SpeedReport
from llamarig.text import cells, wrap
from llamarig.units import fmt_bytes

#: --load-mode values that lock pages in RAM (common/arg.cpp --load-mode)
MLOCK_MODES = ("mlock", "mmap+mlock")


def is_flag(tok: str) -> bool:
    return looks_like_option(tok)


def flag_comment(tok: str, schema: Any, lang: str = "en") -> str:
    """One short line saying what a flag does, in ``lang`` (first sentence of the build's
    --help; in another language its translation from the table of the pinned build's options,
    else the English help in quotes)."""
    if schema is None:
        return ""
    hit = schema.lookup(tok.split("=", 1)[0])
    if hit is None:
        return localize(_("(not a flag of this llama-server build)"), lang)
    opt, positive = hit
    text = re.sub(r"\s+", " ", opt.summary or opt.name)
    if lang != "en":
        text = server_text(text, lang) or "“" + _short(text, 60) + "”"
    if not positive:
        text = localize(_("disable: {what}").format(what=text), lang)
    return _short(text, 72)


def _short(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, cut at a blank (never inside a word) with "…"."""
    if len(text) <= n:
        return text
    cut = text.rfind(" ", 0, n - 1)
    return text[:cut if cut > n // 2 else n - 1].rstrip(" ,;:") + "…"


def uses_mlock(args: Command | Sequence[str], schema: Any = None) -> bool:
    lm = Command.of(args, schema, program=False).get("--load-mode")
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
    #: the language of the file's comments (llamarig.i18n)
    lang: str = "en"
    #: ``args`` as parsed where the command was resolved (None: parsed here, once)
    parsed: Command | None = field(default=None, compare=False, repr=False)

    def command(self) -> Command:
        """What llama-server receives, parsed against the build's flags (the program excluded), once."""
        if self.parsed is None:
            object.__setattr__(self, "parsed", Command.parse(self.args, self.schema, program=False))
        assert self.parsed is not None
        return self.parsed

    @property
    def port(self) -> int:
        v = self.command().get("--port")
        try:
            return int(v) if v else 8080  # llama-server's default port (common/common.h)
        except ValueError:
            return 8080

    @property
    def host(self) -> str:
        return self.command().get("--host") or "127.0.0.1"  # default host (common/common.h)

    @property
    def mlock(self) -> bool:
        return uses_mlock(self.command(), self.schema)

    def groups(self) -> list[list[str]]:
        return self.command().groups()

    def header(self) -> list[str]:
        """Comment lines (without the comment marker) every output starts with, in ``lang``."""
        lines = [_("rendered by llamarig {version} (llamarig render)").format(version=self.version)]
        if self.figures:
            lines.append("")
            lines.extend(self.figures)
        return self.local(lines)

    def comments(self, lines: Sequence[str]) -> list[str]:
        """``lines`` as ``# `` comment lines in the file's language, each wrapped at 80 columns
        (its continuation indented under it; a table row's under its text column): the one
        comment writer of every format."""
        out: list[str] = []
        for ln in self.local(lines):
            lead = ln[:len(ln) - len(ln.lstrip(" "))]
            row = _TABLE_ROW.match(ln)
            hang = " " * cells(row.group(1)) if row and cells(row.group(1)) <= 46 else lead + "    "
            out += [("# " + x).rstrip() for x in wrap(ln.strip(), 78, indent=hang, first_indent=lead)]
        return out

    def local(self, lines: Sequence[str]) -> list[str]:
        """``lines`` (Messages or text) in the file's language."""
        return [localize(ln, self.lang) for ln in lines]

    def flag_table(self, arg_text: Any = None) -> list[str]:
        """Comment lines: each flag group with what it does, in command order."""
        fmt = arg_text or (lambda g: " ".join(g))
        rows = [(fmt(g), flag_comment(g[0], self.schema, self.lang) if is_flag(g[0])
                 else localize(_("(argument)"), self.lang)) for g in self.groups()]
        if not rows:
            return []
        width = min(40, max(len(a) for a, _c in rows))
        out = [localize(_("flags, one per line in the command below (same order):"), self.lang)]
        for a, c in rows:
            out.append(f"  {a:<{width}}  {c}".rstrip() if c else f"  {a}")
        return out


def comment_text(text: str) -> str:
    """The comments (``#``, an INI's ``;``) of a rendered file as one running text (they wrap at 80 columns: a phrase
    may sit across two lines), blanks collapsed; for reading them back, as tests do."""
    return " ".join(" ".join(ln.strip()[1:].split()) for ln in text.splitlines()
                    if ln.lstrip()[:1] in ("#", ";"))


#: a comment line laid out as a table row: a key, two blanks or more, its text
_TABLE_ROW = re.compile(r"( *\S+(?: \S+)*? {2,})\S")

#: a plan's components, as the file's comments name them
COMPONENTS = {"weights": N_("weights"), "kv": N_("KV cache"), "recurrent": N_("recurrent state"),
              "compute": N_("compute buffer"), "mmproj": N_("mmproj"), "draft": N_("draft / MTP"), "other": N_("other"),
              "output": N_("output buffer"), "checkpoints": N_("ctx checkpoints"), "cache_ram": N_("prompt cache")}


def plan_figures(plan: Any, speed: Any = None) -> list[str]:
    """The plan's memory (and speed) figures as short comment lines (Messages), each with its method."""
    out = [_("plan (llamarig plan; weights/KV/recurrent exact from the GGUF header, compute modelled):")]
    out.append("  " + _("n_ctx {n_ctx}, {n_par} slot(s) x {per} tokens, KV K {tk} / V {tv} = {bpt} B/token, "
                        "n_ubatch {ub}, flash attention {fa}").format(
        n_ctx=plan.n_ctx, n_par=plan.n_parallel, per=plan.n_ctx_slot, tk=plan.cache_type_k, tv=plan.cache_type_v,
        bpt=plan.kv_bytes_per_token, ub=plan.n_ubatch, fa="on" if plan.flash_attn else "off"))
    comps = ("weights", "kv", "recurrent", "compute", "mmproj", "draft", "other")
    sep = _(", ")
    for d in plan.devices:
        parts = [_("{what} {size}").format(what=_(COMPONENTS[c]), size=fmt_bytes(d.get(c))) for c in comps if d.get(c)]
        total = fmt_bytes(d.total)
        line = (_("{device} ({label}): {parts}; total {total} of {capacity}") if d.capacity else
                _("{device} ({label}): {parts}; total {total}"))
        out.append("  " + line.format(device=d.name, label=d.label, parts=join(sep, parts) if parts else _("nothing"),
                                      total=total, capacity=fmt_bytes(d.capacity) if d.capacity else ""))
    h = plan.host
    parts = [_("{what} {size}").format(what=_(COMPONENTS[c]), size=fmt_bytes(h.get(c)))
             for c in ("weights", "kv", "recurrent", "compute", "output", "mmproj", "draft", "checkpoints", "cache_ram")
             if h.get(c)]
    mm = _(" (weights mmap'd: page cache)") if h.mmap and h.get("weights") else ""
    out.append("  " + _("host RAM: {parts}; total {total} worst case{mmap}").format(
        parts=join(sep, parts), total=fmt_bytes(h.total), mmap=mm))
    qual = fit_qualifier(plan)  # "fits" qualified as plan's headline qualifies it (plan.verdict)
    out.append("  " + (_("verdict: {verdict}").format(verdict=qual.verdict(True)) if plan.fits else
                       _("verdict: DOES NOT FIT: {short}").format(short=join("; ", plan.shortfalls()))))
    if plan.fits:
        out += ["  " + x for x in qual.lines(None)]
    if isinstance(speed, SpeedReport) and speed.by_depth:
        head = decode_headline(speed)
        line = "  " + _("speed (llamarig speed model, calibration: {cal}):").format(cal=speed.calibration)
        out.append(line)
        out += ["    " + x for x in head.lines(speed.prefill.tok_s)]
    return out
