"""The text around the command: what the readers noticed about the script itself (a cut-off
continuation, orphan flags, ``killall``, bad quoting), and a server put in the background with
nowhere for its log to go."""

from __future__ import annotations

import re

from llamarig.flags.argv import Reading
from llamarig.flags.findings import Finding, Severity
from llamarig.flags.parsed import Invocation, Note
from llamarig.i18n import N_, _


def note_to_finding(n: Note) -> Finding:
    return Finding(n.kind, n.severity, n.line, None, n.message,
                   n.fix or (_(_NOTE_FIX[n.kind]) if n.kind in _NOTE_FIX else None), n.invocation, True)


_NOTE_FIX = {
    "continuation-broken": N_("move comment lines above the command and end every line but the last "
                              "with `\\` (see --fix)"),
    "orphan-flags": N_("join these lines to the llama-server command with `\\` (see --fix)"),
    "kill-by-name": N_("stop your own server by pid (`kill $(cat llama.pid)`) or `pkill -x NAME -u $USER`, "
                       "and wait for it to exit instead of sleeping"),
    "shell-syntax": N_("fix the quoting"),
    "unknown-macro": N_("define the macro under `macros:` before the macros that use it, or write the value"),
    "macro-invalid": N_("rename or fix the macro (names: ^[a-zA-Z0-9_-]+$, not PID/PORT/MODEL_ID, no "
                        "self-reference)"),
    "yaml-not-string": N_("quote the item"),
    "source-missing": N_("put the file next to the script, or fix its path"),
    "preset-section-again": N_("write each section once: merge the two"),
    "paste-prose": N_("put `# ` in front of it (see --fix)"),
    "paste-fence": N_("delete the line (see --fix)"),
    "paste-bullet": N_("delete the marker (see --fix)"),
    "paste-numbered": N_("delete the marker (see --fix)"),
    "paste-prompt": N_("delete the `$ ` (see --fix)"),
    "paste-fullwidth": N_("type these characters in ASCII (see --fix)"),
    "paste-quotes": N_("use straight quotes `\"` and `'` (see --fix)"),
    "paste-dash": N_("write `--` (or `-`) with ASCII hyphens (see --fix)"),
    "paste-prose-tail": N_("put `# ` before the prose, or move it to a comment line above the command (see --fix)"),
    "comment-after-backslash": N_("move the comment to a line above the command and end this line with `\\` "
                                  "(see --fix)"),
    "missing-backslash": N_("end the line with ` \\` (see --fix)"),
    "gap-after-backslash": N_("delete the line, or move the comment above the command (see --fix)"),
}


def background_no_log(inv: Invocation, r: Reading, k: int) -> list[Finding]:
    """background-no-log: ``&`` without --log-file or a redirection of stderr to a file."""
    if inv.background and not any(u.opt and u.opt.name == "--log-file" for u in r.uses):
        where = _log_destination(inv.redirects)
        if where != "file":
            why = (_("its log is thrown away (stderr goes to /dev/null)") if where == "null" else
                   _("its log (stderr) goes to the terminal that started it"))
            return [Finding("background-no-log", Severity.INFO, inv.end_line, None,
                            _("the server runs in the background (`&`) and {why}; add --log-file (or "
                              "`> FILE 2>&1`) to keep it").format(why=why), None, k)]
    return []


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
