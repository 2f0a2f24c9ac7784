"""``llamarig check``'s human output: the verdict first (errors, warnings, where a script cuts a
command off), then per command what llama-server receives and its findings: a table where the
terminal is wide enough, one block per finding where it is not (cli/layout.py). Headings and
argument lists wrap at the terminal's width; nothing is clipped (``--json`` has the same)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.text import Text

from llamarig.cli.lang import N_, _, localize
from llamarig.cli.layout import Column, Sheet, print_lines, print_wrapped, wrap_text
from llamarig.flags.reading import verdict

if TYPE_CHECKING:
    from rich.console import Console

    from llamarig.flags.parsed import Invocation
    from llamarig.flags.readers import Parsed
    from llamarig.flags.rules import Finding
    from llamarig.flags.schema import Schema

STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
#: what a checked file is (Parsed.kind)
KINDS = {"shell": N_("shell script"), "systemd": N_("systemd unit"), "compose": N_("docker compose file"),
         "llama-swap": N_("llama-swap config"), "models-preset": N_("models preset (INI)"), "argv": N_("command"),
         "yaml": N_("YAML file")}


def _q(word: str) -> str:
    return word if word and all(c.isalnum() or c in "-_./:=,+@%~${}" for c in word) else shlex.quote(word)


def _label(text: str) -> str:
    """A label before its text: a full-width colon carries its own space."""
    return text if text.endswith("：") else text + " "


def verdict_lines(parsed: Parsed, findings: list[Finding], name: str) -> list[tuple[str, str]]:
    """The answer first: how many errors and warnings, and for each command what llama-server
    really receives when the script cuts it off."""
    n = {sev: sum(1 for f in findings if f.severity == sev) for sev in ("error", "warning", "info")}
    style = "bold red" if n["error"] else ("yellow" if n["warning"] else "bold green")
    out = [(_("{name}: {errors} error(s), {warnings} warning(s), {info} info").format(
        name=name, errors=n["error"], warnings=n["warning"], info=n["info"]), style)]
    for k, inv in enumerate(parsed.invocations):
        if inv.orphans:
            out.append((_("command {k} (line {line}) is cut off at line {cut}: {words} word(s) after it never reach "
                          "{program}").format(k=k + 1, line=inv.line, cut=inv.cut_line, words=len(inv.orphans),
                                              program=inv.program), "red"))
    first = next((f for f in findings if f.severity == "error"), None)
    if first is not None and not any(inv.orphans for inv in parsed.invocations):
        out.append((_("first error, line {line}: {message}").format(line=first.line, message=localize(first.message)),
                    "red"))
    out += [(localize(v), "yellow") for v in verdict(parsed)]
    if not parsed.invocations and not parsed.others and not any(f.rule == "engine" for f in findings):
        out.append((_("no llama-server command found"), "yellow"))
    return out


def _heading(k: int, inv: Invocation) -> str:
    lines_at = f"{inv.line}" + (f"-{inv.end_line}" if inv.end_line != inv.line else "")
    head = _("invocation {k}: line {lines} {program}{label} receives {n} argument(s)").format(
        k=k + 1, lines=lines_at, program=inv.program, label=" [" + inv.label + "]" if inv.label else "",
        n=len(inv.args))
    if inv.orphans:
        head += _(", {n} cut off at line {line}").format(n=len(inv.orphans), line=inv.cut_line)
    return head


def _arguments(inv: Invocation, width: int) -> list[Text]:
    """What llama-server receives, what the script cut off, and the environment, each a label and
    the whole list wrapped under it (a long path breaks after a /)."""
    out: list[Text] = []
    parts = [(_("receives:"), " ".join(_q(localize(a)) for a in inv.argv), "")]
    if inv.orphans:
        parts.append((_("cut off (lines {first}-{last}):").format(first=inv.orphans[0].line, last=inv.orphans[-1].line),
                      " ".join(_q(w.text) for w in inv.orphans), "red"))
    if inv.env:
        parts.append((_("environment:"), " ".join(f"{n}={v}" for n, v, _line in inv.env), ""))
    for label, text, style in parts:
        line = Text()
        line.append(_label(label), style="dim")
        line.append(text, style=style)
        out += wrap_text(line, width, indent="      ", first_indent="  ")
    return out


def _findings(fs: list[Finding]) -> Sheet:
    severity = {"error": _("error"), "warning": _("warning"), "info": _("info")}
    sheet = Sheet([Column(_("line"), justify="right", key=True), Column(_("severity"), key=True),
                   Column(_("rule"), key=True), Column(_("finding"), prose=True, min_width=44)], rule=False)
    for f in fs:
        msg = Text(localize(f.message))
        if f.fix:
            msg.append("\n")
            msg.append(_label(_("fix:")), style="green")
            msg.append(localize(f.fix))
        sheet.add_row(str(f.line), Text(severity.get(f.severity, f.severity), style=STYLE.get(f.severity, "")),
                      f.rule, msg)
    return sheet


def render(parsed: Parsed, findings: list[Finding], schema: Schema, name: str, console: Console) -> None:
    """The verdict, where the flags come from, then each command's arguments and findings."""
    for line, style in verdict_lines(parsed, findings, name):
        print_wrapped(console, line, indent="  ", style=style)
    print_wrapped(console, _("{kind}, {n} llama-server invocation(s); flags checked against {schema}").format(
        kind=_(KINDS[parsed.kind]) if parsed.kind in KINDS else parsed.kind, n=len(parsed.invocations),
        schema=schema.label()), indent="  ", style="dim")
    by_inv: dict[int | None, list[Finding]] = {}
    for f in findings:  # grouped once: a file of many commands stays linear
        by_inv.setdefault(f.invocation, []).append(f)
    groups: list[tuple[str, list[Finding], Invocation | None]] = []
    if by_inv.get(None):
        groups.append((_("the script"), by_inv[None], None))
    groups += [(_heading(k, inv), by_inv.get(k, []), inv) for k, inv in enumerate(parsed.invocations)]
    for head, fs, inv in groups:
        console.print()
        print_wrapped(console, head, indent="  ", style="bold")
        if inv is not None:
            print_lines(console, _arguments(inv, console.width))
        if fs:
            console.print(_findings(fs))
        else:
            console.print("  [green]" + escape(_("no findings")) + "[/green]")
