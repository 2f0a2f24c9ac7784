"""A function of a model's spec remembered per spec object, for as long as the object lives.

A plan asks the same questions of a spec many times (every tensor's layer, the replay's shape of
the model), and --fit and the optimiser plan one spec dozens of times; a ModelSpec is never
changed but is not hashable (it holds lists), so the answers are kept by the object's identity
and dropped with it."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

from llamarig.gguf.spec import ModelSpec

__all__ = ["per_spec"]

T = TypeVar("T")


def per_spec(fn: Callable[[ModelSpec], T]) -> Callable[[ModelSpec], T]:
    """``fn`` worked out once per spec object."""
    cache: dict[int, tuple[weakref.ref[ModelSpec], T]] = {}

    @functools.wraps(fn)
    def remembered(spec: ModelSpec) -> T:
        k = id(spec)
        hit = cache.get(k)
        if hit is not None and hit[0]() is spec:
            return hit[1]
        out = fn(spec)
        cache[k] = (weakref.ref(spec, lambda _r, k=k, c=cache: c.pop(k, None)), out)  # type: ignore[misc]
        return out

    return remembered
