"""Reading GGUF headers into a typed ModelSpec, without touching tensor data."""

from llamarig.gguf.reader import ArrayInfo, GGUFHeader, TensorInfo, read_header
from llamarig.gguf.spec import (
    LayerSpec,
    ModelSpec,
    ProjectorSpec,
    RecurrentSpec,
    RopeSpec,
    load_spec,
    spec_from_headers,
)

__all__ = [
    "ArrayInfo",
    "GGUFHeader",
    "LayerSpec",
    "ModelSpec",
    "ProjectorSpec",
    "RecurrentSpec",
    "RopeSpec",
    "TensorInfo",
    "load_spec",
    "read_header",
    "spec_from_headers",
]
