"""The speed model against measurements: the published points of data/speed_calibration.json
(each with its source) and the GPU evidence files benchmarks/gpu_evidence.py writes, each
predicted with plan/speed/speed_model.py (``predict_point``), which tests and scripts/accuracy_speed.py
compare with what was measured."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from llamarig.catalogue.gpus import find_gpu
from llamarig.catalogue.models import CatalogueModel, build_spec, find_model
from llamarig.errors import InputError
from llamarig.gguf.ggml_types import TYPE_SIZES
from llamarig.gguf.spec import ModelSpec
from llamarig.hardware.types import GPU, GiB, Hardware
from llamarig.i18n import _
from llamarig.plan.calibration.constants import Calibration, builtin, builtin_data
from llamarig.plan.config import parse_server_args
from llamarig.plan.speed.speed_model import acceptance_from_ratio, matmul_params, speed_report


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


def point_gpu(g: Any) -> GPU:
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
    blk, size = TYPE_SIZES[ggml_type.lower()]
    head = (spec.n_embd or 0) * (spec.n_vocab or 0)
    layer = matmul_params(spec, mtp_layers=True) - matmul_params(spec)
    proto = next(t for t in spec.tensors if t.name == "output.weight" or t.name == "token_embd.weight")
    tensors = (replace(proto, name=f"blk.{spec.n_layer_main}.nextn", n_bytes=int(layer * size / blk)),
               replace(proto, name="output.weight", n_bytes=int(head * size / blk)))
    return replace(spec, tensors=tensors, weights_bytes=sum(t.n_bytes for t in tensors))


def predict_point(p: dict[str, Any], cal: Calibration | None = None) -> PointResult:
    """Predict one published measurement with the speed model."""
    cal = cal or builtin()
    spec = _point_spec(p)
    cpu_only = p.get("gpu") is None
    gpu = point_gpu(p["gpu"]) if not cpu_only else None
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


def _evidence_gpu(doc: dict[str, Any], source: str) -> str | None:
    """The catalogue GPU id an evidence file was measured on (None on the CPU)."""
    if doc.get("backend", "CUDA") == "CPU":
        return None
    gpu = doc.get("gpu")
    if not isinstance(gpu, str) or not gpu:
        raise InputError(_("{source}: no catalogue GPU id ('gpu'); rerun the kit with --gpu ID (`llamarig gpus` "
                           'lists them) or set "gpu" in the file').format(source=source))
    try:
        find_gpu(gpu)
    except InputError as e:
        raise InputError(f"{source}: " + str(e)) from None  # + keeps the Message (llamarig.i18n)
    return gpu


def _run_points(r: dict[str, Any], base: dict[str, Any]) -> list[dict[str, Any]]:
    """One run's points: a decode point per measured depth (an MTP step with --spec), and a
    prefill point where the prompt was long enough."""
    out: list[dict[str, Any]] = []
    n_mtp = int((r.get("spec") or {}).get("n_max", 0))
    for m in r.get("measurements", []):
        if not isinstance(m, dict) or not m.get("decode_tok_s") or (n_mtp and not m.get("draft_n")):
            continue
        d = int(m.get("depth", 0))
        tag = f"{r['model']}-{base['ctk']}-ub{r.get('n_ubatch')}-d{d}" + (f"-mtp{n_mtp}" if n_mtp else "")
        pt = {**base, "id": f"ev-{tag}", "kind": "decode", "depth": d, "measured": float(m["decode_tok_s"])}
        if n_mtp:
            # tokens per step = 1 + n x accepted / drafted (drafts are n long: p_min 0)
            pt["spec"] = {"n": n_mtp, "ratio": min(0.999, float(m.get("draft_n_accepted", 0)) / float(m["draft_n"]))}
        out.append(pt)
        if not n_mtp and m.get("prefill_tok_s") and int(m.get("prompt_n") or 0) >= 512:
            out.append({**base, "id": f"ev-pp-{tag}", "kind": "prefill", "prompt": int(m["prompt_n"]),
                        "ubatch": int(r.get("n_ubatch", 512)), "measured": float(m["prefill_tok_s"])})
    return out


def evidence_points(doc: dict[str, Any], source: str = "evidence") -> list[dict[str, Any]]:
    """The calibration points (the schema of data/speed_calibration.json) of a GPU evidence file:
    one decode and one prefill point per measured depth. The model is the synthetic GGUF's
    recorded shape with its tensor bytes (the catalogue model's shape, or a tiny one in --smoke)."""
    if not is_evidence(doc):
        raise InputError(_("{source}: not a GPU evidence file (kind '{evidence_kind}')").format(source=source, evidence_kind=EVIDENCE_KIND))
    gpu = _evidence_gpu(doc, source)
    build = str((doc.get("server") or {}).get("version", "")).splitlines()
    build_s = next((ln for ln in build if "version" in ln), build[0] if build else "unknown build")
    out: list[dict[str, Any]] = []
    for r in doc.get("runs", []):
        if not isinstance(r, dict) or "error" in r:
            continue
        syn = r.get("synthetic") or {}
        out += _run_points(r, {"gpu": gpu, "model": _evidence_model(r["model"], syn),
                               "ctk": r.get("cache_type_k", "f16"), "ctv": r.get("cache_type_v", "f16"),
                               "ran": " ".join(str(a) for a in r.get("args", [])),
                               "source": f"{source} ({build_s}; synthetic {r['model']} {syn.get('bytes', '?')} B)"})
    return out
