"""Unit facts of the memory model (pure functions, no server)."""

from __future__ import annotations

import pytest

from llamarig.catalogue.gpus import parse_gpu_arg
from llamarig.catalogue.models import build_spec, catalogue_mmproj, find_model
from llamarig.errors import InputError, UnknownNameError
from llamarig.hardware import Hardware
from llamarig.plan import memory as M
from llamarig.plan.config import ServerConfig, parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan

MiB = 1 << 20


@pytest.fixture(scope="module")
def q36():
    m, q = find_model("qwen3.6-27b:iq4_nl")
    return build_spec(m, q)


def test_qwen36_shape(q36) -> None:
    kinds = [ly.kind for ly in q36.layers]
    assert len(kinds) == 64
    assert kinds.count("recurrent") == 48 and kinds.count("attention") == 16
    att = [ly for ly in q36.layers if ly.kind == "attention"]
    assert all(ly.n_head_kv == 4 and ly.head_dim_k == 256 for ly in att)
    assert q36.n_ctx_train == 262144
    assert q36.weights_bytes == pytest.approx(15.8e9, rel=1e-6)


def test_qwen36_q4_0_kv_is_18432_bytes_per_token(q36) -> None:
    # seed 004: "每 token KV 仅 18KB" = 16 layers x 2 x row_size(q4_0, 1024) = 16 x 2 x 576
    assert M.kv_bytes_per_token(q36, "q4_0", "q4_0") == 18432
    assert M.kv_bytes_per_token(q36, "f16", "f16") == 65536


def test_qwen36_recurrent_state_per_sequence(q36) -> None:
    assert M.recurrent_bytes_per_seq(q36) == int(149.625 * MiB)
    # the seed-000 log's "context checkpoint ... size = 149.626 MiB": state + 1180 B header
    ck = M.recurrent_checkpoint_bytes(q36)
    assert ck - M.recurrent_bytes_per_seq(q36) == 1180
    assert f"{ck / MiB:.3f}" == "149.626"


def test_np_auto_is_four_unified_slots(q36) -> None:
    ctx = M.resolve_context(q36, parse_server_args(["-c", "65000"]))
    assert (ctx.n_parallel, ctx.kv_unified, ctx.n_ctx, ctx.n_ctx_seq) == (4, True, 65024, 65024)
    # -np unset forces unified even with -no-kvu (server.cpp:168-173)
    ctx = M.resolve_context(q36, parse_server_args(["-c", "65000", "-no-kvu"]))
    assert ctx.kv_unified


def test_non_unified_partition_rounds_up(q36) -> None:
    ctx = M.resolve_context(q36, parse_server_args(["-c", "8192", "-np", "3"]))
    assert (ctx.n_ctx_seq, ctx.n_ctx) == (2816, 8448)


def test_slot_clamped_to_n_ctx_train(q36) -> None:
    ctx = M.resolve_context(q36, parse_server_args(["-c", "307200", "-np", "4", "-kvu"]))
    assert ctx.n_ctx == 307200 and ctx.n_ctx_slot == 262144


def test_ctx_default_is_n_ctx_train_times_streams(q36) -> None:
    assert M.resolve_context(q36, ServerConfig()).n_ctx == 262144
    ctx = M.resolve_context(q36, parse_server_args(["-np", "2"]))
    assert ctx.n_ctx == 2 * 262144  # --fit starts from n_ctx_train x n_streams
    ctx = M.resolve_context(q36, parse_server_args(["-np", "2", "--fit", "off"]))
    assert ctx.n_ctx == 262144 and ctx.n_ctx_seq == 131072


def test_mtp_rollback_rows_and_draft_kv() -> None:
    m, q = find_model("qwen3.8-27b:ud-q4_k_xl")
    spec = build_spec(m, q)
    cfg = parse_server_args(["-c", "307200", "-np", "4", "-kvu", "--spec-type", "draft-mtp",
                             "--spec-draft-n-max", "4", "-ctkd", "q4_0", "-ctvd", "q4_0"])
    ctx = M.resolve_context(spec, cfg)
    assert ctx.n_rs_seq == 4
    assert M.recurrent_rows(ctx) == 4 * 5
    mtp = M.mtp_kv_layers(spec, ctx, cfg)
    assert len(mtp) == 1 and mtp[0].bytes == 1152 * 307200


def test_swa_cells() -> None:
    m, q = find_model("gpt-oss-20b")
    spec = build_spec(m, q)
    ctx = M.resolve_context(spec, parse_server_args(["-c", "4096", "-np", "1"]))
    assert ctx.swa_cells == 768  # gpt-oss-20b (llama.cpp PR #17609 log): pad(128 + 512, 256)
    swa = [x for x in M.kv_layers(spec, ctx, "f16", "f16") if x.kind == "swa"]
    assert len(swa) == 12 and sum(x.bytes for x in swa) == 18 * MiB


def test_bad_kv_type_lists_accepted() -> None:
    with pytest.raises(InputError, match="accepted: f32, f16, bf16, q8_0, q4_0"):
        parse_server_args(["-ctk", "q2_K"])


def test_quantized_v_without_fa_is_contradictory() -> None:
    with pytest.raises(InputError, match="flash attention"):
        parse_server_args(["-ctv", "q4_0", "-fa", "off"])


def test_removed_flag() -> None:
    with pytest.raises(InputError, match="load-mode"):
        parse_server_args(["--mlock"], strict=True)
    # in a pasted command it is a problem the plan reports, not a crash
    cfg = parse_server_args(["--mlock"])
    assert cfg.load_mode == "mlock" and "removed" in cfg.problems[0].message


def test_pasted_command_ignores_unrelated_flags() -> None:
    cfg = parse_server_args(["llama-server", "-m", "x.gguf", "--host", "0.0.0.0", "--port", "8080", "--metrics", "-c", "4096", "--temp", "0.9"])
    assert cfg.n_ctx == 4096 and cfg.model == "x.gguf"
    assert "--temp" in cfg.ignored


def test_unknown_model_suggests() -> None:
    with pytest.raises(UnknownNameError) as e:
        find_model("qwen3.6-27:iq4_nl")
    assert "qwen3.6-27b" in e.value.suggestions


def test_unknown_quant_suggests() -> None:
    with pytest.raises(UnknownNameError) as e:
        find_model("qwen3.6-27b:q3_k_s")
    assert any("iq4_nl" in s for s in e.value.suggestions)


def test_seed_user_plan_fits_on_3090(q36) -> None:
    m, _ = find_model("qwen3.6-27b")
    cfg = parse_server_args(["-c", "105000", "-np", "1", "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"])
    p = make_plan(PlanInputs(q36, cfg, Hardware((parse_gpu_arg("rtx3090"),)), catalogue_mmproj(m, "f16")))
    d = p.devices[0]
    assert d.get("kv") == 18432 * 105216
    assert d.get("recurrent") == int(149.625 * MiB)
    assert p.fits and 0 < (d.free or 0) < 8 * (1 << 30)
    js = p.to_json()
    for k in ("n_ctx", "n_ctx_seq", "n_parallel", "kv_unified", "kv_bytes_per_token",
              "recurrent_bytes_per_seq", "devices", "host", "command", "warnings"):
        assert k in js
    for k in ("name", "weights", "kv", "recurrent", "compute", "mmproj", "draft", "other", "total", "capacity"):
        assert k in js["devices"][0]
    for k in ("weights", "checkpoints", "cache_ram", "total", "capacity"):
        assert k in js["host"]


def test_overflow_is_an_answer(q36) -> None:
    # -ngl given: --fit does not move layers to the CPU (common/fit.cpp:463-465), so the plan
    # keeps every layer on the GPU and says by how much it does not fit
    cfg = parse_server_args(["-c", "262144", "-np", "1", "-ngl", "99"])
    p = make_plan(PlanInputs(q36, cfg, Hardware((parse_gpu_arg("4060ti:16"),))))
    assert not p.fits
    assert "short by" in p.shortfalls()[0]


def test_layer_split_follows_tensor_split(q36) -> None:
    hw = Hardware(tuple(parse_gpu_arg(g) for g in ("5070ti", "5060ti", "4060ti")))
    cfg = parse_server_args(["-c", "65536", "-np", "1", "-ts", "3,2,1"])
    pl = M.place_layers(q36, cfg, hw.backend_names(), [g.memory_bytes for g in hw.gpus])
    counts = [pl.layer_dev.count(i) for i in range(3)]
    assert sum(counts) == 64 and counts[0] > counts[1] > counts[2]
    assert pl.output_dev == 2
    p = make_plan(PlanInputs(q36, cfg, hw))
    assert [d.name for d in p.devices] == ["CUDA0", "CUDA1", "CUDA2"]
    assert sum(d.get("kv") for d in p.devices) == 65536 * 65536


def test_partial_offload_and_n_cpu_moe() -> None:
    m, q = find_model("qwen3-30b-a3b:q4_k_m")
    spec = build_spec(m, q)
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    full = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192"]), hw))
    moe = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192", "--n-cpu-moe", "24"]), hw))
    ngl = make_plan(PlanInputs(spec, parse_server_args(["-c", "8192", "-ngl", "25"]), hw))
    assert moe.devices[0].get("weights") < full.devices[0].get("weights")
    assert moe.host.get("weights") > full.host.get("weights")
    assert ngl.devices[0].get("kv") < full.devices[0].get("kv")  # KV follows the layers
    assert ngl.host.get("kv") > 0


def test_device_selection_and_rpc(q36) -> None:
    hw = Hardware((parse_gpu_arg("rtx3090"), parse_gpu_arg("4060ti")))
    p = make_plan(PlanInputs(q36, parse_server_args(["-c", "8192", "-np", "1", "-dev", "CUDA1"]), hw))
    assert [d.name for d in p.devices] == ["CUDA1"]
    p = make_plan(PlanInputs(q36, parse_server_args(["-c", "8192", "-np", "1", "-dev", "none"]), hw))
    assert p.devices == () and p.host.get("kv") > 0
    with pytest.raises(InputError, match="unknown device"):
        make_plan(PlanInputs(q36, parse_server_args(["-c", "8192", "-dev", "CUDA7"]), hw))
    p = make_plan(PlanInputs(q36, parse_server_args(["-c", "8192", "-np", "1", "--rpc", "10.0.0.2:50052"]), hw))
    assert [d.name for d in p.devices][:1] == ["RPC0[10.0.0.2:50052]"]
    assert p.devices[0].capacity is None and p.devices[0].get("weights") > 0


def test_fit_lowers_unset_context_like_llama_cpp(q36) -> None:
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    p = make_plan(PlanInputs(q36, ServerConfig(), hw))
    assert 4096 <= p.n_ctx < 262144 and p.n_ctx % 256 == 0
    assert p.fits and (p.devices[0].free or 0) >= 1024 * MiB
    assert "--fit" in p.notes[0]
    # -c given, or --fit off: never changed
    assert make_plan(PlanInputs(q36, parse_server_args(["--fit", "off"]), hw)).n_ctx == 262144
    assert make_plan(PlanInputs(q36, parse_server_args(["-c", "262144"]), hw)).n_ctx == 262144
    # a smaller margin leaves room for more context
    p2 = make_plan(PlanInputs(q36, parse_server_args(["-fitt", "128"]), hw))
    assert p2.n_ctx > p.n_ctx


def test_n_cpu_ffn_moves_dense_ffn_of_the_first_layers(q36) -> None:
    """-ncffn N: blk.<i>.ffn_(up|down|gate). for i < N go to the CPU buffer type
    (common/common.h llm_add_n_cpu_ffn_overrides with LLM_FFN_DENSE_REGEX)."""
    import re

    hw = Hardware((parse_gpu_arg("rtx5090"),))
    base = make_plan(PlanInputs(q36, parse_server_args(["-c", "8192", "-ngl", "99"]), hw))
    ffn = make_plan(PlanInputs(q36, parse_server_args(["-c", "8192", "-ngl", "99", "-ncffn", "10"]), hw))
    moved = sum(t.n_bytes for t in q36.tensors
                if re.match(r"^blk\.(\d)\.ffn_(up|down|gate)\.weight$", t.name))
    assert moved > 0
    assert ffn.host.get("weights") - base.host.get("weights") == moved
    assert base.devices[0].get("weights") - ffn.devices[0].get("weights") >= moved  # + CUDA row padding
    assert "--n-cpu-ffn" in ffn.command


def test_n_cpu_ffn_on_a_real_header(synth_model) -> None:
    """The same rule on real tensor names: blk.0.ffn_up/gate/down.weight move, blk.1's stay."""
    from llamarig.gguf import load_spec

    spec = load_spec(synth_model("llama", n_layer=2))
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    base = make_plan(PlanInputs(spec, parse_server_args(["-c", "512", "-ngl", "99"]), hw))
    ffn = make_plan(PlanInputs(spec, parse_server_args(["-c", "512", "-ngl", "99", "--n-cpu-ffn", "1"]), hw))
    names = {"blk.0.ffn_up.weight", "blk.0.ffn_gate.weight", "blk.0.ffn_down.weight"}
    from llamarig.plan.memory import cuda_alloc_bytes

    moved = sum(cuda_alloc_bytes(t) for t in spec.tensors if t.name in names)
    assert moved > 0 and base.devices[0].get("weights") - ffn.devices[0].get("weights") == moved
    # mmap: the host's CPU_Mapped buffer spans the file range of its tensors, so it grows by at least that
    assert ffn.host.get("weights") - base.host.get("weights") >= sum(t.n_bytes for t in spec.tensors if t.name in names)


def test_override_tensor_matches_catalogue_tensor_names() -> None:
    """-ot ".ffn_.*_exps.=CPU" on a catalogue MoE keeps every expert on the host, as llama.cpp does
    with the real file's blk.N.ffn_{up,gate,down}_exps.weight (published log of this command,
    llama.cpp b5622: well under 1 GiB on the GPUs, the experts in CPU_Mapped); it matched nothing
    when the catalogue named its tensors blk.N.ffn_up_exps (no .weight)."""
    from llamarig.catalogue.models import build_spec, find_model

    spec = build_spec(*find_model("qwen3-30b-a3b:q4_k_m"))
    hw = Hardware((parse_gpu_arg("rtx4090:10"), parse_gpu_arg("rtx5090")))
    argv = ["-ngl", "99", "-ot", ".ffn_.*_exps.=CPU", "-c", "16384", "-np", "1", "-fa", "off"]
    p = make_plan(PlanInputs(spec, parse_server_args(argv), hw))
    exps = sum(t.n_bytes for t in spec.tensors if "_exps." in t.name)
    assert exps > 0.8 * spec.weights_bytes
    assert sum(d.get("weights") for d in p.devices) < (1 << 30)
    assert p.host.get("weights") >= exps
    # a pattern that matches no tensor is said, not silently ignored
    p = make_plan(PlanInputs(spec, parse_server_args(["-ot", "ffn_nothing=CPU", "-c", "4096"]), hw))
    assert any("matches no tensor" in w for w in p.warnings)



def test_tensor_split_without_ts_is_even_by_heads() -> None:
    """-sm tensor with -ts unset splits KV and recurrent state evenly by whole heads
    (src/llama-model.cpp:841-863: an all-zero tensor_split means ne * (j+1) / n_devices), not by
    VRAM: 2720 / 2720 MiB on a 3090 + 4060 Ti; -ts 3,1 gives 3 of 4 KV heads to the first."""
    from llamarig.catalogue.models import build_spec, find_model
    from llamarig.plan.revise import head_split

    assert head_split(4, [0.0, 0.0]) == [2, 2] and head_split(4, [3.0, 1.0]) == [3, 1]
    assert head_split(48, [0.0, 0.0, 0.0]) == [16, 16, 16] and head_split(5, [1.0, 1.0]) == [2, 3]
    spec = build_spec(*find_model("qwen3.8-27b:q4_k_m"))
    hw = Hardware((parse_gpu_arg("rtx3090"), parse_gpu_arg("4060ti")))
    argv = ["-c", "163840", "-np", "2", "-kvu", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-sm", "tensor"]
    p = make_plan(PlanInputs(spec, parse_server_args(argv), hw))
    kv = [d.get("kv") for d in p.devices]
    assert kv[0] == kv[1] == 2720 * MiB
    assert p.devices[0].get("recurrent") == p.devices[1].get("recurrent")
    assert "layer(s) on" not in p.devices[0].lines["weights"].formula
    p = make_plan(PlanInputs(spec, parse_server_args([*argv, "-ts", "3,1"]), hw))
    assert p.devices[0].get("kv") == 3 * p.devices[1].get("kv")
