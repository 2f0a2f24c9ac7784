"""A systemd service unit. ExecStart follows systemd's own rules (systemd.service(5),
systemd.syntax(7)): a line ending in a backslash continues, arguments with spaces or quotes are
double-quoted with C escapes, ``%`` is a specifier (written ``%%``) and ``$`` expands
environment variables (written ``$$``). LimitMEMLOCK=infinity when --load-mode mlock is used
(mlock of a multi-GB model fails under the default 8 MiB RLIMIT_MEMLOCK)."""

from __future__ import annotations

import re

from llamarig.i18n import _
from llamarig.render.common import RenderSpec

_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./$-]+$")


def systemd_quote(arg: str) -> str:
    s = arg.replace("%", "%%").replace("$", "$$")
    if s and _PLAIN.match(s):
        return s
    s = s.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{s}"'


def _env_quote(k: str, v: str) -> str:
    return systemd_quote(f"{k}={v}")


def render_systemd(spec: RenderSpec, user: str | None = None, restart: str = "on-failure",
                   working_dir: str | None = None, requires: tuple[str, ...] = ()) -> str:
    """``requires``: units of this host that must run first (an RPC deployment's local
    rpc-servers, render/rpc.py)."""
    out = [("# " + ln).rstrip() for ln in spec.header()]
    out += [("# " + ln).rstrip() for ln in spec.local([
        "",
        _("install: sudo cp {name}.service /etc/systemd/system/ && sudo systemctl daemon-reload").format(
            name=spec.name),
        _("         && sudo systemctl enable --now {name}; logs: journalctl -u {name} -f").format(name=spec.name),
        _("stop/restart only this server: systemctl stop|restart {name} (never killall)").format(name=spec.name),
        "",
    ] + spec.flag_table())]
    out += [
        "[Unit]",
        f"Description=llama-server {spec.name} (rendered by llamarig {spec.version})",
        "After=network-online.target" + "".join(f" {u}" for u in requires),
        "Wants=network-online.target",
        *(f"Requires={u}" for u in requires),
        "",
        "[Service]",
        "Type=simple",
    ]
    if user:
        out.append(f"User={user}")
    working_dir = spec.workdir or working_dir
    if working_dir:
        out.append(f"WorkingDirectory={working_dir}")
    for k, v in spec.env:
        out.append(f"Environment={_env_quote(k, v)}")
    groups = spec.groups()
    head = " ".join(systemd_quote(t) for t in (*spec.wrappers, spec.binary))
    exec_lines = [f"ExecStart={head}" + (" \\" if groups else "")]
    for i, g in enumerate(groups):
        end = " \\" if i < len(groups) - 1 else ""
        exec_lines.append("    " + " ".join(systemd_quote(t) for t in g) + end)
    out += exec_lines
    out += [
        f"Restart={restart}",
        "RestartSec=5",
        # llama-server exits cleanly on SIGTERM (tools/server/server.cpp signal handler)
        "KillSignal=SIGTERM",
        "TimeoutStopSec=30",
    ]
    if spec.mlock:
        out.append("LimitMEMLOCK=infinity")
    out += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(spec.local(out)) + "\n"
