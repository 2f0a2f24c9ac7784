"""What a rule is given: the invocation under check with its reading (``Subject``), and what the
rules may know beyond the argv (``Context``: the target machine, the model, the planner)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from llamarig.flags.argv import Reading
from llamarig.flags.parsed import Invocation
from llamarig.flags.schema import Schema
from llamarig.hardware.types import GPU

if TYPE_CHECKING:
    from llamarig.gguf.spec import ModelSpec
    from llamarig.hardware.cpu import CpuFeatures


class MemoryVerdict(Protocol):
    """What the memory rule reads of a plan (a llamarig.plan.result.Plan: that layer sits above
    the flag rules, so it is described here rather than imported)."""

    @property
    def fits(self) -> bool: ...

    @property
    def devices(self) -> Sequence[DeviceVerdict]: ...

    def shortfalls(self) -> list[str]: ...


class DeviceVerdict(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def total(self) -> int: ...

    @property
    def free(self) -> int | None: ...


@dataclass(frozen=True)
class Context:
    """What the rules may know beyond the argv."""

    physical_cores: int | None = None
    #: where physical_cores comes from, named in the findings that depend on it: "this
    #: machine" (physical_cores() here), "--cores" (`check --cores N`), or what a caller says
    cores_source: str = "this machine"
    gpus: tuple[GPU, ...] = ()  # `check --gpu NAME[:GB]`, for the memory plan
    ram_bytes: int | None = None
    model_ref: str | None = None  # `check --model` (GGUF path or catalogue id)
    need_ctx: int | None = None  # `check --need-ctx`: tokens one request needs (prompt + output)
    model_spec: ModelSpec | None = None  # the ModelSpec of -m when readable
    model_path: str | None = None  # the GGUF file -m (or `check --model`) names, when it exists
    model_error: str | None = None  # why that file could not be read (rule model-unreadable)
    #: (model_ref, mmproj_arg, gpus, ram_bytes, argv) -> Plan, for the memory rule (check --gpu)
    planner: Callable[[str | None, str | None, Sequence[GPU], int | None, list[str]], MemoryVerdict] | None = None


@dataclass(frozen=True)
class Subject:
    """One llama-server invocation under check: what every rule in llamarig.flags.rules.RULES
    is called with."""

    inv: Invocation
    schema: Schema
    reading: Reading  # the options as llama-server parses them (llamarig.flags.argv)
    k: int | None  # index of the invocation in the input
    ctx: Context
    #: this machine's CPU (llamarig.hardware.cpu.detect_cpu), asked only by the rules that need it
    cpu: Callable[[], CpuFeatures | None]


def physical_cores() -> int | None:
    """Physical cores of this machine (unique core ids in /sys), or None."""
    try:
        base = "/sys/devices/system/cpu"
        seen = set()
        for d in os.listdir(base):
            if re.fullmatch(r"cpu\d+", d):
                p = os.path.join(base, d, "topology")
                try:
                    with open(os.path.join(p, "core_id")) as f:
                        core = f.read().strip()
                    with open(os.path.join(p, "physical_package_id")) as f:
                        pkg = f.read().strip()
                except OSError:
                    continue
                seen.add((pkg, core))
        return len(seen) or None
    except OSError:
        return None
