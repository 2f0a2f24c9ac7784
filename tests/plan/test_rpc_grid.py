"""The plan against the real multi-device rig: llama-server --rpc over two or three rpc-servers on
loopback (llamarig.testing.rpc), synthetic models of every architecture plan replays, the grid of
llamarig.testing.rpc_grid. Per device (an rpc-server, named by its endpoint) and for the host:
weights, KV and recurrent state to the log's 0.01 MiB rounding; compute and the MTP draft context
(KV + compute) to the rounding where the plan calls them exact (the scheduled replay, plan/
compute.py replayed_buffers), else within 2 %. And per rpc-server what it holds once llama-server
has loaded (its own trace of the buffers it allocated and freed) against the plan's total for that
device: a context that reserves its graph twice (the MTP context does, once the speculative
implementation is attached) is counted once, as the server holds it."""

from __future__ import annotations

import pytest

from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.hardware.cpu import from_system_info, system_info_line
from llamarig.plan.config import parse_server_args
from llamarig.plan.draft.draft_estimator import DRAFT_UNUSED
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.plan.result import Plan
from llamarig.plan.rpc import parse_rpc_device
from llamarig.testing.rpc import rpc_argument
from llamarig.testing.rpc_grid import (
    FIT_GRID,
    GRID,
    RPC_TRACE_ENV,
    SHAPES,
    case_id,
    device_rows,
    draft_shapes,
    rpc_held_bytes,
)
from llamarig.units import MiB

pytestmark = pytest.mark.server


def _hw(log: str, rpc_devices: list[str] = ()) -> Hardware:
    line = system_info_line(log)
    assert line is not None, "no system_info line in the -lv 4 log"
    return Hardware(cpu=from_system_info(line), rpc=tuple(g for t in rpc_devices for g in parse_rpc_device(t)))


def _run(shape: str, args: str, rigs, llama_server, synth_model, rpc_devices: list[str] = ()) -> tuple[Plan, str, list[str]]:
    """llama-server over ``rigs`` with the case's flags; the plan of the same command; the -lv 4
    log and each rpc-server's buffer trace."""
    arch, kw = SHAPES[shape]
    path = synth_model(arch, **kw)
    drafts = {name: synth_model(SHAPES[name][0], **SHAPES[name][1]) for name in draft_shapes(args)}
    argv = [*args.format(**{k: str(v) for k, v in drafts.items()}).split(), "--rpc", rpc_argument(rigs)]
    srv = llama_server(path, "-lv", "4", *argv)
    traces = [r.log for r in rigs]  # loaded: what each server holds while llama-server runs
    srv.stop()
    draft = load_spec(next(iter(drafts.values()))) if drafts else None
    plan = make_plan(PlanInputs(load_spec(path), parse_server_args(argv), _hw(srv.log, list(rpc_devices)), draft=draft))
    return plan, srv.log, traces


def _check(plan: Plan, log: str, rigs, traces: list[str]) -> None:
    rows = device_rows(plan, log)
    # every rpc-server that holds a layer logged its compute buffer, and the host its own
    assert {r.device for r in rows if r.component == "compute"} >= {"host"}, rows
    bad = [str(r) for r in rows if not r.ok]
    by_endpoint = {d.name.rsplit("[", 1)[-1].rstrip("]"): d for d in plan.devices}
    # -md without a speculative type: the draft is loaded, then freed (the plan warns, and counts it)
    freed = any(x.code == DRAFT_UNUSED for x in plan.diagnostics)
    for rig, trace in zip(rigs, traces, strict=True):
        held = rpc_held_bytes(trace) / MiB
        d = by_endpoint.get(rig.endpoint)  # -sm none: the plan has only the main device
        want = (d.total - (d.get("draft") if freed else 0)) / MiB if d is not None else 0.0
        if abs(want - held) > 0.01:
            bad.append(f"{rig.endpoint} holds {held:.3f} MiB (its buffer trace), plan {want:.3f} MiB")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(("shape", "n_rpc", "args"), GRID, ids=[case_id(*c) for c in GRID])
def test_every_device_matches_the_log(shape: str, n_rpc: int, args: str, rpc_servers, llama_server,
                                      synth_model) -> None:
    rigs = rpc_servers(n_rpc, env=RPC_TRACE_ENV)
    plan, log, traces = _run(shape, args, rigs, llama_server, synth_model)
    _check(plan, log, rigs, traces)


@pytest.mark.parametrize(("shape", "mems", "args"), FIT_GRID,
                         ids=[case_id(s, len(m), a) + "@" + ",".join(map(str, m)) for s, m, a in FIT_GRID])
def test_fit_over_devices_of_chosen_memory(shape: str, mems: list[int], args: str, rpc_servers, llama_server,
                                           synth_model) -> None:
    """--fit (llama-server's default) over rpc-servers that report ``mems`` MiB: the plan's fit
    ends where llama-server's did and counts every device, the MTP / draft context included, as
    the servers then hold it; where that is past a device's --fit-target although fit settled it
    within, the plan says fit under-counts it."""
    rigs = rpc_servers(len(mems), memory_mib=mems, env=RPC_TRACE_ENV)
    described = [f"{r.endpoint}={m}M" for r, m in zip(rigs, mems, strict=True)]
    plan, log, traces = _run(shape, args, rigs, llama_server, synth_model, described)
    _check(plan, log, rigs, traces)
    cfg = parse_server_args(args.split())
    margin = (cfg.fit_target_mib[0] if cfg.fit_target_mib else 1024) * MiB
    past = [d.name for d in plan.devices if d.capacity and d.capacity - d.total < margin]
    warned = [w for w in plan.warnings if "--fit under-counts" in w]
    assert all(any(name in w for w in warned) for name in past), (past, plan.warnings)
