"""Helpers for the speed-model tests: catalogue specs, hardware, plan inputs."""

from __future__ import annotations

from llamarig.catalogue.gpus import find_gpu
from llamarig.catalogue.models import build_spec, catalogue_mmproj, find_model
from llamarig.hardware import Hardware
from llamarig.plan.config import ServerConfig, parse_server_args
from llamarig.plan.planner import PlanInputs
from llamarig.units import GiB


def spec_of(model_id: str):
    m, q = find_model(model_id)
    return build_spec(m, q)


def hw(*gpus: str, ram_gib: int = 64) -> Hardware:
    return Hardware(tuple(find_gpu(g) for g in gpus), ram_bytes=ram_gib * GiB)


def cfg(*args: str) -> ServerConfig:
    return parse_server_args(list(args))


def inputs(model_id: str, *gpus: str, mmproj: str | None = None, args: tuple[str, ...] = ()) -> PlanInputs:
    m, q = find_model(model_id)
    mm = catalogue_mmproj(m, mmproj) if mmproj else None
    return PlanInputs(build_spec(m, q), parse_server_args(list(args)) if args else ServerConfig(), hw(*gpus), mm)



def seed_inputs_() -> PlanInputs:
    """Seed 000: Qwen3.6-27B IQ4_NL (14.7 GB) + f16 mmproj on one RTX 3090."""
    return inputs("qwen3.6-27b:iq4_nl", "rtx3090", mmproj="f16")
