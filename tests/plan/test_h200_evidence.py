"""plan against the first GPU evidence (benchmarks/evidence/h200-*.json: an H200, CUDA 13.0,
llama-server build 11434 for sm_90), without a GPU: each run's synthetic model is rewritten as a
sparse file (the exact header, the data a hole) and plan runs with the run's arguments and
--gpu h200. Every buffer the -lv 4 log printed must come out to its 0.01 MiB rounding, and the
device total (with the catalogue's measured overhead) must cover nvidia-smi's process memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import llamarig
from llamarig.testing.evidence import compare, logged_buffers, plan_args, sparse_model

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "benchmarks" / "evidence").glob("h200-*.json"))
RUNS = [(f.name, i, r) for f in FILES for i, r in enumerate(json.loads(f.read_text())["runs"]) if "error" not in r]
#: the log prints MiB with two decimals: a figure is within half a unit of the last place
HALF = 0.005


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("h200-evidence")


def test_the_evidence_is_there() -> None:
    assert len(FILES) >= 2 and len(RUNS) >= 13
    assert any(r.get("spec") for _f, _i, r in RUNS)  # the MTP run


@pytest.mark.parametrize(("name", "index", "run"), RUNS, ids=[f"{f}#{i}" for f, i, _r in RUNS])
def test_every_logged_buffer(name: str, index: int, run: dict[str, Any], workdir: Path) -> None:
    model = sparse_model(run, workdir)
    plan = llamarig.plan_command(llamarig.deployment(str(model), plan_args(run),
                                                     hardware=llamarig.machine([llamarig.gpu("h200")])))
    logged = logged_buffers(run["buffers"])
    rows = compare(plan, logged)
    # weights, KV, RS, compute on CUDA0; host weights, compute and output; the MTP context's too
    assert len(rows) >= 7
    for what, planned, got in rows:
        n_lines = 2 if what.startswith("CUDA0 MTP") or (what == "CUDA_Host output" and "CUDA_Host MTP output" in logged) else 1
        assert abs(planned - got) <= HALF * n_lines + 1e-9, f"{name} run {index} {what}: plan {planned:.3f} MiB, log {got:.2f} MiB"
    dev = plan.devices[0]
    assert dev.lines["compute"].method == "exact" and plan.host.lines["compute"].method == "exact"
    # nvidia-smi's process memory after the deepest prompt: the plan's device total (buffers +
    # the catalogue's measured overhead + the MTP context's) covers it, by at most 25 MiB
    seen = [m["gpu_memory"]["process_mib"] for m in run["measurements"] if m.get("gpu_memory")]
    seen.append(run["gpu_memory_after_load"]["process_mib"])
    assert 0 <= dev.total / (1 << 20) - max(seen) <= 25
