"""Unit tests of the speed model's formulas (pure functions, no server)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.plan.speed_helpers import cfg, hw, spec_of

from llamarig.plan.calibration.files import load_calibration
from llamarig.plan.flash_attn import kv_path
from llamarig.plan.speed.speed_model import (
    acceptance_from_ratio,
    decode_seconds,
    depth_points,
    device_loads,
    speed_report,
    tokens_per_step,
)

CAL = load_calibration()


def test_tokens_per_step_geometric():
    assert tokens_per_step(0.0, 4) == 1.0
    assert tokens_per_step(0.6, 3) == pytest.approx((1 - 0.6**4) / 0.4)
    assert tokens_per_step(0.999999, 3) == pytest.approx(4.0, rel=1e-4)
    assert tokens_per_step(0.7, 0) == 1.0


def test_acceptance_from_llama_cpp_ratio_round_trip():
    for a in (0.3, 0.6, 0.8, 0.9):
        for n in (1, 3, 4):
            ratio = (tokens_per_step(a, n) - 1) / n
            assert acceptance_from_ratio(ratio, n) == pytest.approx(a, abs=1e-6)
    # seed 004: accepted/drafted 0.57 at n = 4 is a per-position a of about 0.79
    assert acceptance_from_ratio(0.57, 4) == pytest.approx(0.787, abs=0.01)


def test_kv_paths_follow_cuda_fa_rules():
    assert kv_path("CUDA", "q4_0", "q4_0").kind == "fast"
    assert kv_path("CUDA", "q8_0", "q8_0").kind == "fast"
    assert kv_path("CUDA", "f16", "f16").kind == "fast"
    conv = kv_path("CUDA", "q8_0", "q4_0")
    assert conv.kind == "convert" and conv.factor > 1
    assert kv_path("CUDA", "q4_1", "q4_1").kind == "convert"
    # iq4_nl: no CUDA FA kernel; with a quantized V FA stays on -> attention on the CPU
    assert kv_path("CUDA", "iq4_nl", "iq4_nl").kind == "cpu"
    # iq4_nl K with f16 V and FA auto: FA turns itself off
    assert kv_path("CUDA", "iq4_nl", "f16", "auto").kind == "nofa"
    assert kv_path("Metal", "iq4_nl", "iq4_nl").kind == "fast"
    assert kv_path("CPU", "q4_1", "q5_0").kind == "fast"


def test_depth_points_up_to_context():
    assert depth_points(105000) == [0, 8192, 32768, 65536, 105000]
    assert depth_points(4096) == [0, 4096]
    assert depth_points(262144)[-1] == 262144


def test_physical_limit_is_bandwidth_over_bytes():
    """Seed 000: 14.7 GB file, token embeddings not read; 936 GB/s -> limit about 65 tok/s."""
    spec = spec_of("qwen3.6-27b:iq4_nl")
    rep = speed_report(spec, cfg("-c", "65536", "-np", "1", "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"), hw("rtx3090"))
    loads = rep.devices
    assert len(loads) == 1 and loads[0].name == "CUDA0"
    b = loads[0].bytes_at(0, None)
    assert rep.decode_limit_tok_s == pytest.approx(936e9 / b, rel=1e-6)
    assert 60 < rep.decode_limit_tok_s < 70
    assert rep.decode_tok_s < rep.decode_limit_tok_s
    # KV: 16 attention layers x (K + V) q4_0 rows of 4 x 256 = 18432 B per token of depth
    assert loads[0].kv_per_depth == 18432
    # recurrent state read + written: 2 x 149.625 MiB
    assert loads[0].recurrent_rw == pytest.approx(2 * 149.625 * 2**20, rel=1e-3)


def test_seed000_prediction_within_15_percent():
    """The RTX 3090 field report's run as its log shows it (f16 K/V, -c 95000, 4 unified slots;
    the script's KV flags never reached the server): 43 tok/s short, 37.17 at 30.5K, 37.05 at 45.2K."""
    spec = spec_of("qwen3.6-27b:iq4_nl")
    spec = replace(spec, tensors=tuple(replace(t, n_bytes=int(t.n_bytes * 15.8e9 / spec.weights_bytes))
                                       for t in spec.tensors))
    rep = speed_report(spec, cfg("-c", "95000", "-np", "4", "-kvu", "-fa", "on"), hw("rtx3090"),
                       depths=[2000, 30511, 45168])
    short, d30, d45 = rep.by_depth
    assert short.decode_tok_s == pytest.approx(43, rel=0.15)
    assert d30.decode_tok_s == pytest.approx(37.17, rel=0.15)
    assert d45.decode_tok_s == pytest.approx(37.05, rel=0.15)
    assert d45.decode_tok_s < d30.decode_tok_s < short.decode_tok_s


def test_decode_slows_with_depth_and_f16_kv_slows_more():
    spec = spec_of("qwen3.6-27b:iq4_nl")
    q4 = speed_report(spec, cfg("-c", "131072", "-np", "1", "-ctk", "q4_0", "-ctv", "q4_0"), hw("rtx3090"))
    f16 = speed_report(spec, cfg("-c", "131072", "-np", "1"), hw("rtx3090"))
    speeds = [d.decode_tok_s for d in q4.by_depth]
    assert speeds == sorted(speeds, reverse=True)
    assert f16.by_depth[-1].decode_tok_s < q4.by_depth[-1].decode_tok_s
    assert f16.by_depth[0].decode_tok_s == pytest.approx(q4.by_depth[0].decode_tok_s, rel=0.01)


def test_moe_reads_only_used_experts():
    spec = spec_of("qwen3-30b-a3b:q4_k_m")
    loads = device_loads(spec, cfg("-c", "8192"), hw("rtx4090"), CAL)
    read = sum(x.weights_read for x in loads)
    assert read < 0.2 * spec.weights_bytes  # 8 of 128 experts + attention + head
    rep = speed_report(spec, cfg("-c", "8192"), hw("rtx4090"))
    assert rep.decode_tok_s > 100


def test_swa_layers_read_at_most_the_window():
    spec = spec_of("gemma3-27b:q4_k_m")
    loads = device_loads(spec, cfg("-c", "131072", "-np", "1"), hw("rtx4090"), CAL)
    x = loads[0]
    assert x.swa_per_cell > 0 and x.kv_per_depth > 0
    w = spec.swa_window
    assert x.bytes_at(2 * w, w) - x.bytes_at(w, w) == x.kv_per_depth * w  # only full layers grow


def test_layer_split_sums_row_split_takes_the_max():
    spec = spec_of("qwen3-32b:q4_k_m")
    two = hw("rtx3090", "rtx3090")
    layer = device_loads(spec, cfg("-c", "8192", "-sm", "layer"), two, CAL)
    t_layer = decode_seconds(layer, 0, None, CAL, "layer", limit=True)
    t_row = decode_seconds(layer, 0, None, CAL, "row", limit=True)
    assert t_row == pytest.approx(max(x.seconds_at(0, None, True, CAL) for x in layer), rel=1e-9)
    assert t_layer == pytest.approx(sum(x.seconds_at(0, None, True, CAL) for x in layer), rel=1e-9)
    assert t_row < t_layer


def test_partial_offload_adds_a_cpu_device():
    spec = spec_of("qwen3-32b:q4_k_m")
    rep = speed_report(spec, cfg("-c", "8192", "-ngl", "40"), hw("rtx4060ti16"))
    names = [d.name for d in rep.devices]
    assert names == ["CUDA0", "CPU"]
    full = speed_report(spec, cfg("-c", "8192"), hw("rtx3090"))
    assert rep.decode_tok_s < full.decode_tok_s


def test_cpu_only_hardware():
    spec = spec_of("llama3.1-8b:q4_k_m")
    rep = speed_report(spec, cfg("-c", "4096"), hw(), host_bandwidth_gbs=50)
    assert [d.name for d in rep.devices] == ["CPU"]
    assert rep.decode_limit_tok_s == pytest.approx(50e9 / rep.devices[0].bytes_at(0, None), rel=1e-6)


def test_prefill_grows_with_ubatch_and_falls_with_prompt_length():
    spec = spec_of("qwen3.6-27b:iq4_nl")
    a = speed_report(spec, cfg("-c", "65536", "-ub", "512"), hw("rtx3090"), prompt_tokens=8192).prefill.tok_s
    b = speed_report(spec, cfg("-c", "65536", "-ub", "2048"), hw("rtx3090"), prompt_tokens=8192).prefill.tok_s
    c = speed_report(spec, cfg("-c", "65536", "-ub", "2048"), hw("rtx3090"), prompt_tokens=65536).prefill.tok_s
    assert b > a and c < b


def test_mtp_speculative_speedup():
    spec = spec_of("qwen3.8-27b:ud-q4_k_xl")
    rep = speed_report(spec, cfg("-c", "65536", "-np", "1", "-ctk", "q4_0", "-ctv", "q4_0",
                                 "--spec-type", "draft-mtp", "--spec-draft-n-max", "3"), hw("rtx3090"))
    s = rep.speculative
    assert s is not None and s.kind == "mtp" and s.n_max == 3
    assert s.tokens_per_step == pytest.approx(tokens_per_step(s.acceptance, 3))
    assert 1.2 < s.speedup < s.tokens_per_step
    assert "1 + n x ratio" in s.formula and "draft_n_accepted / draft_n" in s.formula
    assert s.ratio == pytest.approx((s.tokens_per_step - 1) / 3)
    # no MTP layers: no speculative figure
    plain = speed_report(spec_of("qwen3.6-27b:iq4_nl"), cfg("-c", "8192", "--spec-type", "draft-mtp"), hw("rtx3090"))
    assert plain.speculative is None


def test_speed_json_shape(seed_inputs):
    from llamarig.plan.planner import make_plan
    from llamarig.plan.speed.speed_estimator import speed_json

    plan = make_plan(seed_inputs)
    d = speed_json(seed_inputs, plan)
    for k in ("decode_tok_s", "decode_limit_tok_s", "by_depth", "prefill_tok_s", "speculative"):
        assert k in d
    assert d["by_depth"][0]["depth"] == 0 and "decode_tok_s" in d["by_depth"][0]
    assert d["decode_limit_tok_s"] > d["decode_tok_s"] > 0
