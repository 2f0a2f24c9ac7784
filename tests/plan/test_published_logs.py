"""The plan against published llama.cpp logs (tests/plan/published_logs.yaml): GPU figures no
machine here can produce. Each test names the log entry it checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from llamarig.api import deployment, machine, plan_model
from llamarig.catalogue.gpus import parse_gpu_arg
from llamarig.catalogue.models import build_spec, find_model
from llamarig.plan import memory as M
from llamarig.plan.compute.buffers import estimate_compute, pipeline_extra, pipeline_parallel
from llamarig.plan.config import parse_server_args

MiB = 1 << 20
LOGS: dict[str, dict[str, Any]] = {
    e["id"]: e for e in yaml.safe_load((Path(__file__).parent / "published_logs.yaml").read_text())}


def _plan(model: str, args: list[str], gpus: list[str]) -> Any:
    return plan_model(deployment(model, args, hardware=machine([parse_gpu_arg(g) for g in gpus])))


def _reported(log: str, i: int) -> Any:
    return LOGS[log]["figures"][i]["reported"]


def test_every_log_names_its_source_build_command_and_lines() -> None:
    for e in LOGS.values():
        assert e["url"].startswith("https://"), e["id"]
        assert e["build"] and e["command"], e["id"]
        assert isinstance(e["lines"], list), e["id"]
        for f in e["figures"]:
            assert f["sample"] in ("in_sample", "out_of_sample"), e["id"]


# ------------------------------------------------------------------- item 3: the first GPU's premium

def _mistral_two_gpus(pre: bool, first: bool) -> float:
    spec = build_spec(*find_model("mistral-small-24b:q8_0"))
    ctx = M.resolve_context(spec, parse_server_args(["-c", "150272", "-b", "4096", "-ub", "4096", "-np", "1",
                                                     "-fa", "on"]))
    pp = pipeline_parallel(n_devices=2, n_gpu_layers=41, n_layer_all=40, split_mode="layer",
                           backends=("CUDA", "CUDA"))
    extra = pipeline_extra(spec, ctx, 1, pp, first=first, output=not first, pre_23764_mask=pre)
    return (estimate_compute(spec, ctx, 1).bytes + extra.bytes) / MiB


def test_pr16748_first_gpu_compute_of_a_build_before_the_f16_mask() -> None:
    # 4 copies of the f32 mask (2348 MiB each) + the f16 cast + 4 x the embeddings + the FFN phase
    assert _mistral_two_gpus(pre=True, first=True) == pytest.approx(_reported("pr16748-two-gpu-mistral-small", 1),
                                                                     rel=0.02)


def test_pr16748_kv_of_21_layers_on_cuda0() -> None:
    spec = build_spec(*find_model("mistral-small-24b:q8_0"))
    ctx = M.resolve_context(spec, parse_server_args(["-c", "150272", "-np", "1"]))
    per_layer = M.kv_layers(spec, ctx, "f16", "f16")[0].bytes
    assert 21 * per_layer / MiB == _reported("pr16748-two-gpu-mistral-small", 0)


def test_pr15860_the_premium_is_the_pre_23764_mask_and_gone_at_the_pinned_build() -> None:
    # before PR #23764 the first GPU held the f32 mask copies and the cast: nearly twice the others
    first, other = _mistral_two_gpus(pre=True, first=True), _mistral_two_gpus(pre=True, first=False)
    reported = _reported("pr15860-three-4090", 0)
    assert first / other > 1.5 and reported[0] / reported[1] > 1.5
    # at the pinned build every GPU copies the same f16 inputs
    assert _mistral_two_gpus(pre=False, first=True) == pytest.approx(_mistral_two_gpus(pre=False, first=False))


def test_the_first_gpu_premium_at_the_pinned_build_is_the_mixed_batch_branch() -> None:
    """Not the f32 mask any more (PR #23764), but build_inp_embd's mixed-batch branch
    (llama-graph.cpp:2469-2486): its DUP and SET_ROWS run on the first GPU, which therefore copies
    the mixed embeddings input, their token rows and the slots besides the token rows, 4 times
    each under pipeline parallelism, and holds the DUP. The replay of the scheduler gives it (and
    was checked on the RPC rig to the log's rounding: tests/plan/test_rpc_grid.py)."""
    p = _plan("llama3.1-70b:q4_k_m", ["-c", "32768", "-np", "1"], ["rtx4090", "rtx4090", "rtx4090"])
    c = [d.lines["compute"].bytes for d in p.devices]
    e, n = 8192, 512
    assert abs(c[1] - c[2]) < 1024  # the last GPU's output rows and logits: one output
    assert c[0] - c[1] == 4 * (2 * e * n * 4 + n * 8) + e * n * 4


# ------------------------------------------------------------------------- item 4: the MTP context

@pytest.mark.parametrize("log, args", [
    ("hilbertraum-391-32k", ["-c", "32768", "-np", "1"]),
    ("hilbertraum-391-8k", ["-c", "8192", "-np", "1"]),
    ("hilbertraum-318-8k-np4", ["-c", "8192"]),
])
def test_mtp_context_on_a_gpu_at_ub_2048(log: str, args: list[str]) -> None:
    p = _plan("qwen3.8-27b:q5_k_m", [*args, "-b", "2048", "-ub", "2048", "--spec-type", "draft-mtp",
                                      "--spec-draft-n-max", "2"], ["rtx3090"])
    # KV exact + the replayed MTP graph (nothing fitted on these runs any more)
    assert p.devices[0].lines["draft"].bytes / MiB == pytest.approx(_reported(log, 0), abs=0.02)


def test_pr25465_mtp_context_at_262k_ub_1024_out_of_sample() -> None:
    spec = build_spec(*find_model("qwen3.8-27b"))  # the Qwen3.6-27B MTP block has the same shape
    cfg = parse_server_args(["-c", "262144", "-b", "4096", "-ub", "1024", "-np", "1", "--spec-type", "draft-mtp",
                             "--spec-draft-n-max", "2"])
    ctx = M.resolve_context(spec, cfg)
    kv = sum(x.bytes for x in M.mtp_kv_layers(spec, ctx, cfg))
    assert kv / MiB == _reported("pr25465-mtp-262k", 0)
    est = estimate_compute(spec, ctx, 1, layers="mtp", gpu=True)
    # the replayed graph (nothing fitted): within the log's rounding of the CUDA figure
    assert est.bytes / MiB == pytest.approx(_reported("pr25465-mtp-262k", 1), abs=0.01)
    assert "replayed" in est.formula


# ------------------------------------------------------------------ item 5: gpt-oss with --n-cpu-moe

def test_gpt_oss_20b_keeps_attention_and_output_in_q8_0_on_the_gpu() -> None:
    spec = build_spec(*find_model("gpt-oss-20b:mxfp4"))
    on_gpu = [t for t in spec.tensors if "_exps." not in t.name and t.name != "token_embd.weight"]
    assert {t.ggml_type for t in on_gpu if t.name.endswith("attn_q.weight")} == {"q8_0"}
    p = _plan("gpt-oss-20b:mxfp4", ["-ngl", "99", "--n-cpu-moe", "99", "-c", "131072", "-fa", "on", "-np", "1"],
              ["rtx3090:8"])
    gpu_w = p.devices[0].lines["weights"].bytes
    assert gpu_w == pytest.approx(sum(t.n_bytes for t in on_gpu), rel=0.002)  # + CUDA row padding
    assert 1230 * MiB < gpu_w < 1250 * MiB  # was 673 MiB with the file size spread by parameter count
    assert p.devices[0].lines["kv"].bytes == (3072 + 18) * MiB


# ------------------------------------------------------------------- item 5: published file sizes

def test_qwen3_coder_q4_k_m_uses_the_logged_file_size() -> None:
    spec = build_spec(*find_model("qwen3-coder-30b-a3b:q4_k_m"))
    reported = _reported("issue17067-qwen3-coder-30b-a3b-q4_k_m-size", 0)
    assert abs(spec.file_bytes / (1 << 30) - reported) <= 0.005  # printed to 0.01 GiB
    assert spec.origin is not None and not spec.origin.size_estimated


@pytest.mark.parametrize("mid", sorted(_reported("bartowski-qwen3-file-tables", 0)))
def test_catalogue_sizes_from_published_file_tables(mid: str) -> None:
    spec = build_spec(*find_model(mid))
    assert spec.file_bytes / 1e9 == pytest.approx(_reported("bartowski-qwen3-file-tables", 0)[mid], abs=0.005)
    assert spec.origin is not None and not spec.origin.size_estimated
