"""The rpc-servers of an RPC deployment: one ``ggml-rpc-server`` per ``--rpc`` endpoint, as a
command for its host and as a systemd unit, beside the coordinator's llama-server.

What the unit says and why, from the pinned build (11434):
- ``--host`` is the endpoint's own IPv4 address: rpc-server binds with ``inet_addr`` and refuses
  a name (ggml/src/ggml-rpc/transport.cpp:715-740), and it has no authentication: for any host
  but 127.0.0.1 it prints "Never expose the RPC server to an open network!"
  (tools/rpc/rpc-server.cpp main). So it listens on that one address, and the comments say to
  let only the coordinator reach the port.
- ``--device`` names the devices the plan has for that server (``--rpc-device``); without it
  rpc-server offers every GPU of the host, else its CPU (rpc-server.cpp get_devices).
- ``Restart=always``: an unknown argument makes rpc-server print its usage and exit 0
  (rpc-server.cpp:152-156), which ``on-failure`` would not restart.
- the same llama.cpp build on every host: llama-server refuses a server of another RPC protocol
  major version, or a newer minor (ggml-rpc.cpp:355-361, "RPC server version mismatch").
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llamarig import __version__
from llamarig.errors import InputError
from llamarig.hardware.types import GPU
from llamarig.i18n import _, localize
from llamarig.launch.rpc import RPC_SERVER_NAME, rpc_server_argv
from llamarig.plan.rpc import split_endpoint
from llamarig.render.systemd import systemd_quote

#: llama.cpp's device name prefix per backend (as --list-devices prints them)
_DEVICE_PREFIX = {"CUDA": "CUDA", "ROCm": "ROCm", "Vulkan": "Vulkan", "Metal": "MTL", "SYCL": "SYCL"}


@dataclass(frozen=True)
class RpcServerSpec:
    """One rpc-server to run: where, on which address, with which devices."""

    endpoint: str
    bind: str  # the IPv4 address it listens on
    port: int
    binary: str
    devices: tuple[str, ...]  # --device list ("" when the plan does not describe the server)
    note: str = ""

    @property
    def local(self) -> bool:
        return self.bind.startswith("127.")

    def argv(self) -> list[str]:
        return rpc_server_argv(self.binary, self.bind, self.port, devices=self.devices)

    def unit_name(self, name: str) -> str:
        return f"{name}-rpc-{self.bind.replace('.', '-')}-{self.port}"


def rpc_servers(rpc: str | None, described: Sequence[GPU], server_binary: str) -> list[RpcServerSpec]:
    """The rpc-servers ``--rpc`` names, in its order, with the devices ``--rpc-device`` gives
    them (``Hardware.rpc``). Raises InputError for an endpoint whose name does not resolve to an
    IPv4 address."""
    devs: dict[str, list[GPU]] = {}
    for g in described:
        devs.setdefault(g.endpoint, []).append(g)
    binary = str(Path(server_binary).with_name(RPC_SERVER_NAME))
    out = []
    for ep in (e.strip() for e in (rpc or "").split(",") if e.strip()):
        host, port = split_endpoint(ep)
        bind, note = _ipv4(host)
        out.append(RpcServerSpec(ep, bind, port, binary, _device_names(devs.get(ep, [])), note))
    return out


def _ipv4(host: str) -> tuple[str, str]:
    """(the IPv4 address rpc-server binds, a note when it was resolved from a name)."""
    try:
        socket.inet_aton(host)
        if host.count(".") == 3:
            return host, ""
    except OSError:
        pass
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        raise InputError(_("--rpc {host}: rpc-server listens on an IPv4 address, not a name (transport.cpp:724-727, "
                           "inet_addr), and {host} does not resolve here: write the server's address in --rpc").format(
            host=host)) from None
    return ip, _("rpc-server --host {ip}: {host} resolved here when rendering (it needs an address, "
                 "transport.cpp:724-727)").format(ip=ip, host=host)


def _device_names(gpus: Sequence[GPU]) -> tuple[str, ...]:
    """The rpc-server's ``--device`` list for what the plan gives it: CPU, or CUDA0, CUDA1, ..."""
    counters: dict[str, int] = {}
    out = []
    for g in gpus:
        if g.remote_backend in ("CPU", ""):
            out.append("CPU")
            continue
        p = _DEVICE_PREFIX.get(g.remote_backend, g.remote_backend)
        out.append(f"{p}{counters.get(p, 0)}")
        counters[p] = counters.get(p, 0) + 1
    return tuple(out)


def comment_lines(servers: Sequence[RpcServerSpec]) -> list[str]:
    """What the coordinator's file says about its rpc-servers (comment lines, Messages)."""
    if not servers:
        return []
    out = [_("RPC deployment: start these rpc-servers first, one per host, from the same llama.cpp build as this "
             "llama-server (RPC protocol 7.0.0 at build 11434: another version is refused, ggml-rpc.cpp:355-361):")]
    for s in servers:
        out.append("  " + _("on {host}: {command}").format(host=s.bind, command=" ".join(s.argv())))
        if s.note:
            out.append("    " + s.note)
    if any(not s.local for s in servers):
        out.append(_("rpc-server has no authentication: let only this host reach each port (e.g. `ufw allow from "
                     "THIS_HOST to any port PORT proto tcp`), never 0.0.0.0 or an open network (tools/rpc/rpc-server.cpp)"))
    return out


def render_rpc_unit(s: RpcServerSpec, name: str, lang: str = "en") -> str:
    """A systemd unit for one rpc-server, to install on its host."""
    unit = s.unit_name(name)
    head = [
        _("rendered by llamarig {version}: the rpc-server {endpoint} of llama-server {name}").format(
            version=__version__, endpoint=s.endpoint, name=name),
        _("install on {host}: sudo cp {unit}.service /etc/systemd/system/ && sudo systemctl daemon-reload && "
          "sudo systemctl enable --now {unit}").format(host=s.bind, unit=unit),
        _("the same llama.cpp build as llama-server: {binary} must be that build's rpc-server").format(binary=s.binary),
    ]
    if not s.local:
        head.append(_("no authentication: it listens on {ip}:{port} only; let only the llama-server host reach that "
                      "port (firewall)").format(ip=s.bind, port=s.port))
    if not s.devices:
        head.append(_("no --device: it offers every GPU of the host, else its CPU; give --rpc-device to pin them"))
    if s.note:
        head.append(s.note)
    out = ["# " + localize(h, lang) for h in head]
    out += [
        "[Unit]",
        f"Description=ggml rpc-server {s.endpoint} for llama-server {name} (rendered by llamarig {__version__})",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        "ExecStart=" + " ".join(systemd_quote(t) for t in s.argv()),
        # an unknown argument exits 0 (rpc-server.cpp:152-156): on-failure would leave it down
        "Restart=always",
        "RestartSec=5",
        "KillSignal=SIGTERM",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(out) + "\n"
