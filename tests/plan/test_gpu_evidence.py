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
from llamarig.plan.calibration.files import load_calibration
from llamarig.plan.calibration.least_squares import calibration_from_evidence
from llamarig.plan.calibration.points import evidence_points

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


def test_accuracy_script_lists_evidence_in_and_out_of_sample():
    """Each file: the built-in column, and the CUDA defaults alone (out-of-sample); a file the
    built-in GPU entry was fitted to is called in-sample, its repeat run is not."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import accuracy_speed

    lines = accuracy_speed.evidence_section([SAMPLE])
    assert "## GPU evidence files" in lines[0]
    assert any(ln.startswith("| ev-qwen3.6-27b-q4_0-ub256-d8192 | decode |") for ln in lines)
    text = "\n".join(accuracy_speed.evidence_section([H200_A, H200_B]))
    a, b = text.split("### benchmarks/evidence/h200-qwen3.8-27b-b.json")
    assert "in-sample: the built-in entry for this GPU was fitted to this file" in a
    assert "in-sample" not in b and "CUDA defaults" in b
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


# ---------------------------------------------------------------- the first real GPU evidence (H200)

H200_A = ROOT / "benchmarks" / "evidence" / "h200-qwen3.8-27b-a.json"
H200_B = ROOT / "benchmarks" / "evidence" / "h200-qwen3.8-27b-b.json"


def test_h200_builtin_entry_is_the_fit_of_its_evidence_file():
    """The built-in h200 efficiencies are what calibration_from_evidence gives on the committed
    file (so the data file and the procedure cannot drift apart)."""
    from llamarig.plan.calibration.constants import builtin

    fit = calibration_from_evidence(json.loads(H200_A.read_text()), "a")["efficiency"][0]
    e = builtin().gpus["h200"]
    assert fit["gpu"] == "h200"
    for k in ("weights", "kv", "overhead_ms", "prefill", "attn_prefill", "verify_per_token"):
        assert getattr(e, k) == pytest.approx(fit[k], abs=1e-3), k
    assert dict(e.kv_by_type) == pytest.approx(fit["kv_by_type"], abs=1e-3)
    # one model: the shallow points cannot tell weights from overhead, and the fit says so
    assert "not told apart" in fit["source"] and fit["overhead_ms"] == builtin().backends["CUDA"].overhead_ms
    assert 0 < fit["weights"] <= 1


def test_h200_builtin_predicts_the_repeat_run():
    """The repeat run (not fitted): every decode and prefill point within 15 %, median within 5 %;
    the CUDA defaults alone (consumer cards) were 2-3x off."""
    from llamarig.plan.calibration.constants import builtin
    from llamarig.plan.calibration.points import predict_point

    doc = json.loads(H200_B.read_text())
    pts = evidence_points(doc, "b")
    errs = [abs(predict_point(p).error) for p in pts]
    assert max(errs) < 0.15 and sorted(errs)[len(errs) // 2] < 0.05
    generic = builtin()
    generic = type(generic)(**{**generic.__dict__, "gpus": {k: v for k, v in generic.gpus.items() if k != "h200"}})
    assert min(abs(predict_point(p, generic).error) for p in pts) > 1.0


def test_quantized_kv_reads_at_its_own_rate_on_h200():
    """At 32K depth the H200 decodes q4_0 K/V slower than f16 (measured 70.6 vs 85.3 tok/s), and
    plan says so, naming the measurement."""
    from llamarig.plan.calibration.constants import Efficiency, builtin

    e = builtin().gpus["h200"]
    assert e.kv_for("q4_0", "q4_0") < e.kv_for("q8_0", "q8_0") < e.kv_for("f16", "f16") == e.kv
    mixed = e.kv_for("q8_0", "f16")
    assert e.kv_for("q8_0", "q8_0") < mixed < e.kv
    plain = Efficiency("CUDA", 0.7, 0.9, 0.5, 0.6, 96, 0.7, 0.1)
    assert plain.kv_for("q4_0", "q4_0") == 0.9  # no per-type figures: kv for every type


def test_plan_on_h200_uses_the_per_type_kv_and_names_it(capsys):
    args = ["plan", "qwen3.6-27b:q4_k_m", "--gpu", "h200", "-c", "65536", "-np", "1", "-fa", "on", "--json"]
    outs = {}
    for kv in ("f16", "q4_0"):
        assert main([*args, "-ctk", kv, "-ctv", kv]) in (0, None)
        outs[kv] = json.loads(capsys.readouterr().out)["speed"]
    deep = {kv: o["by_depth"][-1]["decode_tok_s"] for kv, o in outs.items()}
    assert deep["q4_0"] < deep["f16"]
    assert "measured on this GPU" in outs["q4_0"]["depth_note"] and "h200-qwen3.8-27b-a.json" in outs["q4_0"]["depth_note"]


def test_calibration_file_kv_by_type_is_checked(tmp_path):
    from llamarig.plan.calibration.files import load_calibration

    good = {"version": 1, "efficiency": [{"backend": "CUDA", "gpu": "rtx3090", "kv_by_type": {"q4_0": 0.3}}]}
    f = tmp_path / "c.json"
    f.write_text(json.dumps(good))
    assert dict(load_calibration(f).gpus["rtx3090"].kv_by_type) == {"q4_0": 0.3}
    f.write_text(json.dumps({"version": 1, "efficiency": [{"backend": "CUDA", "kv_by_type": {"q9_9": 0.3}}]}))
    with pytest.raises(InputError, match="kv_by_type.q9_9"):
        load_calibration(f)


@pytest.mark.parametrize("content, words", [("{garbled", "not readable as JSON"), ("[1]", "not an evidence file")])
def test_resume_of_a_bad_file_is_one_line(server_bin, tmp_path, content, words):
    out = tmp_path / "ev.json"
    out.write_text(content)
    r = subprocess.run([sys.executable, str(KIT), "--server-bin", str(server_bin), "--smoke", "--models", "llama3.1-8b",
                        "--workdir", str(tmp_path / "w"), "--out", str(out), "--resume"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and words in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and out.read_text() == content  # nothing overwritten
