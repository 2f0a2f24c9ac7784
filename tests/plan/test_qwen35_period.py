"""The replay's shortcut (plan/compute/replay.py ``make_cut``): a trunk whose layers repeat is replayed
on a cut of a few periods per device; the figure must be the full replay's exactly, and a trunk
that does not repeat gets the full replay."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamarig.catalogue.models import build_spec, find_model
from llamarig.plan.compute import replay as R
from llamarig.plan.compute.ggml_sched import Backend, cuda_backend
from llamarig.plan.compute.graphs import GraphParams, Layout

CASES = [(512, "f16", 65536, 1, 1), (1, "q8_0", 4096, 1, 1), (4096, "q4_0", 262144, 3, 1),
         (64, "bf16", 131072, 1, 2), (2048, "f32", 8192, 4, 4)]


def _params(ub: int, kv: str, n_kv: int, n_rs: int, n_seqs: int) -> GraphParams:
    return GraphParams(n_tokens=ub * n_seqs, n_seqs=n_seqs, n_outputs=n_seqs, n_kv=n_kv, n_stream=1, n_rs=n_rs,
                       n_rs_seq=0, flash_attn=True, type_k=kv, type_v=kv)


@pytest.mark.parametrize("model_id", ["qwen3.6-27b:q4_k_m", "qwen3.8-27b:ud-q4_k_xl", "qwen3.6-35b-a3b:q4_k_m"])
def test_cut_replay_equals_the_full_replay(model_id):
    m, q = find_model(model_id)
    spec = build_spec(m, q)
    assert R.make_cut(spec, Layout.single(spec.n_layer)) is not None
    cuda = R.Setup(Layout.single(spec.n_layer, 0, 1), (cuda_backend("CUDA0", 900), Backend("CUDA_Host")))
    for ub, kv, n_kv, n_rs, n_seqs in CASES:
        p = _params(ub, kv, n_kv, n_rs, n_seqs)
        cpu = R.Setup.cpu_only(spec.n_layer)
        assert R.buffers(spec, p, cpu) == R.replay(spec, p, cpu), (ub, kv, n_kv)
        # one CUDA GPU: the scheduled graph's two buffers (CUDA0, CUDA_Host) likewise
        assert R.buffers(spec, p, cuda) == R.replay(spec, p, cuda), (ub, kv, n_kv)


def test_a_trunk_that_does_not_repeat_is_replayed_whole():
    m, q = find_model("qwen3.6-27b:q4_k_m")
    spec = build_spec(m, q)
    layers = list(spec.layers)
    i = next(k for k, ly in enumerate(layers) if ly.kind != "recurrent" and k > 20)
    layers[i] = replace(layers[i], n_head=layers[i].n_head // 2)  # one odd attention layer
    assert R.make_cut(replace(spec, layers=tuple(layers)), Layout.single(spec.n_layer)) is None
