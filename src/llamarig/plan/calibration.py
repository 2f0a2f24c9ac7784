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
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from llamarig.catalogue.gpus import find_gpu
from llamarig.catalogue.models import CatalogueModel, build_spec, find_model
from llamarig.errors import InputError
from llamarig.gguf.ggml_types import TYPE_SIZES
from llamarig.gguf.spec import ModelSpec
from llamarig.hardware.types import GPU, GiB, Hardware
from llamarig.i18n import _
from llamarig.paths import state_dir
from llamarig.plan.config import parse_server_args

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


def _parse(data: dict[str, Any], base: Calibration | None, source: str) -> Calibration:
    if not isinstance(data, dict):
        raise InputError(_("{source}: expected a JSON object").format(source=source))
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
    acc = dict(base.acceptance) if base else {}
    for k, v in (data.get("acceptance") or {}).items():
        if k.startswith("_"):
            continue
        if not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise InputError(_("{source}: acceptance '{key}' must be in [0, 1)").format(source=source, key=k))
        acc[k] = float(v)
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
    return _parse(builtin_data(), None, "built-in (llamarig/data/speed_calibration.json)")


#: the file ``llamarig tune`` writes in the state directory; ``plan`` loads it by default
STATE_FILE = "speed-calibration.json"
#: ``LLAMARIG_CALIBRATION``: a file to use, or ``builtin`` to ignore the state-directory file
ENV = "LLAMARIG_CALIBRATION"
BUILTIN_NAMES = ("builtin", "built-in")


def state_calibration_path() -> Path:
    """``$LLAMARIG_STATE_DIR/speed-calibration.json`` (or the XDG state dir), where tune writes."""
    return state_dir() / STATE_FILE


def load_calibration(path: str | Path | None = None) -> Calibration:
    """The calibration the speed model uses.

    ``path`` given: the built-in constants overridden by that file (``builtin``: the built-in
    constants alone). ``path`` None: ``$LLAMARIG_CALIBRATION`` when set (a file, or ``builtin``),
    else the file ``llamarig tune`` wrote in the state directory when it exists, else the
    built-in constants. The source is in ``Calibration.source`` (plan prints it as
    ``calibration: ...``)."""
    base = builtin()
    how = ""
    if path is None:
        env = os.environ.get(ENV, "").strip()
        if env:
            path, how = env, _(" (from ${env})").format(env=ENV)
        else:
            sp = state_calibration_path()
            if not sp.is_file():
                return base
            path, how = sp, _(" (written by llamarig tune; {env}=builtin or --calibration builtin ignores it)").format(env=ENV)
    if str(path) in BUILTIN_NAMES and not Path(path).exists():
        return base
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(_("calibration file {path}{how}: not found").format(path=p, how=how)) from None
    except OSError as e:
        raise InputError(_("calibration file {path}{how}: not readable ({error})").format(path=p, how=how, error=e.strerror or e)) from None
    return _load_file(str(p.resolve()), st.st_mtime_ns, st.st_size, how)


@lru_cache(maxsize=16)
def _load_file(path: str, _mtime_ns: int, _size: int, how: str) -> Calibration:
    """One parsed file (cached on path, modification time and size: the speed model asks for
    the default calibration many times per plan)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise InputError(_("calibration file {path}{how}: not found").format(path=p, how=how)) from None
    except (OSError, ValueError) as e:
        raise InputError(_("calibration file {path}{how}: not readable JSON ({error})").format(path=p, how=how, error=e)) from None
    if is_evidence(data):
        data = calibration_from_evidence(data, f"GPU evidence file {p}")
    if isinstance(data, dict) and data.get("version", 1) != 1:
        raise InputError(_("calibration file {path}{how}: version {version} is not supported (1)").format(path=p, how=how, version=data.get('version')))
    return _parse(data, builtin(), _("calibration file {path}{how}").format(path=p, how=how))


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


def fit_weights_efficiency(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least-squares fit of ``t = bytes / (bw x e) + t0`` to (bytes, bandwidth B/s, measured s)
    points: returns (e, t0 seconds). Linear in (1/e, t0)."""
    if len(points) < 2:
        raise ValueError("need at least two points")
    xs = [b / bw for b, bw, _ in points]
    ys = [t for _, _, t in points]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=False))
    slope = sxy / sxx if sxx else my / mx
    t0 = max(0.0, my - slope * mx)
    return 1.0 / slope, t0


def measure_host_bandwidth(size_mib: int = 256, repeats: int = 3) -> float:
    """Host memory bandwidth in GB/s from a numpy copy (read + write), best of ``repeats``.
    Single-threaded: a lower bound of what llama.cpp's threads reach on a big machine, close to
    it on a small one."""
    import numpy as np  # lazy: numpy (0.2 s), only for the host bandwidth probe

    n = size_mib * (1 << 20) // 8
    a = np.ones(n, dtype=np.float64)
    b = np.empty_like(a)
    best = float("inf")
    for _rep in range(repeats):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9


def measure_host_gflops(n: int = 512, repeats: int = 5, threads: int = 1) -> float:
    """Host float32 matrix-multiply throughput in GFLOPS (numpy BLAS, best of ``repeats``), in a
    subprocess limited to ``threads`` BLAS threads (a multi-threaded BLAS on a busy machine
    measures contention, not the core)."""
    code = ("import time, numpy as np\n"
            f"a = np.random.default_rng(0).standard_normal(({n}, {n})).astype(np.float32)\n"
            "best = 1e9\n"
            f"for _ in range({repeats}):\n"
            "    t = time.perf_counter(); a @ a; best = min(best, time.perf_counter() - t)\n"
            f"print(2 * {n}**3 / best / 1e9)\n")
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60, check=True)
    return float(r.stdout.strip())


# ============================================================================ published points


@dataclass(frozen=True)
class PointResult:
    id: str
    kind: str  # decode | prefill
    gpu: str
    model: str
    setting: str
    measured: float
    predicted: float
    limit: float | None
    source: str

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured if self.measured else 0.0


def points() -> list[dict[str, Any]]:
    return list(builtin_data().get("points", []))


def _point_gpu(g: Any) -> GPU:
    if isinstance(g, str):
        return find_gpu(g)
    return GPU(id=g["name"].lower().replace(" ", "-"), name=g["name"], backend=g.get("backend", "CUDA"),
               memory_bytes=int(float(g.get("memory_gb", 24)) * GiB), bandwidth_gbs=float(g["bandwidth_gbs"]),
               fp16_tflops=float(g.get("fp16_tflops", 0)), overhead_bytes=300 << 20, source="data point")


def _point_spec(p: dict[str, Any]) -> ModelSpec:
    mdl = p["model"]
    if isinstance(mdl, dict):
        entry = dict(mdl)
        size = int(float(entry.pop("file_gb")) * 1e9)
        m = CatalogueModel(entry["id"], entry["id"], entry["arch"], entry, {"Q4_0": {"bytes": size, "source": "point"}}, "point")
        spec = build_spec(m, "Q4_0")
    else:
        m, q = find_model(mdl)
        spec = build_spec(m, q)
    if "file_gb" in p:
        scale = float(p["file_gb"]) * 1e9 / max(1, spec.weights_bytes)
        spec = replace(spec, tensors=tuple(replace(t, n_bytes=int(t.n_bytes * scale)) for t in spec.tensors))
        spec = replace(spec, weights_bytes=sum(t.n_bytes for t in spec.tensors))
    return spec


def _mtp_file_spec(spec: ModelSpec, ggml_type: str) -> ModelSpec:
    """A separate MTP GGUF made from ``spec``: its nextn layer(s) and an output head, every matrix
    at ``ggml_type`` (bits per weight from gguf/ggml_types.py); parameter counts from the
    architecture (speed.matmul_params). The file size of such a draft is rarely published; this is
    the estimate a point states."""
    from llamarig.plan.speed import matmul_params  # lazy: cycle with speed.py

    blk, size = TYPE_SIZES[ggml_type.lower()]
    head = (spec.n_embd or 0) * (spec.n_vocab or 0)
    layer = matmul_params(spec, mtp_layers=True) - matmul_params(spec)
    proto = next(t for t in spec.tensors if t.name == "output.weight" or t.name == "token_embd.weight")
    tensors = (replace(proto, name=f"blk.{spec.n_layer_main}.nextn", n_bytes=int(layer * size / blk)),
               replace(proto, name="output.weight", n_bytes=int(head * size / blk)))
    return replace(spec, tensors=tensors, weights_bytes=sum(t.n_bytes for t in tensors))


def predict_point(p: dict[str, Any], cal: Calibration | None = None) -> PointResult:
    """Predict one published measurement with the speed model."""
    from llamarig.plan.speed import acceptance_from_ratio, speed_report  # lazy: cycle with speed.py

    cal = cal or builtin()
    spec = _point_spec(p)
    cpu_only = p.get("gpu") is None
    gpu = _point_gpu(p["gpu"]) if not cpu_only else None
    hw = Hardware((gpu,) if gpu is not None else ())
    args = ["-c", str(max(4096, int(p.get("depth", 0)) + 1024,
                          int(p.get("prompt", 0)) + int(p.get("start", 0)) + 1024)), "-np", "1",
            "-ctk", p.get("ctk", "f16"), "-ctv", p.get("ctv", "f16"), "-fa", "on", "-ngl", "0" if cpu_only else "99"]
    if "ubatch" in p:
        args += ["-ub", str(p["ubatch"]), "-b", str(max(2048, int(p["ubatch"])))]
    sp = p.get("spec")
    acc = None
    draft = None
    if sp and sp.get("draft_type"):
        draft = _mtp_file_spec(spec, str(sp["draft_type"]))
    if sp:
        args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(sp["n"])]
        acc = acceptance_from_ratio(float(sp["ratio"]), int(sp["n"]))
        if not spec.nextn_layers:
            raise ValueError(f"point {p['id']}: speculative point on a model without MTP layers")
    cfg = parse_server_args(args)
    depth = int(p.get("depth", 0))
    rep = speed_report(spec, cfg, hw, cal=cal, acceptance=acc, prompt_tokens=int(p["prompt"]) if "prompt" in p else None,
                       depths=[depth], prompt_start=int(p.get("start", 0)), draft=draft)
    setting = f"KV {p.get('ctk', 'f16')}/{p.get('ctv', 'f16')}"
    if p["kind"] == "prefill":
        pred, lim = rep.prefill.tok_s, None
        setting += f", prompt {p['prompt']}, -ub {rep.prefill.n_ubatch}"
        if p.get("start"):
            setting += f", after {p['start']} cached"
    elif sp:
        assert rep.speculative is not None
        pred, lim = rep.speculative.decode_tok_s, None
        setting += f", depth {depth}, MTP n={sp['n']} ratio {sp['ratio']} (a={acc:.2f})"
    else:
        pred, lim = rep.by_depth[0].decode_tok_s, rep.by_depth[0].limit_tok_s
        setting += f", depth {depth}"
    model = p["model"] if isinstance(p["model"], str) else p["model"]["id"]
    if "file_gb" in p or isinstance(p["model"], dict):
        model += f" ({spec.weights_bytes / 1e9:.2f} GB)"
    return PointResult(p["id"], p["kind"], gpu.name if gpu is not None else "CPU", model, setting,
                       float(p["measured"]), pred, lim, p.get("source", ""))


def evaluate_points(cal: Calibration | None = None) -> list[PointResult]:
    return [predict_point(p, cal) for p in points()]


# ============================================================================ GPU evidence files

#: what benchmarks/gpu_evidence.py writes ("kind" of its JSON file)
EVIDENCE_KIND = "llamarig-gpu-evidence"
#: decode points at least this deep set ``kv``; shallower ones ``weights`` and ``overhead_ms``
EVIDENCE_DEEP = 8192


def is_evidence(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == EVIDENCE_KIND


def _evidence_model(model_id: str, syn: dict[str, Any]) -> dict[str, Any] | str:
    """The synthetic GGUF's shape as a catalogue-style entry (what _point_spec builds a spec from),
    with its real tensor bytes; the catalogue id when the file recorded no shape."""
    sh = syn.get("shape") or {}
    if not sh:
        return model_id
    e: dict[str, Any] = {"id": f"{model_id} (synthetic)", "arch": syn.get("arch", "llama"),
                         "file_gb": float(syn.get("tensor_bytes", 0)) / 1e9}
    for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_ctx_train", "nextn_layers"):
        e[k] = int(sh[k])
    e["n_vocab"] = int(sh.get("n_vocab") or 0) or 272
    if e["arch"] in ("qwen35", "qwen35moe"):
        e["full_attention_interval"] = int(sh.get("full_attention_interval", 4))
        e["ssm"] = {"conv_kernel": int(sh["ssm_conv_kernel"]), "state_size": int(sh["ssm_state_size"]),
                    "group_count": int(sh["ssm_group_count"]), "time_step_rank": int(sh["ssm_time_step_rank"]),
                    "inner_size": int(sh["ssm_state_size"]) * int(sh["ssm_time_step_rank"])}
    if e["arch"] in ("qwen3moe", "qwen35moe"):
        e.update(n_expert=int(sh["n_expert"]), n_expert_used=int(sh["n_expert_used"]),
                 n_ff_expert=int(sh["n_ff_expert"]))
    if e["arch"] == "gemma3":
        e["swa_window"] = int(sh.get("swa_window", 0))
        if sh.get("swa_period"):
            e["swa_period"] = int(sh["swa_period"])
    return e


def evidence_points(doc: dict[str, Any], source: str = "evidence") -> list[dict[str, Any]]:
    """The calibration points (the schema of data/speed_calibration.json) of a GPU evidence file:
    one decode and one prefill point per measured depth. The model is the synthetic GGUF's
    recorded shape with its tensor bytes (the catalogue model's shape, or a tiny one in --smoke)."""
    if not is_evidence(doc):
        raise InputError(_("{source}: not a GPU evidence file (kind '{evidence_kind}')").format(source=source, evidence_kind=EVIDENCE_KIND))
    gpu = doc.get("gpu") if doc.get("backend", "CUDA") != "CPU" else None
    if doc.get("backend", "CUDA") != "CPU":
        if not isinstance(gpu, str) or not gpu:
            raise InputError(_("{source}: no catalogue GPU id ('gpu'); rerun the kit with --gpu ID (`llamarig gpus` "
                               'lists them) or set "gpu" in the file').format(source=source))
        try:
            find_gpu(gpu)
        except InputError as e:
            raise InputError(f"{source}: " + str(e)) from None  # + keeps the Message (llamarig.i18n)
    build = str((doc.get("server") or {}).get("version", "")).splitlines()
    build_s = next((ln for ln in build if "version" in ln), build[0] if build else "unknown build")
    out: list[dict[str, Any]] = []
    for r in doc.get("runs", []):
        if not isinstance(r, dict) or "error" in r:
            continue
        syn = r.get("synthetic") or {}
        base = {"gpu": gpu, "model": _evidence_model(r["model"], syn),
                "ctk": r.get("cache_type_k", "f16"), "ctv": r.get("cache_type_v", "f16"),
                "ran": " ".join(str(a) for a in r.get("args", [])),
                "source": f"{source} ({build_s}; synthetic {r['model']} {syn.get('bytes', '?')} B)"}
        n_mtp = int((r.get("spec") or {}).get("n_max", 0))
        for m in r.get("measurements", []):
            if not isinstance(m, dict) or not m.get("decode_tok_s"):
                continue
            d = int(m.get("depth", 0))
            tag = f"{r['model']}-{base['ctk']}-ub{r.get('n_ubatch')}-d{d}" + (f"-mtp{n_mtp}" if n_mtp else "")
            pt = {**base, "id": f"ev-{tag}", "kind": "decode", "depth": d, "measured": float(m["decode_tok_s"])}
            if n_mtp:
                if not m.get("draft_n"):
                    continue
                # tokens per step = 1 + n x accepted / drafted (drafts are n long: p_min 0)
                pt["spec"] = {"n": n_mtp, "ratio": min(0.999, float(m.get("draft_n_accepted", 0)) / float(m["draft_n"]))}
            out.append(pt)
            if not n_mtp and m.get("prefill_tok_s") and int(m.get("prompt_n") or 0) >= 512:
                out.append({**base, "id": f"ev-pp-{tag}", "kind": "prefill", "prompt": int(m["prompt_n"]),
                            "ubatch": int(r.get("n_ubatch", 512)), "measured": float(m["prefill_tok_s"])})
    return out


def _ls_rel(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """argmin over (u >= 1, t0 >= 0) of sum(((x u + t0 - y) / y)^2): u = 1 / efficiency."""
    best = (1.0, 0.0, float("inf"))
    w = [1 / y**2 for _, y, _ in rows]
    sw, sx, sy = sum(w), sum(wi * x for wi, (x, _, _) in zip(w, rows, strict=True)), sum(
        wi * y for wi, (_, y, _) in zip(w, rows, strict=True))
    sxx = sum(wi * x * x for wi, (x, _, _) in zip(w, rows, strict=True))
    sxy = sum(wi * x * y for wi, (x, y, _) in zip(w, rows, strict=True))
    cands = []
    det = sxx * sw - sx * sx
    if det > 0:
        cands.append(((sxy * sw - sx * sy) / det, (sxx * sy - sx * sxy) / det))
    cands.append((sxy / sxx if sxx else 1.0, 0.0))
    cands.append((1.0, max(0.0, (sy - sx) / sw)))
    for u, t0 in cands:
        u, t0 = max(1.0, u), max(0.0, t0)
        err = sum(((x * u + t0 - y) / y) ** 2 for x, y, _ in rows)
        if err < best[2]:
            best = (u, t0, err)
    return best[0], best[1]


def _identified(xs: list[float]) -> bool:
    """Whether the shallow decode points tell ``weights`` from ``overhead_ms``: they need weight
    terms that differ (two models or quantizations); one model gives one straight line through the
    origin's neighbourhood that any split fits equally well."""
    return bool(xs) and (max(xs) - min(xs)) > 0.05 * max(xs)


def _ls2_rel(rows: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """argmin over (u >= 1, v >= 1) of sum(((a u + b v - y) / t)^2) for rows (a, b, y, t)."""
    w = [1 / t**2 for *_, t in rows]
    saa = sum(wi * a * a for wi, (a, _, _, _) in zip(w, rows, strict=True))
    sbb = sum(wi * b * b for wi, (_, b, _, _) in zip(w, rows, strict=True))
    sab = sum(wi * a * b for wi, (a, b, _, _) in zip(w, rows, strict=True))
    say = sum(wi * a * y for wi, (a, _, y, _) in zip(w, rows, strict=True))
    sby = sum(wi * b * y for wi, (_, b, y, _) in zip(w, rows, strict=True))
    cands = []
    det = saa * sbb - sab * sab
    if det > 1e-30 * max(1.0, saa * sbb):
        cands.append(((say * sbb - sab * sby) / det, (saa * sby - sab * say) / det))
    if saa > 0:
        cands.append(((say - sab) / saa, 1.0))
    if sbb > 0:
        cands.append((1.0, (sby - sab) / sbb))
    best = (1.0, 1.0, float("inf"))
    for u, v in cands:
        u, v = max(1.0, u), max(1.0, v)
        err = sum(((a * u + b * v - y) / t) ** 2 for a, b, y, t in rows)
        if err < best[2]:
            best = (u, v, err)
    return best[0], best[1]


def calibration_from_evidence(doc: dict[str, Any], source: str = "evidence") -> dict[str, Any]:
    """A user calibration (the JSON load_calibration reads) fitted to a GPU evidence file:
    ``weights`` and ``overhead_ms`` by least squares of the relative decode-time error over the
    points shallower than EVIDENCE_DEEP (their KV term at kv = weights), then ``kv`` over the
    deeper ones, for the evidence's GPU (or backend). Each point's time is linear in the inverse
    efficiencies; the coefficients are read off the speed model itself by probe predictions.

    One model's shallow points cannot tell ``weights`` from ``overhead_ms`` (:func:`_identified`):
    then ``overhead_ms`` stays the built-in one for that GPU or backend and ``weights`` takes all of
    the rest, and the source says so. ``prefill`` and ``attn_prefill`` are fitted to the prefill
    points the same way (the matmul term and the attention term, which grows with the prompt)."""
    every = [p for p in evidence_points(doc, source) if p["kind"] == "decode"]
    pts = [p for p in every if "spec" not in p]
    mtp = [p for p in every if "spec" in p]
    pre = [p for p in evidence_points(doc, source) if p["kind"] == "prefill"]
    if not pts:
        raise InputError(_("{source}: no decode measurement to fit").format(source=source))
    backend = "CPU" if doc.get("backend") == "CPU" else str(doc.get("backend") or "CUDA")
    gpu = doc.get("gpu") if backend != "CPU" else None
    base = builtin()
    base_eff = base.for_device(backend, gpu)

    def probe(**kw: Any) -> Calibration:
        def set_(e: Efficiency) -> Efficiency:  # one kv for every K/V type while probing
            return replace(e, kv_by_type=(), **kw)

        if gpu and gpu in base.gpus:
            return replace(base, gpus={**base.gpus, gpu: set_(base.gpus[gpu])})
        backends = {**base.backends, backend: replace(set_(base.for_device(backend)), backend=backend)}
        gpus = {k: (set_(e) if e.backend == backend else e) for k, e in base.gpus.items()}
        if gpu:
            gpus[gpu] = replace(set_(base.for_device(backend)), backend=backend)
        return replace(base, backends=backends, gpus=gpus)

    terms = []
    for p in pts:
        t1 = 1 / predict_point(p, probe(weights=1.0, kv=1.0, overhead_ms=0.0)).predicted
        x_w = 1 / predict_point(p, probe(weights=0.5, kv=1.0, overhead_ms=0.0)).predicted - t1
        x_kv = 1 / predict_point(p, probe(weights=1.0, kv=0.5, overhead_ms=0.0)).predicted - t1
        terms.append((p, t1 - x_w - x_kv, x_w, x_kv, 1 / p["measured"]))
    short = [t for t in terms if int(t[0]["depth"]) < EVIDENCE_DEEP] or terms
    deep = [t for t in terms if int(t[0]["depth"]) >= EVIDENCE_DEEP]
    split = ""
    if _identified([x_w + x_kv for _, _, x_w, x_kv, _ in short]):
        u_w, t0 = _ls_rel([(x_w + x_kv, y - c, y) for _, c, x_w, x_kv, y in short])
    else:
        t0 = base_eff.overhead_ms / 1000
        num = sum((x_w + x_kv) * (y - c - t0) / y**2 for _, c, x_w, x_kv, y in short)
        den = sum((x_w + x_kv) ** 2 / y**2 for _, c, x_w, x_kv, y in short)
        u_w = max(1.0, num / den) if den > 0 else 1.0
        split = (f"; one model's weight bytes only, so weights and overhead_ms are not told apart: overhead_ms "
                 f"kept at the built-in {base_eff.overhead_ms:g} and weights takes the rest")
    def fit_kv(rows: list[tuple[dict[str, Any], float, float, float, float]]) -> float:
        num = sum(x_kv * (y - c - x_w * u_w - t0) / y**2 for _, c, x_w, x_kv, y in rows)
        den = sum(x_kv * x_kv / y**2 for _, c, x_w, x_kv, y in rows)
        return max(1.0, num / den) if den > 0 else u_w

    u_kv = fit_kv(deep) if deep else u_w
    # K/V types read at their own rate: one kv per type (K and V of one type) when the deep points
    # cover several; ``kv`` is then f16's (or all points' when f16 is absent)
    by_type: dict[str, list[tuple[dict[str, Any], float, float, float, float]]] = {}
    for t in deep:
        if t[0]["ctk"] == t[0]["ctv"]:
            by_type.setdefault(str(t[0]["ctk"]).lower(), []).append(t)
    kv_by_type: dict[str, float] = {}
    if len(by_type) > 1:
        if "f16" in by_type:
            u_kv = fit_kv(by_type["f16"])
        kv_by_type = {k: round(1 / fit_kv(v), 4) for k, v in sorted(by_type.items()) if k != "f16"}
    entry: dict[str, Any] = {"backend": backend, "weights": round(1 / u_w, 4), "kv": round(1 / u_kv, 4),
                             "overhead_ms": round(t0 * 1000, 4),
                             "source": f"{source}: {len(short)} shallow + {len(deep)} deep decode points "
                                       f"(benchmarks/gpu_evidence.py){split}"}
    if kv_by_type:
        entry["kv_by_type"] = kv_by_type
        entry["source"] += f"; kv per K/V type ({', '.join(sorted(by_type))})"
    if pre:  # prefill time = c + x_p / prefill + x_a / attn_prefill
        prows = []
        for p in pre:
            t1 = 1 / predict_point(p, probe(prefill=1.0, attn_prefill=1.0)).predicted
            x_p = 1 / predict_point(p, probe(prefill=0.5, attn_prefill=1.0)).predicted - t1
            x_a = 1 / predict_point(p, probe(prefill=1.0, attn_prefill=0.5)).predicted - t1
            y = 1 / p["measured"]
            prows.append((x_p, x_a, y - (t1 - x_p - x_a), y))
        u_p, u_a = _ls2_rel(prows)
        entry.update(prefill=round(1 / u_p, 4), attn_prefill=round(1 / u_a, 4))
        entry["source"] += f"; prefill / attn_prefill from {len(pre)} prefill points"
    if mtp:  # verify_per_token: the MTP step time is linear in it (weights, kv, overhead as fitted)
        def with_v(v: float) -> Calibration:
            e = {**entry, "verify_per_token": v, **({"gpu": gpu} if gpu else {})}
            return _parse({"version": 1, "efficiency": [e]}, base, source)

        rows = []
        for p in mtp:
            t_0 = 1 / predict_point(p, with_v(0.0)).predicted
            t_1 = 1 / predict_point(p, with_v(1.0)).predicted
            rows.append((t_1 - t_0, 1 / p["measured"] - t_0, 1 / p["measured"]))
        den = sum(x * x / t**2 for x, _, t in rows)
        v = max(0.0, sum(x * y / t**2 for x, y, t in rows) / den) if den > 0 else 0.0
        entry["verify_per_token"] = round(v, 4)
        entry["source"] += f"; verify_per_token from {len(mtp)} MTP step points"
    if gpu:
        entry["gpu"] = gpu
    return {"version": 1, "efficiency": [entry]}
