"""The plan against the real multi-device rig: llama-server --rpc over two or three rpc-servers on
loopback (llamarig.testing.rpc), synthetic models of every architecture plan replays, the grid of
llamarig.testing.rpc_grid. Per device (an rpc-server, named by its endpoint) and for the host:
weights, KV and recurrent state to the log's 0.01 MiB rounding; compute and the MTP draft context
(KV + compute) to the rounding where the plan calls them exact (the scheduled replay, plan/
compute.py replayed_buffers), else within 2 %."""

from __future__ import annotations

import pytest

from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.hardware.cpu import from_system_info, system_info_line
from llamarig.plan.config import parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.testing.rpc import rpc_argument
from llamarig.testing.rpc_grid import GRID, SHAPES, case_id, device_rows, draft_shapes

pytestmark = pytest.mark.server


def _hw(log: str) -> Hardware:
    line = system_info_line(log)
    assert line is not None, "no system_info line in the -lv 4 log"
    return Hardware(cpu=from_system_info(line))


@pytest.mark.parametrize(("shape", "n_rpc", "args"), GRID, ids=[case_id(*c) for c in GRID])
def test_every_device_matches_the_log(shape: str, n_rpc: int, args: str, rpc_servers, llama_server,
                                      synth_model) -> None:
    arch, kw = SHAPES[shape]
    path = synth_model(arch, **kw)
    drafts = {name: synth_model(SHAPES[name][0], **SHAPES[name][1]) for name in draft_shapes(args)}
    rigs = rpc_servers(n_rpc)
    argv = [*args.format(**{k: str(v) for k, v in drafts.items()}).split(), "--rpc", rpc_argument(rigs)]
    srv = llama_server(path, "-lv", "4", *argv)
    srv.stop()
    draft = load_spec(next(iter(drafts.values()))) if drafts else None
    plan = make_plan(PlanInputs(load_spec(path), parse_server_args(argv), _hw(srv.log), draft=draft))
    rows = device_rows(plan, srv.log)
    # every rpc-server that holds a layer logged its compute buffer, and the host its own
    assert {r.device for r in rows if r.component == "compute"} >= {"host"}, rows
    bad = [str(r) for r in rows if not r.ok]
    assert not bad, "\n".join(bad)
