"""``--fit`` across devices, on the RPC rig: plan's replay of common/fit.cpp against llama-server's
own decisions.

Each rpc-server reports its own memory (the LD_PRELOAD shim of llamarig.testing.rpc on its
``sysconf(_SC_PHYS_PAGES)``); llama-server runs ``--fit on`` (its default) over them at ``-lv 4``
and logs every step (llamarig.plan.fit.fit_log). The plan gets the same devices (``--rpc-device
HOST:PORT=<MiB>M``) and must end where llama-server ended: the same context, the same layers on
each device, the same layers in host memory, hence the same weight and KV buffers to the log's
rounding.

Where the two end differently, the test replays every dry run fit made (the trace logs each
one's layers per device and measured MiB) through the plan's measurement of a dry run
(llamarig.plan.planner.fit_measurement: the prompt graph alone with nothing pinned, the MTP
context at the user's placement) and names the run and the numbers that differ; if every run
measures the same and the decisions still differ, the port of fit is wrong.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamarig.plan.fit.fit_log import FitLog, parse_fit_log
from llamarig.plan.fit.fit_replay import trial_config
from llamarig.plan.inputs import build_inputs
from llamarig.plan.memory_log import compare
from llamarig.plan.planner import fit_measurement, make_plan
from llamarig.plan.result import Plan, PlanInputs
from llamarig.testing.plans import deployment_of
from llamarig.testing.rpc import rpc_argument
from llamarig.units import MiB

pytestmark = pytest.mark.server

#: synthetic models: a dense llama whose 8 layers are ~31 MiB each (f16, n_embd 1024), a small
#: MoE (qwen3moe, 8 experts) and a qwen35 hybrid with one MTP (nextn) layer (its draft context
#: counts in every dry run, fit.cpp:205-258)
MODELS = {
    "llama": ("llama", {"n_layer": 8, "n_embd": 1024, "n_head": 8, "n_head_kv": 4, "head_dim": 128,
                        "n_ff": 4096, "n_ctx_train": 16384}),
    "moe": ("qwen3moe", {"n_layer": 6, "n_embd": 512, "n_head": 8, "n_head_kv": 4, "head_dim": 64,
                         "n_expert": 8, "n_expert_used": 2, "n_ff_expert": 1024, "n_ctx_train": 8192}),
    "mtp": ("qwen35", {"nextn_layers": 1, "n_layer": 8, "n_embd": 1024, "n_ff": 3072, "n_head": 8, "n_head_kv": 2,
                       "head_dim": 128, "n_ctx_train": 16384}),
}

CASES = [
    # (model, MiB per rpc-server, llama-server flags)
    pytest.param("llama", [600, 600], ["-fitt", "32", "-ub", "64"], id="2dev-nothing-to-do"),
    pytest.param("llama", [400, 300], ["-fitt", "32", "-ub", "64"], id="2dev-layers"),
    pytest.param("llama", [250, 200], ["-c", "8192", "-fitt", "32", "-ub", "64"], id="2dev-c-layers-to-host"),
    pytest.param("llama", [200, 150], ["-fitt", "32"], id="2dev-context-lowered"),
    pytest.param("llama", [300, 200, 150], ["-fitt", "32", "-ub", "64"], id="3dev-layers-to-host"),
    pytest.param("llama", [150, 120, 100], ["-c", "4096", "-fitt", "32", "-ub", "64"], id="3dev-c"),
    pytest.param("llama", [300, 250], ["-fitt", "32", "-ub", "64", "-ts", "1,1"], id="2dev-ts-stops-layers"),
    pytest.param("llama", [300], ["-c", "4096", "-fitt", "32", "-ub", "64"], id="1dev"),
    pytest.param("moe", [120, 100], ["-c", "4096", "-fitt", "8", "-ub", "64"], id="2dev-moe"),
    pytest.param("moe", [100, 90], ["-c", "4096", "-fitt", "8", "-ub", "64"], id="2dev-moe-overflow"),
    pytest.param("mtp", [120, 100], ["-fitt", "16", "--spec-type", "draft-mtp", "-ub", "64"], id="2dev-mtp-context"),
    pytest.param("mtp", [150, 90], ["-c", "16384", "-fitt", "16", "--spec-type", "draft-mtp", "-ub", "64"],
                 id="2dev-mtp-layers"),
    pytest.param("mtp", [100, 80, 60], ["-c", "8192", "-fitt", "16", "--spec-type", "draft-mtp", "-ub", "64"],
                 id="3dev-mtp"),
]


def _plan_inputs(model: str, rigs: list, mems: list[int], flags: list[str]) -> PlanInputs:
    return build_inputs(deployment_of(model, ["--rpc", rpc_argument(rigs), *flags],
                                      rpc_devices=[f"{r.endpoint}={m}M" for r, m in zip(rigs, mems, strict=True)]))


def _used_mib(p: Plan) -> list[int]:
    """What fit counts per device (model + context + compute, the MTP context included), MiB
    rounded down as its trace prints them."""
    return [(d.total - d.get("other") - d.get("mmproj")) // MiB for d in p.devices]


def _plan_layers(inp: PlanInputs, plan: Plan) -> tuple[int, ...] | None:
    """Layers per device the plan's fit chose (None when it placed none)."""
    c = plan.effective_cfg
    if c is None or c.n_gpu_layers < 0 or inp.cfg.n_gpu_layers >= 0:
        return None
    nd = len(plan.devices)
    return tuple(int(x) for x in c.tensor_split) if nd > 1 else (c.n_gpu_layers,)


def _measured_differently(inp: PlanInputs, fl: FitLog, names: list[str]) -> list[str]:
    """fit's dry runs (its initial projection and every layer trial) that the plan measures
    differently from llama-server, with the numbers."""
    out = []
    first = fit_measurement(replace(inp, cfg=inp.cfg.with_(fit=False, n_ctx=inp.cfg.n_ctx or inp.spec.n_ctx_train)),
                            inp.cfg)
    logged = [d.used_mib for d in fl.devices if d.used_mib is not None]
    if len(logged) == len(names) and len(names) > 1:
        mine = _used_mib(first)
        if any(abs(a - b) > 1 for a, b in zip(mine, logged, strict=True)):
            out.append(f"initial settings: plan {mine} MiB vs llama-server {logged} MiB")
    for k, t in enumerate(fl.trials):
        cfg = trial_config(inp, names, fl.n_ctx or 0, t.layers)
        mine = _used_mib(fit_measurement(replace(inp, cfg=cfg.with_(fit=False)), inp.cfg))
        if any(abs(a - b) > 1 for a, b in zip(mine, t.mem_mib, strict=True)):
            out.append(f"dry run {k} (n_layer, n_part, overflow per device {list(t.layers)}): "
                       f"plan {mine} MiB vs llama-server {list(t.mem_mib)} MiB")
    return out


@pytest.mark.parametrize(("model", "mems", "flags"), CASES)
def test_plan_fit_equals_llama_server_fit(model, mems, flags, rpc_servers, llama_server, synth_model):
    arch, shape = MODELS[model]
    path = synth_model(arch, **shape)
    rigs = rpc_servers(len(mems), memory_mib=mems)
    srv = llama_server(path, "-lv", "4", "--rpc", rpc_argument(rigs), *flags)
    log = srv.log
    srv.stop()
    for r, m in zip(rigs, mems, strict=True):  # the shim took: each server offered its own memory
        assert f"({m} MiB, {m} MiB free)" in r.log, r.log[-400:]
    fl = parse_fit_log(log)
    assert fl.ran and fl.n_ctx

    inp = _plan_inputs(str(path), rigs, mems, flags)
    plan = make_plan(inp)
    names = [d.name for d in plan.devices]
    rows = [r for r in compare(plan, log) if r.component.split(" ")[0] in ("weights", "kv", "recurrent")]
    mine = {"n_ctx": plan.n_ctx, "layers": _plan_layers(inp, plan),
            "weights/KV per buffer": [(r.device, r.component, round(r.planned / MiB, 2)) for r in rows]}
    theirs = {"n_ctx": fl.n_ctx, "layers": fl.layers(),
              "weights/KV per buffer": [(r.device, r.component, r.actual_mib) for r in rows]}
    same = (plan.n_ctx == fl.n_ctx and mine["layers"] == theirs["layers"] and all(r.ok for r in rows))
    if same:
        return
    differently = _measured_differently(inp, fl, names)
    if differently:
        pytest.fail("the plan measures fit's dry runs differently from llama-server: " + "; ".join(differently[:3])
                    + f"; so fit ends elsewhere: plan {mine} vs llama-server {theirs}")
    pytest.fail(f"every dry run measures the same, yet fit ends elsewhere: plan {mine} vs llama-server {theirs}")
