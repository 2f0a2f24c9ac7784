"""The page's static files (package data: ``llamarig/web/static``) and the rules every answer of
the page follows, whichever server sends it (``top --web``'s, llamarig.web.serve, or the
gateway's, llamarig.gateway.ui).

Safe by default: the page only reads; a client from another machine gets it only with the
admin key (HTTP Basic: any user name, the key as password, so the browser asks once and its
EventSource sends it too); a strict Content-Security-Policy (scripts and styles only from
llamarig itself: no inline script, no CDN), no framing, no referrer.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
from functools import cache
from importlib import resources

#: path under the page's prefix -> (file in static/, content type)
FILES = {
    "": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "app.css": ("app.css", "text/css; charset=utf-8"),
    "uPlot.iife.min.js": ("uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    "uPlot.min.css": ("uPlot.min.css", "text/css; charset=utf-8"),
    "uPlot.LICENSE": ("uPlot.LICENSE", "text/plain; charset=utf-8"),
    "icon.svg": ("icon.svg", "image/svg+xml"),
}

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

#: sent with every answer of the page
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}

SSE_HEADERS = {**HEADERS, "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-store",
               "X-Accel-Buffering": "no"}

#: the browser's question when a key is needed
CHALLENGE = {"WWW-Authenticate": 'Basic realm="llamarig", charset="UTF-8"'}


@cache
def asset(name: str) -> tuple[bytes, str] | None:
    """The file served at ``name`` under the page's prefix and its content type (None: none)."""
    f = FILES.get(name)
    if f is None:
        return None
    return resources.files("llamarig.web").joinpath("static").joinpath(f[0]).read_bytes(), f[1]


def is_loopback(host: str | None) -> bool:
    """``host`` (an address or ``localhost``) is this machine's loopback."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_given(authorization: str, key: str) -> bool:
    """The ``Authorization`` header carries ``key``: as HTTP Basic's password or a Bearer token."""
    scheme, _sep, value = authorization.strip().partition(" ")
    token = value.strip()
    if scheme.lower() == "basic":
        try:
            token = base64.b64decode(token, validate=True).decode("utf-8").partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return False
    elif scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.encode(), key.encode())


def allowed(peer: str | None, authorization: str, key: str | None) -> bool:
    """May this client read the page: from this machine always, from another with the admin key."""
    if is_loopback(peer):
        return True
    return key is not None and key_given(authorization, key)
