"""Property checks of the memory model over random llama-server settings (hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamarig.catalogue.gpus import parse_gpu_arg
from llamarig.catalogue.models import build_spec, find_model
from llamarig.errors import InputError
from llamarig.gguf.ggml_types import KV_CACHE_TYPES
from llamarig.hardware import Hardware
from llamarig.plan import memory as M
from llamarig.plan.config import parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan

SPECS = {mid: build_spec(*find_model(mid)) for mid in ("qwen3.6-27b:iq4_nl", "gemma3-27b", "qwen3-30b-a3b", "gpt-oss-20b")}
GPUS = ["rtx3090", "4060ti", "5090", "h100"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(sorted(SPECS)),
    ctx=st.integers(min_value=1, max_value=400_000),
    np_=st.sampled_from([None, 1, 2, 3, 4, 8]),
    kvu=st.sampled_from([None, True, False]),
    ctk=st.sampled_from(KV_CACHE_TYPES),
    ctv=st.sampled_from(KV_CACHE_TYPES),
    fa=st.sampled_from(["on", "off", "auto"]),
    ub=st.sampled_from([64, 256, 512, 2048]),
    gpus=st.lists(st.sampled_from(GPUS), max_size=3),
    ngl=st.sampled_from([None, 0, 5, 30, 99]),
)
def test_plan_invariants(model, ctx, np_, kvu, ctk, ctv, fa, ub, gpus, ngl) -> None:
    argv = ["-c", str(ctx), "-ctk", ctk, "-ctv", ctv, "-fa", fa, "-ub", str(ub)]
    if np_ is not None:
        argv += ["-np", str(np_)]
    if kvu is not None:
        argv.append("-kvu" if kvu else "-no-kvu")
    if ngl is not None:
        argv += ["-ngl", str(ngl)]
    spec = SPECS[model]
    try:
        cfg = parse_server_args(argv)
        plan = make_plan(PlanInputs(spec, cfg, Hardware(tuple(parse_gpu_arg(g) for g in gpus), 64 << 30)))
    except InputError as e:
        # only the documented contradictions
        assert "flash attention" in str(e) or "does not divide" in str(e)
        return
    # llama-context.cpp:290-305: n_ctx is padded to 256; without unified KV each of the n_seq
    # streams gets pad(n_ctx / n_seq, 256) cells and n_ctx is that times n_seq
    padded = -(-ctx // 256) * 256
    assert plan.n_ctx % 256 == 0
    if plan.kv_unified:
        assert plan.n_ctx == padded and plan.n_ctx_seq == padded
    else:
        assert plan.n_ctx_seq == -(-(padded // plan.n_parallel) // 256) * 256 and plan.n_ctx_seq % 256 == 0
    assert plan.n_ctx_seq * (1 if plan.kv_unified else plan.n_parallel) == plan.n_ctx
    assert plan.n_ctx_slot <= (spec.n_ctx_train or plan.n_ctx_slot)
    kv_total = sum(d.get("kv") for d in plan.devices) + plan.host.get("kv")
    ctx_l = M.resolve_context(spec, cfg)
    assert kv_total == sum(x.bytes for x in M.kv_layers(spec, ctx_l, ctk, ctv))
    for d in plan.devices:
        assert all(ln.bytes >= 0 for ln in d.lines.values())
        assert d.total == sum(d.get(c) for c in ("weights", "kv", "recurrent", "compute", "mmproj", "draft", "other"))
    weights = sum(d.get("weights") for d in plan.devices) + plan.host.get("weights")
    assert weights >= spec.weights_bytes  # tied-output duplicates may add
    json.dumps(plan.to_json())
    assert plan.fits == (not plan.shortfalls())


def test_np_limit() -> None:
    with pytest.raises(InputError, match="256"):
        parse_server_args(["-np", "300"])
