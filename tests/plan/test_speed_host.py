"""The host (CPU) side of the speed model without a server: the prefill prompt fits the slot,
threads, the calibration keys tune writes, and the host path of experts kept in RAM
(`--n-cpu-moe`, `-ot exps=CPU`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.plan.speed_helpers import cfg, hw, spec_of

from llamarig.errors import InputError
from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.plan.calibration.constants import builtin, builtin_data, calibration_from_json
from llamarig.plan.speed.speed_model import (
    DEFAULT_PROMPT,
    plan_threads,
    prompt_length,
    speed_report,
)
from llamarig.testing.synth import write_model

CAL = builtin()


@pytest.mark.parametrize(("args", "slot", "prompt"), [
    (("-c", "32768", "-np", "1"), 32768, DEFAULT_PROMPT),
    (("-c", "4096", "-np", "1"), 4096, 4095),
    # four slots without a unified cache: each holds n_ctx / 4 (llama-context.cpp n_ctx_seq)
    (("-c", "8192", "-np", "4", "-no-kvu"), 2048, 2047),
    # unified: one slot may use the whole context
    (("-c", "8192", "-np", "4", "-kvu"), 8192, 8191),
])
def test_default_prefill_prompt_fits_the_slot(args, slot, prompt):
    spec = spec_of("qwen3.6-27b:iq4_nl")
    rep = speed_report(spec, cfg(*args), hw("rtx3090"), cal=CAL)
    assert rep.by_depth[-1].depth == slot
    assert rep.prefill.prompt_tokens == prompt
    assert rep.prefill.prompt_tokens < slot  # llama-server refuses n_tokens >= n_ctx_slot
    assert str(prompt) in rep.prefill.prompt_note
    assert rep.to_json()["prefill"]["prompt_note"] == rep.prefill.prompt_note


def test_prompt_length_rules():
    assert prompt_length(100000) == (DEFAULT_PROMPT, prompt_length(100000)[1])
    n, why = prompt_length(1000)
    assert n == 999 and "1000" in why
    n, why = prompt_length(1000, 5000)  # asked for: kept, and said not to fit
    assert n == 5000 and "does not fit" in why
    n, _why = prompt_length(1000, start=600)  # after 600 cached tokens, 399 more fit
    assert n == 399


def test_threads_are_read_and_default_to_cores():
    c = cfg("-t", "3")
    assert (c.threads, c.threads_batch) == (3, -1)
    assert plan_threads(c, Hardware(())) == (3, 3)
    assert plan_threads(cfg("-t", "3", "-tb", "6"), Hardware(())) == (3, 6)
    assert plan_threads(cfg(), Hardware((), cpu_cores=8)) == (8, 8)
    assert plan_threads(cfg(), Hardware(())) == (None, None)
    assert plan_threads(cfg("-t", "0"), Hardware((), cpu_cores=4)) == (4, 4)
    assert cfg("-t", "3", "-tb", "6").argv()[-4:] == ["-t", "3", "-tb", "6"]  # the plan's command keeps them


def test_calibrated_host_compute_scales_with_batch_threads(tmp_path):
    spec = load_spec(write_model(tmp_path / "m.gguf", "llama", n_layer=2, n_embd=256, n_head=4, n_head_kv=2,
                                 head_dim=64, n_ff=512))
    cal = calibration_from_json({"version": 1, "host_gflops": 50.0, "host_threads": 1}, "test")
    one = speed_report(spec, cfg("-c", "2048", "-t", "1"), Hardware(()), cal=cal, prompt_tokens=512)
    four = speed_report(spec, cfg("-c", "2048", "-t", "4"), Hardware(()), cal=cal, prompt_tokens=512)
    # more threads: more compute; decode is memory-bound and unscaled
    assert four.prefill.tok_s > 2 * one.prefill.tok_s
    assert four.decode_tok_s == one.decode_tok_s
    # threads above the cores only share them
    capped = speed_report(spec, cfg("-c", "2048", "-t", "4"), Hardware((), cpu_cores=2), cal=cal, prompt_tokens=512)
    two = speed_report(spec, cfg("-c", "2048", "-t", "2"), Hardware((), cpu_cores=2), cal=cal, prompt_tokens=512)
    assert capped.prefill.tok_s == pytest.approx(two.prefill.tok_s)
    assert "host compute x4 (-tb 4 / calibrated -tb 1)" in four.prefill.formula
    # no -t and no core count: the calibrated figure is used as is, and the plan says so
    unknown = speed_report(spec, cfg("-c", "2048"), Hardware(()), cal=cal, prompt_tokens=512)
    assert unknown.prefill.tok_s == pytest.approx(one.prefill.tok_s)
    assert any("-tb 1" in w for w in unknown.warnings)


def test_bad_host_threads_is_a_one_line_error():
    with pytest.raises(InputError, match="host_threads"):
        calibration_from_json({"version": 1, "host_threads": 0}, "f.json")


@pytest.mark.parametrize("args", [("--n-cpu-moe", "4"), ("-ot", "exps=CPU")])
def test_experts_in_host_ram_decode_at_the_host_model(tmp_path, args):
    """The CPU device that holds the experts uses the same host figures (bandwidth, CPU
    efficiency) as a CPU-only plan: a calibration of the host changes its time alone."""
    spec = load_spec(write_model(tmp_path / "moe.gguf", "qwen3moe", n_layer=4, n_embd=256, n_head=4, n_head_kv=2,
                                 head_dim=64, n_ff=512, n_expert=8, n_expert_used=2, n_ff_expert=512))
    c = cfg("-c", "4096", "-ngl", "99", *args)
    rep = speed_report(spec, c, hw("rtx3090"), cal=CAL, depths=[0])
    cpu = next(d for d in rep.devices if d.name == "CPU")
    assert cpu.weights_read > 0 and cpu.eff == CAL.for_device("CPU")
    assert cpu.bandwidth_gbs == CAL.host_bandwidth_gbs
    fast = replace(CAL, host_bandwidth_gbs=CAL.host_bandwidth_gbs * 4)
    rep2 = speed_report(spec, c, hw("rtx3090"), cal=fast, depths=[0])
    t1, t2 = 1 / rep.decode_tok_s, 1 / rep2.decode_tok_s
    host_s = cpu.weights_read / (CAL.host_bandwidth_gbs * 1e9 * cpu.eff.weights)
    assert t1 - t2 == pytest.approx(host_s * 3 / 4, rel=1e-6)


def test_uncalibrated_host_says_how_far_it_can_be_off(tmp_path):
    spec = load_spec(write_model(tmp_path / "m.gguf", "llama", n_layer=2, n_embd=256, n_head=4, n_head_kv=2,
                                 head_dim=64, n_ff=512))
    c = cfg("-c", "2048", "-t", "1")
    rep = speed_report(spec, c, Hardware(()), cal=CAL)
    hr = rep.host_range
    assert hr is not None and hr.prefill_tok_s is not None
    assert hr.decode_tok_s[0] < rep.decode_tok_s < hr.decode_tok_s[1]
    assert hr.prefill_tok_s[0] < hr.prefill_tok_s[1] < rep.prefill.tok_s  # built-in prefill is high here
    assert "RESULTS.md" in hr.note and rep.to_json()["host_range"]["decode_tok_s"][0] == round(hr.decode_tok_s[0], 2)
    # a measured bandwidth (plan --detect) has its own range
    det = speed_report(spec, c, Hardware(()), cal=CAL, host_bandwidth_gbs=12.0).host_range
    assert det is not None and "--detect" in det.note
    # after tune's calibration of this host there is no range to give
    tuned = calibration_from_json({"version": 1, "efficiency": [{"backend": "CPU", "weights": 0.3}],
                                   "host_gflops": 80.0, "host_threads": 1}, "tune")
    assert speed_report(spec, c, Hardware(()), cal=tuned).host_range is None


def test_host_range_covers_only_the_host_share_of_a_gpu_plan(tmp_path):
    spec = load_spec(write_model(tmp_path / "moe.gguf", "qwen3moe", n_layer=4, n_embd=256, n_head=4, n_head_kv=2,
                                 head_dim=64, n_ff=512, n_expert=8, n_expert_used=2, n_ff_expert=512))
    rep = speed_report(spec, cfg("-c", "4096", "-ngl", "99", "--n-cpu-moe", "4"), hw("rtx3090"), cal=CAL, depths=[0])
    hr = rep.host_range
    assert hr is not None and hr.prefill_tok_s is None  # batches of host weights run on the GPU
    lo, hi = hr.decode_tok_s
    assert lo < rep.decode_tok_s < hi
    # the GPU's share is not widened: the range is narrower than the host ratios themselves
    r = builtin_data()["host_uncalibrated"]["builtin"]["decode"]
    assert hi / lo < r[1] / r[0]
    assert speed_report(spec, cfg("-c", "4096", "-ngl", "99"), hw("rtx3090"), cal=CAL).host_range is None


def test_tune_fit_reproduces_decode_and_prefill_on_the_host(tmp_path):
    from llamarig.tune.calibrate import fit_calibration

    spec = load_spec(write_model(tmp_path / "m.gguf", "llama", n_layer=4, n_embd=256, n_head=4, n_head_kv=2,
                                 head_dim=64, n_ff=512))
    c = cfg("-c", "2048", "-t", "1", "-ub", "256")
    data, pred = fit_calibration(spec, c, Hardware(()), 900.0, host_bandwidth_gbs=12.0, depth=272,
                                 prefill_tok_s=4000.0, prompt_tokens=256)
    assert data["host_threads"] == 1 and data["host_bandwidth_gbs"] == 12.0
    cal = calibration_from_json(data, "tune")
    rep = speed_report(spec, c, Hardware(()), cal=cal, prompt_tokens=256, depths=[272])
    assert rep.by_depth[0].decode_tok_s == pytest.approx(900.0, rel=0.02) and pred == pytest.approx(900.0, rel=0.02)
    assert rep.prefill.tok_s == pytest.approx(4000.0, rel=0.02)
    assert rep.host_range is None
    # the same file planned for -t 2: twice the host compute, the weights' streaming unchanged
    rep2 = speed_report(spec, cfg("-c", "2048", "-t", "2", "-ub", "256"), Hardware(()), cal=cal, prompt_tokens=256,
                        depths=[272])
    assert rep2.prefill.tok_s > 1.5 * rep.prefill.tok_s
    assert rep.by_depth[0].decode_tok_s < rep2.by_depth[0].decode_tok_s < 2 * rep.by_depth[0].decode_tok_s


def test_tune_fit_at_two_depths_reproduces_both(tmp_path):
    """A second decode measurement deeper in the context sets the host's attention cost per KV
    cell (attn_decode): the plan gives back both measured decodes and the prefill."""
    from llamarig.tune.calibrate import calibration_deep_depth, fit_calibration

    spec = load_spec(write_model(tmp_path / "m.gguf", "llama", n_layer=4, n_embd=256, n_head=4, n_head_kv=2,
                                 head_dim=64, n_ff=512))
    c = cfg("-c", "4096", "-t", "1", "-ub", "256")
    assert calibration_deep_depth(4096, 256, 32) == 2048
    assert calibration_deep_depth(2048, 256, 64) == 1983  # the longest prompt the slot holds
    assert calibration_deep_depth(500, 256, 64) is None  # not twice as deep: no second measurement
    # about 20 s of prefill at the first measurement's speed, 2048-32768 tokens, within the slot
    assert calibration_deep_depth(65536, 256, 32, prefill_tok_s=1000.0) == 20000
    # a slow host: 20 s of prefill is 400 tokens, not twice the first depth: no deep measurement
    # (tune would otherwise spend minutes per request)
    assert calibration_deep_depth(65536, 256, 32, prefill_tok_s=20.0) is None
    assert calibration_deep_depth(65536, 256, 32, prefill_tok_s=40.0) == 800
    assert calibration_deep_depth(262144, 256, 32, prefill_tok_s=5000.0) == 32768
    assert calibration_deep_depth(4096, 256, 32, prefill_tok_s=1000.0) == 4063
    out = {}
    for deep in (400.0, 550.0):  # attention slower / faster per cell
        data, pred = fit_calibration(spec, c, Hardware(()), 1200.0, host_bandwidth_gbs=12.0, depth=272,
                                     prefill_tok_s=4000.0, prompt_tokens=256, deep=[(2064, deep)])
        cal = calibration_from_json(data, "tune")
        rep = speed_report(spec, c, Hardware(()), cal=cal, prompt_tokens=256, depths=[272, 2064])
        assert [d.decode_tok_s for d in rep.by_depth] == pytest.approx([1200.0, deep], rel=0.02)
        assert rep.prefill.tok_s == pytest.approx(4000.0, rel=0.02)
        assert "depth 2064" in data["efficiency"][0]["source"]
        out[deep] = data["efficiency"][0]["attn_decode"]
    assert out[400.0] < out[550.0]  # slower at depth: a lower attention rate
    assert "attn_decode_depths" not in data["efficiency"][0]  # one deep point: one rate


def test_tune_depth_ladder_reproduces_every_rung_and_bends(tmp_path):
    """tune's depth ladder (calibration_ladder): decodes at several depths whose cost per KV cell
    grows with depth (as measured on this machine's 4-KV-head models, benchmarks/RESULTS.md "CPU
    speed model"). The plan gives back every measured decode, interpolates the attention's time
    between them, extends it beyond the deepest with the last segment's slope, and a deeper rung
    measured faster than the last one (noise) is held flat, never faster."""
    from llamarig.plan.calibration.constants import Efficiency
    from llamarig.tune.calibrate import calibration_ladder, fit_calibration

    assert calibration_ladder(4096, 272, 32, prefill_tok_s=1000.0) == [1015, 2031, 3047, 4063]
    assert calibration_ladder(4096, 800, 32, prefill_tok_s=1000.0) == [2031, 3047, 4063]  # >= 2 x 800
    assert calibration_ladder(500, 256, 64) == []
    spec = load_spec(write_model(tmp_path / "m.gguf", "llama", n_layer=4, n_embd=256, n_head=4, n_head_kv=2,
                                 head_dim=64, n_ff=512))
    c = cfg("-c", "8192", "-t", "1", "-ub", "256")
    # ms per token: 1.0 at 272, then the attention's cost per cell doubling beyond 2048 cells
    ms = {272: 1.0, 1040: 1.6, 2064: 2.4, 3088: 4.0, 4112: 5.6}
    measured = [(d, 1000 / v) for d, v in ms.items() if d > 272]
    data, _ = fit_calibration(spec, c, Hardware(()), 1000.0, host_bandwidth_gbs=12.0, depth=272,
                              prefill_tok_s=4000.0, prompt_tokens=256, deep=measured)
    eff = data["efficiency"][0]
    assert [p[0] for p in eff["attn_decode_depths"]] == [1040, 2064, 3088, 4112]
    assert "4 measured decodes" in eff["source"]
    cal = calibration_from_json(data, "tune")
    depths = [272, 1040, 1552, 2064, 3088, 4112, 6160]
    got = {d.depth: 1000 / d.decode_tok_s for d in speed_report(spec, c, Hardware(()), cal=cal, depths=depths).by_depth}
    for d, v in ms.items():
        assert got[d] == pytest.approx(v, rel=0.02)
    assert got[1552] == pytest.approx(2.0, rel=0.02)  # halfway between two rungs
    assert got[6160] == pytest.approx(8.8, rel=0.02)  # 2048 cells beyond at the last slope (1.6 ms / 1024)
    # a deeper rung measured faster than the one before: held flat (the attention never gets cheaper)
    noisy = [(1040, 1000 / 1.6), (2064, 1000 / 1.5)]
    data, _ = fit_calibration(spec, c, Hardware(()), 1000.0, host_bandwidth_gbs=12.0, depth=272,
                              prefill_tok_s=4000.0, prompt_tokens=256, deep=noisy)
    cal = calibration_from_json(data, "tune")
    rep = speed_report(spec, c, Hardware(()), cal=cal, depths=[1040, 2064])
    assert rep.by_depth[1].decode_tok_s <= rep.by_depth[0].decode_tok_s * 1.0001
    # Efficiency.attn_cells: the time through (0, 0) and each (d, d / e)
    e = Efficiency("CPU", 1, 1, 0, 1, 1, 1, 0, attn_decode=0.5, attn_decode_depths=((100, 0.5), (200, 0.25)))
    assert [e.attn_cells(x) for x in (0, 50, 100, 150, 200, 300)] == pytest.approx([0, 100, 200, 500, 800, 1400])
    assert Efficiency("CPU", 1, 1, 0, 1, 1, 1, 0, attn_decode=0.5).attn_cells(300) == pytest.approx(600)


def test_tune_fits_the_host_prefill_attention_from_the_ladder(tmp_path):
    """The ladder's rungs extend each other, so each one's first request prefills the new tokens
    after the cached ones: from those the host's prefill attention (attn_prefill) is solved, with
    host_gflops from the prompt's prefill; the plan gives both back."""
    from llamarig.tune.calibrate import fit_calibration

    spec = load_spec(write_model(tmp_path / "m.gguf", "llama", n_layer=4, n_embd=256, n_head=4, n_head_kv=2,
                                 head_dim=64, n_ff=512))
    c = cfg("-c", "8192", "-t", "1", "-ub", "512")
    out = {}
    for deep_pf in (1500.0, 2000.0):  # attention slower / faster in prefill
        data, _ = fit_calibration(spec, c, Hardware(()), 1000.0, host_bandwidth_gbs=12.0, depth=272,
                                  prefill_tok_s=4000.0, prompt_tokens=256, deep=[(1040, 600.0)],
                                  deep_prefill=[(1031, 1016, deep_pf)])
        cal = calibration_from_json(data, "tune")
        assert speed_report(spec, c, Hardware(()), cal=cal, prompt_tokens=256, depths=[0]).prefill.tok_s == \
            pytest.approx(4000.0, rel=0.02)
        assert speed_report(spec, c, Hardware(()), cal=cal, prompt_tokens=1016, prompt_start=1031,
                            depths=[0]).prefill.tok_s == pytest.approx(deep_pf, rel=0.02)
        assert "attn_prefill solved" in data["_prefill"]
        out[deep_pf] = data["efficiency"][0]["attn_prefill"]
    assert out[1500.0] < out[2000.0]
    # without deeper prefills attn_prefill stays the built-in one
    data, _ = fit_calibration(spec, c, Hardware(()), 1000.0, host_bandwidth_gbs=12.0, depth=272,
                              prefill_tok_s=4000.0, prompt_tokens=256)
    assert "attn_prefill" not in data["efficiency"][0]


@pytest.mark.parametrize("bad", ["x", [[100]], [[0, 0.5]], [[100, 0]], [[100, 2.0]], [[200, 0.5], [100, 0.5]],
                                 [[100, 0.5], [200, 1.5]], [[100.5, 0.5]], [[True, 0.5]]])
def test_attn_decode_depths_must_be_plausible(bad):
    """A calibration file's ``attn_decode_depths`` is [[cells, efficiency], ...], cells ascending,
    the time never falling with depth: anything else is one clear error naming the key."""
    from llamarig.errors import InputError

    eff = {"backend": "CPU", "weights": 0.5, "kv": 1, "overhead_ms": 0.1, "prefill": 0.5, "ubatch_half": 64,
           "attn_prefill": 0.5, "verify_per_token": 0.1, "attn_decode": 0.5, "attn_decode_depths": bad}
    with pytest.raises(InputError, match="attn_decode_depths"):
        calibration_from_json({"version": 1, "efficiency": [eff]}, "f.json")


def test_a_calibration_files_source_reads_in_the_users_language(tmp_path, capsys):
    """The calibration line names the file in the user's language (it was English under
    --lang zh); --json keeps the English."""
    import contextlib
    import json

    from llamarig.cli.main import main

    model = write_model(tmp_path / "m.gguf", "llama", n_layer=2, n_embd=128, n_head=4, n_head_kv=2, head_dim=32,
                        n_ff=256)
    f = tmp_path / "cal.json"
    f.write_text(json.dumps({"version": 1, "efficiency": [{"backend": "CPU", "weights": 0.4}]}))
    with contextlib.suppress(SystemExit):
        main(["--lang", "zh", "plan", str(model), "-c", "1024", "--calibration", str(f)])
    out = " ".join(capsys.readouterr().out.split())  # the text as read, wherever the terminal wraps it
    assert f"速度校准：校准文件 {f}" in out
    with contextlib.suppress(SystemExit):
        main(["plan", str(model), "-c", "1024", "--calibration", str(f), "--json"])
    assert json.loads(capsys.readouterr().out)["speed"]["calibration"] == f"calibration file {f}"
