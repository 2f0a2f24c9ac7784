"""The devices a plan has, in llama.cpp's order, and the ``PlanLayout`` every estimator reads."""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.diagnostics import Diagnostic, info
from llamarig.errors import InputError
from llamarig.hardware.cpu import DEFAULT_FEATURES
from llamarig.hardware.types import GPU, Hardware
from llamarig.i18n import _
from llamarig.plan import memory as M
from llamarig.plan.config import ServerConfig
from llamarig.plan.estimator import PlanLayout
from llamarig.plan.result import PlanInputs
from llamarig.plan.rpc import UNKNOWN_RPC_SHARE, rpc_devices

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


def devices(hw: Hardware, cfg: ServerConfig) -> Devices:
    """Devices in llama.cpp's order: RPC servers first (src/llama.cpp:275; what each brings from
    ``Hardware.rpc``, llamarig.plan.rpc), then the local GPUs, filtered by -dev (names as
    --list-devices prints them, or 'none'), then -sm none's main GPU (src/llama.cpp:288-301).
    Names are buffer type names (``CUDA0``, ``RPC0[HOST:PORT]``)."""
    names = hw.backend_names()
    dev_names = list(names)
    gpus = list(hw.gpus)
    notes: list[str] = []
    guess = 0
    if cfg.rpc:
        local = [g.memory_bytes for g in gpus]
        guess = (sum(local) // len(local)) if local else UNKNOWN_RPC_SHARE
        rpc = rpc_devices(cfg.rpc, hw.rpc, notes, guess)
        names = [r.buffer_name for r in rpc] + names
        dev_names = [r.dev_name for r in rpc] + dev_names
        gpus = [r.gpu for r in rpc] + gpus
    if cfg.devices:
        names, gpus = _by_dev(cfg, names, dev_names, gpus)
    if cfg.split_mode == "none" and gpus:
        # single-GPU mode keeps only the main GPU of the whole list, RPC servers first; a negative
        # -mg keeps none: the model runs on the CPU (src/llama.cpp:288-301)
        if cfg.main_gpu < 0:
            return Devices((), (), (), tuple(info(RPC_MEMORY_ASSUMED, n) for n in notes))
        if cfg.main_gpu >= len(gpus):
            raise InputError(_("-mg {main_gpu}: invalid main GPU (devices: {names})").format(main_gpu=cfg.main_gpu, names=', '.join(names)))
        names, gpus = [names[cfg.main_gpu]], [gpus[cfg.main_gpu]]
    return Devices(tuple(names), tuple(gpus), tuple(g.memory_bytes or guess for g in gpus),
                   tuple(info(RPC_MEMORY_ASSUMED, n) for n in notes))


def _by_dev(cfg: ServerConfig, names: list[str], dev_names: list[str], gpus: list[GPU]
            ) -> tuple[list[str], list[GPU]]:
    """-dev: the devices named (buffer or device names), in the order given
    (common/arg.cpp parse_device_list), or none."""
    wanted = [d.upper() for d in cfg.devices]
    if wanted == ["NONE"]:
        return [], []
    pos = {n.upper(): i for i, n in enumerate(dev_names)}
    pos.update({n.upper(): i for i, n in enumerate(names)})
    unknown = [d for d in cfg.devices if d.upper() not in pos]
    if unknown:
        raise InputError(_("-dev {devices}: unknown device(s) {unknown} (the given GPUs are {names})").format(devices=','.join(cfg.devices), unknown=', '.join(unknown), names=', '.join(dev_names) or 'none'))
    keep = [pos[w] for w in wanted]
    return [names[i] for i in keep], [gpus[i] for i in keep]


def uses_mmap(cfg: ServerConfig) -> bool:
    """Weights are mmap'd: --load-mode auto, mmap or mmap+mlock."""
    return cfg.load_mode in ("auto", "mmap", "mmap+mlock")


def layout(inp: PlanInputs, base_cfg: ServerConfig | None = None, dry_run: bool = False) -> PlanLayout:
    """The PlanLayout of ``inp``: its context, devices and layer placement (llama-model.cpp's
    split, memory.place_layers); ``dry_run``: as one of --fit's dry runs measures it."""
    spec, cfg = inp.spec, inp.cfg
    M.check_kv_types(spec, cfg)
    ctx = M.resolve_context(spec, cfg)
    devs = devices(inp.hardware, cfg)
    placement = M.place_layers(spec, cfg, devs.names, devs.free)
    return PlanLayout(inp, base_cfg or cfg, ctx, devs.names, devs.gpus, placement,
                      inp.hardware.cpu or DEFAULT_FEATURES, uses_mmap(cfg), devs.diagnostics, devs.free, dry_run)
