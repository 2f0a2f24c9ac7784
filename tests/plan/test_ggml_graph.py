"""The ggml-alloc replay (llamarig.plan.compute.ggml_graph) and the qwen35 graphs built on it, without a
server: the allocator's rules one by one, and figures the real llama-server (build 11434,
portable CPU build) logged for synthetic models, so a regression shows without the binary.
tests/plan/test_against_server.py checks the same against the live server."""

from __future__ import annotations

import gc

import pytest

from llamarig.catalogue.models import build_spec, find_model
from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.plan.compute import replay as R
from llamarig.plan.compute.ggml_graph import FLAG_OUTPUT, DynAllocator, Graph, allocate
from llamarig.plan.compute.graphs import GraphParams
from llamarig.plan.config import parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.units import MiB

from .test_against_server import SHAPES


def test_best_fit_and_merging() -> None:
    a = DynAllocator(32)
    x = a.alloc(100)  # 128 after alignment
    y = a.alloc(64)
    z = a.alloc(256)
    assert (x, y, z) == (0, 128, 192) and a.max_size == 448
    a.free(x, 100)
    a.free(z, 256)  # merges with the open end
    # 64 fits the 128-byte hole at 0 (best fit among the closed blocks), not the end
    assert a.alloc(64) == 0
    a.free(y, 64)
    a.free(0, 64)  # the two holes and the end merge back into one block
    assert a.blocks == [[0, a.blocks[0][1]]] and a.max_size == 448


def test_inplace_reuse_needs_a_single_consumer() -> None:
    g = Graph()
    x = g.input((1024,), "f32")
    a = g.unary(x, "RMS_NORM")  # x has one consumer: a is written over it
    b = g.unary(a)  # and b over a
    c = g.mul_mat(g.external((1024, 8)), b)
    g.expand(c)
    assert allocate(g).size == 4096 + 32  # x/a/b, c

    g = Graph()
    x = g.input((1024,), "f32")
    a = g.unary(x, "RMS_NORM")
    b = g.unary(a)  # a is read again below: no reuse
    c = g.binary("ADD", b, a)
    g.expand(c)
    assert allocate(g).size == 2 * 4096  # x/a, b/c


def test_views_are_free_and_outputs_stay() -> None:
    g = Graph()
    x = g.input((256, 4), "f32")
    a = g.unary(x, "RMS_NORM")
    v = g.reshape(a, 1024)
    out = g.unary(v, "SCALE")  # the parent is a view: a new tensor
    out.flags |= FLAG_OUTPUT
    after = g.mul_mat(g.external((1024, 1024)), out)
    g.expand(after)
    # x/a (the view costs nothing; a is freed once the view's reader ran), out (a new tensor:
    # a view is never written over), after (in a's place); out is never freed
    assert allocate(g).size == 2 * 4096


#: (shape, llama-server flags, CPU compute buffer logged by build 11434 with -lv 4)
LOGGED = [
    ("qwen35", "-c 4096 -np 2", 7.57),
    ("qwen35", "-c 2048 -fa off -np 1", 24.02),
    ("qwen35-q36", "-c 8192 -np 1 -b 4096 -ub 2048", 244.09),
    ("qwen35-q36", "-c 8192 -np 3 -ub 512", 68.26),
    ("qwen35-q36", "-c 8192 -np 1 -b 4096 -ub 64 -ctk f32 -ctv f32", 39.63),
    ("qwen35-q36", "-c 4096 -np 4 -ub 128 -ctk q4_0 -ctv q4_0", 39.71),
    ("qwen35-q36mtp", "-c 4096 -np 1 --spec-type draft-mtp --spec-draft-n-max 3 -ctk f32 -ctv f32", 73.02),
    ("qwen35moe-a3b", "-c 4096 -np 6 -b 2048 -ub 2048 -ctk bf16 -ctv bf16", 216.08),
]


@pytest.mark.parametrize(("model", "args", "logged"), LOGGED, ids=[f"{m}:{a.replace(' ', '_')}" for m, a, _ in LOGGED])
def test_replay_equals_the_logged_buffer(model: str, args: str, logged: float, synth_model) -> None:
    spec = load_spec(synth_model(model.split("-")[0], **SHAPES[model]))
    plan = make_plan(PlanInputs(spec, parse_server_args(args.split()), Hardware()))
    line = plan.host.lines["compute"]
    assert line.method == "exact"
    assert abs(line.bytes / MiB - logged) <= 0.0051, line.formula


def test_mtp_draft_replay_equals_the_logged_buffer(synth_model) -> None:
    """The MTP draft context of the same run: 54.02 MiB logged (its KV is separate)."""
    spec = load_spec(synth_model("qwen35", **SHAPES["qwen35-q36mtp"]))
    argv = ["-c", "4096", "-np", "1", "--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "-ctk", "f32", "-ctv", "f32"]
    plan = make_plan(PlanInputs(spec, parse_server_args(argv), Hardware()))
    from llamarig.plan.memory import mtp_kv_layers, resolve_context

    kv = sum(x.bytes for x in mtp_kv_layers(spec, resolve_context(spec, parse_server_args(argv)), parse_server_args(argv)))
    assert abs((plan.host.get("draft") - kv) / MiB - 54.02) <= 0.0051


def test_a_replayed_graph_is_freed_without_the_cycle_collector() -> None:
    """A replay makes tens of thousands of tensors: they must go by reference counting when the
    replay ends. A reference cycle (a closure calling itself once held the graph's node list)
    keeps them alive until the cycle collector finds them, and every collection before that walks
    them all (it cost about 40 % of a replay)."""
    spec = build_spec(*find_model("qwen3.6-27b:q4_k_m"))
    p = GraphParams(512, 1, 1, 8192, 1, 1, 0, True, "f16", "f16")
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds stays in gc.garbage, to be read
    try:
        R.replay_graph(spec, p, R.Setup.cpu_only(spec.n_layer))
        gc.collect()
        # only the replay's own objects count: a thread another test left behind (an event loop
        # winding down) may make garbage of its own while the collector is off
        ours = [type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("llamarig.plan")]
        assert not ours, f"{len(ours)} of the replay's objects were left to the cycle collector: {ours[:5]}"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
