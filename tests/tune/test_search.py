"""Successive halving, resumable state, objectives, calibration fit, quality arithmetic (no server)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from llamarig.errors import InputError
from llamarig.tune import search as S
from llamarig.tune.quality import kl_topk, needle_prompt, parse_types


def fake_measure(true: dict[str, float], noise: float, seed: int, calls: list[str]):
    rng = random.Random(seed)

    def measure(c: S.Candidate, budget: int) -> S.Measurement:
        calls.append(c.key)
        # the mean of `budget` noisy samples: noise shrinks as 1/sqrt(budget)
        vals = [true[c.key] * (1 + rng.gauss(0, noise)) for _ in range(budget)]
        v = sum(vals) / len(vals)
        return S.Measurement(c.key, 0, budget, v, {"decode_tok_s": v})

    return measure


def test_space_and_dims() -> None:
    assert S.parse_dim("-ub=64,128") == ("-ub", ["64", "128"])
    assert S.parse_dim("-t 1,2") == ("-t", ["1", "2"])
    with pytest.raises(InputError):
        S.parse_dim("ub=1")
    cands = S.space([("-ub", ["64", "128", "256"]), ("-t", ["1", "2"])])
    assert len(cands) == 6 and cands[0].args() == ["-ub", "64", "-t", "1"]
    assert S.rung_budgets(1, 9, 3) == [1, 3, 9] and S.rung_budgets(1, 4, 3) == [1, 3, 4]
    kvu = S.space([("-kvu", ["+", "-"]), ("-ub", ["64"])])
    assert [c.key for c in kvu] == ["-kvu -ub 64", "no -kvu -ub 64"]
    base = ["-m", "x.gguf", "-ub", "512", "-kvu", "-ngl", "-1", "-t", "4"]
    assert kvu[1].apply(base) == ["-m", "x.gguf", "-ngl", "-1", "-t", "4", "-ub", "64"]
    assert kvu[0].apply(base) == ["-m", "x.gguf", "-ngl", "-1", "-t", "4", "-kvu", "-ub", "64"]


def test_halving_finds_the_exhaustive_winner_cheaper() -> None:
    cands = S.space([("-ub", ["64", "128", "256", "512"]), ("-t", ["1", "2", "4"])])
    rng = random.Random(1)
    true = {c.key: 100 + 60 * rng.random() for c in cands}
    best = max(true, key=true.__getitem__)
    calls: list[str] = []
    sh = S.successive_halving(cands, fake_measure(true, 0.03, 7, calls), min_budget=1, max_budget=9, eta=3, seed=0)
    ex = S.exhaustive(cands, fake_measure(true, 0.03, 8, []), 9)
    assert ex.winner is not None and sh.winner is not None
    assert true[sh.winner.key] >= 0.97 * true[best]
    assert sh.cost < ex.cost  # 12x1 + 4x3 + 2x9 = 42 requests vs 108
    assert [len(r) for r in sh.rungs] == [12, 4, 2]


def test_resume_after_interrupt(tmp_path: Path) -> None:
    cands = S.space([("-ub", ["64", "128", "256"]), ("-t", ["1", "2"])])
    true = {c.key: float(i + 1) for i, c in enumerate(cands)}
    calls: list[str] = []
    inner = fake_measure(true, 0.0, 0, calls)

    def interrupting(c: S.Candidate, b: int) -> S.Measurement:
        if len(calls) == 4:
            raise KeyboardInterrupt
        return inner(c, b)

    p = tmp_path / "state.json"
    with pytest.raises(KeyboardInterrupt):
        S.successive_halving(cands, interrupting, min_budget=1, max_budget=3, eta=3, seed=0,
                             state=S.TuneState(p, "fp"))
    assert len(calls) == 4
    st = S.TuneState(p, "fp")
    assert st.resumed == 4
    res = S.successive_halving(cands, inner, min_budget=1, max_budget=3, eta=3, seed=0, state=st)
    assert res.reused == 4 and res.measured == 4  # 2 more at rung 1, 2 at rung 2; nothing twice
    assert len(calls) == 8 and res.winner is not None and res.winner.key == cands[-1].key
    with pytest.raises(InputError, match="different search"):
        S.TuneState(p, "other")
    p.write_text("{not json")
    with pytest.raises(InputError, match="unreadable"):
        S.TuneState(p, "fp")


def test_failed_candidates_never_win() -> None:
    cands = S.space([("-t", ["1", "2", "3"])])

    def measure(c: S.Candidate, b: int) -> S.Measurement:
        if c.key == "-t 3":
            return S.Measurement(c.key, 0, b, float("-inf"), {}, "exited")
        return S.Measurement(c.key, 0, b, float(c.key[-1]), {})

    res = S.successive_halving(cands, measure, min_budget=1, max_budget=2, eta=2)
    assert res.winner is not None and res.winner.key == "-t 2"
    with pytest.raises(InputError):
        S.successive_halving([], measure, min_budget=1, max_budget=2)


def test_objectives() -> None:
    m = {"decode_tok_s": 40.0, "prefill_tok_s": 1000.0, "ttft_ms": 250.0}
    assert S.score_of("decode", m) == 40 and S.score_of("ttft", m) == -250
    assert S.score_of("throughput", {**m, "throughput_tok_s": 90.0}) == 90
    assert math.isclose(S.score_of("weighted", m, 0.5), math.sqrt(40 * 1000))
    assert S.median([3, 1, 2]) == 2 and S.median([1, 2, 3, 4]) == 2.5


def test_quality_arithmetic() -> None:
    p = {1: 0.5, 2: 0.3, 3: 0.2}
    assert kl_topk(p, p) == pytest.approx(0.0, abs=1e-12)
    assert kl_topk(p, {1: 0.2, 2: 0.3, 3: 0.5}) > 0
    assert kl_topk(p, {1: 0.5, 2: 0.3}) > 0  # a missing token costs something
    assert parse_types("q8_0,q4_0/q8_0") == [("q8_0", "q8_0"), ("q4_0", "q8_0")]
    with pytest.raises(InputError):
        parse_types("q2_K")
    assert "73914" in needle_prompt(50, 0.5)


def test_calibration_fit_reproduces_the_measurement(synth_model, tmp_path: Path) -> None:
    from llamarig.gguf import load_spec
    from llamarig.hardware import Hardware
    from llamarig.plan.calibration.files import load_calibration
    from llamarig.plan.config import parse_server_args
    from llamarig.plan.speed.speed_model import speed_report
    from llamarig.tune.calibrate import fit_calibration, write_calibration

    spec = load_spec(synth_model("llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=4))
    cfg = parse_server_args(["-c", "1024"])
    for measured in (50.0, 900.0):
        data, pred = fit_calibration(spec, cfg, Hardware(), measured)
        p = tmp_path / f"cal-{measured}.json"
        write_calibration(p, data)
        cal = load_calibration(p)
        again = speed_report(spec, cfg, Hardware(), cal=cal).decode_tok_s
        assert again == pytest.approx(measured, rel=0.03), (measured, data)
        assert pred == pytest.approx(again, rel=1e-6)
    data, pred = fit_calibration(spec, cfg, Hardware(), 1e9)  # beyond any bandwidth
    assert pred < 1e9 and "_note" in data


def test_cpu_fit_records_the_host_bandwidth(synth_model, tmp_path: Path) -> None:
    from llamarig.gguf import load_spec
    from llamarig.hardware import Hardware
    from llamarig.plan.calibration.files import load_calibration
    from llamarig.plan.config import parse_server_args
    from llamarig.plan.speed.speed_model import speed_report
    from llamarig.tune.calibrate import fit_calibration, write_calibration

    spec = load_spec(synth_model("llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=4))
    cfg = parse_server_args(["-c", "1024"])
    data, pred = fit_calibration(spec, cfg, Hardware(), 300.0, host_bandwidth_gbs=12.5, depth=100)
    assert data["host_bandwidth_gbs"] == 12.5 and data["efficiency"][0]["backend"] == "CPU"
    p = tmp_path / "cal.json"
    write_calibration(p, data)
    cal = load_calibration(p)
    assert cal.host_bandwidth_gbs == 12.5
    rep = speed_report(spec, cfg, Hardware(), cal=cal, depths=[100])
    assert rep.by_depth[0].decode_tok_s == pytest.approx(300.0, rel=0.02) and pred == pytest.approx(300.0, rel=0.02)


def test_state_dir_calibration_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from llamarig.plan.calibration.constants import builtin
    from llamarig.plan.calibration.files import load_calibration

    monkeypatch.setenv("LLAMARIG_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("LLAMARIG_CALIBRATION", raising=False)
    assert load_calibration() is builtin()  # no file yet
    f = tmp_path / "speed-calibration.json"
    f.write_text(json.dumps({"version": 1, "efficiency": [{"backend": "CPU", "weights": 0.25}],
                             "host_bandwidth_gbs": 9.0}))
    cal = load_calibration()
    assert cal.host_bandwidth_gbs == 9.0 and cal.for_device("CPU").weights == 0.25
    assert cal.source.startswith(f"calibration file {f}") and "written by llamarig tune" in cal.source
    assert load_calibration("builtin") is builtin()  # plan --calibration builtin
    monkeypatch.setenv("LLAMARIG_CALIBRATION", "builtin")
    assert load_calibration() is builtin()
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"version": 1, "host_bandwidth_gbs": 3.0}))
    monkeypatch.setenv("LLAMARIG_CALIBRATION", str(other))
    assert load_calibration().host_bandwidth_gbs == 3.0 and "LLAMARIG_CALIBRATION" in load_calibration().source
    monkeypatch.setenv("LLAMARIG_CALIBRATION", str(tmp_path / "missing.json"))
    with pytest.raises(InputError, match="not found"):
        load_calibration()
    monkeypatch.delenv("LLAMARIG_CALIBRATION")
    f.write_text(json.dumps({"version": 1, "host_bandwidth_gbs": 7.0}))  # rewritten: not a stale cache
    assert load_calibration().host_bandwidth_gbs == 7.0


def test_default_space_follows_the_goal(synth_model) -> None:
    from dataclasses import replace

    from llamarig.gguf import load_spec
    from llamarig.plan.config import parse_server_args
    from llamarig.tune.space import candidates, default_dimensions, threads_values

    assert threads_values(2, 2) == [1, 2] and threads_values(8, 16) == [4, 7, 8, 9] and threads_values(None, 1) == [1]
    spec = load_spec(synth_model("llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=4))
    cfg = parse_server_args(["-c", "1024"])

    def names(obj: str, c=cfg, plan=None) -> list[str]:
        return [d.name for d in default_dimensions(obj, spec, c, plan, physical=2, logical=2)]

    assert names("decode") == ["threads", "KV types x flash attention"]
    assert names("prefill") == ["threads", "-b/-ub", "flash attention"]
    assert names("throughput") == ["threads", "flash attention", "-np (with -kvu)"]
    draft = replace(cfg, spec_types=("draft-mtp",))
    assert "draft length" in names("decode", draft)

    class Dev:
        name, capacity, free = "CUDA0", 24 << 30, 1 << 30

    class Tight:
        fits, devices = True, (Dev(),)

    assert names("decode", plan=Tight())[-1] == "-ngl"
    dims = default_dimensions("decode", spec, cfg, None, physical=2, logical=2)
    cands = candidates(dims)
    assert len(cands) == 2 * 3  # q8_0 V without flash attention is never a candidate
    assert all("-fa off" not in c.key or "q8_0" not in c.key for c in cands)
    assert cands[0].args() == ["-t", "1", "-ctk", "f16", "-ctv", "f16", "-fa", "on"]
    odd = replace(spec, layers=tuple(replace(ly, head_dim_v=40) for ly in spec.layers))
    assert names("decode", plan=None)[1] == "KV types x flash attention"
    assert [d.name for d in default_dimensions("decode", odd, cfg, None, physical=2, logical=2)][1] == "flash attention"


def test_cpu_fit_faster_than_the_copy_bandwidth(synth_model) -> None:
    """A decode speed the measured copy bandwidth cannot explain: the bandwidth is solved."""
    from llamarig.gguf import load_spec
    from llamarig.hardware import Hardware
    from llamarig.plan.calibration.constants import calibration_from_json
    from llamarig.plan.config import parse_server_args
    from llamarig.plan.speed.speed_model import speed_report
    from llamarig.tune.calibrate import fit_calibration

    spec = load_spec(synth_model("llama", n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=4))
    cfg = parse_server_args(["-c", "1024"])
    data, pred = fit_calibration(spec, cfg, Hardware(), 3000.0, host_bandwidth_gbs=0.5, depth=10)
    assert data["host_bandwidth_gbs"] > 0.5 and "effective" in data["_host"] and "_note" not in data
    cal = calibration_from_json(data, "t")
    assert speed_report(spec, cfg, Hardware(), cal=cal, depths=[10]).by_depth[0].decode_tok_s == pytest.approx(3000, rel=0.02)


def test_apply_removes_every_spelling_of_a_tried_option() -> None:
    """A tried -ub replaces --ubatch-size 512 written in the base (the option, not the spelling),
    and a flag's value is never taken for an option."""
    from llamarig.tune.search import Candidate

    c = Candidate((("-ub", "256"),))
    base = ["-m", "a.gguf", "--ubatch-size", "512", "-a", "-ub", "-c", "4096"]
    assert c.apply(base) == ["-m", "a.gguf", "-a", "-ub", "-c", "4096", "-ub", "256"]


def test_coordinate_descent_finds_an_additive_best_with_a_fraction_of_the_measurements() -> None:
    """Six two-valued dimensions whose effects multiply (threads, -ub, ... on one device): the
    best of the 64 in 1 + 6 + 6 measurements at most, noise well under the effects."""
    dims = [(f"-d{i}", ["a", "b"]) for i in range(6)]
    gain = {f"-d{i}": (1.3 if i % 2 else 0.8) for i in range(6)}  # b is better on odd dimensions
    cands = S.space(dims)
    true = {}
    for c in cands:
        v = 100.0
        for f, val in c.flags:
            v *= gain[f] if val == "b" else 1.0
        true[c.key] = v
    best = max(true, key=true.__getitem__)
    calls: list[str] = []
    cd = S.coordinate_descent(dims, fake_measure(true, 0.01, 3, calls), budget=3)
    assert cd.winner is not None and cd.winner.key == best
    assert len(calls) == len(set(calls)) <= 13 and cd.cost == 3 * len(calls)


def test_coordinate_descent_does_not_move_on_noise() -> None:
    """Every value within a few per cent: nothing beats the start by more than the noise floor
    (NOISE_FLOOR), so the first values (the defaults) are kept after one pass."""
    dims = [("-t", ["1", "2"]), ("-ub", ["64", "256"])]
    true = {c.key: 100.0 * (1 + 0.01 * i) for i, c in enumerate(S.space(dims))}
    calls: list[str] = []
    cd = S.coordinate_descent(dims, fake_measure(true, 0.0, 0, calls), budget=2)
    assert cd.winner is not None and cd.winner.key == "-t 1 -ub 64" and len(calls) == 3
