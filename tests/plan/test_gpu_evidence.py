"""The GPU evidence kit (benchmarks/gpu_evidence.py) and its reading side (plan's calibration,
scripts/accuracy_speed.py): a CPU smoke run against the real portable llama-server, and a recorded
sample file."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from llamarig.cli.main import main
from llamarig.errors import InputError
from llamarig.plan.calibration import calibration_from_evidence, evidence_points, load_calibration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "fixtures" / "evidence" / "cpu-smoke-sample.json"
KIT = ROOT / "benchmarks" / "gpu_evidence.py"


def test_smoke_run_against_the_real_server(server_bin, tmp_path):
    """Tiny shapes of a catalogue architecture with an MTP layer, one K/V type, two depths: the file
    has the buffer lines of the -lv 4 log, the parsed memory figures, llama-server's timings, an
    MTP run with draft_n / draft_n_accepted, and plan reads it (verify_per_token included)."""
    out = tmp_path / "ev.json"
    r = subprocess.run([sys.executable, str(KIT), "--server-bin", str(server_bin), "--smoke", "--models",
                        "qwen3.8-27b", "--kv", "q8_0", "--ub", "256", "--depths", "0,300", "--n-predict", "8",
                        "--threads", "1", "--workdir", str(tmp_path / "w"), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["kind"] == "llamarig-gpu-evidence" and doc["smoke"] and "build 11434" in doc["server"]["version"]
    run, mtp = doc["runs"]
    assert run["cache_type_k"] == "q8_0" and "-lv" in run["args"] and "spec" not in run
    assert mtp["spec"] == {"type": "draft-mtp", "n_max": 4} and "draft-mtp" in mtp["args"]
    assert all(m["draft_n"] > 0 and m["draft_n_accepted"] >= 0 for m in mtp["measurements"])
    assert mtp["memory"]["draft_compute"]  # the MTP context's compute buffer
    assert any("KV buffer size" in ln for ln in run["buffers"])
    assert any("RS buffer size" in ln for ln in run["buffers"])  # qwen35: recurrent state
    assert run["memory"]["kv"] and run["memory"]["compute"]
    depths = [m["depth"] for m in run["measurements"]]
    assert depths == [1, 300]
    assert all(m["decode_tok_s"] > 0 and m["decode_n"] == 8 for m in run["measurements"])
    cal = load_calibration(out)
    assert "GPU evidence file" in cal.backends["CPU"].source and "2 MTP step points" in cal.backends["CPU"].source


def test_recorded_sample_is_read_by_plans_calibration():
    doc = json.loads(SAMPLE.read_text())
    pts = evidence_points(doc, "sample")
    n_meas = sum(len(r["measurements"]) for r in doc["runs"] if "error" not in r)
    assert sum(1 for p in pts if p["kind"] == "decode") == n_meas
    fit = calibration_from_evidence(doc, "sample")["efficiency"][0]
    assert fit["backend"] == "CPU" and 0 < fit["weights"] <= 1 and 0 < fit["kv"] <= 1 and fit["overhead_ms"] >= 0
    assert "4 deep" in fit["source"]
    cal = load_calibration(SAMPLE)
    assert cal.backends["CPU"].weights == pytest.approx(fit["weights"])


def test_plan_takes_an_evidence_file_as_calibration(capsys):
    with contextlib.suppress(SystemExit):
        main(["plan", "llama3.1-8b:q4_k_m", "-c", "8192", "--calibration", str(SAMPLE), "--json"])
    j = json.loads(capsys.readouterr().out)
    assert "cpu-smoke-sample.json" in j["speed"]["calibration"]


def test_accuracy_script_lists_evidence_out_of_sample():
    sys.path.insert(0, str(ROOT / "scripts"))
    import accuracy_speed

    lines = accuracy_speed.evidence_section([SAMPLE])
    assert "## GPU evidence files (out-of-sample)" in lines[0]
    assert any(ln.startswith("| ev-qwen3.6-27b-q4_0-ub256-d8192 | decode |") for ln in lines)
    assert any("None yet" in ln for ln in accuracy_speed.evidence_section([]))


def test_not_an_evidence_file_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="not a GPU evidence file"):
        evidence_points({"kind": "something else"}, "x.json")
    with pytest.raises(InputError, match="no catalogue GPU id"):
        evidence_points({"kind": "llamarig-gpu-evidence", "backend": "CUDA", "gpu": None, "runs": []}, "g.json")
    with pytest.raises(InputError, match="g.json: "):
        evidence_points({"kind": "llamarig-gpu-evidence", "backend": "CUDA", "gpu": "rtx9999", "runs": []}, "g.json")
    empty = tmp_path / "e.json"
    empty.write_text(json.dumps({"kind": "llamarig-gpu-evidence", "version": 1, "backend": "CPU", "runs": []}))
    with pytest.raises(InputError, match="no decode measurement"):
        load_calibration(empty)
