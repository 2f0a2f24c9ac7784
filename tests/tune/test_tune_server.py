"""tune and quality against the real llama-server with a tiny synthetic model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamarig.tune import search as S
from llamarig.tune.measure import ServerMeasure

pytestmark = pytest.mark.server

SHAPE = {"n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512, "n_layer": 4}


@pytest.fixture
def env(server_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMARIG_SERVER_BIN", str(server_bin))
    monkeypatch.setenv("LLAMARIG_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    from llamarig.cli.main import main

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            main(list(argv))
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def test_halving_matches_exhaustive_on_a_real_server(synth_model, server_bin: Path, env: Path) -> None:
    """-ub 64/128/256 x -t 1/2, prefill of a ~200-token prompt. Machine noise (other tests run
    alongside) is large, so: SH's winner must score, in the exhaustive measurement, at least half
    of the exhaustive best, with fewer measured requests."""
    model = synth_model("llama", **SHAPE)
    cands = S.space([("-ub", ["64", "128", "256"]), ("-t", ["1", "2"])])
    base = ["-m", str(model), "-c", "1024", "-np", "1"]
    meas = ServerMeasure(str(server_bin), base, "prefill", prompt_words=32, n_predict=2, log_dir=str(env))
    sh = S.successive_halving(cands, meas, min_budget=1, max_budget=3, eta=3, seed=0,
                              state=S.TuneState(env / "sh.json", "x"))
    ex = S.exhaustive(cands, meas, 3)
    assert sh.winner is not None and ex.winner is not None
    scores = {m.key: m.score for m in ex.rungs[0]}
    if scores[sh.winner.key] < 0.5 * scores[ex.winner.key]:
        # one confirmatory measurement of the two contenders (other tests load the same cores)
        by_key = {c.key: c for c in cands}
        scores = {k: meas(by_key[k], 5).score for k in (sh.winner.key, ex.winner.key)}
    assert scores[sh.winner.key] >= 0.5 * scores[ex.winner.key], (sh.to_json(), scores)
    assert sh.cost < ex.cost
    assert all(m.metrics["prompt_tokens"] > 64 for m in ex.rungs[0])  # several micro-batches at -ub 64


def test_tune_cli_prunes_resumes_and_writes_outputs(synth_model, env: Path, cli) -> None:
    model = synth_model("llama", **SHAPE)
    out = env / "tuned.sh"
    cal = env / "cal.json"
    argv = ["tune", "--json", "--try", "-ub=64,256", "--try", "-c=1024,100000000", "--max-runs", "2",
            "--n-predict", "4", "--prompt-words", "16", "--ram", "16G", "-o", str(out), "--calibration-out", str(cal),
            str(model), "-np", "1", "-t", "1"]
    code, stdout, err = cli(*argv)
    assert code == 0, err
    res = json.loads(stdout)
    assert "pruned by the planner: -ub 64 -c 100000000" in err  # never launched
    assert len(res["pruned"]) == 2 and res["search"]["winner"].endswith("-c 1024")
    assert out.exists() and "rendered by llamarig" in out.read_text()
    from llamarig.plan.calibration import load_calibration

    assert load_calibration(cal).source.startswith("calibration file")
    # a second run reads every measurement back: nothing is launched again
    code, stdout, err = cli(*argv)
    assert code == 0 and json.loads(stdout)["search"]["measured"] == 0 and "resuming" in err
    code, _, err = cli("tune", str(model))
    assert code == 2 and "--try" in err


def test_quality_probe(synth_model, env: Path, cli) -> None:
    model = synth_model("llama", **SHAPE)
    code, stdout, err = cli("quality", "--json", "--types", "q8_0,q4_0", "--prompts", "2", "--prompt-words", "40",
                            "--needle-words", "40", "--depths", "0.2,0.8", "--top-k", "8",
                            str(model), "-c", "1024", "-np", "1", "-t", "2")
    assert code == 0, err
    rep = json.loads(stdout)
    rows = {r["type_k"]: r for r in rep["rows"]}
    assert set(rows) == {"f16", "q8_0", "q4_0"} and "teacher-forced" in rep["method"]
    assert rows["f16"]["top1_agreement"] == 1.0
    for t in ("q8_0", "q4_0"):
        r = rows[t]
        assert r["positions"] == 2 * 4
        assert 0 <= r["top1_agreement"] <= 1 and 0 <= r["topk_overlap"] <= 1 and r["kl_mean"] >= 0
        assert len(r["needle"]) == 2
    # 8-bit keys and values disturb the distribution less than 4-bit ones
    assert rows["q8_0"]["kl_mean"] <= rows["q4_0"]["kl_mean"] + 1e-9


def test_tune_quality_floor_prunes_by_measured_agreement(synth_model, env: Path, cli) -> None:
    model = synth_model("llama", **SHAPE)
    code, stdout, err = cli("tune", "--json", "--try", "-ctk=f16,q4_0", "--quality-floor", "1.0", "--max-runs", "1",
                            "--n-predict", "4", "--prompt-words", "16", str(model), "-c", "1024", "-np", "1", "-t", "1")
    assert code == 0, err
    res = json.loads(stdout)
    rows = {(r["type_k"], r["type_v"]): r for r in res["quality"]["rows"]}
    q4 = rows[("q4_0", "f16")]["top1_agreement"]
    pruned = {p["candidate"] for p in res["pruned"]}
    assert ("-ctk q4_0" in pruned) == (q4 < 1.0)
    assert "-ctk f16" not in pruned
