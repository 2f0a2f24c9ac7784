"""Hardware: GPUs, host RAM and cores (types), CPU features (cpu), the CPU backend's buffer types
(cpu_buffers). The GPU catalogue is llamarig.catalogue.gpus; detection on this machine,
llamarig.detect."""

from llamarig.hardware.types import GPU, Hardware

__all__ = ["GPU", "Hardware"]
