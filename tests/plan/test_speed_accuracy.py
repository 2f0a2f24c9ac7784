"""scripts/accuracy.py and scripts/accuracy_speed.py: CLI, leave-one-out column, depth caveat."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import accuracy_speed  # noqa: E402

from llamarig.plan.calibration.constants import builtin  # noqa: E402
from llamarig.plan.calibration.points import points, predict_point  # noqa: E402


@pytest.mark.parametrize("script", ["accuracy.py", "accuracy_speed.py"])
def test_help_writes_nothing(script, tmp_path):
    before = {p: p.read_text() for p in (ROOT / "docs").glob("accuracy*.md")}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "--check" in r.stdout
    assert {p: p.read_text() for p in (ROOT / "docs").glob("accuracy*.md")} == before


def test_unknown_option_is_exit_2():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "accuracy.py"), "--nope"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_accuracy_check_covers_both_docs():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "accuracy.py"), "--check"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "accuracy-speed.md" in (ROOT / "docs" / "accuracy.md").read_text()


def test_leave_one_out_refits_without_the_point():
    ev = accuracy_speed.evaluate()
    rows = {r.res.id: r for r in ev.decode}
    # every fitted decode point has an out-of-sample prediction
    assert all(r.loo is not None for r in ev.decode)
    # kv comes from four deep f16 points (two from the RTX 3090 report's log, two llama.cpp PRs)
    assert ev.decode_all.kv_basis == "deep points"
    assert {k for k in ev.decode_fitted if accuracy_speed.DEPTH[k] >= accuracy_speed.DEEP} == {
        "seed000-deep30k", "seed000-deep45k", "llama-17505-4090-d32k", "llama-17891-3090-d32k"}
    # the procedure recovers constants of the built-in's order; f16 K/V is read about as fast as weights
    assert 0.65 < ev.decode_all.weights < 0.8 and ev.decode_all.kv > 0.8
    assert rows["seed000-deep30k"].loo is not None


def test_every_point_states_what_ran():
    """Each calibration point says which configuration really ran, derived from the evidence."""
    for p in points():
        assert p.get("ran"), p["id"]
    seed = {p["id"]: p for p in points() if p["id"].startswith("seed000")}
    for p in seed.values():  # the script never reached the KV flags: f16, the default
        assert (p["ctk"], p["ctv"]) == ("f16", "f16") and "2147483647" in p["ran"]
    assert "n_ctx_slot = 95232" in seed["seed000-deep30k"]["ran"]


def test_rtx3090_deep_figures_are_f16_and_within_15_percent():
    """Issue 14 item 6: the 43 -> 37.17 / 37.05 tok/s of the RTX 3090 field report ran with f16 K/V
    (the log, not the script); with it the model is within 15 % at both depths (it was 25 % low for
    f16 at 32K with the constant fitted on the misread q4_0 point)."""
    res = {p["id"]: predict_point(p) for p in points() if p["id"].startswith("seed000-deep")}
    assert set(res) == {"seed000-deep30k", "seed000-deep45k"}
    for r in res.values():
        assert abs(r.error) <= 0.15, (r.id, r.predicted)


def test_q4_0_is_not_far_ahead_at_depth():
    """With f16 read near the weights' efficiency (the published deep f16 figures), q4_0 K/V is
    ahead at 105K by its smaller bytes only, not 30 vs 18 tok/s."""
    base = next(p for p in points() if p["id"] == "seed000-deep30k")
    cal = builtin()
    f16 = predict_point({**base, "depth": 105000}, cal).predicted
    q4 = predict_point({**base, "depth": 105000, "ctk": "q4_0", "ctv": "q4_0"}, cal).predicted
    assert 1.0 < q4 / f16 < 1.4, (f16, q4)


def test_kv_section_lists_every_deep_point():
    lines = accuracy_speed.kv_uncertainty()
    text = "\n".join(lines)
    for k in ("seed000-deep30k", "seed000-deep45k", "llama-17505-4090-d32k", "llama-17891-3090-d32k"):
        assert k in text
    assert "| 105000 |" in text


def test_leave_one_out_fit_on_exact_synthetic_data():
    """_ls2 recovers (u, t0) exactly from noiseless rows; bounds hold."""
    rows = [(x, x * 1.5 + 0.0003, x * 1.5 + 0.0003) for x in (0.002, 0.01, 0.02)]
    u, t0 = accuracy_speed._ls2(rows)
    assert u == pytest.approx(1.5) and t0 == pytest.approx(0.0003)
    u, t0 = accuracy_speed._ls2([(0.01, 0.005, 0.005), (0.02, 0.01, 0.01)])  # would need e > 1
    assert u >= 1 and t0 >= 0
