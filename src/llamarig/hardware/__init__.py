"""Hardware: the GPU catalogue (data/gpus.json), --gpu parsing, and local detection."""

from llamarig.hardware.catalogue import GPU, Hardware, find_gpu, load_gpus, parse_gpu_arg

__all__ = ["GPU", "Hardware", "find_gpu", "load_gpus", "parse_gpu_arg"]
