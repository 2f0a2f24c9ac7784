"""The devices a plan has, in llama.cpp's order, and the ``Layout`` every estimator reads."""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.diagnostics import Diagnostic, info
from llamarig.errors import InputError
from llamarig.hardware.cpu import DEFAULT_FEATURES
from llamarig.hardware.types import GPU, Hardware
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.config import ServerConfig
from llamarig.plan.estimators.base import Layout
from llamarig.plan.result import PlanInputs
from llamarig.units import GiB, fmt_bytes

#: a diagnostic code: --rpc servers' memory is assumed
RPC_MEMORY_ASSUMED = "rpc-memory-assumed"


@dataclass(frozen=True)
class Devices:
    """The devices of a model, in llama.cpp's order: their names (CUDA0, RPC0[host:port]), the
    GPUs, the memory the default split divides by, and what resolving them found."""

    names: tuple[str, ...]
    gpus: tuple[GPU, ...]
    free: tuple[int, ...]
    diagnostics: tuple[Diagnostic, ...] = ()


def _by_dev(hw: Hardware, cfg: ServerConfig, names: list[str], gpus: list[GPU]) -> tuple[list[str], list[GPU]]:
    """-dev: the devices named, in the order given (common/arg.cpp parse_device_list), or none."""
    wanted = [d.upper() for d in cfg.devices]
    if wanted == ["NONE"]:
        return [], []
    unknown = [d for d in cfg.devices if d.upper() not in {n.upper() for n in names}]
    if unknown:
        raise InputError(_("-dev {devices}: unknown device(s) {unknown} (the given GPUs are {names})").format(devices=','.join(cfg.devices), unknown=', '.join(unknown), names=', '.join(names) or 'none'))
    pos = {n.upper(): i for i, n in enumerate(names)}
    keep = [pos[w] for w in wanted]
    return [names[i] for i in keep], [gpus[i] for i in keep]


def devices(hw: Hardware, cfg: ServerConfig) -> Devices:
    """Devices in llama.cpp's order: RPC servers first (src/llama.cpp:275), then the local GPUs,
    filtered by -dev (names as --list-devices prints them, or 'none')."""
    names = hw.backend_names()
    gpus = list(hw.gpus)
    if cfg.devices:
        names, gpus = _by_dev(hw, cfg, names, gpus)
    if cfg.split_mode == "none" and gpus:
        # single-GPU mode keeps only the main GPU (src/llama.cpp:288-301)
        if cfg.main_gpu >= len(gpus):
            raise InputError(_("-mg {main_gpu}: invalid main GPU (devices: {names})").format(main_gpu=cfg.main_gpu, names=', '.join(names)))
        names, gpus = [names[cfg.main_gpu]], [gpus[cfg.main_gpu]]
    free = [g.memory_bytes for g in gpus]
    if not cfg.rpc:
        return Devices(tuple(names), tuple(gpus), tuple(free))
    guess = (sum(free) // len(free)) if free else 24 * GiB
    rpc = [GPU(id="rpc", name=f"RPC server {h}", backend="RPC", memory_bytes=0, bandwidth_gbs=None,
               fp16_tflops=None, overhead_bytes=0, source="--rpc") for h in cfg.rpc]
    note = info(RPC_MEMORY_ASSUMED, _("--rpc: the RPC servers' memory is unknown here; the default split assumes "
                                      "{size} each (give -ts to fix it)").format(size=fmt_bytes(guess)))
    return Devices((*(f"RPC{i}[{h}]" for i, h in enumerate(cfg.rpc)), *names), (*rpc, *gpus),
                   (*([guess] * len(rpc)), *free), (note,))


def uses_mmap(cfg: ServerConfig) -> bool:
    """Weights are mmap'd: --load-mode auto, mmap or mmap+mlock."""
    return cfg.load_mode in ("auto", "mmap", "mmap+mlock")


def layout(inp: PlanInputs, base_cfg: ServerConfig | None = None) -> Layout:
    """The Layout of ``inp``: its context, devices and layer placement (llama-model.cpp's
    split, memory.place_layers)."""
    spec, cfg = inp.spec, inp.cfg
    M.check_kv_types(spec, cfg)
    ctx = M.resolve_context(spec, cfg)
    devs = devices(inp.hardware, cfg)
    placement = M.place_layers(spec, cfg, devs.names, devs.free)
    return Layout(inp, base_cfg or cfg, ctx, devs.names, devs.gpus, placement,
                  inp.hardware.cpu or DEFAULT_FEATURES, uses_mmap(cfg), devs.diagnostics)
