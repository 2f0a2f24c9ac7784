"""ggml-backend's scheduler and CUDA flash attention's allocation size, rule by rule
(llamarig.plan.compute.ggml_sched.schedule, llamarig.plan.compute.cuda_fattn); the whole of it against the H200
logs is tests/plan/test_h200_evidence.py."""

from __future__ import annotations

import pytest

from llamarig.plan.compute import cuda_fattn
from llamarig.plan.compute.ggml_graph import CPU, GPU, Graph, Tensor, allocate
from llamarig.plan.compute.ggml_sched import schedule


def _fa(g: Graph, n_q: int, tk: str, tv: str, n_kv: int = 4096, d: int = 128, h: int = 16, hkv: int = 4) -> Tensor:
    q = g.permute(g.new("ROPE", (d, h, n_q)), 0, 2, 1, 3)
    k = g.permute(g.view(g.external((d, n_kv, hkv), tk), (d, hkv, n_kv)), 0, 2, 1, 3)
    v = g.permute(g.view(g.external((d, n_kv, hkv), tv), (d, hkv, n_kv)), 0, 2, 1, 3)
    mask = g.input((n_kv, n_q), "f16")
    return g.new("FLASH_ATTN_EXT", (d, h, n_q), "f32", (q, k, v, mask))


@pytest.mark.parametrize(("cc", "n_q", "tk", "tv", "kernel", "copies"), [
    (900, 512, "q8_0", "q8_0", "MMA_F16", (True, True)),  # prompt batch, tensor cores: f16 K and V
    (900, 1, "q8_0", "q8_0", "VEC", (False, False)),  # a vector kernel for q8_0-q8_0 is compiled
    (900, 1, "q8_0", "q4_0", "VEC", (True, True)),  # mixed pair: not in GGML_CUDA_FA_QUANTS, f16 fallback
    (900, 512, "f16", "f16", "MMA_F16", (True, True)),  # needed, but the cache is f16 already: no copy
    (860, 2, "q4_0", "q4_0", "MMA_F16", (True, True)),  # before Ada only one query row takes VEC
    (600, 2, "q4_0", "q4_0", "VEC", (False, False)),  # Pascal: VEC up to two rows
    (600, 64, "q4_0", "q4_0", "TILE", (True, True)),
])
def test_kernel_choice_and_f16_copies(cc: int, n_q: int, tk: str, tv: str, kernel: str,
                                      copies: tuple[bool, bool]) -> None:
    node = _fa(Graph(), n_q, tk, tv)
    q, k, v, mask = node.src
    assert cuda_fattn.best_kernel(cc, q, k, v, mask) == kernel
    assert cuda_fattn.f16_copies(cc, node) == copies


def test_alloc_size_pads_the_output_then_adds_k_and_v() -> None:
    node = _fa(Graph(), 512, "q8_0", "q8_0", n_kv=4096, d=128, hkv=4)
    out = 128 * 16 * 512 * 4
    kv = 128 * 4096 * 4 * 2  # f16 elements of one cache
    assert cuda_fattn.alloc_size(900, node) == out + kv + kv  # out is a multiple of 128 already
    assert cuda_fattn.alloc_size(900, _fa(Graph(), 1, "q8_0", "q8_0")) == 128 * 16 * 4  # VEC reads q8_0


def test_inputs_and_host_weight_get_rows_stay_on_the_cpu_the_gpu_reads_copies() -> None:
    g = Graph()
    emb = g.external((64, 1000), "f16", "token_embd", backend=CPU, weight=True)
    tokens = g.input((32,), "i32", "tokens")
    x = g.get_rows(emb, tokens)  # host weight, GET_ROWS never offloaded: CPU
    w = g.external((64, 64), "f16", "w", backend=GPU, weight=True)
    y = g.mul_mat(w, g.unary(x, "RMS_NORM"))  # the norm follows the GPU matmul after it
    g.expand(y)
    sch = schedule(g)
    assert tokens.be == CPU and x.be == CPU and y.be == GPU
    assert [c.name for c in sch.copies] == ["GPU#GET_ROWS#0"]  # only x crosses to the GPU
    r = allocate(sch.graph, node_buffer=sch.node_buffer, leaf_buffer=sch.leaf_buffer, alignments=(128, 32))
    # CPU: tokens (128 B) and x (8 KiB), allocated before the GPU split starts; GPU: the copy of
    # x, the norm written over it, y
    assert r.sizes[CPU] == 128 + 64 * 32 * 4
    assert r.sizes[GPU] == 64 * 32 * 4 + 64 * 32 * 4
