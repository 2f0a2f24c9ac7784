"""`Command.parse` runs once per input: each command of the field reports' scripts
(tests/fixtures/seeds/) is parsed once per command run, by whichever use case reads it, and
every later step (check's findings, explain, the plan, render, launch, logs --script) reads that
Command, not the words again.

A command cut off by a comment line is two inputs to the server's reading: what llama-server
receives and what its author meant (report 000); each is parsed once. `check --fix` parses the
repaired text's command once more: it is a new input. Counted around the one definition,
``llamarig.flags.argv.Command.parse``, with each command run in-process through the CLI.
"""

from __future__ import annotations

import contextlib
import io
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from llamarig.cli.main import main
from llamarig.flags.argv import Command

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
R004 = str(SEEDS / "004_execstart.sh")  # one command, nothing cut off
R000 = str(SEEDS / "000_run105k.sh")  # one command, cut off by its comment lines: received != meant
LOG000 = str(SEEDS / "000_3d5d35932c1dd60e.txt")
ON_5090 = ["--model", "qwen3.8-27b:ud-q4_k_xl", "--gpu", "rtx5090"]
ON_3090 = ["--model", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090"]


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, ...]]]:
    """The argv of every ``Command.parse`` call while the test runs."""
    seen: list[tuple[str, ...]] = []
    real = Command.parse.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Command], argv: Sequence[str], schema: object = None, *, program: bool | None = None
                ) -> Command:
        seen.append(tuple(argv))
        return real(cls, argv, schema, program=program)  # type: ignore[no-any-return]

    monkeypatch.setattr(Command, "parse", classmethod(counted))
    yield seen


def _run(argv: list[str]) -> int:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            main(argv)
        except SystemExit as e:
            return int(e.code or 0)
    return 0


CASES = [
    pytest.param(["check", R004], 1, id="check-004"),
    pytest.param(["check", *ON_5090, "--need-ctx", "300000", R004], 1, id="check-004-model-gpu"),
    pytest.param(["check", R000], 2, id="check-000"),
    pytest.param(["check", *ON_3090, R000], 2, id="check-000-model-gpu"),
    pytest.param(["check", "--fix", R000], 3, id="fix-000"),  # + the repaired command
    pytest.param(["explain", R004], 1, id="explain-004"),
    pytest.param(["explain", *ON_5090, R004], 1, id="explain-004-model-gpu"),
    pytest.param(["explain", *ON_3090, R000], 2, id="explain-000-model-gpu"),
    pytest.param(["plan", "qwen3.8-27b:ud-q4_k_xl", "--gpu", "rtx5090", "--from-script", R004], 1, id="plan-from-script"),
    pytest.param(["plan", "--gpu", "rtx3090", "qwen3.6-27b:iq4_nl", "-c", "105000", "-np", "4"], 1, id="plan"),
    pytest.param(["render", "--from-script", R004], 1, id="render-from-script"),
    pytest.param(["render", "--model-path", "/m/q.gguf", "qwen3.6-27b:iq4_nl", "-c", "8192"], 1, id="render"),
    pytest.param(["logs", LOG000, "--script", R000, *ON_3090], 2, id="logs-script-000"),
]


@pytest.mark.parametrize(("argv", "n"), CASES)
def test_each_command_is_parsed_once(argv: list[str], n: int, parses: list[tuple[str, ...]],
                                     server_bin: Path) -> None:
    rc = _run(argv)
    assert rc in (0, 1), rc  # a verdict (1: findings), not bad input
    assert len(parses) == n, parses
    assert len(set(parses)) == len(parses), "an argv parsed twice"


def test_launch_parses_its_command_once(parses: list[tuple[str, ...]], server_bin: Path,
                                        synth_model: object) -> None:
    """launch reads the command once from resolving it to the start (a taken port stops it
    there: no server is started)."""
    model = synth_model("llama")  # type: ignore[operator]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        parses.clear()
        rc = _run(["launch", "--force", "--port", str(port), str(model), "-c", "256"])
    assert rc == 3  # the port is in use: ServerError, before anything starts
    assert len(parses) == 1, parses
