"""Pipeline-parallel compute buffers and the output phase (pure functions, hand-computed values).

With several GPUs and a layer split llama.cpp keeps GGML_SCHED_MAX_COPIES = 4 never-freed copies
of every split input per GPU (ggml-backend.cpp:1515-1533, 1703-1733, 2028). No multi-GPU machine
was available: these values are the source's arithmetic, not measurements.
"""

from __future__ import annotations

import pytest

from llamarig.catalogue.models import build_spec, find_model
from llamarig.plan import memory as M
from llamarig.plan.compute.buffers import (
    GGML_SCHED_MAX_COPIES,
    estimate_compute,
    host_pipeline_extra,
    pipeline_extra,
    pipeline_parallel,
    pipeline_split_inputs,
)
from llamarig.plan.config import parse_server_args

MiB = 1 << 20


@pytest.fixture(scope="module")
def llama8b():
    spec = build_spec(*find_model("llama3.1-8b"))
    ctx = M.resolve_context(spec, parse_server_args(["-c", "32768", "-np", "1"]))
    assert ctx.flash_attn and ctx.n_ubatch == 512 and ctx.n_ctx_seq == 32768
    return spec, ctx


def _pp(**kw):
    args = dict(n_devices=2, n_gpu_layers=33, n_layer_all=32, split_mode="layer", backends=("CUDA", "CUDA"))
    args.update(kw)
    return pipeline_parallel(**args)


def test_pipeline_parallel_conditions() -> None:
    on = _pp()
    assert on.enabled and on.n_copies == GGML_SCHED_MAX_COPIES == 4
    assert "llama-context.cpp:431-457" in on.reason
    for kw, why in [(dict(n_devices=1, backends=("CUDA",)), "1 model device"),
                    (dict(n_gpu_layers=32), "-ngl 32 <= n_layer 32"),
                    (dict(split_mode="row"), "-sm row"),
                    (dict(offload_kqv=False), "-nkvo"),
                    (dict(tensor_overrides=True), "tensor overrides"),
                    (dict(backends=("CUDA", "OpenCL")), "OpenCL")]:
        off = _pp(**kw)
        assert not off.enabled and off.n_copies == 1, kw
        assert why in off.reason, (kw, off.reason)
    # the CPU backend is ignored by the capability check; Metal, Vulkan, RPC report async + events
    assert _pp(backends=("CPU", "RPC", "Metal", "Vulkan")).enabled


def test_split_inputs_per_stage(llama8b) -> None:
    spec, ctx = llama8b
    # f16 mask 32768 x 512 x 2 B = 32 MiB; embeddings 4096 x 512 x 4 B = 8 MiB; positions 512 x 4 B
    first, what = pipeline_split_inputs(spec, ctx, 1, first=True, output=False)
    assert first == 32 * MiB + 8 * MiB + 2048
    assert "token embeddings from the CPU" in what
    last, what = pipeline_split_inputs(spec, ctx, 1, first=False, output=True)
    assert last == 32 * MiB + 8 * MiB + 2048 + 4  # + one output id (i32)
    assert "residual stream from the previous GPU" in what and "output ids" in what


def test_pipeline_extra_first_and_last_gpu(llama8b) -> None:
    spec, ctx = llama8b
    pp = _pp()
    e0 = pipeline_extra(spec, ctx, 1, pp, first=True, output=False)
    # 4 copies of (8 MiB + 32 MiB + 2048 B) less the one mask the single-GPU model counts
    assert e0.bytes == 4 * (40 * MiB + 2048) - 32 * MiB == 134225920
    e1 = pipeline_extra(spec, ctx, 1, pp, first=False, output=True)
    assert e1.bytes == 4 * (40 * MiB + 2048 + 4) - 32 * MiB == 134225936
    assert "not measured on several GPUs" in e0.formula and "ggml-backend.cpp" in e0.formula
    # off: nothing added
    off = pipeline_extra(spec, ctx, 1, _pp(split_mode="row"), first=True, output=False)
    assert off.bytes == 0 and off.formula == ""


def test_pipeline_extra_scales_with_context_through_the_mask(llama8b) -> None:
    spec, _ = llama8b
    ctx = M.resolve_context(spec, parse_server_args(["-c", "131072", "-np", "1"]))
    e = pipeline_extra(spec, ctx, 1, _pp(), first=True, output=False)
    # mask 131072 x 512 x 2 B = 128 MiB: 3 extra copies (384 MiB) + 4 x (8 MiB + 2048 B)
    assert e.bytes == 3 * 128 * MiB + 4 * (8 * MiB + 2048)


def test_host_pipeline_extra(llama8b) -> None:
    spec, ctx = llama8b
    h = host_pipeline_extra(spec, ctx, 1, _pp())
    # one copy: tokens 2048 + embd 8 MiB + mixed tokens 2048 + slots 4096 + mixed embd 8 MiB
    #           + positions 2048 + output id 4 + mask 32 MiB
    per_copy = 2048 + 8 * MiB + 2048 + 4096 + 8 * MiB + 2048 + 4 + 32 * MiB
    assert h.bytes == 3 * per_copy == 151025676
    assert host_pipeline_extra(spec, ctx, 1, _pp(n_devices=1)).bytes == 0


def test_output_phase_when_every_token_is_an_output() -> None:
    # llama.cpp before PR #23861 reserved n_ubatch outputs: gpt-oss-20b on Metal printed a
    # 404.00 MiB compute buffer (PR #17609) = logits 201088 x 512 x 4 B + 2 x 2880 x 512 x 4 B
    oss = build_spec(*find_model("gpt-oss-20b"))
    ctx = M.resolve_context(oss, parse_server_args(["-c", "4096", "-np", "1"]))
    est = estimate_compute(oss, ctx, 512)
    assert est.bytes == 201088 * 512 * 4 + 2 * 2880 * 512 * 4 == 404 * MiB
    assert est.formula.startswith("output phase 404.00 MiB")
    # with one output the layers' peak wins and the logits stay additive (CPU calibration)
    one = estimate_compute(oss, ctx, 1)
    assert one.bytes < 150 * MiB and "output phase" not in one.formula
