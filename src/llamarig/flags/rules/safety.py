"""Safety: a server that listens on the network without an API key, or with tools enabled."""

from __future__ import annotations

from llamarig.flags.findings import Finding, Severity, finding
from llamarig.flags.knowledge import LOCAL_HOSTS
from llamarig.flags.rules.context import Subject
from llamarig.i18n import _


def public_listen(s: Subject) -> list[Finding]:
    """public-no-api-key, public-tools."""
    inv, r, k = s.inv, s.reading, s.k
    out = []
    h = r.last("--host")
    hosts = [x.strip() for x in (h.value or "").split(",")] if h else []
    public = [x for x in hosts if x and x not in LOCAL_HOSTS and not x.endswith(".sock")]
    has_key = r.has("--api-key") or r.has("--api-key-file") or any(
        n in ("LLAMA_API_KEY", "LLAMA_ARG_API_KEY_FILE") for n, _, _ in inv.env)
    if public and not has_key:
        assert h is not None
        out.append(finding("public-no-api-key", Severity.WARNING, h.line, h.spelling,
                           _("`--host {host}` listens on the network with no `--api-key`: anyone who can reach "
                             "the port can use the model, read /slots and, with --tools, run commands "
                             "(tools/server/server-http.cpp checks keys only when set)").format(host=h.value),
                           _("add `--api-key-file FILE` (or `--api-key KEY`), or bind to 127.0.0.1"), k, h.passed))
    tools = r.last("--tools")
    if tools and public:
        out.append(finding("public-tools", Severity.ERROR if not has_key else Severity.WARNING, tools.line, tools.spelling,
                           _("`--tools` lets the model run shell commands and edit files, and the server "
                             "is reachable from the network"), _("bind to 127.0.0.1 or drop --tools"), k,
                           tools.passed))
    return out
