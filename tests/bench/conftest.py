"""Fixtures for the bench/logs tests: one real llama-server with 2 slots and --metrics, shared by
the module that needs it (tiny synthetic llama, -c 2048 -> 1024 tokens per slot)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from llamarig.bench.report import schema
from llamarig.testing.server import RunningServer, start_server


@pytest.fixture(scope="module")
def np2_server(server_bin: Path, synth_model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    model = synth_model("llama")
    srv = start_server(server_bin, model, ["-c", "2048", "-np", "2", "--metrics"],
                       log_dir=tmp_path_factory.mktemp("np2"))
    try:
        yield srv
    finally:
        srv.stop()


def validate(doc: dict) -> None:
    """The shipped JSON Schema, plus what a schema cannot say: every figure's n is the number of
    its samples, and its spread is the spread of those samples."""
    jsonschema.validate(doc, schema(), cls=jsonschema.Draft202012Validator)
    for f in doc["figures"]:
        assert f["n"] == len(f["samples"]), f
        if f["samples"]:
            assert f["spread"]["min"] == min(f["samples"]) and f["spread"]["max"] == max(f["samples"]), f
        else:
            assert f["value"] is None and f["spread"] == {}, f


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium_console(html_path: Path, png: Path) -> tuple[list[str], int]:
    """Open ``html_path`` in headless Chromium, write a screenshot; return (console lines, exit)."""
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--screenshot={png}", "--window-size=1200,1600", html_path.resolve().as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ":CONSOLE" in ln]
    return lines, proc.returncode


@pytest.fixture
def validate_doc():
    """``validate_doc(doc)`` validates a bench/logs document against the shipped JSON Schema."""
    return validate


@pytest.fixture
def open_in_chromium():
    """``open_in_chromium(html, png)`` -> (console lines, exit code); skips without Chromium."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    return chromium_console
