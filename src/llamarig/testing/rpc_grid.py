"""The multi-device plan-vs-log grid: small synthetic models under ``llama-server --rpc`` over
two or three rpc-servers on loopback (:mod:`llamarig.testing.rpc`), every device's buffers in the
``-lv 4`` log held against the plan. Used by tests/plan/test_rpc_grid.py and
benchmarks/bench_rpc_grid.py (which writes the table of benchmarks/RESULTS.md).

The shapes keep llama.cpp's default split away from a knife edge: it splits layers by each
device's free memory (src/llama-model.cpp:1558-1610), which every rpc-server reports as the
host's, read a moment apart, so the plan takes them as equal; n_layer_all + 1 is kept prime to
2 and 3 devices, so no layer boundary sits on a split point and a few per cent of drift between
the servers' reports cannot move a layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llamarig.plan.memory_log import ServerMemoryLog, parse_memory_log
from llamarig.plan.result import Plan
from llamarig.units import MiB

#: a figure printed with %.2f MiB is within 0.005 MiB of the truth (plus float noise)
ROUND = 0.0051
#: the tolerance of a compute buffer the plan does not call exact (issue 31's target)
MODELLED = 0.02

_BASE: dict[str, Any] = {"n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512}
_SSM: dict[str, Any] = {"ssm_state_size": 64, "ssm_group_count": 2, "ssm_time_step_rank": 8}
#: name -> (architecture, synth shape); every n_layer_all + 1 is 5 or 7
SHAPES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", dict(_BASE, n_layer=6)),
    "qwen3": ("qwen3", dict(_BASE, n_layer=4)),
    "gemma3": ("gemma3", dict(_BASE, n_layer=6, swa_window=128)),
    "qwen35": ("qwen35", dict(_BASE, n_layer=4, **_SSM)),
    # 5 trunk layers (three recurrent, one attention, one recurrent) and the MTP block
    "qwen35-mtp": ("qwen35", dict(_BASE, n_layer=5, nextn_layers=1, **_SSM)),
    "qwen3moe": ("qwen3moe", dict(_BASE, n_layer=4, n_expert=8, n_expert_used=2, n_ff_expert=256)),
    "qwen35moe": ("qwen35moe", dict(_BASE, n_layer=4, n_expert=8, n_expert_used=2, n_ff_expert=256, **_SSM)),
    # a separate draft model (-md {llama-draft}): narrower, 4 layers
    "llama-draft": ("llama", dict(_BASE, n_embd=128, n_head=2, n_head_kv=1, n_layer=4)),
}

#: (shape, rpc-servers, llama-server flags): 2 and 3 devices; the default split and -ts; partial
#: -ngl; -ot; -sm none -mg; SWA; hybrid; MoE with experts on the host; MTP; -np; -ub; K/V types;
#: flash attention off
GRID: list[tuple[str, int, str]] = [
    ("llama", 2, "-c 4096"),
    ("llama", 3, "-c 4096"),
    ("llama", 2, "-c 4096 -ts 3,1"),
    ("llama", 2, "-c 4096 -ngl 4"),
    # the RPC backend has no offload_op (ggml-rpc.cpp:2264): --no-op-offload changes nothing here
    ("llama", 2, "-c 4096 -ngl 4 --no-op-offload"),
    ("llama", 3, "-c 4096 -ngl 5 -ts 1,2,1"),
    ("llama", 2, r"-c 4096 -ot blk\.[0-2]\.attn_.*=CPU"),
    ("llama", 2, "-c 4096 -sm none -mg 1"),
    ("llama", 2, "-c 4096 -sm none -mg -1"),
    ("llama", 2, "-c 4096 -np 3 -ub 128"),
    ("llama", 3, "-c 2048 -np 2 -ub 64 -fa off"),
    ("qwen3", 2, "-c 4096 -np 2 -kvu -ub 100"),
    ("qwen3", 3, "-c 4096 -ts 1,1,2 -ctk q8_0 -ctv q8_0"),
    ("gemma3", 2, "-c 4096"),
    ("gemma3", 3, "-c 4096 -np 2 -ts 2,1,1"),
    ("gemma3", 2, "-c 2048 -ngl 4 --swa-full"),
    ("qwen35", 2, "-c 4096"),
    ("qwen35", 3, "-c 4096 -np 3 -ub 256"),
    ("qwen35", 2, "-c 4096 -ngl 3 -ctk q4_0 -ctv q4_0"),
    ("qwen35", 2, r"-c 4096 -ot blk\.0\.ssm_.*=CPU"),
    ("qwen35", 2, "-c 4096 -sm none -mg 0 -fa off"),
    ("qwen35-mtp", 2, "-c 4096 --spec-type draft-mtp"),
    ("qwen35-mtp", 2, "-c 4096 -np 2 -ts 1,3 --spec-type draft-mtp"),
    ("qwen35-mtp", 3, "-c 4096 -np 4 -ub 256 --spec-type draft-mtp --spec-draft-n-max 3 -ctk q8_0 -ctv q8_0"),
    ("qwen35-mtp", 2, "-c 4096 -ngl 4 --spec-type draft-mtp"),
    ("qwen35-mtp", 3, "-c 4096 -np 2 -ts 1,1,3 --spec-type draft-mtp -ctkd q8_0 -ctvd q8_0"),
    ("qwen3moe", 2, "-c 4096"),
    ("qwen3moe", 3, "-c 4096 --n-cpu-moe 2"),
    ("qwen35moe", 2, "-c 4096 -np 2 -ub 256"),
    ("qwen35moe", 2, "-c 4096 -ts 1,2 --n-cpu-moe 1"),
    ("llama", 2, "-c 4096 -np 2 -md {llama-draft}"),
    ("llama", 3, "-c 4096 -md {llama-draft} -ngld 3"),
    ("llama", 2, "-c 4096 -np 2 -ts 1,3 -md {llama-draft} --spec-type draft-simple"),
]


#: (shape, MiB each rpc-server reports, llama-server flags): --fit over devices of chosen memory
#: (llamarig.testing.rpc's shim). The first two leave fit a placement whose last device ends
#: past its target once the first takes layers (plan/fit/fit_replay.py _under_counted): the plan must
#: count what the servers then hold, not what fit counted
FIT_GRID: list[tuple[str, list[int], str]] = [
    ("qwen35-mtp", [40, 48], "-c 4096 -fitt 2 --spec-type draft-mtp"),
    ("qwen35-mtp", [36, 30, 48], "-c 4096 -fitt 2 --spec-type draft-mtp"),
    ("qwen35-mtp", [60, 60], "-c 4096 -np 2 -fitt 4 --spec-type draft-mtp"),
    ("llama", [40, 40], "-c 4096 -fitt 4 -md {llama-draft}"),
    ("llama", [30, 40], "-c 4096 -np 2 -fitt 2 -md {llama-draft} --spec-type draft-simple"),
]

#: the environment that makes an rpc-server trace every buffer it allocates and frees
#: (ggml/src/ggml-rpc/ggml-rpc.cpp:26-29, 1261, 1295)
RPC_TRACE_ENV = {"GGML_RPC_DEBUG": "1"}

_ALLOC = re.compile(r"\[alloc_buffer\] device: \d+, size: (\d+) -> remote_ptr: (\w+), remote_size: (\d+)")
_FREE = re.compile(r"\[free_buffer\] remote_ptr: (\w+)")


def rpc_held_bytes(rpc_log: str) -> int:
    """What an rpc-server holds now: the buffers its trace (:data:`RPC_TRACE_ENV`) allocated and
    has not freed. A context that reserves its graph twice frees the first buffers before the
    second reservation allocates (src/llama-context.cpp:643 replaces the scheduler), so that is
    each buffer once, whatever the -lv 4 log repeats. Not counted: what was freed during loading,
    --fit's dry runs' recurrent state (allocated for real, src/llama-memory-recurrent.cpp:118-119,
    where the KV cache honours no_alloc, src/llama-kv-cache.cpp:279-283) and a draft model
    loaded without a speculative type (freed, tools/server/server-context.cpp:1406-1412)."""
    live: dict[str, int] = {}
    for line in rpc_log.splitlines():
        if m := _ALLOC.search(line):
            live[m.group(2)] = int(m.group(3))
        elif m := _FREE.search(line):
            live.pop(m.group(1), None)
    return sum(live.values())


def draft_shapes(args: str) -> list[str]:
    """The shapes a case's arguments name as ``{shape}`` (a -md draft model's file)."""
    return re.findall(r"\{([\w-]+)\}", args)


def case_id(shape: str, n_rpc: int, args: str) -> str:
    return f"{shape}-{n_rpc}dev:{args.replace(' ', '_')}"


@dataclass(frozen=True)
class DeviceRow:
    """One buffer of one device: planned and logged MiB, and how close they must be."""

    device: str  # an rpc-server's endpoint, or "host"
    component: str  # weights, kv, recurrent, compute, draft (the MTP context's KV + compute)
    planned_mib: float
    logged_mib: float
    method: str
    tolerance_mib: float
    #: the device's place in --rpc (the plan's device order); -1 for the host
    index: int = -1

    @property
    def ok(self) -> bool:
        return abs(self.planned_mib - self.logged_mib) <= self.tolerance_mib

    def __str__(self) -> str:
        return (f"{self.device} {self.component}: plan {self.planned_mib:.3f} MiB, log {self.logged_mib:.2f} MiB "
                f"({self.method}, tolerance {self.tolerance_mib:.3f})")


_ENDPOINT = re.compile(r"\[(.+)\]$")


def _device(buffer_name: str) -> str:
    """A log's buffer name -> the device: every rpc-server's buffer type is named RPC0[HOST:PORT]
    in its own client's numbering, so the endpoint names the device; CPU* buffers are the host's."""
    m = _ENDPOINT.search(buffer_name)
    return m.group(1) if m else "host"


def _logged(mem: ServerMemoryLog) -> dict[tuple[str, str], tuple[float, int]]:
    """(device, component) -> (MiB, number of log lines summed)."""
    out: dict[tuple[str, str], tuple[float, int]] = {}

    def put(comp: str, bufs: list[tuple[str, float]]) -> None:
        for name, mib in bufs:
            key = (_device(name), comp)
            old, n = out.get(key, (0.0, 0))
            out[key] = (old + mib, n + 1)

    put("weights", list(mem.model_weights[0]) if mem.model_weights else [])
    tgt = mem.target
    put("kv", tgt.kv_buffers)
    put("recurrent", tgt.rs_buffers)
    put("compute", [(dev, tgt.compute_mib(dev)) for dev in dict.fromkeys(d for d, _ in tgt.compute)])
    if len(mem.model_weights) > 1:  # a draft model's weights (-md): its own load_tensors lines
        put("draft", list(mem.model_weights[1]))
    if mem.draft is not None:
        put("draft", mem.draft.kv_buffers)
        put("draft", [(dev, mem.draft.compute_mib(dev)) for dev in dict.fromkeys(d for d, _ in mem.draft.compute)])
    return out


def device_rows(plan: Plan, log_text: str) -> list[DeviceRow]:
    """Every device's (and the host's) weights, KV, recurrent state, compute and MTP context,
    planned vs logged. Weights, KV and state are llama.cpp's arithmetic (the log's rounding per
    buffer line); compute and the MTP context to the log's rounding where the plan calls them
    exact, else within :data:`MODELLED`."""
    logged = _logged(parse_memory_log(log_text))
    rows = []
    sides = [(i, _device(d.name), d.lines) for i, d in enumerate(plan.devices)] + [(-1, "host", plan.host.lines)]
    for index, dev, lines in sides:
        for comp in ("weights", "kv", "recurrent", "compute", "draft"):
            line = lines.get(comp)
            planned = line.bytes / MiB if line is not None else 0.0
            got, n_lines = logged.get((dev, comp), (0.0, 1))
            if not planned and not got:
                continue
            method = line.method if line is not None else "not planned"
            exact = comp in ("weights", "kv", "recurrent") or method == "exact"
            tol = ROUND * max(1, n_lines) if exact else MODELLED * got + 0.02
            rows.append(DeviceRow(dev, comp, planned, got, method, tol, index))
    return rows
