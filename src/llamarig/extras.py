"""The optional parts of the install (pyproject's ``[project.optional-dependencies]``) and the one
way a module says it needs one: its third-party imports sit in ``with needed("gateway"):``, so a
missing package becomes a one-line :class:`~llamarig.errors.MissingExtraError` (exit 3) naming the
``pip install 'llamarig[...]'`` to run, where the import happens.

The core (inspect, plan, check, explain, render, launch, stop, tune, quality, logs, models, gpus)
needs none of them;
tests/test_extras.py keeps this table, pyproject.toml and the imports in step.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from llamarig.errors import MissingExtraError
from llamarig.i18n import _


@dataclass(frozen=True)
class Extra:
    """One optional part: the modules it brings (import names) and what needs it (for the docs)."""

    name: str
    modules: tuple[str, ...]
    used_by: str


#: extra name -> the modules it brings (import names); pyproject.toml lists their distributions
EXTRAS: dict[str, Extra] = {e.name: e for e in (
    Extra("bench", ("aiohttp", "prometheus_client"), "bench and top: their HTTP client; top --web's gauges"),
    Extra("gateway", ("aiohttp", "httptools", "prometheus_client", "uvloop", "tomli"), "gateway"),
    Extra("gpu", ("pynvml",), "GPU telemetry through NVML in bench and top (else nvidia-smi)"),
    Extra("hub", ("huggingface_hub", "httpx2"), "hf:, ms: and URL models (inspect, plan, models)"),
    Extra("modelscope", ("modelscope_hub",), "ms: models (with the hub extra)"),
    Extra("ledger", ("redis",), "gateway --ledger redis://: replicas sharing one ledger"),
    Extra("synth", ("gguf",), "llamarig.testing: synthetic GGUF models for tests"),
)}


def _top_module(name: str | None) -> str:
    return (name or "").split(".")[0]


@contextmanager
def needed(extra: str) -> Iterator[None]:
    """Imports inside this block belong to ``extra``: one of its modules missing raises
    MissingExtraError (an ImportError of anything else passes through as it is)."""
    known = EXTRAS[extra].modules
    try:
        yield
    except ImportError as e:
        missing = _top_module(e.name)
        if missing not in known:
            raise
        raise MissingExtraError(_("this needs llamarig's {extra} extra ({module} is not installed): "
                                  "pip install 'llamarig[{extra}]'").format(extra=extra, module=missing),
                                extra) from None
