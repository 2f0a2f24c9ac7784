"""One model of what runs: explain prices the command llama-server really receives with the
planner's figures, on the field reports' scripts as their users had them (copied verbatim out of
tests/fixtures/seeds/, as pasted and with the `#` of their comment lines restored)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from llamarig.app.check import check, what_runs
from llamarig.app.explain import explain
from llamarig.cli.main import main
from llamarig.testing.plans import gpus_of, plan_of

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
RUN105K = SEEDS / "000_run105k.sh"  # the RTX 3090 field report's script of its log, `#` restored
MODEL = "qwen3.6-27b:iq4_nl"


def _report(path: Path):  # type: ignore[no-untyped-def]
    return check(path.read_text(encoding="utf-8"), origin=path, base_dir=path.parent)


def test_the_pair_of_the_3090_script() -> None:
    pair = what_runs(_report(RUN105K), 0)
    # the comment at line 10 ends the command: -c reaches the server, -np and the KV types do not
    assert pair.cut_line == 10
    assert "--ctx-size" in pair.received and "--parallel" not in pair.received
    assert "--cache-type-k" not in pair.received and "--cache-type-k" in pair.meant
    assert pair.meant[: len(pair.received)] == pair.received


def test_explain_kv_equals_plan_of_what_runs() -> None:
    """The RTX 3090 field report: explain priced q2_K/q2_K (1.05 GiB) on flags the server never
    received; what runs is f16 with 4 unified slots, as plan prices it (6.42 GiB)."""
    rep = explain(_report(RUN105K), model=MODEL, base_dir=SEEDS, gpus=gpus_of(["rtx3090"]))
    cmd = rep.commands[0]
    assert cmd.priced is not None and cmd.priced.runs.plan is not None
    args = list(cmd.priced.pair.received[1:])
    plan = plan_of(MODEL, command=["llama-server", *[a for a in args if "mmproj" not in a]],
                   gpus=["rtx3090"], mmproj="f16")
    kv = sum(d.get("kv") for d in plan.devices) + plan.host.get("kv")
    assert cmd.priced.runs.kv_bytes == kv
    assert plan.cache_type_k == "f16" and plan.n_parallel == 4 and kv == 16 * 105216 * 4096  # 6.42 GiB
    rows = {r.flag: r for r in cmd.rows}
    assert rows["--ctx-size"].effect.startswith("KV 6.42 GiB with f16/f16")
    # the cut-off KV type is priced nowhere: its row says it never reaches the server
    assert not rows["--cache-type-k"].reaches_server and "never reaches llama-server" in rows["--cache-type-k"].effect
    assert "KV" not in rows["--cache-type-k"].effect.split("never reaches llama-server")[1]
    # what the meant command would change, and that llama-server would refuse it
    text = "\n".join(cmd.summary)
    assert "what runs (line 5)" in text and "KV 6.42 GiB" in text
    assert "4 (unified KV) -> 1" in text and "f16 / f16 -> q2_K / q2_K" in text
    assert "would not start" in text and "q2_K" in text


def test_explain_json_is_the_typed_result(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    main(["explain", "--bundled", "--json", "--model", MODEL, str(RUN105K)])
    d = json.loads(capsys.readouterr().out)
    inv = d["invocations"][0]
    assert inv["runs"]["kv_bytes"] == 16 * 105216 * 4096 and inv["runs"]["n_parallel"] == 4
    assert "q2_K" in inv["meant"]["error"]
    assert {"what", "runs", "meant"} <= set(inv["changes"][0])


@pytest.mark.parametrize("order", ["options first", "file first"])
def test_explain_file_then_options(order: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`explain FILE --model X` read the options as a command ('no llama-server command found')."""
    argv = (["explain", "--bundled", "--json", "--model", MODEL, str(RUN105K)] if order == "options first"
            else ["explain", str(RUN105K), "--bundled", "--model", MODEL, "--json"])
    capsys.readouterr()
    with contextlib.suppress(SystemExit):
        main(argv)
    d = json.loads(capsys.readouterr().out)
    assert d["invocations"][0]["runs"]["kv_bytes"] == 16 * 105216 * 4096


def test_check_memory_prices_what_runs() -> None:
    """check --gpu priced the meant command (q2_K: no plan at all); it prices what runs, and says
    what the cut-off words would change."""
    rep = check(RUN105K.read_text(encoding="utf-8"), origin=RUN105K, base_dir=SEEDS, gpus=gpus_of(["rtx3090"]), model=MODEL)
    mem = next(f for f in rep.findings if f.rule == "memory")
    assert mem.message.startswith("memory plan (llamarig plan): fits. CUDA0 (NVIDIA GeForce RTX 3090): 22.67 GiB")
    assert "as meant (the words cut off at line 10 put back): no plan: --cache-type-k q2_K" in mem.message


def test_explain_the_script_as_pasted() -> None:
    """As pasted out of the chat (tests/fixtures/seeds/000_run105k_pasted.sh: the comment lines
    lost their `#`, most lines their `\\`), bash runs `./llama3-server` with no argument at all:
    llama-server then loads no model, so nothing is priced as if it did; the meant command (every
    flag, read as a person reads it) would not start (q2_K)."""
    path = SEEDS / "000_run105k_pasted.sh"
    rep = explain(_report(path), model=MODEL, base_dir=SEEDS, gpus=gpus_of(["rtx3090"]))
    cmd = rep.commands[0]
    assert cmd.priced is not None
    assert cmd.priced.pair.received == ("./llama3-server",)
    assert cmd.priced.runs.plan is None and "loads none" in str(cmd.priced.runs.error)
    assert "--parallel" in cmd.priced.pair.meant and "--reasoning-budget" in cmd.priced.pair.meant
    assert cmd.priced.meant is not None and "q2_K" in str(cmd.priced.meant.error)
    text = "\n".join(cmd.summary)
    assert "not priced: llama-server receives no model (-m)" in text and "would not start" in text


def test_explain_two_files_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["explain", str(RUN105K), str(RUN105K)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give one file" in err
