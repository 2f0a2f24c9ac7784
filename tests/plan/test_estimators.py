"""The planner's component estimators (each room's ``*_estimator`` in llamarig.plan): what each returns is typed
(Lines per device, Diagnostics with codes), the MemoryLines adds them as the planner always did, and
no code finds a diagnostic by its wording."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import llamarig
from llamarig.catalogue.gpus import find_gpu, parse_gpu_arg
from llamarig.diagnostics import Severity
from llamarig.hardware.types import Hardware
from llamarig.plan import settings as S
from llamarig.plan.budget import budget
from llamarig.plan.compute.compute_estimator import estimate_compute_buffers
from llamarig.plan.config import parse_server_args
from llamarig.plan.estimator import HOST, Contribution, MemoryLines, entry
from llamarig.plan.flash_attn import kv_path
from llamarig.plan.inputs import build_inputs
from llamarig.plan.kv.kv_estimator import estimate_kv
from llamarig.plan.layout import layout
from llamarig.plan.planner import make_plan, plan_once
from llamarig.plan.result import Line
from llamarig.plan.weights.weights_estimator import estimate_weights
from llamarig.testing.synth import write_model

CAT = "qwen3.6-27b:iq4_nl"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("est") / "small.gguf", "llama", n_layer=4, n_embd=1024, n_head=8,
                       n_head_kv=4, head_dim=128, n_ff=2048)


def _inputs(model: str, args: list[str], gpus: list[str] = ()):  # type: ignore[assignment]
    hw = llamarig.machine([parse_gpu_arg(g) for g in gpus])
    return build_inputs(llamarig.deployment(model, args, hardware=hw))


def test_the_ledger_adds_a_component_twice_as_the_planner_did() -> None:
    led = MemoryLines(1)
    led.post(Contribution((entry(0, "kv", 10, "a"), entry(0, "kv", 5, "b", "modelled"), entry(0, "kv", 0, "c"),
                       entry(HOST, "compute", 0, "zero"))))
    assert led.devices[0]["kv"] == Line(15, "a + b", "modelled")
    assert led.host["compute"].bytes == 0  # a first zero is kept, a later one adds nothing
    led.revise([entry(0, "kv", 1, "one")])
    assert list(led.devices[0]) == ["kv"] and led.devices[0]["kv"].bytes == 1


def test_every_diagnostic_has_a_code_and_the_plan_reads_them_by_severity() -> None:
    p = make_plan(_inputs(CAT, ["-c", "305000", "-ts", "1,1"], ["rtx3090"]))
    assert p.diagnostics and all(d.code and d.code == d.code.lower() for d in p.diagnostics)
    assert p.warnings == tuple(d.message for d in p.diagnostics if d.severity is Severity.WARNING)
    assert p.notes == tuple(d.message for d in p.diagnostics if d.severity is Severity.INFO)
    assert S.TS_COUNT in {d.code for d in p.diagnostics}


def test_each_estimator_gives_typed_lines_for_real_devices(small: Path) -> None:
    inp = _inputs(str(small), ["-c", "4096", "-ngl", "3"], ["rtx3090", "rtx3090"])
    lay = layout(inp)
    for est in (estimate_weights(lay).estimate, estimate_kv(lay), estimate_compute_buffers(lay)):
        assert est.entries
        for e in est.entries:
            assert e.device == HOST or 0 <= e.device < lay.n_dev
            assert isinstance(e.line, Line) and e.line.bytes >= 0 and e.line.formula


def test_the_plan_is_the_estimates_posted_in_order(small: Path) -> None:
    inp = _inputs(str(small), ["-c", "4096", "--fit", "off"], ["rtx3090"])
    lay = layout(inp)
    led = MemoryLines(lay.n_dev)
    weights = estimate_weights(lay)
    led.post(weights.estimate)
    led.post(estimate_kv(lay))
    p = plan_once(inp)
    assert p.devices[0].lines["weights"] == led.devices[0]["weights"]
    assert p.devices[0].lines["kv"] == led.devices[0]["kv"]
    assert p.host.lines["weights"].parts == weights.host.parts
    assert p.fit_model_bytes == weights.split.per_device
    assert budget(lay, led).devices[0].capacity == find_gpu("rtx3090").memory_bytes


def test_fit_drops_the_trials_cpu_layers_note_by_its_code(small: Path) -> None:
    inp = _inputs(str(small), ["-c", "4096"], ["rtx3090:1.4"])
    p = make_plan(inp)
    assert p.effective_cfg is not None and p.effective_cfg.n_gpu_layers < 5
    assert not any(d.code == S.CPU_LAYERS for d in p.diagnostics)
    assert any(d.code == "fit-placement" for d in p.diagnostics)  # fit's own note, by its code
    trial = plan_once(replace(inp, cfg=p.effective_cfg))
    assert any(d.code == S.CPU_LAYERS for d in trial.diagnostics)


def test_a_catalogue_entrys_origin_is_not_a_plan_warning() -> None:
    p = make_plan(_inputs(CAT, ["-c", "8192"], ["rtx3090"]))
    assert not any("catalogue entry" in w for w in p.warnings)
    assert "file size estimated" in p.devices[0].lines["weights"].formula
    assert p.devices[0].lines["weights"].method == "estimated"


@pytest.mark.parametrize("k, v, fa", [("iq4_nl", "iq4_nl", "auto"), ("iq4_nl", "f16", "auto"),
                                      ("iq4_nl", "f16", "on"), ("q4_0", "q4_0", "auto")])
def test_one_flash_attention_rule(k: str, v: str, fa: str) -> None:
    """The plan warns that attention runs on the CPU exactly when the speed model's path says so
    (plan/flash_attn.py): auto with an f16 V turns flash attention off instead."""
    cfg = parse_server_args(["-c", "8192", "-ctk", k, "-ctv", v, "-fa", fa])
    inp = replace(_inputs(CAT, ["-c", "8192"], ["rtx3090"]), cfg=cfg, hardware=Hardware((find_gpu("rtx3090"),)))
    warned = S.IQ4_NL_CUDA_ATTENTION in {d.code for d in make_plan(inp).diagnostics}
    assert warned == (kv_path("CUDA", k, v, fa).kind == "cpu")  # type: ignore[arg-type]
    assert cfg.flash_attn_enabled  # the KV layout: flash attention unless -fa off
