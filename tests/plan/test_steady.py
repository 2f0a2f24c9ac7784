"""One replay of a cut trunk stands for the whole trunk when the allocators' states repeat
(plan/compute/steady.py): the rule on hand-made states, and on real graphs, where the one replay must
give the full replay's buffers exactly and be the only one made."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from llamarig.catalogue.models import build_spec, find_model
from llamarig.plan.compute import replay as R
from llamarig.plan.compute.ggml_sched import Backend, cuda_backend
from llamarig.plan.compute.graphs import GraphParams, Layout
from llamarig.plan.compute.steady import State, Watch, same
from llamarig.testing.layouts import random_case

FREE = ((0, 1 << 62),)


class _T:
    """A stand-in tensor: only whether it is still alive matters to the comparison."""

    def __init__(self, alive: bool = False) -> None:
        self.allocated = alive
        self.view_src = None
        self.n_children = 0


def _state(blocks: tuple[tuple[int, int], ...], *live: tuple[tuple[int, int, int, int, int, int, int], _T]) -> State:
    return State(0, (blocks,), tuple(live))  # type: ignore[arg-type]


def _t(dist: int, offset: int, children: int = 1) -> tuple[int, int, int, int, int, int, int]:
    return (dist, 0, offset, 64, children, 0, 0)


def _steady(*states: State, every: int = 2) -> bool:
    w = Watch(every)
    for s in states:
        w.add(s)
    return w.steady


def test_a_period_that_changes_nothing_is_steady() -> None:
    a = _state(((128, 1 << 62),), (_t(0, 0), _T()))
    b = _state(((128, 1 << 62),), (_t(0, 0), _T()))  # another tensor in the same role and place
    assert _steady(a, b)
    assert _steady(a, a, b)


def test_a_state_that_alternates_is_steady_over_two_periods() -> None:
    """A residual stream that changes place each period: the state repeats after two."""
    x = _state(((0, 64), (128, 1 << 62)), (_t(0, 64), _T()))
    y = _state(((64, 1 << 62),), (_t(0, 0), _T()))
    assert not _steady(x, y)
    assert _steady(x, y, x)
    # a cut that leaves out single periods must not take it: it could end in the other phase
    assert not _steady(x, y, x, every=1)


def test_different_blocks_roles_or_children_are_not_steady() -> None:
    a = _state(((128, 1 << 62),), (_t(0, 0), _T()))
    assert not _steady(a, _state(((256, 1 << 62),), (_t(0, 0), _T())))
    assert not _steady(a, _state(((128, 1 << 62),), (_t(3, 0), _T())))
    assert not _steady(a, _state(((128, 1 << 62),), (_t(0, 0, children=2), _T())))


def test_a_tensor_alive_at_both_points_is_the_same_one() -> None:
    """An input copy made at the stretch's start and read by every layer: still alive at the
    later point, whether or not that scan reached back to it, it does not count against the
    state; gone by then, it does."""
    copy = _T(alive=True)
    a = _state(FREE, (_t(40, 0, children=9), copy))
    assert _steady(a, _state(FREE, (_t(80, 0, children=5), copy)))
    assert _steady(a, _state(FREE))
    gone = _state(FREE, (_t(40, 0, children=9), _T()))
    assert not _steady(gone, _state(FREE))
    assert same(a, a)


def _layout(n_layer: int, splits: tuple[int, ...], cpu_first: int = 0) -> Layout:
    n_dev = len(splits)
    layers = [n_dev] * cpu_first
    for d, n in enumerate(splits):
        layers += [d] * n
    layers += [n_dev - 1] * (n_layer - len(layers))
    return Layout(tuple(layers[:n_layer]), n_dev - 1, n_dev, full_offload=cpu_first == 0)


CASES = [
    ("qwen3.6-27b:q4_k_m", "cuda", (22, 22, 21), 0, 4),
    ("qwen3.8-27b:ud-q4_k_xl", "cuda", (45, 21), 0, 4),
    ("qwen3.6-27b:q4_k_m", "rpc", (13, 30, 21), 0, 4),
    ("gemma3-27b:q4_k_m", "cuda", (21, 21, 20), 0, 4),
    ("llama3.1-8b:q4_k_m", "rpc", (17, 16), 0, 4),
    ("llama3.1-70b:q4_k_m", "cuda", (39,), 41, 1),
]


@pytest.mark.parametrize(("model_id", "kind", "splits", "cpu_first", "n_copies"), CASES)
def test_a_cut_gives_the_full_buffers_without_the_whole_trunk(model_id: str, kind: str, splits: tuple[int, ...],
                                                               cpu_first: int, n_copies: int,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    spec = build_spec(*find_model(model_id))
    devs = tuple(cuda_backend(f"CUDA{i}", 890) if kind == "cuda" else Backend(f"RPC{i}") for i in range(len(splits)))
    setup = R.Setup(_layout(spec.n_layer, splits, cpu_first), (*devs, Backend("CPU")), n_copies)
    whole = R.replay_graph
    calls: list[object] = []

    def counted(*a: object, **k: object) -> tuple[int, ...]:
        calls.append(a)
        return whole(*a, **k)  # type: ignore[arg-type]

    for p in (GraphParams(512, 1, 1, 32768, 1, 1, 0, True, "f16", "f16"),
              GraphParams(2048, 2, 2, 16384, 1, 2, 0, True, "q8_0", "q4_0")):
        R.forget()
        monkeypatch.setattr(R, "replay_graph", counted)
        got = R.buffers(spec, p, setup)
        monkeypatch.setattr(R, "replay_graph", whole)
        assert not calls, "the whole trunk was replayed: no cut showed the steady state"
        assert got == R.replay(spec, p, setup), (model_id, splits, p)


def test_a_recurrent_model_is_cut_by_two_periods() -> None:
    """qwen35's residual stream changes place with each recurrent layer: a cut that leaves out
    single periods shows no steady state, one that leaves out pairs does, and is the one used."""
    spec = build_spec(*find_model("qwen3.6-27b:q4_k_m"))
    setup = R.Setup(_layout(spec.n_layer, (22, 22, 21)), (*(Backend(f"RPC{i}") for i in range(3)), Backend("CPU")), 4)
    p = GraphParams(512, 1, 1, 32768, 1, 1, 0, True, "f16", "f16")
    one = R.make_cut(spec, setup.layout, every=1)
    two = R.make_cut(spec, setup.layout, every=2)
    assert one is not None and two is not None
    assert not R._steady_replay(spec, p, setup, one)[1]
    assert R._steady_replay(spec, p, setup, two)[1]
    assert R._periods_left_out(spec) == (2,)
    assert R._periods_left_out(build_spec(*find_model("gemma3-27b:q4_k_m"))) == (1, 2)


def test_cache_types_count_exactly_when_a_cache_is_copied() -> None:
    """Layers on the CPU keep their KV in host memory; the scheduler runs their flash attention on
    the GPU, which reads copies of the caches' views: q8_0 and q4_0 copies differ in bytes, so the
    memo must not take one for the other (they would share a class with every cache on a GPU)."""
    spec = build_spec(*find_model("llama3.1-70b:q4_k_m"))
    setup = R.Setup(_layout(spec.n_layer, (39,), 41), (cuda_backend("CUDA0", 860), Backend("CUDA_Host")))
    p8 = GraphParams(512, 1, 1, 65536, 1, 1, 0, True, "q8_0", "q8_0")
    p4 = GraphParams(512, 1, 1, 65536, 1, 1, 0, True, "q4_0", "q4_0")
    assert R.replay_graph(spec, p8, setup) != R.replay_graph(spec, p4, setup)
    assert R.kv_class(p8, setup.backends, setup.layout) != R.kv_class(p4, setup.backends, setup.layout)
    on_gpu = R.Setup(Layout.single(spec.n_layer, 0, 1), setup.backends)
    assert R.kv_class(p8, setup.backends, on_gpu.layout) == R.kv_class(p4, setup.backends, on_gpu.layout)


def test_a_cut_that_does_not_show_the_steady_state_gives_way_to_the_whole_trunk() -> None:
    """-nkvo over two RPC servers, the output on the second: the cut's replay shows no steady
    state, and the whole trunk is replayed (two cuts a period apart gave equal buffers here, and
    48 KiB less than the whole trunk on the first server)."""
    spec = build_spec(*find_model("qwen3.6-27b:q4_k_m"))
    lay = Layout(tuple([0] * 26 + [1] * 38), 1, 2, kv_on_cpu=True)
    setup = R.Setup(lay, (Backend("RPC0"), Backend("RPC1"), Backend("CPU")))
    p = GraphParams(2, 1, 1, 32768, 1, 1, 0, True, "bf16", "f16")
    cut = R.make_cut(spec, lay)
    assert cut is not None
    assert not R._steady_replay(spec, p, setup, cut)[1]
    R.forget()
    assert R.buffers(spec, p, setup) == R.replay(spec, p, setup)


def test_a_copy_made_where_a_stretch_first_needs_it_keeps_the_proof_away() -> None:
    """26 gemma3 layers on the CPU before two GPUs: CUDA0 takes over their matrix products and
    flash attention, and the first global-attention layer (the sixth) makes CUDA0's copy of the
    global mask, which the whole stretch keeps for its later global layers; a cut of 8 layers
    frees it at once, and its state after layer 6 equals the one after layer 0. That window does
    not count (a cut trusted there gave CUDA0 739 MiB instead of 813); the cut keeps a period more
    of a stretch in host memory, and the proof comes from the periods after the first."""
    spec = build_spec(*find_model("gemma3-27b:q4_k_m"))
    lay = Layout(tuple([2] * 26 + [0] * 2 + [1] * 34), 2, 2, full_offload=False)
    setup = R.Setup(lay, (cuda_backend("CUDA0", 860), cuda_backend("CUDA1", 860), Backend("CPU")))
    p = GraphParams(2048, 2, 2, 4096, 2, 2, 0, True, "q4_0", "q4_0", 2048)
    short = R.Cut(replace(lay, keep=(*range(8), 26, 27, *range(28, 28 + 34))), ((0, 8),), 6, 1)
    assert not R._steady_replay(spec, p, setup, short)[1]
    cut = R.make_cut(spec, lay, R._sized(setup), every=1)
    assert cut is not None and cut.stretches[0][1] > 8
    assert R._steady_replay(spec, p, setup, cut)[1]
    R.forget()
    assert R.buffers(spec, p, setup) == R.replay(spec, p, setup)


@pytest.mark.parametrize(("seed", "overrides"), [(0, False), (1, False), (2, True)])
def test_random_reservations_equal_the_whole_trunk(seed: int, overrides: bool) -> None:
    """Seeded random cases (llamarig.testing.layouts; benchmarks/check_cut.py runs thousands): the
    shortcuts give the whole trunk's buffers on every backend."""
    rng = random.Random(seed)
    for _i in range(25):
        c = random_case(rng, overrides=overrides)
        R.forget()
        assert R.buffers(c.spec, c.params, c.setup) == R.replay(c.spec, c.params, c.setup), (seed, _i, c.model)


def test_a_quant_mix_keeps_the_host_stretch_whole_and_cuts_the_gpu_one() -> None:
    """Q4_K_M gives some layers a bigger ffn_down; a GPU that takes over the ops of layers in host
    memory copies their weights in, so the host stretch repeats only by size, and does not: it
    is kept whole, while the GPU's stretch, whose weights are never copied, is cut."""
    from llamarig.testing.layouts import quant_mix

    spec = quant_mix(build_spec(*find_model("qwen3.8-27b:ud-q4_k_xl")))
    lay = Layout(tuple([1] * 20 + [0] * (spec.n_layer - 20)), 0, 1, full_offload=False)
    setup = R.Setup(lay, (cuda_backend("CUDA0", 890), Backend("CUDA_Host")))
    assert R._sized(setup)
    cut = R.make_cut(spec, lay, True, every=2)
    assert cut is not None and cut.layout.keep is not None
    assert cut.layout.keep[:20] == tuple(range(20))  # the host stretch, whole
    assert [f for f, _n in cut.stretches] == [20]  # only the GPU's is cut
    p = GraphParams(1024, 1, 1, 65536, 1, 1, 0, True, "q8_0", "q8_0")
    R.forget()
    assert R.buffers(spec, p, setup) == R.replay(spec, p, setup)
    assert R._steady_replay(spec, p, setup, cut)[1]
