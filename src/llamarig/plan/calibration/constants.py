"""Speed-model efficiency constants: built-in (data/speed_calibration.json, fitted to published
measurements listed there with their sources) and a user calibration file that ``bench`` or
``llamarig tune`` writes (tune: ``$LLAMARIG_STATE_DIR/speed-calibration.json``, loaded by default;
see load_calibration).

An efficiency is the fraction of a device's peak figure that llama.cpp reaches:

- ``weights``: of peak memory bandwidth while streaming weights (decode matrix-vector products)
- ``kv``: of peak memory bandwidth while reading the KV cache in attention (flash-attention decode
  kernels reach much less than weight streaming; fitted to the RTX 3090 field report's (tests/fixtures/seeds/000_3d5d35932c1dd60e.txt) 43 -> 37 tok/s slowdown)
- ``overhead_ms``: fixed time per decoded token (kernel launches, sampling, synchronisation)
- ``prefill``: of peak dense FP16 throughput at a saturated micro-batch
- ``ubatch_half``: micro-batch size at which prefill reaches half its saturated throughput
- ``attn_prefill``: attention FLOPs efficiency relative to ``prefill`` (long-prompt slowdown)
- ``verify_per_token``: extra cost of verifying one more drafted token, relative to one decode step
- ``attn_decode`` (CPU): the host's decode attention per KV cell, as a fraction of its matmul rate;
  ``attn_decode_depths`` ([[cells, efficiency], ...], tune's depth ladder): the same measured at
  several depths, the attention's time running through each (Efficiency.attn_cells)
- ``kv_by_type``: ``kv`` for particular K/V cache types ({type: efficiency})

User file format (JSON, see docs/speed.md)::

    {"version": 1,
     "efficiency": [{"backend": "CUDA", "gpu": "rtx3090", "weights": 0.7, "overhead_ms": 0.5}],
     "host_bandwidth_gbs": 38.5}

Entries override the built-in values field by field; ``gpu`` is optional (a backend-wide entry).

This module holds the calibration's data (the built-in constants, a file's entries over them);
reading a calibration file (or a GPU evidence file, fitted on the way) is
``plan/calibration/files.py``. Measuring this host is
``plan/speed/host_probes.py``; predicting published measurements and GPU evidence files with the speed
model, ``plan/calibration/points.py``; fitting efficiencies to measurements,
``plan/calibration/least_squares.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from llamarig.errors import InputError
from llamarig.gguf.ggml_types import TYPE_SIZES
from llamarig.i18n import _

_FIELDS = ("weights", "kv", "overhead_ms", "prefill", "ubatch_half", "attn_prefill",
           "verify_per_token")
#: efficiency fields a backend may leave out (then 0: the term is not modelled for it)
_OPTIONAL = ("attn_decode",)


@dataclass(frozen=True)
class Efficiency:
    backend: str
    weights: float
    kv: float
    overhead_ms: float
    prefill: float
    ubatch_half: float
    attn_prefill: float
    verify_per_token: float
    source: str = ""
    #: decode attention on the host: fraction of the host's matmul rate (host_gflops) that one
    #: query row's attention reaches per KV cell (CPU only; 0 = not modelled)
    attn_decode: float = 0.0
    #: ``kv`` for particular K/V cache types ((type, efficiency), ...): quantized K/V can read far
    #: slower per byte than f16 (the decode kernel dequantizes every element); types not named
    #: read at ``kv``
    kv_by_type: tuple[tuple[str, float], ...] = ()
    #: ``attn_decode`` measured at several depths ((cells, efficiency), ascending; tune's depth
    #: ladder on the CPU): the efficiency is the average over the first ``cells`` cells, so the
    #: attention's time is piecewise linear in the cells through the measured points (attn_cells);
    #: empty: ``attn_decode`` at every depth
    attn_decode_depths: tuple[tuple[int, float], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["kv_by_type"] = dict(self.kv_by_type)
        out["attn_decode_depths"] = [list(p) for p in self.attn_decode_depths]
        return out

    def attn_cells(self, cells: float) -> float:
        """``cells`` KV cells of host decode attention in units of cells at full rate (time =
        FLOPs per cell x this / the host's rate): ``cells / attn_decode``, or, with measured depths,
        the line through (0, 0) and each (d, d / efficiency at d), extended beyond the deepest
        point with its last segment's slope (a host whose cost per cell grows with depth is then
        planned at the deepest measured rate, not at the average)."""
        if self.attn_decode <= 0 or cells <= 0:
            return 0.0
        pts = self.attn_decode_depths
        if not pts:
            return cells / self.attn_decode
        x0, y0 = 0.0, 0.0
        for d, e in pts:
            x1, y1 = float(d), d / e
            if cells <= x1:
                return y0 + (y1 - y0) * (cells - x0) / (x1 - x0)
            x0, y0 = x1, y1
        if len(pts) == 1:
            return cells * y0 / x0
        xp, yp = float(pts[-2][0]), pts[-2][0] / pts[-2][1]
        return y0 + (y0 - yp) / (x0 - xp) * (cells - x0)

    def kv_for(self, type_k: str, type_v: str) -> float:
        """The K/V read efficiency for these cache types: each type's own (``kv_by_type``, else
        ``kv``), combined over the K and V bytes (bytes per element of each type)."""
        if not self.kv_by_type:
            return self.kv
        by = dict(self.kv_by_type)
        parts = []
        for t in (type_k, type_v):
            block, size = TYPE_SIZES.get(t.lower(), (1, 2))
            parts.append((size / block, by.get(t.lower(), self.kv)))
        total = sum(b for b, _ in parts)
        return total / sum(b / max(e, 1e-6) for b, e in parts)


@dataclass(frozen=True)
class Calibration:
    backends: dict[str, Efficiency]
    gpus: dict[str, Efficiency] = field(default_factory=dict)
    host_bandwidth_gbs: float = 40.0
    host_gflops: float = 200.0
    pcie_gbs: float = 25.0
    hop_ms: float = 0.05
    acceptance: dict[str, float] = field(default_factory=dict)
    source: str = "built-in"
    #: the llama-server threads (-tb) ``host_gflops`` was measured with (tune records it); None:
    #: the figure is for whatever threads the plan uses (the built-in default)
    host_threads: int | None = None

    def for_device(self, backend: str, gpu_id: str | None = None) -> Efficiency:
        if gpu_id and gpu_id in self.gpus:
            return self.gpus[gpu_id]
        if backend in self.backends:
            return self.backends[backend]
        return self.backends["CUDA"]  # an unknown GPU backend: assume CUDA-like kernels


def _eff(backend: str, d: dict[str, Any], base: Efficiency | None, source: str) -> Efficiency:
    vals: dict[str, Any] = {} if base is None else {k: getattr(base, k) for k in _FIELDS + _OPTIONAL}
    for k in _FIELDS + _OPTIONAL:
        if k in d:
            v = d[k]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or (k != "overhead_ms" and k != "ubatch_half" and k != "verify_per_token" and v > 1.5):
                raise InputError(_("{source}: efficiency '{key}' = {value!r} is not a plausible number").format(source=source, key=k, value=v))
            vals[k] = float(v)
    missing = [k for k in _FIELDS if k not in vals]
    if missing:
        raise InputError(_("{source}: efficiency for {backend} lacks {missing}").format(source=source, backend=backend, missing=', '.join(missing)))
    by = dict(base.kv_by_type) if base is not None else {}
    raw = d.get("kv_by_type", {})
    if not isinstance(raw, dict):
        raise InputError(_("{source}: efficiency '{key}' = {value!r} is not a plausible number").format(
            source=source, key="kv_by_type", value=raw))
    for t, v in raw.items():
        if (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v <= 1.5
                or str(t).lower() not in TYPE_SIZES):
            raise InputError(_("{source}: efficiency '{key}' = {value!r} is not a plausible number").format(
                source=source, key=f"kv_by_type.{t}", value=v))
        by[str(t).lower()] = float(v)
    depths = base.attn_decode_depths if base is not None else ()
    if "attn_decode_depths" in d:
        depths = _attn_depths(d["attn_decode_depths"], source)
    return Efficiency(backend=backend, source=d.get("source", source), kv_by_type=tuple(sorted(by.items())),
                      attn_decode_depths=depths, **vals)


def _attn_depths(raw: Any, source: str) -> tuple[tuple[int, float], ...]:
    """``attn_decode_depths``: [[cells, efficiency], ...], cells ascending positive integers,
    efficiencies in (0, 1.5], the attention's time never falling with depth."""
    out: list[tuple[int, float]] = []
    ok = isinstance(raw, list)
    for p in raw if ok else ():
        if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], int) and not isinstance(p[0], bool)
                and isinstance(p[1], (int, float)) and not isinstance(p[1], bool) and p[0] > 0 and 0 < p[1] <= 1.5
                and (not out or (p[0] > out[-1][0] and p[0] / p[1] >= out[-1][0] / out[-1][1] * (1 - 1e-9)))):
            ok = False
            break
        out.append((int(p[0]), float(p[1])))
    if not ok:
        raise InputError(_("{source}: efficiency '{key}' = {value!r} is not a plausible number").format(
            source=source, key="attn_decode_depths", value=raw))
    return tuple(out)


def _efficiencies(data: dict[str, Any], base: Calibration | None, source: str
                  ) -> tuple[dict[str, Efficiency], dict[str, Efficiency]]:
    """(per backend, per GPU id): ``data``'s efficiency entries over ``base``'s."""
    backends = dict(base.backends) if base else {}
    gpus = dict(base.gpus) if base else {}
    effs = data.get("efficiency", [])
    if not isinstance(effs, list):
        raise InputError(_("{source}: 'efficiency' must be a list").format(source=source))
    for e in effs:
        if not isinstance(e, dict) or not isinstance(e.get("backend"), str):
            raise InputError(_("{source}: each efficiency entry needs a 'backend' (CUDA, ROCm, Metal, Vulkan, CPU)").format(source=source))
        be = e["backend"]
        gid = e.get("gpu")
        if gid:
            gpus[gid] = _eff(be, e, gpus.get(gid) or backends.get(be), source)
        else:
            backends[be] = _eff(be, e, backends.get(be), source)
    return backends, gpus


def _host(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The host and link figures a file sets (bandwidth, GFLOPS, PCIe, hop, threads)."""
    kw: dict[str, Any] = {}
    for k in ("host_bandwidth_gbs", "host_gflops", "pcie_gbs", "hop_ms"):
        if k in data:
            v = data[k]
            if not isinstance(v, (int, float)) or v <= 0:
                raise InputError(_("{source}: '{key}' must be a positive number").format(source=source, key=k))
            kw[k] = float(v)
    if "host_threads" in data:
        v = data["host_threads"]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise InputError(_("{source}: '{key}' must be a positive number").format(source=source, key="host_threads"))
        kw["host_threads"] = v
    return kw


def _acceptance(data: dict[str, Any], base: Calibration | None, source: str) -> dict[str, float]:
    acc = dict(base.acceptance) if base else {}
    for k, v in (data.get("acceptance") or {}).items():
        if k.startswith("_"):
            continue
        if not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise InputError(_("{source}: acceptance '{key}' must be in [0, 1)").format(source=source, key=k))
        acc[k] = float(v)
    return acc


def _parse(data: dict[str, Any], base: Calibration | None, source: str) -> Calibration:
    if not isinstance(data, dict):
        raise InputError(_("{source}: expected a JSON object").format(source=source))
    backends, gpus = _efficiencies(data, base, source)
    kw = _host(data, source)
    acc = _acceptance(data, base, source)
    if base is not None:
        out = replace(base, backends=backends, gpus=gpus, acceptance=acc, source=source, **kw)
    else:
        out = Calibration(backends=backends, gpus=gpus, acceptance=acc, source=source, **kw)
    if "CUDA" not in out.backends or "CPU" not in out.backends:
        raise InputError(_("{source}: calibration needs CUDA and CPU entries").format(source=source))
    return out


@lru_cache(maxsize=1)
def builtin_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("llamarig.data").joinpath("speed_calibration.json").read_text())
    return data


@lru_cache(maxsize=1)
def builtin() -> Calibration:
    return _parse(builtin_data(), None, _("built-in ({path})").format(path="llamarig/data/speed_calibration.json"))




def calibration_from_json(data: dict[str, Any], source: str) -> Calibration:
    """The built-in constants overridden by ``data`` (a calibration file's JSON object)."""
    return _parse(data, builtin(), source)


def user_calibration_json(backend: str, gpu: str | None, **values: float) -> dict[str, Any]:
    """The JSON a measurement tool (``bench``) writes for one device."""
    entry: dict[str, Any] = {"backend": backend}
    if gpu:
        entry["gpu"] = gpu
    for k, v in values.items():
        if k not in _FIELDS + _OPTIONAL:
            raise ValueError(f"unknown efficiency field {k}")
        entry[k] = v
    return {"version": 1, "efficiency": [entry]}
