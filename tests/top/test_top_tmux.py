"""The interactive view in a real terminal: ``llamarig top`` in tmux (80 and 120 columns, and
Chinese at 80), read back with ``capture-pane``; keys change the view and ``q`` quits. Skipped
without tmux (scripts/test installs it where it can)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len
from tests.top.helpers import decoding_slot, wait_for

pytestmark = pytest.mark.server

TMUX = shutil.which("tmux")


class Tmux:
    """One private tmux server (its own socket and config) holding one pane."""

    def __init__(self, tmp: Path, cols: int, rows: int) -> None:
        assert TMUX is not None
        self.sock = str(tmp / "tmux.sock")
        self.conf = tmp / "tmux.conf"
        # the pane (and the server) stay after the command ends, for a last capture-pane
        self.conf.write_text("set -g remain-on-exit on\nset -g status off\n")
        self.cols, self.rows = cols, rows
        self.pane_pid: int | None = None
        self.after = tmp / "after.txt"

    def tmux(self, *args: str) -> str:
        assert TMUX is not None
        r = subprocess.run([TMUX, "-u", "-S", self.sock, "-f", str(self.conf), *args], capture_output=True, text=True,
                           timeout=30, env={**os.environ, "LANG": "C.UTF-8", "TERM": "xterm-256color"})
        assert r.returncode == 0, r.stderr
        return r.stdout

    def start(self, command: str) -> None:
        """Run ``command`` in the pane under bash, which then writes its exit status and the
        terminal's modes to a file: the event the tests wait for. (tmux's own
        ``pane_dead_status`` is not reliable here: tmux 3.3a sometimes leaves the exited process
        unreaped.) bash, not sh: bash goes on after a child that ended on Ctrl-C by itself."""
        self.after.unlink(missing_ok=True)
        wrapped = f"bash -c '{command}; echo exit=$? > {self.after}.tmp; stty -a >> {self.after}.tmp; mv {self.after}.tmp {self.after}'"
        self.tmux("new-session", "-d", "-s", "top", "-x", str(self.cols), "-y", str(self.rows), wrapped)
        self.pane_pid = int(self.tmux("display-message", "-p", "-t", "top", "#{pane_pid}").strip())

    def ended(self) -> str:
        """What the shell wrote after the command ended ("exit=N" and ``stty -a``), else ""."""
        return self.after.read_text() if self.after.exists() else ""

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top")

    def close(self) -> None:
        if self.pane_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pane_pid, signal.SIGKILL)
        assert TMUX is not None
        subprocess.run([TMUX, "-S", self.sock, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux_pane(tmp_path: Path) -> Any:
    if TMUX is None:
        pytest.skip("tmux not installed (Debian: apt-get install -y tmux)")
    made: list[Tmux] = []

    def make(cols: int, rows: int = 40) -> Tmux:
        t = Tmux(tmp_path, cols, rows)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


@pytest.mark.parametrize(("cols", "lang"), [(80, "en"), (120, "en"), (80, "zh")])
def test_interactive_view_in_tmux(np2: Any, long_request: Any, tmux_pane: Any, cols: int, lang: str) -> None:
    long_request(np2.url)
    wait_for("a slot decoding", lambda: decoding_slot(np2.url) is not None)
    t = tmux_pane(cols)
    t.start(f"{sys.executable} -m llamarig top --url {np2.url} --lang {lang}")
    busy, idle, sort = ("busy", "idle", "sort: id") if lang == "en" else ("忙", "空闲", "排序：id")

    def slots_shown() -> str:
        s = t.screen()
        return s if busy in s and idle in s and sort in s and "tok/s" in s else ""

    screen = wait_for("the slots on screen", slots_shown, 60)
    lines = screen.splitlines()
    assert all(cell_len(ln) <= cols for ln in lines), [ln for ln in lines if cell_len(ln) > cols]
    head = lines[0]
    assert ("llama-server up" if lang == "en" else "llama-server 已运行") in head and "1/2" in head
    rows = [ln for ln in lines if ln.strip().startswith(("0 ", "1 "))]
    assert len(rows) == 2, screen
    # keys: s sorts (the footer says by what), v switches the view, q quits
    t.tmux("send-keys", "-t", "top", "s")
    wait_for("sorted by busy", lambda: ("sort: busy" if lang == "en" else "排序：busy") in t.screen(), 30)
    t.tmux("send-keys", "-t", "top", "v")
    wait_for("the slots view", lambda: ("view: slots" if lang == "en" else "视图：slots") in t.screen(), 30)
    t.tmux("send-keys", "-t", "top", "q")
    after = wait_for("top exited", t.ended, 30)
    assert after.startswith("exit=0"), (after, t.screen())
    modes = after.split()  # the terminal is back as it was: canonical input, echo
    assert "icanon" in modes and "echo" in modes and "-icanon" not in modes and "-echo" not in modes

def test_ctrl_c_restores_the_terminal(np2: Any, tmux_pane: Any) -> None:
    """Ctrl-C ends top with 130 and the terminal's mode is back (canonical input, echo), as after q."""
    t = tmux_pane(80, 30)
    t.start(f"{sys.executable} -m llamarig top --url {np2.url}")
    wait_for("the slots on screen", lambda: "q quit" in t.screen() and "slot" in t.screen(), 60)
    t.tmux("send-keys", "-t", "top", "C-c")
    after = wait_for("top ended", t.ended, 30)
    assert after.startswith("exit=130"), after
    modes = after.split()
    assert "icanon" in modes and "echo" in modes and "-icanon" not in modes and "-echo" not in modes


def test_server_gone_and_back_on_screen(llama_server: Any, synth_model: Any, tmux_pane: Any) -> None:
    """The live view says when the server stops answering, and when it is back that it restarted."""
    from tests.top.helpers import SERVER_ARGS

    from llamarig.testing.server import free_port

    port = free_port()
    model = synth_model("llama", n_ctx_train=131072)
    srv = llama_server(model, *SERVER_ARGS, port=port)
    t = tmux_pane(120, 40)
    t.start(f"{sys.executable} -m llamarig top --url {srv.url} --interval 0.5")
    wait_for("up", lambda: t.screen().startswith("llama-server up"), 60)
    srv.stop()
    def starting(prefix: str) -> str:
        screen = t.screen()
        return screen if screen.startswith(prefix) else ""

    down = wait_for("down on screen", lambda: starting("llama-server down for"), 60)
    assert "server: not answering for" in down and "connection refused" in down
    llama_server(model, *SERVER_ARGS, port=port)
    back = wait_for("back on screen", lambda: starting("llama-server up"), 60)
    assert "server: restarted" in back and "restarts 1" in back
    assert ": down: " in back and ": back: " in back and ": restart: " in back  # the timeline
    t.tmux("send-keys", "-t", "top", "q")
    assert wait_for("top exited", t.ended, 30).startswith("exit=0")
