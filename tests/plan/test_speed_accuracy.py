"""scripts/accuracy.py and scripts/accuracy_speed.py: CLI, leave-one-out column, depth caveat."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import accuracy_speed  # noqa: E402

from llamarig.plan.speed import KV_PAIR_BOUNDS  # noqa: E402


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
    # the deep point alone sets kv: without it the prior kv = weights is used (marked *)
    assert "*" in rows["seed000-deep"].loo_how
    assert rows["seed000-deep"].loo is not None and rows["seed000-deep"].loo > rows["seed000-deep"].res.predicted
    # every fitted decode point has an out-of-sample prediction
    assert all(r.loo is not None for r in ev.decode)
    # the procedure recovers constants of the built-in's order
    assert 0.5 < ev.decode_all.weights < 0.8 and 0.1 < ev.decode_all.kv < 0.4


def test_kv_pair_bounds_match_the_script():
    lines = accuracy_speed.kv_uncertainty()
    implied = [float(x.split("|")[3]) for x in lines[2:6]]
    assert (min(implied), max(implied)) == pytest.approx(KV_PAIR_BOUNDS, abs=0.006)


def test_leave_one_out_fit_on_exact_synthetic_data():
    """_ls2 recovers (u, t0) exactly from noiseless rows; bounds hold."""
    rows = [(x, x * 1.5 + 0.0003, x * 1.5 + 0.0003) for x in (0.002, 0.01, 0.02)]
    u, t0 = accuracy_speed._ls2(rows)
    assert u == pytest.approx(1.5) and t0 == pytest.approx(0.0003)
    u, t0 = accuracy_speed._ls2([(0.01, 0.005, 0.005), (0.02, 0.01, 0.01)])  # would need e > 1
    assert u >= 1 and t0 >= 0
