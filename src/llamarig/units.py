"""Byte and size formatting and parsing (binary units, as llama.cpp logs them: MiB = 2^20)."""

from __future__ import annotations

import re

from llamarig.errors import InputError
from llamarig.i18n import _

MiB = 1 << 20
GiB = 1 << 30

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": MiB, "mb": 10**6,
          "mib": MiB, "g": GiB, "gb": 10**9, "gib": GiB, "t": 1 << 40, "tb": 10**12, "tib": 1 << 40}


def fmt_bytes(n: float) -> str:
    """``1536 MiB`` style: binary units, 2 decimals above KiB."""
    n = float(n)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def parse_size(text: str, default_unit: str = "") -> int:
    """Parse ``1GiB``, ``512MiB``, ``24G`` (binary), ``16GB`` (decimal) into bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m:
        raise InputError(_("'{text}' is not a size (examples: 1GiB, 512MiB, 24G)").format(text=text))
    unit = (m.group(2) or default_unit).lower()
    if unit not in _UNITS:
        raise InputError(_("'{text}': unknown unit '{unit}' (use B, KiB, MiB, GiB, GB…)").format(text=text, unit=m.group(2)))
    return int(float(m.group(1)) * _UNITS[unit])
