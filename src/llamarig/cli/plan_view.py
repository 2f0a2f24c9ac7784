"""``llamarig plan``'s human output: the verdict first, then a compact table per device, then
the notes. Formulas and sources are behind ``--why`` (``--json`` has everything).

Every sentence comes from the message catalogue (llamarig.i18n); sizes, flag names and
formulas stay as they are in both languages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from llamarig.cli.lang import N_, _, localize
from llamarig.cli.layout import (
    Column,
    Sheet,
    cells,
    command_lines,
    labelled,
    print_lines,
    print_wrapped,
)
from llamarig.cli.speed_view import calibration_label
from llamarig.plan.optimise.verdict import decode_headline, fit_qualifier
from llamarig.plan.result import HOST_GROWTH
from llamarig.units import MiB, fmt_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from llamarig.plan.result import DevicePlan, Plan

#: component -> label, in table order
DEVICE_ROWS = (("weights", N_("weights")), ("kv", N_("KV cache")), ("recurrent", N_("recurrent state")),
               ("compute", N_("compute")), ("mmproj", N_("mmproj")), ("draft", N_("draft / MTP")),
               ("other", N_("other")))
HOST_ROWS = (("weights", N_("weights")), ("kv", N_("KV cache")), ("recurrent", N_("recurrent state")),
             ("compute", N_("compute")), ("output", N_("output buffer")), ("mmproj", N_("mmproj")),
             ("draft", N_("draft / MTP")), ("checkpoints", N_("ctx checkpoints")),
             ("cache_ram", N_("prompt cache")))
#: the method words, translated where a table shows them
METHODS = {"exact": N_("exact"), "modelled": N_("modelled"), "given": N_("given"),
           "estimated": N_("estimated"), "not planned": N_("not planned")}


def _gib(n: int) -> str:
    return fmt_bytes(n)


def _gib_range(lo: int, hi: int) -> str:
    """'1.24-1.40 GiB' (one unit when both ends share it), else '980.00 MiB-1.10 GiB'."""
    a, b = _gib(lo), _gib(hi)
    ua, ub = a.rsplit(" ", 1), b.rsplit(" ", 1)
    return f"{ua[0]}-{b}" if len(ua) == 2 and len(ub) == 2 and ua[1] == ub[1] else f"{a}-{b}"


def _device_name(d: DevicePlan) -> str:
    return f"{d.name} ({d.label})" if d.label and d.label != d.name else d.name


_VENDOR_PREFIXES = ("NVIDIA GeForce ", "NVIDIA ", "AMD Radeon ", "AMD ", "Intel(R) ", "Apple ")


def _short_name(d: DevicePlan) -> str:
    """'CUDA0 (RTX 3090)': the verdict line names the card without its vendor prefix, so it stays
    on one line at 80 columns (the tables below give the full name)."""
    label = d.label or ""
    for p in _VENDOR_PREFIXES:
        if label.startswith(p):
            label = label[len(p):]
            break
    return f"{d.name} ({label})" if label and label != d.name else d.name


def _estimated_parts(d: DevicePlan) -> tuple[str, int]:
    """The components whose figures carry a range, e.g. 'file size and compute buffer', and how
    many they are."""
    names = {"weights": _("file size"), "compute": _("compute buffer")}
    parts = [names.get(c, c) for c, ln in d.lines.items() if ln.spread]
    return _(" and ").join(parts), len(parts)


def _host_line(plan: Plan) -> str:
    """Host RAM at start: of its capacity, short, or not checked."""
    h = plan.host
    if not h.capacity:
        return _("host RAM {start} at start (not checked: give --ram or --detect)").format(start=_gib(h.start_total))
    if (h.free_at_start or 0) >= 0:
        return _("host RAM {used} of {cap} at start").format(used=_gib(h.start_total), cap=_gib(h.capacity))
    return _("host RAM short by {short}").format(short=_gib(-(h.free_at_start or 0)))


def _device_part(d: DevicePlan) -> str:
    """One device on the verdict line: its use of its capacity, free, short or a range."""
    if not d.capacity:
        return _("{dev} {used} (capacity unknown)").format(dev=_short_name(d), used=_gib(d.total))
    if d.uncertainty and d.free_range is not None:
        lo, hi = d.free_range
        if lo >= 0:
            return _("{dev} {used} of {cap}, {range} free").format(
                dev=_short_name(d), used=_gib(d.total), cap=_gib(d.capacity), range=_gib_range(lo, hi))
        return _("{dev} between {short} short and {hi} free").format(
            dev=_short_name(d), short=_gib(-lo), hi=_gib(max(hi, 0)))
    if (d.free or 0) >= 0:
        return _("{dev} {used} of {cap}, {free} free").format(
            dev=_short_name(d), used=_gib(d.total), cap=_gib(d.capacity), free=_gib(d.free or 0))
    return _("{dev} short by {short}").format(dev=_short_name(d), short=_gib(-(d.free or 0)))


def _ranged(d: DevicePlan) -> bool:
    return bool(d.capacity) and bool(d.uncertainty) and d.free_range is not None


def _range_line(plan: Plan, maybe: bool) -> list[str]:
    """Why the free memory is a range, on its own line (the verdict line stays short)."""
    found = [_estimated_parts(d) for d in plan.devices if _ranged(d)]
    if not found:
        return []
    estimated = [what for what, _n in found]
    one = len(set(estimated)) == 1
    what = estimated[0] if one else _("; ").join(dict.fromkeys(estimated))
    if one and max(n for _w, n in found) == 1:
        line = (_("free is a range: the {what} is an estimate; check with the real GGUF or a -lv 4 log") if maybe
                else _("free is a range: the {what} is an estimate"))
    else:
        line = (_("free is a range: the {what} are estimates; check with the real GGUF or a -lv 4 log") if maybe
                else _("free is a range: the {what} are estimates"))
    return [line.format(what=what)]


def _speed_lines(plan: Plan) -> list[str]:
    """Decode and prefill at a glance (speculative decoding named), how far an uncalibrated host
    can be off, and the calibration the figures rest on."""
    sp = plan.speed
    if sp is None or not sp.by_depth:
        return []
    # speculative decoding named, its limit recomputed for it (llamarig.plan.optimise.verdict)
    out = [localize(x) for x in decode_headline(sp).lines(sp.prefill.tok_s)]
    if sp.host_range is not None:  # an uncalibrated host: how far the figures can be off
        hr = sp.host_range
        pre = (_(", prefill {lo:.0f}-{hi:.0f} tok/s").format(lo=hr.prefill_tok_s[0], hi=hr.prefill_tok_s[1])
               if hr.prefill_tok_s else "")
        out.append(_("host part not calibrated: expect decode {lo:.1f}-{hi:.1f} tok/s at depth 0{pre} (measured "
                     "range, benchmarks/RESULTS.md; `llamarig tune` calibrates this machine)").format(
            lo=hr.decode_tok_s[0], hi=hr.decode_tok_s[1], pre=pre))
    out.append(_("calibration: {source}").format(source=calibration_label(sp.calibration)))
    return out


def verdict_lines(plan: Plan) -> list[str]:
    """The answer: fits or not, free or short per device, host RAM, and what to change."""
    parts = [_device_part(d) for d in plan.devices]
    host = _host_line(plan)
    maybe = any(d.uncertainty and d.free_range is not None and d.free_range[0] < 0 for d in plan.devices)
    qual = fit_qualifier(plan)  # layers in host RAM, host RAM unchecked: "fits" says so
    head = localize(qual.verdict(plan.fits)) if plan.fits and (qual.qualified or not maybe) else (
        _("may not fit") if plan.fits else _("does not fit"))
    # the devices on the verdict line, host RAM on the next: one line each reads at 80 columns in
    # both languages (joined, the Chinese line broke inside a figure)
    out = [_("{verdict}: {details}").format(verdict=head, details=_("; ").join(parts or [host]))]
    out += _range_line(plan, maybe)
    sp = plan.speed
    if plan.fits:
        out += [localize(x) for x in qual.lines(decode_headline(sp).d0 if sp is not None and sp.by_depth else None)]
    if parts and qual.unchecked_bytes is None:
        out.append(host)
    if plan.host.growth:
        out.append(_("host RAM can grow by {grow} over long sessions (context checkpoints and the prompt "
                     "cache fill as requests come)").format(grow=_gib(plan.host.growth)))
    if not plan.fits:
        out += suggestions(plan)
    return out + _speed_lines(plan)


def suggestions(plan: Plan) -> list[str]:
    """What to change when it does not fit, sized from the plan's own figures (then re-plan)."""
    out: list[str] = []
    short = [d for d in plan.devices if d.capacity and (d.free or 0) < 0]
    if not short:
        return out
    d = max(short, key=lambda x: -(x.free or 0))
    need = -(d.free or 0)
    kv = d.get("kv")
    tries = []
    if kv > need and plan.n_ctx > 256:
        per_cell = kv / plan.n_ctx
        new_ctx = int((plan.n_ctx - need / per_cell) // 256 * 256)
        if new_ctx >= 256:
            tries.append(f"-c {new_ctx}")
    if plan.cache_type_k == "f16" and plan.cache_type_v == "f16" and kv / 2 > need:
        tries.append(_("-ctk q8_0 -ctv q8_0 (KV about half)"))
    # layers on the CPU free their weights and KV on the GPU: this always helps, at a speed cost
    tries.append(_("fewer GPU layers (leave -ngl unset: --fit moves layers to the CPU)"))
    out.append(_("try: {options}; then run plan again").format(options=_(" or ").join(tries)))
    out.append(_("or let plan search the settings that fit: --target-ctx {ctx}").format(ctx=plan.n_ctx))
    return out


def _table(title: str, rows: list[tuple[str, int, str]], total: list[tuple[str, str]]) -> Sheet:
    """One device's (or the host's) memory: component, size, how it was obtained; totals in bold."""
    t = Sheet([Column(_("component"), key=True), Column(_("size"), justify="right"), Column(_("method"))],
              title=Text(title), rule=False)
    for label, b, method in rows:
        t.add_row("  " + label, fmt_bytes(b), method)
    for label, value in total:
        t.add_row("  " + label, value, "", style="bold")
    return t


def _summary(plan: Plan) -> str:
    return _("{model} ({arch}): n_ctx {n_ctx}, {slots} slot(s), {kv_mode} ({per_slot} tokens per "
             "slot), K {k} / V {v}, flash attention {fa}, n_ubatch {ub}").format(
        model=plan.model, arch=plan.architecture, n_ctx=plan.n_ctx, slots=plan.n_parallel,
        kv_mode=_("unified KV") if plan.kv_unified else _("KV split per slot"), per_slot=plan.n_ctx_slot,
        k=plan.cache_type_k, v=plan.cache_type_v, fa=_("on") if plan.flash_attn else _("off"), ub=plan.n_ubatch)


def _device_table(d: DevicePlan) -> Sheet:
    rows = [(_(label), d.lines[c].bytes, _(METHODS.get(d.lines[c].method, d.lines[c].method)))
            for c, label in DEVICE_ROWS if c in d.lines and d.lines[c].bytes]
    total = [(_("total"), fmt_bytes(d.total))]
    if d.capacity:
        free = d.free or 0
        total += [(_("capacity"), fmt_bytes(d.capacity)),
                  (_("free") if free >= 0 else _("short"), fmt_bytes(abs(free)))]
    return _table(_device_name(d), rows, total)


def _host_table(plan: Plan) -> Sheet:
    h = plan.host
    rows = []
    for c, label in HOST_ROWS:
        ln = h.lines.get(c)
        if ln is None or not ln.bytes:
            continue
        name = _(label)
        if c == "weights" and h.mmap:
            name += _(" (mmap)")
        if c in HOST_GROWTH:
            name += _(" (grows)")
        rows.append((name, ln.bytes, _(METHODS.get(ln.method, ln.method))))
        if c == "weights" and len(ln.parts) > 1:
            rows += [("  " + buf, b, "") for buf, b in ln.parts]
    total = [(_("total (worst case)"), fmt_bytes(h.total))]
    if h.capacity:
        total += [(_("capacity"), fmt_bytes(h.capacity)), (_("free"), fmt_bytes(h.free or 0))]
    return _table(_("host RAM"), rows, total)


def print_command(console: Console, label: str, argv: list[str] | tuple[str, ...]) -> None:
    """A command to copy: on the label's line when it fits, else under it in shell continuation
    lines (never cut: `--json` has it too)."""
    one = labelled(label, " ".join(argv))
    if cells(one.plain) <= console.width:
        print_lines(console, [one])
    else:
        print_lines(console, [label, *command_lines("  " + " ".join(argv), console.width)])


def render(plan: Plan, console: Console, *, why: bool = False) -> None:
    """The verdict, the tables, the notes; formulas with ``why``."""
    lines = verdict_lines(plan)
    print_wrapped(console, lines[0], indent="  ", style="bold green" if plan.fits else "bold red")
    for text in lines[1:]:
        print_wrapped(console, text, indent="  ")
    print_wrapped(console, _summary(plan), indent="  ")
    for d in plan.devices:
        console.print(_device_table(d))
    console.print(_host_table(plan))
    note, warning = _("note:"), _("warning:")
    for n in plan.notes:
        print_wrapped(console, labelled(note, localize(n), "cyan"), indent="  ")
    for w in plan.warnings:
        print_wrapped(console, labelled(warning, localize(w), "yellow"), indent="  ")
    if why:
        render_formulas(plan, console)
    print_command(console, _("command:"), list(plan.command))
    if not why:
        print_wrapped(console, _("formulas and sources: add --why; everything: --json"), style="dim")


def render_formulas(plan: Plan, console: Console) -> None:
    """Every figure's formula and source (``--why``)."""
    print_wrapped(console, _("how each figure was obtained"), style="bold")
    print_wrapped(console, _("KV per token (full-attention layers): {b} B").format(b=plan.kv_bytes_per_token),
                  indent="  ")
    if plan.recurrent_bytes_per_seq:
        print_wrapped(console, _("recurrent state per sequence: {rs}; one context checkpoint {ck:.3f} MiB").format(
            rs=fmt_bytes(plan.recurrent_bytes_per_seq), ck=plan.checkpoint_bytes / MiB), indent="  ")
    for d in plan.devices:
        for c, label in DEVICE_ROWS:
            ln = d.lines.get(c)
            if ln and ln.bytes:
                print_wrapped(console, _("{where} {what}: {formula}").format(
                    where=d.name, what=_(label), formula=localize(ln.formula)), indent="      ", first_indent="  ")
    for c, label in HOST_ROWS:
        ln = plan.host.lines.get(c)
        if ln and ln.bytes:
            print_wrapped(console, _("{where} {what}: {formula}").format(
                where=_("host"), what=_(label), formula=localize(ln.formula)), indent="      ", first_indent="  ")
