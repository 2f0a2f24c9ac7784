"""`explain` and `check` accept a catalogue id for the model, as `plan` does."""

from __future__ import annotations

import json
import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llamarig", *args], capture_output=True, text=True,
                          timeout=120)


def test_explain_with_catalogue_model_shows_kv_effect() -> None:
    r = run("explain", "--bundled", "--model", "qwen3.6-27b:iq4_nl", "--", "llama-server", "-c", "105000",
            "-np", "1", "-ctk", "q4_0", "-ctv", "q4_0")
    assert r.returncode == 0, r.stderr
    # 16 attention layers x 18 432 B/token x 105 216 cells = 1.81 GiB
    assert "KV 1.81 GiB" in r.stdout and "q4_0/q4_0" in r.stdout


def test_unknown_model_is_one_line_exit_2() -> None:
    r = run("explain", "--bundled", "--model", "no-such-model", "--", "llama-server", "-c", "4096")
    assert r.returncode == 2
    # the same one line as `llamarig plan no-such-model`
    assert r.stderr.count("\n") == 1 and "no such file" in r.stderr


def test_check_json_with_catalogue_model() -> None:
    r = run("check", "--bundled", "--json", "--model", "qwen3.6-27b:iq4_nl", "-")
    # stdin is empty here: a clean "nothing to check" or findings, never a traceback
    assert "Traceback" not in r.stderr
    if r.returncode in (0, 1):
        json.loads(r.stdout)
