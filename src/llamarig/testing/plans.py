"""Plans from the words a test writes ("rtx3090:24", "64G"), read as the CLI reads them: the
string-typed shortcut the public API does not offer (llamarig.api takes GPU values and bytes)."""

from __future__ import annotations

from collections.abc import Sequence

from llamarig.app.planning import plan_with_speed
from llamarig.catalogue.gpus import read_gpu_args
from llamarig.hardware.cpu import parse_cpu_features
from llamarig.hardware.types import GPU
from llamarig.plan.deployment import Deployment, deployment, hardware
from llamarig.plan.result import Plan
from llamarig.plan.rpc import parse_rpc_device
from llamarig.units import parse_size


def gpus_of(names: Sequence[str]) -> tuple[GPU, ...]:
    """``--gpu NAME[:VRAM_GB]`` words as catalogue GPUs."""
    return read_gpu_args(names)[0]


def deployment_of(model: str | None = None, args: Sequence[str] = (), *, command: Sequence[str] | None = None,
                  gpus: Sequence[str] = (), ram: str | None = None, detect: bool = False, mmproj: str | None = None,
                  draft: str | None = None, overhead: str | None = None, cpu_features: str | None = None,
                  rpc_devices: Sequence[str] = ()) -> Deployment:
    """The Deployment `llamarig plan` builds from these words (``rpc_devices``: ``--rpc-device
    HOST:PORT=SPEC``)."""
    values, notes = read_gpu_args(gpus)
    hw = hardware(values, ram_bytes=parse_size(ram, "g") if ram else None,
                  cpu=parse_cpu_features(cpu_features) if cpu_features is not None else None, detect=detect,
                  rpc=tuple(g for text in rpc_devices for g in parse_rpc_device(text)))
    return deployment(model, args, command=command, hardware=hw, mmproj=mmproj, draft=draft,
                      overhead_bytes=parse_size(overhead, "mib") if overhead else None, diagnostics=notes)


def plan_of(model: str | None = None, args: Sequence[str] = (), *, command: Sequence[str] | None = None,
            gpus: Sequence[str] = (), ram: str | None = None, mmproj: str | None = None, draft: str | None = None,
            calibration: str | None = None, speed: bool = True) -> Plan:
    """What `llamarig plan MODEL --gpu ... --ram ... ARGS` plans (with its speed unless ``speed``
    is False)."""
    d = deployment_of(model, args, command=command, gpus=gpus, ram=ram, mmproj=mmproj, draft=draft)
    return plan_with_speed(d, calibration=calibration, speed=speed)
