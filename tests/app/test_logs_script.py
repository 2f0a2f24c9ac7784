"""`logs --script` sets the log against the script's command and its plan: the RTX 3090 field
report's log and the script it ran with (copied verbatim out of the report: as pasted, and with
the `#` of its comment lines restored)."""

from __future__ import annotations

import contextlib
import json
import re
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
    # 95232 is not what -c 105000 gives, and --fit keeps a given -c: this run did not get -c 105000
    assert "not the 105216 that" in text and "gives (-c 105000, 4 slots sharing one pool)" in text
    assert "common/fit.cpp:455), so the run that wrote this log did not get -c 105000" in text
    # fit's result with -c unset, as the plan predicts it, and the free memory the log implies
    assert "95232 is --fit's result with -c unset" in text and "the plan predicts 110592" in text
    assert "about 960.00 MiB less free memory than the plan assumes" in text and "(15360 cells x 65536 B of KV)" in text
    assert "about 22.77 GiB was left for llama-server instead of 23.71 GiB" in text
    # what really ran, priced at the log's context: f16 K/V with 4 slots (the q2_K and -np 1 never reached it)
    assert "K/V f16/f16, 4 slots sharing one pool of 95232 cells" in text and "KV 5.81 GiB" in text
    assert "-c 105000" not in next(f for f in doc["findings"] if f.startswith("what ran"))
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
    # the script's -m is not on this machine: no plan, so no slot arithmetic of its own; the flags
    # that never reached the server are still named, and the log's own context stands
    assert not any("gives 105216" in f for f in findings)
    assert any("never reached the server" in f for f in findings)
    assert any("the server ran with n_ctx_slot = 95232" in f for f in findings)
    assert any(f.startswith("give --gpu") for f in findings)
    assert not any("--fit's result" in f for f in findings)


def test_with_a_model_but_no_gpu_the_plan_gives_the_context_and_both_readings() -> None:
    text = "\n".join(logs_report(LOG, SCRIPTS["restored"], model="qwen3.6-27b:iq4_nl").to_json()["findings"])
    assert "not the 105216 that" in text and "-c 94977-95232 gives it exactly, or --fit with -c unset" in text
    assert "give --gpu to tell which" in text and "--fit's result" not in text


def test_cli_takes_model_and_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "logs.json"
    main(["logs", str(LOG), "--script", str(SCRIPTS["restored"]), "--model", "qwen3.6-27b:iq4_nl",
          "--gpu", "rtx3090", "--json", str(out), "-q"])
    assert any("--fit's result" in f for f in json.loads(out.read_text())["findings"])


#: what one finding tells, by the words that tell it: each fact is told at most once
FACTS = {
    "the context the slots ran with": r"n_ctx_slot = 95232",
    "the reasoning budget": r"reasoning.budget",
    "the flags that never reached the server": r"never reached the server",
    "the log's evidence of the slots": r"^the log agrees",
    "--fit's result": r"--fit's result",
    "what ran": r"^what ran",
}
#: statements that cannot both hold of one log
CONTRADICTIONS = (
    (r"did not get -c 105000", r"-c 105000 reaches the server"),
    (r"is --fit's result", r"neither the cut-off nor --fit explains"),
    (r"did not get -c 105000", r"^what ran .*-c 105000"),
    (r"K/V f16/f16", r"K/V q2_K"),
)


def _story(findings: list[str]) -> None:
    for fact, rx in FACTS.items():
        told = [f for f in findings if re.search(rx, f)]
        assert len(told) <= 1, (fact, told)
    for a, b in CONTRADICTIONS:
        assert not (any(re.search(a, f) for f in findings) and any(re.search(b, f) for f in findings)), (a, b, findings)


@pytest.mark.parametrize("machine", ["none", "model", "model and gpu"])
@pytest.mark.parametrize("which", sorted(SCRIPTS))
def test_the_findings_tell_one_story(which: str, machine: str) -> None:
    """Report 000's own log with its script: one finding per fact and no two that contradict
    each other, as pasted and with the `#` restored, with and without the plan; the chain is the
    one diagnosis (the flags never reached the server; f16 KV and 4 slots; about 960 MiB less
    free memory than planned)."""
    kw = {"none": {}, "model": {"model": ON_3090["model"]}, "model and gpu": ON_3090}[machine]
    findings = logs_report(LOG, SCRIPTS[which], **kw).to_json()["findings"]
    _story(findings)
    if machine == "model and gpu":
        i = {k: next(n for n, f in enumerate(findings) if re.search(rx, f)) for k, rx in
             (("context", r"not the 105216"), ("fit", r"95232 is --fit's result"), ("never", r"never reached the server"),
              ("ran", r"^what ran"))}
        assert i["context"] + 1 == i["fit"] < i["never"] < i["ran"], findings


@pytest.mark.parametrize("seed", sorted(p.name for p in SEEDS.glob("*.txt")))
def test_without_the_script_the_log_says_each_fact_once(seed: str) -> None:
    _story(logs_report(SEEDS / seed).to_json()["findings"])


def test_report_004s_log_with_its_unit_tells_one_story() -> None:
    log = next(SEEDS.glob("004_*.txt"))
    _story(logs_report(log, SEEDS / "004_execstart.sh", model="qwen3.8-27b:ud-q4_k_xl").to_json()["findings"])


def test_the_hint_check_and_plan_give_names_the_command() -> None:
    from llamarig.app.logs import log_hint
    from llamarig.i18n import localize

    hint = log_hint("run.sh")
    assert "`llamarig logs LOG --script run.sh --model MODEL --gpu GPU`" in hint
    assert "`llamarig logs 日志 --script run.sh" in localize(hint, "zh")


def test_a_log_with_restarts_is_set_against_its_last_run(tmp_path: Path) -> None:
    """The recorded three-run log (tests/fixtures/logs/restarts.log): the script that started the
    last run (-c 6144 -np 2) is set against that run alone, planned on the model it served."""
    from llamarig.testing.synth import write_model

    model = write_model(tmp_path / "llama.gguf", "llama", n_ctx_train=8192)
    script = tmp_path / "run.sh"
    script.write_text(f"llama-server -m {model} -c 6144 -np 2 -t 2\n")
    log = SEEDS.parent / "logs" / "restarts.log"
    doc = logs_report(log, script).to_json()
    first = doc["findings"][0]
    assert first.startswith("line 162: n_ctx_slot = 3072, as") and "(-c 6144, 2 slot(s), one pool each)" in first
    _story(doc["findings"])
    assert not any("n_ctx_slot = 3072 tokens per slot" in f for f in doc["findings"])  # told once
    assert any("n_ctx_slot = 4096 tokens per slot" in f for f in doc["runs"][0]["findings"])
