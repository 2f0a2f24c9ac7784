"""`logs --script` sets the log against the script's command and its plan: the RTX 3090 field
report's log and the script it ran with (copied verbatim out of the report: as pasted, and with
the `#` of its comment lines restored)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from llamarig.app.logs import logs_report
from llamarig.cli.main import main
from llamarig.testing.plans import gpus_of

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
LOG = SEEDS / "000_3d5d35932c1dd60e.txt"
SCRIPTS = {"restored": SEEDS / "000_run105k.sh", "as pasted": SEEDS / "000_run105k_pasted.sh"}
ON_3090 = {"model": "qwen3.6-27b:iq4_nl", "gpus": gpus_of(["rtx3090"])}


@pytest.mark.parametrize("which", sorted(SCRIPTS))
def test_logs_state_fits_result_and_the_free_memory_it_implies(which: str) -> None:
    doc = logs_report(LOG, SCRIPTS[which], **ON_3090).to_json()
    text = "\n".join(doc["findings"])
    # -c 105000 reaches the server: the cut-off at line 10 does not explain 95232
    assert "gives 105216 (-c 105000, 4 slots sharing one pool)" in text
    assert "neither the cut-off nor --fit explains 95232" in text and "common/fit.cpp:455" in text
    # fit's result with -c unset, as the plan predicts it, and the free memory the log implies
    assert "--fit's result: n_ctx_slot 95232 where the plan predicts 110592" in text
    assert "about 960.00 MiB less free memory than the plan assumes (15360 cells x 65536 B of KV)" in text
    assert "about 22.77 GiB for llama-server instead of 23.71 GiB" in text
    # what really ran, priced: f16 K/V with 4 slots (the q2_K and -np 1 never reached it)
    assert "what ran" in text and "K/V f16/f16" in text and "KV 5.81 GiB" in text
    assert "the plan of what ran predicts" in text
    # the cut-off flags are named, and the log's own evidence agrees (slot id 1: not -np 1)
    cut = 10 if which == "restored" else 11  # as pasted, a blank line sits before the first prose line
    assert f"--cache-type-k q2_K --cache-type-v q2_K --parallel 1 never reached the server (cut off at line {cut})" in text
    assert "--reasoning-budget 768" in text and f"never reached llama-server (cut off at line {cut})" in text
    assert "the log agrees: slot id 1 (line 419) needs at least 2 slots, more than the script's -np 1" in text
    if which == "as pasted":  # its command loads no model: read as the author's file ran it
        assert "loads no model" in text and "prose lines as the comments they were" in text


def test_the_decode_the_plan_predicts_is_near_the_logged_one() -> None:
    doc = logs_report(LOG, SCRIPTS["restored"], **ON_3090).to_json()
    line = next(f for f in doc["findings"] if f.startswith("decode 37.05 tok/s logged at depth 45168"))
    pred = float(line.split("predicts ")[1].split(" tok/s")[0])
    assert abs(pred - 37.05) / 37.05 < 0.15  # the CUDA decode model's own error band (docs/accuracy-speed.md)


def test_without_a_gpu_the_script_arithmetic_and_a_hint(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "logs.json"
    capsys.readouterr()
    with contextlib.suppress(SystemExit):
        main(["logs", str(LOG), "--script", str(SCRIPTS["restored"]), "--json", str(out), "-q"])
    findings = json.loads(out.read_text())["findings"]
    assert any("gives 105216" in f for f in findings)
    assert any(f.startswith("give --gpu") for f in findings)
    assert not any("--fit's result" in f for f in findings)


def test_cli_takes_model_and_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "logs.json"
    main(["logs", str(LOG), "--script", str(SCRIPTS["restored"]), "--model", "qwen3.6-27b:iq4_nl",
          "--gpu", "rtx3090", "--json", str(out), "-q"])
    assert any("--fit's result" in f for f in json.loads(out.read_text())["findings"])
