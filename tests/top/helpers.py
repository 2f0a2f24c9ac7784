"""Helpers of the ``llamarig top`` tests: the long request, event waits, stopping by pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from typing import Any

#: a streaming /completion that decodes until its client is stopped (n_predict far beyond what
#: the test needs; ignore_eos so it never ends early)
LONG_CLIENT = """
import json, sys, urllib.request
body = json.dumps({"prompt": "tell a long story", "n_predict": int(sys.argv[2]), "ignore_eos": True,
                   "stream": True}).encode()
req = urllib.request.Request(sys.argv[1] + "/completion", data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=3600) as r:
    for _ in r:
        pass
"""

#: slot context: -c 131072 -np 2 with a model trained for 131072 tokens -> 65536 per slot
SERVER_ARGS = ("-c", "131072", "-np", "2", "--metrics")


def get_json(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_for(what: str, probe: Callable[[], Any], limit_s: float = 120) -> Any:
    """Poll ``probe`` until it returns something truthy (an event), bounded by ``limit_s``."""
    deadline = time.monotonic() + limit_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, ValueError) as e:  # not up yet
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what}: not seen within {limit_s} s (last: {last!r})")


def decoding_slot(url: str) -> int | None:
    """The id of a slot that is decoding (busy, tokens generated), or None."""
    for s in get_json(url + "/slots"):
        nt = (s.get("next_token") or [{}])[0]
        if s.get("is_processing") and nt.get("n_decoded", 0) > 0:
            return int(s["id"])
    return None


def decoding_tasks(url: str) -> dict[int, int]:
    """slot id -> task id of every slot that is decoding now."""
    out = {}
    for s in get_json(url + "/slots"):
        nt = (s.get("next_token") or [{}])[0]
        if s.get("is_processing") and nt.get("n_decoded", 0) > 0:
            out[int(s["id"])] = int(s["id_task"])
    return out


def stop_pid(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
