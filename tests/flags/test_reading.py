"""The pair every view works from (llamarig.flags.reading): the commands the shell really runs
and the one command meant."""

from __future__ import annotations

from pathlib import Path

from llamarig.flags.reading import ScriptReading, read_script

FIX = Path(__file__).with_name("fixtures")


def test_cut_off_command_received_and_meant() -> None:
    text = "llama-server -m m.gguf -c 4096 \\\n# slots\n  -np 2 --metrics\n"
    r = read_script(text)
    assert isinstance(r, ScriptReading)
    (inv,) = r.received
    assert inv.argv == ["llama-server", "-m", "m.gguf", "-c", "4096"]
    assert [w.text for w in inv.orphans] == ["-np", "2", "--metrics"]
    assert r.meant_argv == ["llama-server", "-m", "m.gguf", "-c", "4096", "-np", "2", "--metrics"]
    assert r.meant is not None and r.meant.orphans == [] and r.meant.args[-1].line == 3
    assert r.why_not == () and r.ambiguous_lines == ()


def test_two_commands_no_single_meant() -> None:
    r = read_script("llama-server -m a.gguf --port 8080\nllama-server -m b.gguf --port 8081\n")
    assert r.meant is None and len(r.meant_each) == 2
    assert r.ambiguous_lines == (1, 2) and "2 llama-server commands" in r.why_not[0]


def test_fragment_alone_has_no_meant_command() -> None:
    r = read_script((FIX / "seed000_extras.sh").read_text(encoding="utf-8"))
    assert r.meant is None and r.meant_each == ()
    assert r.received[0].source == "fragment"
    assert r.ambiguous_lines and "no llama-server command" in " ".join(r.why_not)
