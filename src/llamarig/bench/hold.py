"""``llamarig bench --hold``: hold tiers of a llamarig gateway (its cron jobs, say) while a bench
measures through it, and release them at the end (docs/gateway.md, "Cron that yields")."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from llamarig.errors import InputError
from llamarig.i18n import _

#: how long ``--hold`` holds at most (the bench releases it at its end; this bounds a bench that dies)
HOLD_S = 3600


def gateway_hold(url: str, action: str, tiers: tuple[str, ...], *, api_key: str | None = None) -> None:
    """POST /gateway/hold or /gateway/release on a llamarig gateway (``--hold``); InputError."""
    body = {"tiers": list(tiers), **({"seconds": HOLD_S} if action == "hold" else {})}
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    req = urllib.request.Request(url.rstrip("/") + f"/gateway/{action}", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
    except urllib.error.HTTPError as e:
        raise InputError(_("--hold: {url} answered HTTP {status} to /gateway/{action} (a llamarig gateway, with an "
                           "admin key where it has keys?)").format(url=url, status=e.code, action=action)) from None
    except (urllib.error.URLError, OSError) as e:
        raise InputError(_("--hold: cannot reach {url}: {error}").format(url=url, error=e)) from None
