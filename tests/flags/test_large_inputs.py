"""Large inputs are read correctly, with output and work linear in the input: these inputs were
(or would be) quadratic before — duplicate-flag messages listing every line, an array grown by
`+=` one element at a time, a scalar grown by `+=`, many models sharing many macros, hundreds of
thousands of distinct unknown flags each searched for a close spelling. No wall-clock limits
here (benchmarks/bench_check.py --curve measures time and memory); the assertions are on the
result and on counts."""

from __future__ import annotations

from llamarig.flags import argv
from llamarig.flags.readers import parse_text
from llamarig.flags.rules import MAX_SIMILARITY_SEARCHES, Context, lint
from llamarig.flags.schema import load_bundled

SCHEMA = load_bundled()


def test_appending_to_arrays_and_strings() -> None:
    n = 20000
    text = ('ARGS="-m a.gguf"\n' + "".join(f'ARGS+=" --temp 0.{i % 10}"\n' for i in range(n))
            + "args=()\n" + "".join(f"args+=(--top-k {i})\n" for i in range(n))
            + 'llama-server $ARGS "${args[@]}"\n')
    inv = parse_text(text).invocations[0]
    assert len(inv.args) == 2 + 4 * n
    assert [w.text for w in inv.args[-2:]] == ["--top-k", str(n - 1)]
    assert inv.args[-1].line == 2 * n + 2  # the element's own line


def test_many_models_share_many_macros() -> None:
    n = 2000
    text = ("macros:\n" + "".join(f"  m{i}: \"--temp 0.{i % 10}\"\n" for i in range(n))
            + "models:\n" + "".join(f"  model{i}:\n    cmd: llama-server --port ${{PORT}} ${{m{i}}}\n"
                                    for i in range(n)))
    p = parse_text(text)
    assert len(p.invocations) == n
    inv = p.invocations[7]
    assert inv.label == "model7" and [w.text for w in inv.args] == ["--port", str(5800 + sorted(
        f"model{i}" for i in range(n)).index("model7")), "--temp", "0.7"]
    assert inv.args[2].line == 2 + 7  # the macro's line


def test_distinct_unknown_flags_get_bounded_similarity_searches(monkeypatch) -> None:
    calls = []
    real = argv.difflib.get_close_matches

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(argv.difflib, "get_close_matches", counting)
    n = MAX_SIMILARITY_SEARCHES + 500
    text = "llama-server -m a.gguf \\\n" + "".join(f"  --no-such-flag-{i} \\\n" for i in range(n)) + "  --port 1\n"
    _, fs = lint(parse_text(text), SCHEMA, Context(physical_cores=4))
    assert sum(f.rule == "unknown-flag" for f in fs) == n
    assert len(calls) <= MAX_SIMILARITY_SEARCHES


def test_a_four_mib_repeated_flag_script() -> None:
    # the size check accepts (4 MiB): one command, every --temp but the last a duplicate
    line = "  --temp 0.7 \\\n"
    n = (4 * 1024 * 1024 - 64) // len(line)
    text = "llama-server -m a.gguf \\\n" + line * n + "  --port 8080\n"
    parsed = parse_text(text)
    _, fs = lint(parsed, SCHEMA, Context(physical_cores=4))
    dup = [f for f in fs if f.rule == "duplicate-flag"]
    assert len(parsed.invocations[0].args) == 2 * n + 4
    assert len(dup) == 21 and max(len(f.message) for f in dup) < 400
    assert f"given {n} times" in dup[0].message


def test_function_calls_are_followed_within_a_budget(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A function called more times than the budget allows: the calls past it are not read (one
    note), so the work stays bounded by the input size whatever the script does."""
    from llamarig.flags.readers import bash

    monkeypatch.setattr(bash, "_MAX_FOLLOWED", 30)
    text = "start() {\n  llama-server -m \"$1\" -c 4096\n}\n" + "".join(f"start m{i}.gguf\n" for i in range(100))
    p = parse_text(text)
    assert len(p.invocations) == 10  # 3 commands per call: `{`, the server, `}`
    assert [n.kind for n in p.notes if n.kind == "not-followed"] == ["not-followed"]
    assert p.invocations[-1].argv == ["llama-server", "-m", "m9.gguf", "-c", "4096"]


def test_a_four_mib_continued_rpc_server_command() -> None:
    """One rpc-server command continued over 4 MiB of lines: read as one command with every
    argument (each line is joined once; the growing command was re-copied per line before,
    7 minutes for this input)."""
    from llamarig.flags.rules.rpc import rpc_server_findings

    line = "  -H 127.0.0.1 \\\n"
    n = (4 * 1024 * 1024 - 64) // len(line)
    fs = rpc_server_findings("rpc-server -p 50052 \\\n" + line * n + "  -c\n")
    assert not [f for f in fs if f.rule in ("rpc-open", "rpc-unknown-arg")], fs[:3]
