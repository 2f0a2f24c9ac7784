"""Bash variables and arrays defined earlier in a script, expanded as bash does before
llama-server gets its argv; what is unknown here is kept as written, said in a note, and not
judged as an argument. Where bash is installed, real bash is the reference."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from llamarig.flags.readers import parse_text
from llamarig.flags.rules import PARSE_RULES, Context, lint
from llamarig.flags.schema import load_bundled

SCHEMA = load_bundled()

SCRIPT = """\
#!/bin/bash
MODEL=/models/q.gguf
args=(
  -ctk q4_0   # a comment inside the array
  -ctv q4_0
  -fa on
)
ARGS="-c 8192 -ngl 99"
PORT="${PORT:-8080}"
args+=( --host "127.0.0.1" )
EMPTY=""
llama-server -m "$MODEL" -v "${args[@]}" $ARGS $EMPTY --port "$PORT" --alias "${NAME:-my model}"
"""

EXPECTED = ["-m", "/models/q.gguf", "-v", "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on", "--host", "127.0.0.1",
            "-c", "8192", "-ngl", "99", "--port", "8080", "--alias", "my model"]


def findings(text: str):
    _, fs = lint(parse_text(text), SCHEMA, Context(physical_cores=8))
    return fs


def test_arrays_and_variables_are_expanded() -> None:
    inv = parse_text(SCRIPT).invocations[0]
    assert [w.text for w in inv.args] == EXPECTED
    # an element keeps the line it is written on
    assert [(w.text, w.line) for w in inv.args[3:9]] == [("-ctk", 4), ("q4_0", 4), ("-ctv", 5), ("q4_0", 5),
                                                         ("-fa", 6), ("on", 6)]
    # `-v "${args[@]}"` is -v followed by the array's words, not "-v takes no value"
    assert not [f for f in findings(SCRIPT) if f.rule in PARSE_RULES]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_expansion_agrees_with_bash(tmp_path) -> None:
    stub = tmp_path / "llama-server"
    stub.write_text("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > \"$OUT\"\n")
    stub.chmod(0o755)
    out = tmp_path / "argv.txt"
    script = SCRIPT.replace("llama-server ", f"{stub} ")
    subprocess.run(["bash", "-c", script], env={"OUT": str(out), "PATH": "/usr/bin:/bin"},
                   capture_output=True, timeout=20, check=True)
    assert out.read_text().splitlines() == EXPECTED


def test_unknown_variables_are_noted_not_judged() -> None:
    text = 'llama-server -m "$1" --jinja $EXTRA "$@"\n'
    p = parse_text(text)
    inv = p.invocations[0]
    assert [w.text for w in inv.args] == ["-m", "$1", "--jinja", "$EXTRA", "$@"]
    assert [w.opaque for w in inv.args] == [False, True, False, True, True]
    notes = [n for n in p.notes if n.kind == "unknown-variable"]
    assert {n.message.split("`")[1] for n in notes} == {"$1", "$EXTRA", "$@"}
    # before: `--jinja $EXTRA` was "--jinja takes no value" and `"$@"` a stray argument
    assert not [f for f in findings(text) if f.rule in PARSE_RULES]


def test_unknown_in_an_array_is_reported_where_it_is_used() -> None:
    text = 'opts=(--api-key "$API_KEY" --port "${PORT:-3191}")\nllama-server "${opts[@]}" "$@"\n'
    p = parse_text(text)
    assert [w.text for w in p.invocations[0].args] == ["--api-key", "$API_KEY", "--port", "3191", "$@"]
    msgs = [n.message for n in p.notes if n.kind == "unknown-variable"]
    assert any("$API_KEY" in m for m in msgs) and any("default `3191`" in m for m in msgs)


def test_program_from_a_variable_and_command_substitution() -> None:
    text = ('BIN=./build/bin/llama-server\nT=$(nproc)\n$BIN -m a.gguf -t $T\n'
            '"$LLAMA_BIN" -m b.gguf --port 8080\n')
    p = parse_text(text)
    assert [inv.argv for inv in p.invocations] == [
        ["./build/bin/llama-server", "-m", "a.gguf", "-t", "$T"], ["$LLAMA_BIN", "-m", "b.gguf", "--port", "8080"]]
    assert any("command substitution" in n.message for n in p.notes)


def test_quoted_empty_variable_is_an_empty_argument() -> None:
    text = 'X=""\nllama-server -m a.gguf "$X"\n'
    assert [w.text for w in parse_text(text).invocations[0].args] == ["-m", "a.gguf", ""]
    assert any(f.rule == "stray-argument" for f in findings(text))


def test_fix_keeps_unknown_variables_as_written() -> None:
    from llamarig.flags.fix import fix_text

    text = 'llama-server -m "$1" --metrics on "$@"\n'
    p = parse_text(text)
    readings, fs = lint(p, SCHEMA, Context(physical_cores=8))
    fixed = fix_text(p, readings, fs, SCHEMA)
    assert '  "$@"\n' in fixed and '-m "$1"' in fixed and "  --metrics \\\n" in fixed


def test_shell_variables_are_not_the_servers_environment() -> None:
    # arrays cannot be exported, and a variable the script expands itself is a shell variable;
    # an assignment the script never uses (or exports) stays in the environment as before
    text = ('LLAMA_SCRIPT=./llama-server\nOPTS=(--port 8080)\nLOG=/tmp/l.log\nLLAMA_ARG_CTX_SIZE=8192\n'
            '"$LLAMA_SCRIPT" "${OPTS[@]}" -m a.gguf >> "$LOG" 2>&1 &\n')
    inv = parse_text(text).invocations[0]
    assert [n for n, _, _ in inv.env] == ["LLAMA_ARG_CTX_SIZE"]


def test_exported_variables_are_judged_once_per_script() -> None:
    text = "export LLAMA_SET_ROWS=0\nexport CUDA_VISIBLE_DEVICES=0\n" + "".join(
        f"export CUDA_VISIBLE_DEVICES={i % 2}\nllama-server -m a.gguf --port {8000 + i}\n" for i in range(200))
    p = parse_text(text)
    assert all(len(inv.env) == 2 for inv in p.invocations)  # reassigned, not accumulated
    dead = [f for f in findings(text) if f.rule == "dead-env-var"]
    assert len(dead) == 1 and dead[0].line == 1
