"""Host weights per CPU buffer type (AMX, CPU_REPACK, CPU_Mapped) as llama.cpp chooses them.

The AMX figures are the buffer sizes an AMX Xeon's native build 11434 logged for these exact
synthetic models (docs/plan.md "CPU buffer types"); the AVX2 ones are checked against the real
server in test_against_server.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llamarig.catalogue.gpus import find_gpu
from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.hardware.cpu import parse_cpu_features
from llamarig.hardware.cpu_buffers import amx_alloc_bytes, host_weight_buffer
from llamarig.plan.config import parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.testing.synth import write_model

MiB = 1 << 20
SHAPE = dict(n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_layer=4)
AMX = parse_cpu_features("avx512f,avx512_vnni,amx_int8")
AVX2 = parse_cpu_features("avx2")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cpu-buffers")
    return {wt: write_model(d / f"llama-{wt}.gguf", "llama", weight_type=wt, **SHAPE)  # type: ignore[arg-type]
            for wt in ("f16", "q8_0", "q4_0")}


def _parts(path: Path, argv: list[str], hw: Hardware) -> dict[str, float]:
    plan = make_plan(PlanInputs(load_spec(path), parse_server_args(argv), hw))
    return {k: round(v / MiB, 2) for k, v in plan.host.lines["weights"].parts}


def test_amx_takes_f16_and_q8_0_matrices(models: dict[str, Path]) -> None:
    # logged: AMX model buffer size = 4.50 MiB, CPU_Mapped model buffer size = 4.02 MiB
    assert _parts(models["f16"], ["-c", "2048"], Hardware(cpu=AMX)) == {"CPU_Mapped": 4.02, "AMX": 4.50}
    # logged: AMX model buffer size = 2.67 MiB (q8_0 packs 4 B of compensation per block)
    assert _parts(models["q8_0"], ["-c", "2048"], Hardware(cpu=AMX))["AMX"] == 2.67


def test_avx2_repacks_q4_0_only(models: dict[str, Path]) -> None:
    assert _parts(models["q4_0"], ["-c", "2048"], Hardware(cpu=AVX2)) == {"CPU_Mapped": 1.14, "CPU_REPACK": 1.27}
    assert list(_parts(models["f16"], ["-c", "2048"], Hardware(cpu=AVX2))) == ["CPU_Mapped"]
    assert list(_parts(models["q4_0"], ["-c", "2048", "-nr"], Hardware(cpu=AVX2))) == ["CPU_Mapped"]


def test_amx_comes_before_repack(models: dict[str, Path]) -> None:
    parts = _parts(models["q4_0"], ["-c", "2048"], Hardware(cpu=AMX))
    assert "AMX" in parts and "CPU_REPACK" not in parts


def test_a_gpu_host_buffer_keeps_weights_out_of_the_extra_buffers(models: dict[str, Path]) -> None:
    gpu = Hardware(gpus=(find_gpu("rtx3090"),), cpu=AMX)
    plan = make_plan(PlanInputs(load_spec(models["q4_0"]), parse_server_args(["-c", "2048", "-ngl", "0"]), gpu))
    assert [k for k, _ in plan.host.lines["weights"].parts] == ["CPU_Mapped"]
    assert any("--no-host" in n for n in plan.notes)
    plan = make_plan(PlanInputs(load_spec(models["q4_0"]),
                                parse_server_args(["-c", "2048", "-ngl", "0", "--no-host"]), gpu))
    assert "AMX" in dict(plan.host.lines["weights"].parts)
    assert "--no-host" in plan.command


def test_no_mmap_uses_an_allocated_cpu_buffer(models: dict[str, Path]) -> None:
    parts = _parts(models["q4_0"], ["-c", "2048", "--load-mode", "none"], Hardware(cpu=AVX2))
    assert set(parts) == {"CPU", "CPU_REPACK"}


def test_amx_quantized_weights_are_warned(models: dict[str, Path]) -> None:
    plan = make_plan(PlanInputs(load_spec(models["q8_0"]), parse_server_args(["-c", "2048"]), Hardware(cpu=AMX)))
    assert any("AMX tile kernels" in w and "--no-repack" in w for w in plan.warnings)
    plan = make_plan(PlanInputs(load_spec(models["f16"]), parse_server_args(["-c", "2048"]), Hardware(cpu=AMX)))
    assert not any("AMX tile kernels" in w for w in plan.warnings)
    assert plan.cpu is not None and plan.cpu.features == AMX.features


def test_rules_from_source() -> None:
    # AMX: rows a multiple of 32, ne0 a multiple of the block; K-quants need 256
    assert host_weight_buffer("blk.0.ffn_up.weight", "q4_k", (256, 32), 4608, AMX, extra_bufts=True).buffer == "AMX"
    assert host_weight_buffer("blk.0.ffn_up.weight", "q4_0", (256, 40), 5760, AMX, extra_bufts=True).buffer == "CPU_REPACK"
    assert host_weight_buffer("token_embd.weight", "q4_0", (256, 64), 9216, AMX, extra_bufts=True).buffer == ""
    assert amx_alloc_bytes("q4_k", (512, 32), 32 * 2 * 144) == 32 * 2 * 148
    assert amx_alloc_bytes("iq4_xs", (256, 32), 32 * 136) == 32 * 138
    # q2_K repacks only with AVX-512; Arm repacks q8_0 with dot-product
    assert host_weight_buffer("blk.0.attn_q.weight", "q2_k", (256, 8), 672, AVX2, extra_bufts=True).buffer == ""
    assert host_weight_buffer("blk.0.attn_q.weight", "q2_k", (256, 8), 672,
                              parse_cpu_features("avx512f"), extra_bufts=True).buffer == "CPU_REPACK"
    arm = parse_cpu_features("neon,dotprod")
    assert host_weight_buffer("blk.0.attn_q.weight", "q8_0", (256, 4), 1088, arm, extra_bufts=True).buffer == "CPU_REPACK"
    # experts (3-D, MUL_MAT_ID) repack; AMX does not take MUL_MAT_ID
    assert host_weight_buffer("blk.0.ffn_up_exps.weight", "q4_0", (256, 64, 8), 73728, AMX,
                              extra_bufts=True).buffer == "CPU_REPACK"
