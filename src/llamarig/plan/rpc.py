"""RPC devices: what each rpc-server of llama-server's ``--rpc`` brings, in llama.cpp's order.

llama-server registers every device an rpc-server exposes (``RPC_CMD_DEVICE_COUNT``,
ggml/src/ggml-rpc/ggml-rpc.cpp:2311-2345) and puts them first in the model's device list, before
the local GPUs, "to minimize network transfers" (src/llama.cpp:275). Each device gets two names:

- the ggml device name ``RPC<k>``, k counting devices over all servers in ``--rpc`` order
  (ggml-rpc.cpp:2328): what ``-dev`` takes and what ``--fit``'s log prints;
- the buffer type name ``RPC<j>[HOST:PORT]``, j the device's index on its own server
  (ggml-rpc.cpp:1089): what the ``-lv 4`` buffer lines and ``-ot`` name. With one device per
  server every buffer is ``RPC0[...]``.

How much memory a device offers is what the server reports (``RPC_CMD_GET_DEVICE_MEMORY``,
ggml-rpc.cpp:1802-1814): a GPU's free VRAM, or for the CPU device the host's whole RAM (free ==
total: ggml/src/ggml-cpu/ggml-cpu.cpp:365-381, ``sysconf(_SC_PHYS_PAGES)``). Here the user says
it with ``--rpc-device HOST:PORT=SPEC`` (docs/plan.md, "RPC deployments").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from llamarig.errors import InputError
from llamarig.hardware.types import GPU
from llamarig.i18n import _
from llamarig.units import GiB, MiB, fmt_bytes, parse_size

#: a size as ``--rpc-device`` takes it: 24G, 24GiB, 16000M, 512MiB (a bare number is GiB)
_SIZE = re.compile(r"\s*[0-9]*\.?[0-9]+\s*([kKmMgGtT]i?[bB]?)?\s*")


@dataclass(frozen=True)
class RpcDevice:
    """One device of the plan reached through an rpc-server."""

    gpu: GPU
    #: the ggml device name (``RPC<k>``, what ``-dev`` takes)
    dev_name: str
    #: the buffer type name (``RPC<j>[HOST:PORT]``, what the log and ``-ot`` name)
    buffer_name: str


def split_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port) as ggml-rpc's parse_endpoint reads it (the first ``:``
    splits, ggml-rpc.cpp:291-303; an IPv6 address cannot be written). Raises InputError."""
    host, sep, port = text.partition(":")
    if not sep or not host or not port.strip().isdigit() or not 0 < int(port) <= 65535:
        raise InputError(_("'{text}': an rpc-server endpoint is HOST:PORT (e.g. 192.168.1.20:50052)").format(text=text))
    return host, int(port)


def parse_rpc_device(text: str) -> tuple[GPU, ...]:
    """``HOST:PORT=SPEC[,SPEC...]``: the devices one rpc-server exposes, in its order (its
    ``-d/--device`` list). SPEC is a GPU of the catalogue (``rtx3090``, ``rtx3090:20`` for
    another VRAM size, as ``--gpu`` takes it: a CUDA device behind the server), or a size
    (``64G``, ``cpu:64G``: the server's CPU device, which offers the host's RAM). Raises
    InputError (exit 2) with the expected form."""
    endpoint, sep, specs = text.partition("=")
    endpoint = endpoint.strip()
    if not sep or not specs.strip():
        raise InputError(_("--rpc-device '{text}': expected HOST:PORT=SPEC, SPEC a GPU (rtx3090, rtx3090:20) or "
                           "the memory of an rpc-server's CPU device (64G)").format(text=text))
    split_endpoint(endpoint)
    return tuple(_one_device(endpoint, s.strip(), text) for s in specs.split(","))


def _one_device(endpoint: str, spec: str, text: str) -> GPU:
    from llamarig.catalogue.gpus import parse_gpu_arg  # lazy: catalogue off the --help path

    size = spec[4:] if spec.lower().startswith("cpu:") else spec
    if _SIZE.fullmatch(size):
        n = parse_size(size, "g")
        if n <= 0:
            raise InputError(_("--rpc-device '{text}': the memory must be more than 0").format(text=text))
        return GPU(id="cpu", name=f"CPU behind {endpoint}", backend="RPC", memory_bytes=n, bandwidth_gbs=None,
                   fp16_tflops=None, overhead_bytes=0, source=_("--rpc-device {spec}: an rpc-server's CPU device "
                                                                "(it offers the host's RAM)").format(spec=spec),
                   endpoint=endpoint, remote_backend="CPU")
    if spec.lower() == "cpu":
        raise InputError(_("--rpc-device '{text}': give the host's RAM, e.g. cpu:64G (an rpc-server's CPU device "
                           "offers all of it)").format(text=text))
    g = parse_gpu_arg(spec)
    return replace(g, backend="RPC", endpoint=endpoint, remote_backend=g.backend,
                   source=f"{g.source}; behind rpc-server {endpoint}")


def rpc_devices(endpoints: Sequence[str], described: Sequence[GPU], notes: list[str],
                guess: int) -> list[RpcDevice]:
    """The devices of ``--rpc`` in llama.cpp's order. An endpoint ``--rpc-device`` did not
    describe is one device of unknown size (``memory_bytes`` 0): its default split share is
    ``guess`` and a note says so. Raises InputError for a described endpoint not in ``--rpc``."""
    by_ep: dict[str, list[GPU]] = {}
    for g in described:
        by_ep.setdefault(g.endpoint, []).append(g)
    stray = [ep for ep in by_ep if ep not in endpoints]
    if stray:
        raise InputError(_("--rpc-device {endpoints}: not in --rpc {rpc} (llama-server uses only the servers of "
                           "--rpc)").format(endpoints=", ".join(stray), rpc=",".join(endpoints) or _("(none)")))
    out: list[RpcDevice] = []
    unknown = []
    # a repeated endpoint is one registry, its devices counted once (ggml-rpc.cpp:2303-2345;
    # observed with the binary: tests/flags/test_rpc_rules.py)
    for ep in dict.fromkeys(endpoints):
        gs = by_ep.get(ep)
        if not gs:
            unknown.append(ep)
            gs = [GPU(id="rpc", name=f"RPC server {ep}", backend="RPC", memory_bytes=0, bandwidth_gbs=None,
                      fp16_tflops=None, overhead_bytes=0, source="--rpc", endpoint=ep)]
        for j, g in enumerate(gs):
            out.append(RpcDevice(g, f"RPC{len(out)}", f"RPC{j}[{ep}]"))
    if unknown:
        notes.append(_("--rpc {endpoints}: what these rpc-servers bring is unknown here; the default split assumes "
                       "{size} each (describe them with --rpc-device HOST:PORT=rtx3090 or =64G, or give -ts)").format(
            endpoints=",".join(unknown), size=fmt_bytes(guess)))
    return out


def loopback_descriptions(rpc: str | None, described: Sequence[str], memory: int) -> list[str]:
    """``--rpc-device`` texts for the ``--rpc`` endpoints on this machine (127.0.0.1, localhost)
    that ``described`` leaves out: an rpc-server here offers its CPU device with ``memory``, this
    machine's RAM (ggml-cpu.cpp:365-381)."""
    have = {d.partition("=")[0].strip() for d in described}
    eps = [e.strip() for e in (rpc or "").split(",") if e.strip()]
    return [f"{e}=cpu:{memory // MiB}M" for e in eps
            if e not in have and e.partition(":")[0] in ("127.0.0.1", "localhost")]


def describe(g: GPU) -> str:
    """``192.168.1.20:50052 rtx3090 (24.00 GiB, CUDA)`` for notes and tables."""
    what = "CPU" if g.remote_backend in ("CPU", "") else f"{g.name}, {g.remote_backend}"
    size = fmt_bytes(g.memory_bytes) if g.memory_bytes else "?"
    return f"{g.endpoint} ({what}, {size})"


#: the default split's share of an RPC device whose memory is unknown, without local GPUs
UNKNOWN_RPC_SHARE = 24 * GiB

__all__ = ["UNKNOWN_RPC_SHARE", "RpcDevice", "describe", "parse_rpc_device", "rpc_devices", "split_endpoint"]
