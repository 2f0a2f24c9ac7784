"""RPC: llama-server's ``--rpc`` list, and the ``ggml-rpc-server`` commands a script starts.

Grounded in the pinned build (11434): tools/rpc/rpc-server.cpp (its options, 116-167; the
warning for any host but 127.0.0.1, 224-232), ggml/src/ggml-rpc/transport.cpp (it binds with
``inet_addr``, 715-740), ggml/src/ggml-rpc/ggml-rpc.cpp (the endpoint parser, 291-303, 535-551; the
version handshake, 345-365; the weight cache, 1456-1520) and common/arg.cpp (``--rpc``,
1169-1188, 2683-2692); what the real binaries do with them is in tests/flags/test_rpc_rules.py.
"""

from __future__ import annotations

import re
import shlex
import socket

from llamarig.flags.findings import Finding, Severity, finding
from llamarig.flags.rules.context import Subject
from llamarig.i18n import _

#: the rpc-server's program names: the build target, and the name of older builds and packages
_RPC_PROGRAM = re.compile(r"^(ggml-)?rpc-server$|^llama-rpc-server$")
#: rpc-server's options and whether they take a value (tools/rpc/rpc-server.cpp:116-167)
_RPC_OPTIONS = {"-H": True, "--host": True, "-p": True, "--port": True, "-t": True, "--threads": True,
                "-d": True, "--device": True, "-c": False, "--cache": False, "-h": False, "--help": False}
#: shell words that end a command
_SHELL_END = {";", "&&", "||", "|", "&", ")", "}"}


def rpc_endpoints(s: Subject) -> list[Finding]:
    """rpc-endpoint-invalid, rpc-endpoint-repeated, rpc-same-build, rpc-cache-ram: llama-server's
    ``--rpc HOST:PORT,...``."""
    r, k = s.reading, s.k
    u = r.last("--rpc")
    if u is None or not u.value:
        return []
    eps = [e.strip() for e in u.value.split(",")]
    out = []
    bad = [e for e in eps if not re.fullmatch(r"[^:\s]+:\d{1,5}", e) or not 0 < int(e.rsplit(":", 1)[1]) <= 65535]
    if bad:
        out.append(finding("rpc-endpoint-invalid", Severity.ERROR, u.line, u.spelling,
                           _("`--rpc {value}`: {bad} is not HOST:PORT; llama-server aborts at start (\"Failed to parse "
                             "endpoint\", ggml/src/ggml-rpc/ggml-rpc.cpp:535-540; an IPv6 address cannot be written: "
                             "the first `:` splits it, 291-303)").format(value=u.value, bad=", ".join(bad)),
                           _("write each rpc-server as IPV4-OR-NAME:PORT, e.g. 192.168.1.20:50052"), k, u.passed))
    seen: set[str] = set()
    dups = [e for e in eps if e in seen or seen.add(e)]  # type: ignore[func-returns-value]
    if dups:
        out.append(finding("rpc-endpoint-repeated", Severity.WARNING, u.line, u.spelling,
                           _("`--rpc` names {dups} twice: llama-server registers that server's devices once (the "
                             "second is the same backend registry, ggml-rpc.cpp ggml_backend_rpc_add_server), so "
                             "the model is split over fewer devices than the list suggests").format(dups=", ".join(dups)),
                           _("name each rpc-server once"), k, u.passed))
    out.append(finding("rpc-same-build", Severity.INFO, u.line, u.spelling,
                       _("every rpc-server must run the same llama.cpp build as this llama-server: it refuses a "
                         "server of another RPC protocol major version or a newer minor (\"RPC server version "
                         "mismatch\", ggml-rpc.cpp:355-361; build 11434 speaks 7.0.0) and aborts (\"RPC handshake "
                         "failed\")"), None, k, u.passed))
    cache = r.last("--cache-ram")
    if cache is None or (cache.value or "").strip() != "0":
        out.append(finding("rpc-cache-ram", Severity.INFO, u.line, u.spelling,
                           _("with --rpc, the prompt cache (--cache-ram, 8192 MiB by default) reads a replaced slot's "
                             "KV cells back from every rpc-server over the network; --cache-ram 0 keeps that traffic "
                             "off the link (docs/plan.md, \"RPC deployments\")"), None, k, u.passed))
    return out


def rpc_server_findings(text: str) -> list[Finding]:
    """rpc-open, rpc-host-invalid, rpc-unknown-arg, rpc-bad-value, rpc-cache: every
    ``ggml-rpc-server`` command in a script or unit (``ExecStart=`` too), read line by line with
    its ``\\`` continuations."""
    out: list[Finding] = []
    for line, words in _commands(text):
        out += _server_findings(line, words)
    return out


def _commands(text: str) -> list[tuple[int, list[str]]]:
    """(line, the rpc-server's arguments) for every rpc-server a shell line or unit starts."""
    found: list[tuple[int, list[str]]] = []
    lines = text.splitlines()
    unit = re.search(r"^\[(Service|Unit)\]", text, re.M) is not None  # only ExecStart= runs a program
    i = 0
    while i < len(lines):
        start = i
        parts = [lines[i]]  # joined once: a growing string re-copied per line would be quadratic
        while parts[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            parts[-1] = parts[-1].rstrip()[:-1]
            i += 1
            parts.append(lines[i])
        logical = " ".join(parts)
        i += 1
        if unit and not re.match(r"^\s*ExecStart(Pre|Post)?=", logical):
            continue
        body = re.sub(r"^\s*ExecStart(Pre|Post)?=[-@:+!]*", "", logical)
        if "rpc-server" not in body or body.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(body, comments=True)
        except ValueError:
            continue
        for j, w in enumerate(words):
            if _RPC_PROGRAM.match(w.rsplit("/", 1)[-1]):
                args = []
                for a in words[j + 1:]:
                    if a in _SHELL_END or a.startswith((">", "2>", "<")):
                        break
                    args.append(a)
                found.append((start + 1, args))
    return found


def _server_findings(line: int, args: list[str]) -> list[Finding]:
    out: list[Finding] = []
    host = "127.0.0.1"
    i = 0
    while i < len(args):
        a = args[i]
        if a not in _RPC_OPTIONS:
            out.append(Finding("rpc-unknown-arg", Severity.ERROR, line, a,
                               _("rpc-server does not know `{arg}`: it prints its usage and exits with code 0 "
                                 "(tools/rpc/rpc-server.cpp:161-165), so a unit with Restart=on-failure stays down "
                                 "without an error").format(arg=a),
                               _("its options are -H/--host, -p/--port, -t/--threads, -d/--device, -c/--cache")))
            i += 1
            continue
        val = args[i + 1] if _RPC_OPTIONS[a] and i + 1 < len(args) else None
        if a in ("-H", "--host") and val is not None:
            host = val
        elif a in ("-p", "--port", "-t", "--threads") and val is not None:
            out += _number(line, a, val)
        elif a in ("-c", "--cache"):
            out.append(Finding("rpc-cache", Severity.INFO, line, a,
                               _("`{flag}` caches every weight tensor above 10 MiB by its hash in $LLAMA_CACHE/rpc "
                                 "(~/.cache/llama.cpp/rpc) and never deletes one: a model reloads faster, and the "
                                 "directory grows by each model's size (ggml-rpc.cpp:1456-1520)").format(flag=a), None))
        i += 2 if _RPC_OPTIONS[a] else 1
    return out + _host(line, host)


def _number(line: int, flag: str, val: str) -> list[Finding]:
    ok = val.isdigit() and (0 < int(val) <= 65535 if flag in ("-p", "--port") else int(val) > 0)
    if ok:
        return []
    return [Finding("rpc-bad-value", Severity.ERROR, line, flag,
                    _("rpc-server `{flag} {val}`: it does not start (std::stoi of a word that is not a number "
                      "aborts; a port outside 1-65535 or threads below 1 print \"Invalid parameters\", "
                      "tools/rpc/rpc-server.cpp:124-155, 218-222)").format(flag=flag, val=val), None)]


def _host(line: int, host: str) -> list[Finding]:
    try:
        socket.inet_aton(host)
        ipv4 = host.count(".") == 3
    except OSError:
        ipv4 = False
    if not ipv4:
        return [Finding("rpc-host-invalid", Severity.ERROR, line, "--host",
                        _("rpc-server `--host {host}`: it binds with inet_addr, which takes an IPv4 address only "
                          "(\"Invalid host address\", ggml/src/ggml-rpc/transport.cpp:724-727): it does not "
                          "listen, and exits with code 0").format(host=host),
                        _("give the address: 127.0.0.1 on one machine, this host's LAN address for others"))]
    if host == "127.0.0.1":
        return []
    why = _("every interface of the host") if host == "0.0.0.0" else host
    return [Finding("rpc-open", Severity.WARNING, line, "--host",
                    _("rpc-server listens on {where} and has no authentication: anyone who reaches the port can "
                      "allocate memory, write and read tensors and run graphs on the device (rpc-server prints "
                      "\"Never expose the RPC server to an open network!\", tools/rpc/rpc-server.cpp:224-232)").format(
                        where=why),
                    _("bind to the one LAN address llama-server connects to and let only that host reach the port "
                      "(firewall); never 0.0.0.0 on a network you do not control"))]
