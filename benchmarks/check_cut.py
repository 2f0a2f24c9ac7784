"""Check: the replay's shortcuts against the whole-trunk replay on random reservations.

Method: ``llamarig.testing.layouts.random_case`` (seeded) draws a catalogue model, 1-3 CUDA GPUs or
RPC servers, layers on the CPU first or not, -nkvo, pipeline copies, op offload, -ot style
overrides (``--overrides``) and a reservation (-ub, -np, cache types, flash attention); for each
case with a cut, ``replay.buffers`` (memo and cut forgotten first) must equal ``replay.replay``
(the whole trunk, no memo, no cut), byte for byte, on every backend. Prints the cases, how many
cut replays showed a steady state and how many gave way to the whole trunk, and every case that
differs (with what to rebuild it: the seed and the case's index).

``--catalogue``: instead, every ``buffers`` call with a cut that the optimiser (and plans with
-ngl 20, -nkvo, -sm none, -np 3 with q8_0/q4_0, --no-op-offload, -ot, flash attention off) make
for every catalogue model on one, two and three GPUs, each against the whole trunk.

Run:  .venv/bin/python benchmarks/check_cut.py [--seed 1] [--cases 400] [--overrides] [--catalogue]
"""

from __future__ import annotations

import argparse
import random
import time

from llamarig.catalogue.gpus import find_gpu
from llamarig.catalogue.models import build_spec, find_model, load_models
from llamarig.gguf.spec import ModelSpec
from llamarig.hardware import Hardware
from llamarig.plan.compute import buffers as compute
from llamarig.plan.compute import replay
from llamarig.plan.compute.graphs import GraphParams
from llamarig.plan.config import parse_server_args
from llamarig.plan.optimise.search import Targets, optimise
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.testing.layouts import MODELS, random_case
from llamarig.units import GiB


def catalogue() -> int:
    """The optimiser's and a few plans' replays with a cut, on every catalogue model."""
    calls: dict[tuple[object, ...], tuple[object, ...]] = {}
    plain = replay.buffers

    def recorded(spec: ModelSpec, p: GraphParams, setup: replay.Setup, mtp: bool = False, *,
                 dry_run: bool = False) -> tuple[int, ...]:
        out = plain(spec, p, setup, mtp, dry_run=dry_run)
        if not mtp and any(replay.make_cut(spec, setup.layout, replay._sized(setup), e) for e in (1, 2)):
            calls.setdefault((id(spec), p, setup, dry_run), (spec, p, setup, dry_run, out))
        return out

    compute.buffers = recorded  # type: ignore[assignment]
    gpus = (["rtx3090"], ["rtx3090", "rtx4060ti16"], ["rtx5070ti", "rtx5060ti16", "rtx4060ti16"])
    extras = (["-ngl", "20"], ["-nkvo"], ["-sm", "none", "-mg", "0"], ["-np", "3", "-ctk", "q8_0", "-ctv", "q4_0"],
              ["--no-op-offload", "-ngl", "10"], ["-ot", "blk\\.[0-9]\\.ffn_.*=CPU"], ["-fa", "off", "-c", "8192"])
    for mid in load_models():
        spec = build_spec(*find_model(mid))
        mtp = ["--spec-type", "draft-mtp"] if spec.nextn_layers else []
        for names in gpus:
            hw = Hardware(tuple(find_gpu(g) for g in names), ram_bytes=64 * GiB)
            replay.forget()
            optimise(PlanInputs(spec, parse_server_args(mtp), hw), Targets(ctx=min(65536, spec.n_ctx_train or 4096)))
            for extra in extras:
                replay.forget()
                make_plan(PlanInputs(spec, parse_server_args(["-c", "32768", *mtp, *extra]), hw))
    compute.buffers = plain  # type: ignore[assignment]
    bad = 0
    for spec, p, setup, dry, got in calls.values():  # type: ignore[misc]
        whole = replay.replay_graph(spec, p, setup) if dry else replay.replay(spec, p, setup)
        if got != whole:
            bad += 1
            print(f"DIFF {spec.architecture} {p} {setup}: {got} != {whole}")
    print(f"catalogue: {len(calls)} replays with a cut, {bad} differ")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--overrides", action="store_true", help="-ot / --n-cpu-moe style overrides in every case")
    ap.add_argument("--catalogue", action="store_true", help="the optimiser's and plans' replays on the catalogue")
    a = ap.parse_args()
    if a.catalogue:
        return catalogue()
    rng = random.Random(a.seed)
    specs = {m: build_spec(*find_model(m)) for m in MODELS}
    seen = {True: 0, False: 0}
    plain = replay._steady_replay

    def counted(*args: object) -> tuple[tuple[int, ...], bool]:
        out = plain(*args)  # type: ignore[arg-type]
        seen[out[1]] += 1
        return out

    replay._steady_replay = counted  # type: ignore[assignment]
    bad = cut = 0
    t = time.perf_counter()
    for i in range(a.cases):
        c = random_case(rng, specs, a.overrides)
        if all(replay.make_cut(c.spec, c.setup.layout, replay._sized(c.setup), e) is None for e in (1, 2)):
            continue
        cut += 1
        replay.forget()
        got = replay.buffers(c.spec, c.params, c.setup)
        whole = replay.replay(c.spec, c.params, c.setup)
        if got != whole:
            bad += 1
            print(f"DIFF seed {a.seed} case {i}: {c.model} {c.params} {c.setup}: {got} != {whole}")
    print(f"seed {a.seed}: {a.cases} cases, {cut} with a cut, {bad} differ; cut replays steady {seen[True]}, "
          f"not {seen[False]} (whole trunk then); {time.perf_counter() - t:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
