"""The hardware a plan is for: GPUs in llama.cpp's device order, the host's RAM, cores and CPU."""

from __future__ import annotations

from dataclasses import dataclass

from llamarig.hardware.cpu import CpuFeatures
from llamarig.units import GiB, MiB

__all__ = ["GPU", "Hardware", "GiB", "MiB"]


@dataclass(frozen=True)
class GPU:
    id: str
    name: str
    backend: str  # CUDA | ROCm | Metal | Vulkan
    memory_bytes: int  # capacity llama.cpp can use
    bandwidth_gbs: float | None
    fp16_tflops: float | None
    overhead_bytes: int  # driver / context overhead outside llama.cpp's buffers
    unified_memory: bool = False
    system_memory_bytes: int | None = None
    source: str = ""
    aliases: tuple[str, ...] = ()
    detected: bool = False
    #: CUDA compute capability x 100 (+ minor x 10): 900 for 9.0; picks the flash-attention kernel
    #: and with it what a FLASH_ATTN_EXT node allocates (llamarig.plan.compute.cuda_fattn)
    compute_capability: int | None = None
    #: the rpc-server (``HOST:PORT``) this device is reached through by llama-server's ``--rpc``;
    #: "" for a device of this machine. Such a device's ``backend`` is ``RPC`` (llama-server's
    #: name for it) and ``remote_backend`` the backend behind the rpc-server (``CPU``, ``CUDA``...)
    endpoint: str = ""
    remote_backend: str = ""

    @property
    def buffer_backend(self) -> str:
        """The backend whose buffers hold this device's tensors: the remote one behind an
        rpc-server (its ``get_alloc_size`` sizes them, ggml/src/ggml-rpc/ggml-rpc.cpp:907-988),
        else the device's own."""
        return self.remote_backend if self.endpoint and self.remote_backend else self.backend

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id, "name": self.name, "backend": self.backend,
            "memory": self.memory_bytes, "bandwidth_gbs": self.bandwidth_gbs,
            "fp16_tflops": self.fp16_tflops, "overhead": self.overhead_bytes,
            "unified_memory": self.unified_memory, "source": self.source,
            **({"compute_capability": f"{self.compute_capability // 100}.{self.compute_capability % 100 // 10}"}
               if self.compute_capability else {}),
            **({"endpoint": self.endpoint, "remote_backend": self.remote_backend} if self.endpoint else {}),
        }


@dataclass(frozen=True)
class Hardware:
    """Devices in llama.cpp order plus the host."""

    gpus: tuple[GPU, ...] = ()
    ram_bytes: int | None = None  # host RAM (None = unknown)
    ram_free_bytes: int | None = None
    cpu_cores: int | None = None
    source: str = "given"
    cpu: CpuFeatures | None = None  # None: plan assumes hardware.cpu.DEFAULT_FEATURES
    #: what each rpc-server of ``--rpc`` brings (``GPU.endpoint`` set), in any order: the planner
    #: takes them in the order of ``--rpc`` (llamarig.plan.rpc)
    rpc: tuple[GPU, ...] = ()

    def backend_names(self) -> list[str]:
        """ggml device names in order: CUDA0, CUDA1, ... (ROCm0, MTL0, Vulkan0)."""
        counters: dict[str, int] = {}
        out = []
        prefix = {"CUDA": "CUDA", "ROCm": "ROCm", "Metal": "MTL", "Vulkan": "Vulkan"}
        for g in self.gpus:
            p = prefix.get(g.backend, g.backend)
            i = counters.get(p, 0)
            counters[p] = i + 1
            out.append(f"{p}{i}")
        return out


