"""The plan vs the real llama-server (CPU backend, -lv 4 buffer lines).

Weights, KV (per cache, cells too), recurrent state and the MTP draft KV must equal the logged
buffer sizes within the 2-decimal MiB rounding of the log; compute buffers within 5 %, except
where the plan replays llama.cpp's graph and ggml-alloc (qwen35 / qwen35moe, their MTP draft
context: method "exact"), which must equal the log to its rounding.
"""

from __future__ import annotations

import pytest

from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.hardware.cpu import from_system_info, system_info_line
from llamarig.plan.config import parse_server_args
from llamarig.plan.memory_log import parse_memory_log
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.testing.synth import ARCHITECTURES

pytestmark = pytest.mark.server

MiB = 1 << 20
#: a MiB figure printed with %.2f is within 0.005 of the truth (plus float noise)
ROUND = 0.0051

BASE = {"n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512}
SHAPES = {
    "llama": dict(BASE, n_layer=4),
    "qwen3": dict(BASE, n_layer=3),
    "gemma3": dict(BASE, n_layer=6, swa_window=128),
    "qwen35": dict(BASE, n_layer=4, ssm_state_size=64, ssm_group_count=2, ssm_time_step_rank=8),
    "qwen35-mtp": dict(BASE, n_layer=4, ssm_state_size=64, ssm_group_count=2, ssm_time_step_rank=8,
                       nextn_layers=1),
    "qwen3moe": dict(BASE, n_layer=3, n_expert=8, n_expert_used=2, n_ff_expert=256),
    "llama-q4_0": dict(BASE, n_layer=4, weight_type="q4_0"),
    "llama-q8_0": dict(BASE, n_layer=4, weight_type="q8_0"),
    "qwen35moe": dict(BASE, n_layer=4, n_expert=8, n_expert_used=2, n_ff_expert=256,
                      ssm_state_size=64, ssm_group_count=2, ssm_time_step_rank=8),
}
#: Qwen3.6-27B's head counts and head sizes (24 query / 4 KV heads of 256, 64 rotary dims;
#: gated delta net: 16 key heads, 48 value heads, state 128, conv kernel 4; the Hugging Face
#: config.json of Qwen/Qwen3.6-27B), narrowed to n_embd 512 / n_ff 1792 and 3 + 1 layers: the
#: compute buffer's tensors keep their real shapes per head, only fewer and thinner layers
Q36 = dict(n_embd=512, n_head=24, n_head_kv=4, head_dim=256, n_rot=64, n_ff=1792, n_layer=4,
           ssm_state_size=128, ssm_group_count=16, ssm_time_step_rank=48, fill="tiled")
#: Qwen3.5-35B-A3B's heads (16 query / 2 KV of 256; delta net 16 key / 32 value heads of 128;
#: 8 of the experts used, expert and shared-expert width 512), with 16 experts and n_embd 512
A3B = dict(n_embd=512, n_head=16, n_head_kv=2, head_dim=256, n_rot=64, n_layer=4, n_expert=16,
           n_expert_used=8, n_ff_expert=512, n_ff_shexp=512, ssm_state_size=128, ssm_group_count=16,
           ssm_time_step_rank=32, fill="tiled")
SHAPES.update({
    "qwen35-q36": Q36,
    "qwen35-q36mtp": dict(Q36, nextn_layers=1),
    "qwen35moe-a3b": A3B,
    "qwen35moe-a3bmtp": dict(A3B, nextn_layers=1),
})
#: issue 23: the hybrid models users run, over K/V types (f16, q8_0, q4_0, f32, bf16), -np 1-8
#: (3, 5, 6: n_ubatch rounded up to a multiple of the sequences), -ub 64-4096, flash attention
#: on/off, unified KV and MTP speculative decoding (n_rs_seq rollback rows, the draft context
#: with its own -ctkd/-ctvd): a covering design, every value of each axis at least once
HYBRID_GRID = [
    ("qwen35-q36", "-c 4096 -np 1"),
    ("qwen35-q36", "-c 8192 -np 2 -b 2048 -ub 2048 -ctk f32 -ctv f32"),
    ("qwen35-q36", "-c 4096 -np 3 -ub 64 -ctk q4_0 -ctv q4_0"),
    ("qwen35-q36", "-c 8192 -np 4 -b 4096 -ub 4096 -ctk bf16 -ctv bf16"),
    ("qwen35-q36", "-c 4096 -np 8 -ub 1024 -ctk q8_0 -ctv q8_0"),
    ("qwen35-q36", "-c 4096 -np 6 -ub 256 -fa off"),
    ("qwen35-q36", "-c 2048 -np 1 -ub 128 -fa off -ctk f32 -ctv f32"),
    ("qwen35-q36", "-c 4096 -np 2 -kvu -ctk q8_0"),
    ("qwen35-q36mtp", "-c 4096 -np 1 --spec-type draft-mtp --spec-draft-n-max 3 -ctk f32 -ctv f32"),
    ("qwen35-q36mtp", "-c 4096 -np 4 -ub 256 --spec-type draft-mtp -ctk q8_0 -ctv q8_0"),
    ("qwen35-q36mtp", "-c 8192 -np 2 -ub 1024 --spec-type draft-mtp --spec-draft-n-max 2 -ctk q4_0 -ctv q4_0 "
     "-ctkd q8_0 -ctvd q8_0"),
    ("qwen35-q36mtp", "-c 4096 -np 8 -ub 64 --spec-type draft-mtp -ctk bf16 -ctv bf16"),
    ("qwen35-q36mtp", "-c 4096 -np 3 -b 2048 -ub 2048 -fa off"),
    ("qwen35moe-a3b", "-c 4096 -np 1"),
    ("qwen35moe-a3b", "-c 4096 -np 6 -b 2048 -ub 2048 -ctk bf16 -ctv bf16"),
    ("qwen35moe-a3b", "-c 4096 -np 2 -ub 64 -ctk q4_0 -ctv q4_0"),
    ("qwen35moe-a3b", "-c 8192 -np 4 -b 4096 -ub 4096 -ctk f32 -ctv f32"),
    ("qwen35moe-a3b", "-c 4096 -np 3 -ub 128 -ctk q8_0 -fa off"),
    ("qwen35moe-a3b", "-c 4096 -np 8 -kvu"),
    ("qwen35moe-a3bmtp", "-c 4096 -np 2 -ub 256 --spec-type draft-mtp -ctk q8_0 -ctv q8_0"),
    ("qwen35-q36", "-c 8192"),  # -np unset: 4 slots, unified KV
    ("qwen35-q36", "-c 4096 -b 128 -ub 512"),  # n_ubatch clipped to n_batch
    ("qwen35moe-a3b", "-c 2048 -np 7 -ub 100 -ctk q5_1 -ctv iq4_nl"),  # 100 -> 105 tokens
    ("qwen35-q36mtp", "-c 4096 -b 2048 -ub 2048 --spec-type draft-mtp --spec-draft-n-max 8 -fa off -np 1"),
    ("qwen35", "-c 4096 -np 5 -ub 1024 -ctk f32 -ctv f32"),
    ("qwen35moe", "-c 4096 -np 7 -ub 512 -ctk bf16 -ctv bf16 -fa off"),
]

GRID = [
    ("llama", "-c 4096"),
    ("llama", "-c 4096 -np 2"),
    ("llama", "-c 2048 -np 3 -ctk q8_0 -ctv q4_0"),
    ("llama", "-c 4096 -fa off"),
    ("llama", "-c 1000 -np 2 -kvu -ub 256"),
    ("llama", "-c 2048 -ngl 2"),
    ("llama", "-c 3000 -ctk q5_1 -ctv iq4_nl -b 1024"),
    ("qwen3", "-c 2048 -ctk bf16 -ctv f32"),
    ("llama-q4_0", "-c 2048"),  # CPU_REPACK + CPU_Mapped
    ("llama-q4_0", "-c 2048 -nr"),
    ("llama-q8_0", "-c 2048 -np 2"),
    ("gemma3", "-c 4096"),
    ("gemma3", "-c 4096 -np 2"),
    ("gemma3", "-c 2048 -np 2 -kvu -ctk q8_0 -ctv q8_0"),
    ("gemma3", "-c 2048 --swa-full -fa off"),
    ("qwen35", "-c 4096"),
    ("qwen35", "-c 4096 -np 2 -ctk q4_0 -ctv q4_0"),
    ("qwen35", "-c 2048 -fa off -np 1"),
    ("qwen35-mtp", "-c 2048"),
    ("qwen35-mtp", "-c 4096 -np 2 --spec-type draft-mtp --spec-draft-n-max 2"),
    ("qwen35-mtp", "-c 2048 --spec-type draft-mtp -ctkd q8_0 -ctvd q4_0"),
    ("qwen3moe", "-c 4096"),
    ("qwen3moe", "-c 2048 -fa off -np 2"),
    ("qwen35moe", "-c 2048 -np 2"),
    *HYBRID_GRID,
]


def _arch(name: str) -> str:
    return name.split("-")[0]


def _hw(log: str) -> Hardware:
    """The host as the server under test reports it: its system_info line names the CPU features
    it was built with, which decide the AMX / CPU_REPACK weight buffers."""
    line = system_info_line(log)
    assert line is not None, "no system_info line in the -lv 4 log"
    return Hardware(cpu=from_system_info(line))


@pytest.mark.parametrize(("model", "args"), GRID, ids=[f"{m}:{a.replace(' ', '_')}" for m, a in GRID])
def test_plan_matches_server_log(model: str, args: str, synth_model, llama_server) -> None:
    arch = _arch(model)
    if arch not in ARCHITECTURES:
        pytest.skip(f"synth has no {arch} writer yet")
    path = synth_model(arch, **SHAPES[model])
    argv = args.split()
    srv = llama_server(path, "-lv", "4", *argv)
    srv.stop()
    log = parse_memory_log(srv.log)
    spec = load_spec(path)
    plan = make_plan(PlanInputs(spec, parse_server_args(argv), _hw(srv.log)))
    host = plan.host
    tgt = log.target

    # context resolution
    assert int(tgt.params["n_ctx"]) == plan.n_ctx
    assert int(tgt.params["n_ctx_seq"]) == plan.n_ctx_seq
    assert int(tgt.params["n_ubatch"]) == plan.n_ubatch
    assert (tgt.params["kv_unified"] == "true") == plan.kv_unified
    if log.slots:
        assert log.slots[0] == plan.n_parallel

    # weights: exact, in total and per buffer type (CPU_Mapped, CPU_REPACK, AMX)
    assert abs(log.weights_mib() - host.get("weights") / MiB) <= ROUND * len(log.weights), log.weights
    logged = {name: mib for name, mib in log.weights}
    planned_parts = {name: b / MiB for name, b in host.lines["weights"].parts if b}
    assert set(logged) == set(planned_parts), (log.weights, planned_parts)
    for name, mib in logged.items():
        assert abs(mib - planned_parts[name]) <= ROUND, (name, mib, planned_parts[name])

    # KV: exact, per cache (cells) and in total
    assert abs(tgt.kv_mib() - host.get("kv") / MiB) <= ROUND * max(1, len(tgt.kv_buffers)), tgt.kv_buffers
    cells = sorted(c.cells for c in tgt.kv_caches)
    from llamarig.plan.memory import kv_layers, resolve_context

    ctx = resolve_context(spec, parse_server_args(argv))
    planned_cells = sorted({(x.kind, x.cells) for x in kv_layers(spec, ctx, plan.cache_type_k, plan.cache_type_v)})
    # the summary line prints kv_size = cells per stream
    assert cells == sorted(c // ctx.n_stream for _, c in planned_cells)

    # the comparison `launch` prints agrees (every buffer, compute within 5 %)
    from llamarig.plan.memory_log import compare

    bad = [c for c in compare(plan, srv.log, modelled_tolerance=0.05) if not c.ok]
    assert not bad, bad

    # recurrent state: exact
    assert abs(tgt.rs_mib() - host.get("recurrent") / MiB) <= ROUND, tgt.rs_buffers
    if tgt.rs_size:
        assert tgt.rs_size[4] == plan.n_rs_seq

    # compute: within 5 %; exact (the log's rounding) where the plan replays the graph
    logged = tgt.compute_mib("CPU")
    planned = host.get("compute") / MiB
    assert abs(planned - logged) <= 0.05 * logged + 0.02, (planned, logged, host.lines["compute"].formula)
    if _arch(model) in ("qwen35", "qwen35moe"):
        assert host.lines["compute"].method == "exact", host.lines["compute"]
        assert abs(planned - logged) <= ROUND, (planned, logged, host.lines["compute"].formula)

    # MTP draft context: KV exact, compute within 5 %
    draft = log.draft
    if draft is not None:
        from llamarig.plan.memory import mtp_kv_layers

        mtp_kv = sum(x.bytes for x in mtp_kv_layers(spec, ctx, parse_server_args(argv))) / MiB
        assert abs(draft.kv_mib() - mtp_kv) <= ROUND
        d_compute = host.get("draft") / MiB - mtp_kv
        assert abs(d_compute - draft.compute_mib("CPU")) <= 0.05 * draft.compute_mib("CPU") + 0.02
        if _arch(model) in ("qwen35", "qwen35moe"):  # replayed: the log's rounding (KV + compute)
            assert abs(d_compute - draft.compute_mib("CPU")) <= 2 * ROUND, (d_compute, draft.compute_mib("CPU"))
    else:
        assert host.get("draft") == 0


def test_checkpoint_size_matches_server(synth_model, llama_server) -> None:
    """A hybrid model's context checkpoint = recurrent state of one sequence + 1180 B header
    for 48 layers; here: the logged 'created context checkpoint ... size' of a real prompt."""
    path = synth_model("qwen35", **SHAPES["qwen35"])
    srv = llama_server(path, "-lv", "4", "-c", "2048", "-np", "1", "-ub", "64", "-b", "64")
    srv.post("/completion", {"prompt": "hello there " * 12, "n_predict": 2, "cache_prompt": True})
    srv.stop()
    log = parse_memory_log(srv.log)
    spec = load_spec(path)
    from llamarig.plan.memory import recurrent_checkpoint_bytes

    if not log.checkpoints:
        pytest.skip("the server created no checkpoint for this prompt")
    # printed with %.3f
    assert abs(log.checkpoints[-1] - recurrent_checkpoint_bytes(spec) / MiB) <= 0.0005 + 1e-9


def test_swa_checkpoint_size_matches_server(synth_model, llama_server) -> None:
    """An iSWA model's checkpoint holds the n_swa unmasked SWA cells of the sequence."""
    path = synth_model("gemma3", **SHAPES["gemma3"])
    srv = llama_server(path, "-lv", "4", "-c", "4096", "-np", "1", "-ub", "64", "-b", "64")
    srv.post("/completion", {"prompt": "hello there " * 20, "n_predict": 2})
    srv.stop()
    log = parse_memory_log(srv.log)
    if not log.checkpoints:
        pytest.skip("the server created no checkpoint for this prompt")
    from llamarig.plan.memory import resolve_context, swa_checkpoint_bytes

    spec = load_spec(path)
    ctx = resolve_context(spec, parse_server_args(["-c", "4096", "-np", "1", "-ub", "64", "-b", "64"]))
    assert abs(log.checkpoints[-1] - swa_checkpoint_bytes(spec, ctx, "f16", "f16") / MiB) <= 0.0005 + 1e-9


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_every_synth_architecture_default_shape(arch: str, synth_model, llama_server) -> None:
    """Every architecture synth can write (default shape) plans exactly: weights, KV, state.
    Compute gets 35 %: at these toy widths (n_embd 64, head dim 16) small per-token terms the
    model does not resolve dominate; the calibrated grid above holds it to 5 %."""
    path = synth_model(arch)
    argv = ["-c", "2048", "-np", "2"]
    srv = llama_server(path, "-lv", "4", *argv)
    srv.stop()
    log = parse_memory_log(srv.log)
    plan = make_plan(PlanInputs(load_spec(path), parse_server_args(argv), _hw(srv.log)))
    from llamarig.plan.memory_log import compare

    bad = [c for c in compare(plan, srv.log, modelled_tolerance=0.35) if not c.ok]
    assert not bad, bad
    assert log.weights and log.target.kv_buffers


def test_draft_model_matches_server(synth_model, llama_server) -> None:
    """A separate draft model (-md): its weights and KV exact, its own context's compute buffer
    within 5 %; llama-server creates the draft context even without --spec-type (build 11434)."""
    path = synth_model("llama", **SHAPES["llama"])
    dpath = synth_model("llama", n_embd=128, n_head=2, n_head_kv=1, head_dim=64, n_ff=384, n_layer=4)
    argv = ["-md", str(dpath), "-c", "2048", "-np", "2"]
    srv = llama_server(path, "-lv", "4", *argv)
    srv.stop()
    log = parse_memory_log(srv.log)
    assert log.draft is not None and len(log.model_weights) == 2, log.weights
    plan = make_plan(PlanInputs(load_spec(path), parse_server_args(argv), _hw(srv.log), draft=load_spec(dpath)))
    draft_w = sum(v for _, v in log.model_weights[1])
    logged = draft_w + log.draft.kv_mib() + log.draft.compute_mib("CPU")
    planned = plan.host.get("draft") / MiB
    exact_part = draft_w + log.draft.kv_mib()
    print(f"draft: planned {planned:.3f} MiB, logged {logged:.3f} MiB (weights + KV {exact_part:.3f}, compute "
          f"{log.draft.compute_mib('CPU'):.3f})")
    assert abs(planned - logged) <= 0.05 * log.draft.compute_mib("CPU") + 3 * ROUND, (
        planned, logged, exact_part, plan.host.lines["draft"].formula)


def test_mtp_sidecar_draft_matches_server(synth_model, llama_server) -> None:
    """Seed 004's `--model-draft mtp-*.gguf --spec-type draft-mtp`: the sidecar holds only its
    nextn blocks, so only they get KV cells, and its context runs the MTP graph (build 11434
    logs "1 layers" for the sidecar's KV and reserves that graph twice)."""
    target = synth_model("qwen35")
    sidecar = synth_model("qwen35", nextn_layers=1, mtp_only=True)
    argv = ["--model-draft", str(sidecar), "--spec-type", "draft-mtp", "-c", "2048", "-np", "1"]
    srv = llama_server(target, "-lv", "4", *argv)
    srv.stop()
    log = parse_memory_log(srv.log)
    assert log.draft is not None and len(log.model_weights) == 2
    assert [c.layers for c in log.draft.kv_caches] == [1]
    plan = make_plan(PlanInputs(load_spec(target), parse_server_args(argv), _hw(srv.log), draft=load_spec(sidecar)))
    logged = sum(v for _, v in log.model_weights[1]) + log.draft.kv_mib() + log.draft.compute_mib("CPU")
    planned = plan.host.get("draft") / MiB
    print(f"sidecar: planned {planned:.3f} MiB, logged {logged:.3f} MiB")
    assert abs(planned - logged) <= 0.05 * log.draft.compute_mib("CPU") + 3 * ROUND, (
        planned, logged, plan.host.lines["draft"].formula)


@pytest.mark.parametrize(("model", "args"), GRID, ids=[f"{m}:{a.replace(' ', '_')}" for m, a in GRID])
def test_plan_matches_native_server_log(model: str, args: str, synth_model, native_llama_server) -> None:
    """The same grid against a native build (-march=native), where this CPU has buffer types the
    portable build lacks (AMX on Sapphire Rapids and newer, q2_K repacking with AVX-512, Arm
    repacking): host weights per buffer type must still be exact. A quantized matrix in the AMX
    buffer runs llama.cpp's AMX tile kernels, which crashed in warm-up on an AMX Xeon for these
    models: plan warns of it, and a crash is accepted only where the plan predicted that path."""
    from pathlib import Path

    from llamarig.errors import ServerError
    from llamarig.hardware.cpu import from_cpuinfo

    path = synth_model(_arch(model), **SHAPES[model])
    argv = args.split()
    cpu = from_cpuinfo(Path("/proc/cpuinfo").read_text())  # this CPU, as the native build compiles it
    predicted = make_plan(PlanInputs(load_spec(path), parse_server_args(argv), Hardware(cpu=cpu)))
    amx_tiles = any("AMX tile kernels" in w for w in predicted.warnings)
    try:
        srv = native_llama_server(path, "-lv", "4", *argv)
    except ServerError as e:
        if amx_tiles and "crashed (SIGSEGV)" in str(e):
            pytest.xfail("llama.cpp's AMX tile path crashed (SIGSEGV), as plan warned: " + predicted.warnings[0])
        raise
    srv.stop()
    log = parse_memory_log(srv.log)
    plan = make_plan(PlanInputs(load_spec(path), parse_server_args(argv), _hw(srv.log)))
    logged = {name: mib for name, mib in log.model_weights[0]}
    planned_parts = {name: b / MiB for name, b in plan.host.lines["weights"].parts if b}
    assert set(logged) == set(planned_parts), (log.weights, planned_parts)
    for name, mib in logged.items():
        assert abs(mib - planned_parts[name]) <= ROUND, (name, mib, planned_parts[name])
    from llamarig.plan.memory_log import compare

    bad = [c for c in compare(plan, srv.log, modelled_tolerance=0.05) if not c.ok]
    assert not bad, bad
