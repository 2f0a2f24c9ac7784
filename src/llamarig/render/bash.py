"""A bash launcher: start/stop/restart/status/foreground, one flag per continued line, the flag
comments ABOVE the command (a comment line between continued lines would cut the command
there: bash ends the command at the first line that does not end with a backslash), a PID file,
a log file, and a stop that signals only the PID it started (never killall/pkill by name)."""

from __future__ import annotations

import shlex

from llamarig.i18n import _, localize
from llamarig.render.common import RenderSpec


def _comment(lines: list[str], lang: str) -> list[str]:
    return [("# " + ln).rstrip() for ln in localize(lines, lang)]


def _command_lines(spec: RenderSpec) -> list[str]:
    """run_llama_server's body: the command, one flag per continued line."""
    q = shlex.quote
    groups = spec.groups()
    cmd_lines = [f"  exec {' '.join(q(t) for t in (*spec.wrappers, spec.binary))} \\"]
    for i, g in enumerate(groups):
        end = " \\" if i < len(groups) - 1 else ""
        cmd_lines.append("    " + " ".join(q(t) for t in g) + end)
    if not groups:
        cmd_lines[0] = cmd_lines[0][:-2]
    if spec.workdir:  # the input's `cd DIR`: relative names (`./llama3-server`) resolve there
        cmd_lines.insert(0, f"  cd {q(spec.workdir)}")
    return cmd_lines


def _usage(spec: RenderSpec) -> list[str]:
    """The header comment: the plan's figures, the usage, each flag with what it does."""
    q = shlex.quote
    return _comment(spec.header(), spec.lang) + _comment([
        "",
        _("usage: {name}.sh [start|stop|restart|status|foreground]   (default: start)").format(name=spec.name),
        "  start       " + _("run in the background: PID file and log in $LLAMARIG_RUN_DIR"),
        "  stop        " + _("SIGTERM to the PID in the PID file only (after checking it is this"),
        "              " + _("llama-server), SIGKILL after 30 s"),
        "  foreground  " + _("exec the server in this shell (for systemd, containers, debugging)"),
        "",
    ] + spec.flag_table(lambda g: " ".join(q(t) for t in g)), spec.lang)


def _is_ours(spec: RenderSpec) -> list[str]:
    return [
        "# " + _("true when PID is alive and its command line starts with our binary (not a reused PID)"),
        "# " + _("(or, when a wrapper such as timeout stays the parent, runs it)"),
        "is_ours() {",
        '  local pid=$1 args',
        '  [[ "$pid" =~ ^[0-9]+$ ]] || return 1',
        '  kill -0 "$pid" 2>/dev/null || return 1',
        '  args=$(ps -p "$pid" -o args= 2>/dev/null) || return 1',
        '  [[ "$args" == "$BIN"* || "$args" == *" $BIN "* ]]' if spec.wrappers else '  [[ "$args" == "$BIN"* ]]',
        "}",
        "",
        "read_pid() {",
        '  if [[ -f "$PID_FILE" ]]; then cat "$PID_FILE"; fi',
        "}",
    ]


def _start() -> list[str]:
    return [
        "start() {",
        '  mkdir -p "$RUN_DIR"',
        "  local pid",
        "  pid=$(read_pid)",
        '  if is_ours "$pid"; then echo "$NAME: already running (pid $pid)"; return 0; fi',
        '  if [[ -f "$LOG_FILE" ]]; then mv -f "$LOG_FILE" "$LOG_FILE.1"; fi',
        "  # " + _("a subshell that ignores SIGHUP (closing the terminal must not stop the server), then"),
        "  # " + _("execs llama-server: $! is llama-server's own pid"),
        '  ( trap "" HUP; run_llama_server ) >"$LOG_FILE" 2>&1 </dev/null &',
        "  pid=$!",
        '  echo "$pid" >"$PID_FILE"',
        "  local i",
        '  for ((i = 0; i < START_TIMEOUT * 5; i++)); do',
        '    if ! kill -0 "$pid" 2>/dev/null; then',
        '      echo "$NAME: llama-server exited during start-up; last log lines:" >&2',
        '      tail -n 20 "$LOG_FILE" >&2',
        '      rm -f "$PID_FILE"',
        "      return 1",
        "    fi",
        '    if grep -q -e "listening on http" -e "server is listening on" "$LOG_FILE"; then',
        '      echo "$NAME: running (pid $pid, port $PORT, log $LOG_FILE)"',
        "      return 0",
        "    fi",
        "    sleep 0.2",
        "  done",
        '  echo "$NAME: not ready after ${START_TIMEOUT} s (pid $pid still starting; log $LOG_FILE)" >&2',
        "  return 1",
        "}",
    ]


#: stop (only the PID it started, after checking it is ours), status and the dispatch
_STOP_STATUS = (
    "stop() {",
    "  local pid i",
    "  pid=$(read_pid)",
    '  if [[ -z "$pid" ]]; then echo "$NAME: not running (no $PID_FILE)"; return 0; fi',
    '  if ! is_ours "$pid"; then',
    '    echo "$NAME: pid $pid is not our llama-server any more; removing the stale $PID_FILE"',
    '    rm -f "$PID_FILE"',
    "    return 0",
    "  fi",
    '  kill -TERM "$pid"',
    '  for ((i = 0; i < 150; i++)); do',
    '    kill -0 "$pid" 2>/dev/null || break',
    "    sleep 0.2",
    "  done",
    '  if kill -0 "$pid" 2>/dev/null; then',
    '    echo "$NAME: pid $pid did not exit 30 s after SIGTERM; sending SIGKILL" >&2',
    '    kill -KILL "$pid"',
    "  fi",
    '  rm -f "$PID_FILE"',
    '  echo "$NAME: stopped (pid $pid)"',
    "}",
    "",
    "status() {",
    "  local pid",
    "  pid=$(read_pid)",
    '  if is_ours "$pid"; then echo "$NAME: running (pid $pid, port $PORT)"; return 0; fi',
    '  echo "$NAME: not running"',
    "  return 3",
    "}",
    "",
    'case "${1:-start}" in',
    "  start) start ;;",
    "  stop) stop ;;",
    "  restart) stop && start ;;",
    "  status) status ;;",
    "  foreground) run_llama_server ;;",
    '  *) echo "usage: $0 [start|stop|restart|status|foreground]" >&2; exit 2 ;;',
    "esac",
)


def render_bash(spec: RenderSpec, run_dir: str = "${LLAMARIG_RUN_DIR:-$HOME/.local/state/llamarig}",
                start_timeout_s: int = 300) -> str:
    q = shlex.quote
    out: list[str] = ["#!/usr/bin/env bash", *_usage(spec)]
    out += [
        "set -euo pipefail",
        "",
        f"NAME={q(spec.name)}",
        f'RUN_DIR="{run_dir}"',
        'PID_FILE="$RUN_DIR/$NAME.pid"',
        'LOG_FILE="$RUN_DIR/$NAME.log"',
        f"BIN={q(spec.binary)}",
        f"PORT={spec.port}",
        f"START_TIMEOUT={start_timeout_s}",
        *(f"export {k}={q(v)}" for k, v in spec.env),
        "",
        "# " + _("the llama-server command: one flag per line, nothing between the continued lines"),
        "run_llama_server() {",
        *_command_lines(spec),
        "}",
        "",
        *_is_ours(spec),
        "",
        *_start(),
        "",
        *_STOP_STATUS,
    ]
    return "\n".join(spec.local(out)) + "\n"
