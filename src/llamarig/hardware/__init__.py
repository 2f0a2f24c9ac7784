"""Hardware: GPUs, host RAM and cores (types), CPU features (cpu), the CPU backend's buffer types
(cpu_buffers), and detection on this machine (detect). The GPU catalogue is llamarig.catalogue.gpus."""

from llamarig.hardware.types import GPU, Hardware

__all__ = ["GPU", "Hardware"]
