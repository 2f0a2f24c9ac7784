"""Check: the replay's shortcuts against the whole-trunk replay on random reservations.

Method: ``llamarig.testing.layouts.random_case`` (seeded) draws a catalogue model, 1-3 CUDA GPUs or
RPC servers, layers on the CPU first or not, -nkvo, pipeline copies, op offload, -ot style
overrides (``--overrides``) and a reservation (-ub, -np, cache types, flash attention); for each
case with a cut, ``replay.buffers`` (memo and cut forgotten first) must equal ``replay.replay``
(the whole trunk, no memo, no cut), byte for byte, on every backend. Prints the cases, how many
cut replays showed a steady state and how many gave way to the whole trunk, and every case that
differs (with what to rebuild it: the seed and the case's index).

Run:  .venv/bin/python benchmarks/check_cut.py [--seed 1] [--cases 400] [--overrides]
"""

from __future__ import annotations

import argparse
import random
import time

from llamarig.catalogue.models import build_spec, find_model
from llamarig.plan import replay
from llamarig.testing.layouts import MODELS, random_case


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--overrides", action="store_true", help="-ot / --n-cpu-moe style overrides in every case")
    a = ap.parse_args()
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
