"""The built-in model catalogue (llamarig/data/models.json) as ModelSpecs.

A catalogue id is ``model[:quant]`` (e.g. ``qwen3.6-27b:iq4_nl``). The spec has the real layer
layout; its tensors are per-layer aggregates (attention, recurrent, FFN or experts, embeddings,
output) whose byte counts are parameter counts scaled so that they add up to the file size. A
quant whose entry lists ``tensor_types`` (``[[regex, ggml type], ...]``, first match wins) gets
real tensors instead: shapes as llama.cpp creates them and bytes from their types.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from llamarig.errors import ModelNotFoundError, UnknownNameError
from llamarig.gguf import load_spec
from llamarig.gguf.ggml_types import tensor_bytes
from llamarig.gguf.reader import TensorInfo
from llamarig.gguf.spec import (
    CatalogueOrigin,
    LayerKind,
    LayerSpec,
    ModelSpec,
    RecurrentSpec,
    RopeSpec,
)
from llamarig.hub.ref import is_remote
from llamarig.i18n import _, did_you_mean, unknown_name

DEFAULT_QUANT = "Q4_K_M"


@dataclass(frozen=True)
class CatalogueModel:
    id: str
    name: str
    arch: str
    entry: dict[str, Any]
    quants: dict[str, dict[str, Any]]
    source: str

    def size_estimated(self, quant: str) -> bool:
        """The file size of ``quant`` is a range (a rounded published figure with its spread, or bits
        per weight), not a published byte count."""
        q = self.quants.get(quant, {})
        return bool(q.get("spread")) or not q.get("bytes")

    def file_bytes(self, quant: str, bpw: dict[str, float]) -> tuple[int, str]:
        q = self.quants.get(quant, {})
        if q.get("bytes") and q.get("spread"):
            # a size whose reading is uncertain: labelled an estimate, with its range
            return int(q["bytes"]), f"estimated: {int(q['bytes']):,} B +-{float(q['spread']):.1%} ({q.get('source', '')})"
        if q.get("bytes"):
            return int(q["bytes"]), str(q.get("source", "catalogue"))
        bits = bpw.get(quant, 4.85)
        params = float(self.entry.get("params_b", 0)) * 1e9
        return int(params * bits / 8), f"estimated: {self.entry.get('params_b')}B params x {bits} bits/weight ({quant})"


def refresh_from_repo(m: CatalogueModel, bpw: dict[str, float], repo: str | None = None) -> dict[str, Any]:
    """The catalogue's size of each quant next to the real file's, from the repo the entry names
    (``"repo": "hf:OWNER/REPO"`` in data/models.json, or ``repo``): the hub's file listing, exact.
    Nothing is rewritten; a quant the repo lacks, or the catalogue lacks, is listed with None."""
    from llamarig.hub.resolve import repo_quants  # lazy: huggingface_hub, remote refs only

    ref = repo or m.entry.get("repo")
    if not ref:
        raise UnknownNameError("repo for model", m.id, [], _("{id}: the catalogue entry names no repo "
                                                             "(\"repo\": \"hf:OWNER/REPO\"); give one").format(id=m.id))
    doc = repo_quants(ref)
    real = {q["quant"].upper(): q for q in doc["quants"]}
    rows = []
    for quant in dict.fromkeys([*m.quants, *real]):
        cat = m.file_bytes(quant, bpw) if quant in m.quants else None
        r = real.get(quant.upper())
        rows.append({"quant": quant, "catalogue_bytes": cat[0] if cat else None,
                     "catalogue_source": cat[1] if cat else None,
                     "repo_bytes": r["bytes"] if r else None, "reference": r["reference"] if r else None,
                     "difference": (r["bytes"] - cat[0]) if (r and cat and r["bytes"] is not None) else None})
    return {"id": m.id, "repo": ref, "commit": doc["commit"], "method": doc["method"], "quants": rows}


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("llamarig.data").joinpath("models.json").read_text())
    return data


@lru_cache(maxsize=1)
def load_models() -> dict[str, CatalogueModel]:
    data = _data()
    raw = {e["id"]: e for e in data["models"]}
    out = {}
    for mid, e in raw.items():
        base = raw[e["alias_of"]] if "alias_of" in e else e
        out[mid] = CatalogueModel(mid, e.get("name", mid), base["arch"], base,
                                  base.get("quants", {}), e.get("source", base.get("source", "")))
    return out


def bpw_table() -> dict[str, float]:
    return {k: float(v) for k, v in _data()["bpw"].items() if not k.startswith("_")}


def split_id(text: str) -> tuple[str, str | None]:
    name, _, quant = text.partition(":")
    return name.strip().lower(), (quant.strip() or None)


def find_model(text: str) -> tuple[CatalogueModel, str]:
    """Resolve ``model[:quant]``; raises UnknownNameError with the closest ids."""
    models = load_models()
    name, quant = split_id(text)
    m = models.get(name)
    if m is None:
        close = difflib.get_close_matches(name, list(models), n=4, cutoff=0.4)
        if not close:
            close = [k for k in models if name and (name in k or k.startswith(name[:5]))][:4]
        raise unknown_name(_("model"), text, close)
    if quant is None:
        quant = DEFAULT_QUANT if DEFAULT_QUANT in m.quants else next(iter(m.quants))
    qmap = {q.lower(): q for q in m.quants}
    if quant.lower() not in qmap:
        if quant.upper() in bpw_table():
            return m, quant.upper()  # a quant we know the size of, estimated
        raise unknown_name(_("quant of {model}").format(model=m.id), quant,
                               [f"{m.id}:{q.lower()}" for q in m.quants])
    return m, qmap[quant.lower()]


def is_catalogue_id(text: str) -> bool:
    name, _ = split_id(text)
    return name in load_models()


def resolve_model(text: str) -> tuple[ModelSpec, CatalogueModel | None]:
    """MODEL as a GGUF path (split files too), a remote reference (``hf:OWNER/REPO:QUANT``,
    ``OWNER/REPO:QUANT``, ``ms:…``, an https URL: llamarig.hub reads only its header) or a
    catalogue id (``llamarig models``), for every command that takes one: the spec, and the
    catalogue entry when it came from the catalogue.

    An existing path always wins; a catalogue id is tried next; anything else is read as a path,
    so a missing file is a one-line ``no such file`` error (exit 2), with the closest catalogue
    ids when the text looks like one.
    """
    p = Path(text)
    if p.exists():
        return load_spec(p), None
    if is_remote(text):
        from llamarig.hub.resolve import load_remote  # lazy: huggingface_hub, remote refs only

        return load_remote(text), None
    if is_catalogue_id(text):
        m, quant = find_model(text)  # UnknownNameError (exit 2) for an unknown quant
        return build_spec(m, quant), m
    if text.lower().endswith(".gguf") or "/" in text or "\\" in text:
        return load_spec(p), None  # GGUFError: no such file
    try:
        find_model(text)
    except UnknownNameError as e:
        hint = did_you_mean(e.suggestions)
        raise ModelNotFoundError(text, _("no such file, and not a catalogue id{hint}").format(hint=hint)) from None
    raise ModelNotFoundError(text, _("no such file"))  # pragma: no cover - find_model accepted what is_catalogue_id refused


def _tensor(name: str, n_bytes: int) -> TensorInfo:
    return TensorInfo(name=name, ggml_type="catalogue", shape=(), n_bytes=n_bytes, offset=-1)


@dataclass(frozen=True)
class _EntryShape:
    """A catalogue entry's shape, read once."""

    arch: str
    n_main: int
    nextn: int
    embd: int
    nh: int
    nkv: int
    hd: int
    n_ff: int
    vocab: int
    interval: int
    swa_window: int
    period: int
    n_exp: int
    ff_exp: int
    ssm: dict[str, Any] | None

    @classmethod
    def of(cls, e: dict[str, Any]) -> _EntryShape:
        return cls(e["arch"], int(e["n_layer"]), int(e.get("nextn_layers", 0)), int(e["n_embd"]), int(e["n_head"]),
                   int(e["n_head_kv"]), int(e["head_dim"]), int(e.get("n_ff", 0)), int(e["n_vocab"]),
                   int(e.get("full_attention_interval") or 0), int(e.get("swa_window") or 0),
                   int(e.get("swa_period") or 0), int(e.get("n_expert", 0)), int(e.get("n_ff_expert", 0) or 0),
                   e.get("ssm"))

    def kind(self, il: int) -> LayerKind:
        if il >= self.n_main:
            return "attention"  # a nextn (MTP) layer
        if self.interval and (il + 1) % self.interval != 0:
            return "recurrent"
        if self.swa_window and self.period and il % self.period < self.period - 1:
            return "swa"
        return "attention"


def _attention_params(sh: _EntryShape, p: str, kind: str) -> list[tuple[str, tuple[int, ...]]]:
    embd, nh, nkv, hd = sh.embd, sh.nh, sh.nkv, sh.hd
    if kind == "recurrent" and sh.ssm:
        inner = int(sh.ssm["inner_size"])
        conv = inner + 2 * int(sh.ssm["group_count"]) * int(sh.ssm["state_size"])
        return [(f"{p}.attn_qkv.weight", (embd, conv)),  # qwen35 linear attention in-projection
                (f"{p}.attn_gate.weight", (embd, inner)), (f"{p}.ssm_out.weight", (inner, embd))]
    gate = 2 if sh.arch in ("qwen35", "qwen35moe") else 1
    return [(f"{p}.attn_q.weight", (embd, nh * hd * gate)), (f"{p}.attn_k.weight", (embd, nkv * hd)),
            (f"{p}.attn_v.weight", (embd, nkv * hd)), (f"{p}.attn_output.weight", (nh * hd, embd))]


def _ffn_params(sh: _EntryShape, p: str) -> list[tuple[str, tuple[int, ...]]]:
    embd, n_exp, ff_exp = sh.embd, sh.n_exp, sh.ff_exp
    if n_exp:
        return [(f"{p}.ffn_up_exps.weight", (embd, ff_exp, n_exp)), (f"{p}.ffn_gate_exps.weight", (embd, ff_exp, n_exp)),
                (f"{p}.ffn_down_exps.weight", (ff_exp, embd, n_exp)), (f"{p}.ffn_gate_inp.weight", (embd, n_exp))]
    return [(f"{p}.ffn_gate.weight", (embd, sh.n_ff)), (f"{p}.ffn_up.weight", (embd, sh.n_ff)),
            (f"{p}.ffn_down.weight", (sh.n_ff, embd))]


def _gpt_oss_vectors(sh: _EntryShape, p: str) -> list[tuple[str, tuple[int, ...]]]:
    """The f32 vectors of an openai-moe block (src/models/openai-moe.cpp:36-54 at build 11434):
    they follow their layer (norms, sinks, attention and router biases) or the experts
    (--n-cpu-moe's pattern blk.N.ffn_(up|down|gate)_(ch|)exps also matches the biases)."""
    embd, nh, nkv, hd, n_exp, ff_exp = sh.embd, sh.nh, sh.nkv, sh.hd, sh.n_exp, sh.ff_exp
    return [(f"{p}.attn_norm.weight", (embd,)), (f"{p}.post_attention_norm.weight", (embd,)),
            (f"{p}.attn_q.bias", (nh * hd,)), (f"{p}.attn_k.bias", (nkv * hd,)),
            (f"{p}.attn_v.bias", (nkv * hd,)), (f"{p}.attn_output.bias", (embd,)),
            (f"{p}.attn_sinks.weight", (nh,)), (f"{p}.ffn_gate_inp.bias", (n_exp,)),
            (f"{p}.ffn_gate_exps.bias", (ff_exp, n_exp)), (f"{p}.ffn_up_exps.bias", (ff_exp, n_exp)),
            (f"{p}.ffn_down_exps.bias", (embd, n_exp))]


def _params(sh: _EntryShape, tied: bool) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape in ggml order: ne0 first) of every tensor. Tensor names as llama.cpp's GGUFs
    have them (src/llama-arch.cpp LLM_TENSOR_NAMES), so that -ot patterns, --n-cpu-moe and
    --n-cpu-ffn match a catalogue model as they match the file."""
    params: list[tuple[str, tuple[int, ...]]] = []
    for il in range(sh.n_main + sh.nextn):
        p = f"blk.{il}"
        params += _attention_params(sh, p, sh.kind(il)) + _ffn_params(sh, p)
        if il >= sh.n_main:
            params.append((f"{p}.nextn.eh_proj.weight", (2 * sh.embd, sh.embd)))
        if sh.arch == "gpt-oss":
            params += _gpt_oss_vectors(sh, p)
    params.append(("token_embd.weight", (sh.embd, sh.vocab)))
    if not tied:
        params.append(("output.weight", (sh.embd, sh.vocab)))
    return params


def _tensors(m: CatalogueModel, quant: str, params: list[tuple[str, tuple[int, ...]]]
             ) -> tuple[tuple[TensorInfo, ...], int, str]:
    """(tensors, file bytes, where the size comes from): each tensor's bytes from the catalogue's
    tensor types when it has them, else the file size spread over the tensors by parameter count."""
    file_bytes, size_source = m.file_bytes(quant, bpw_table())
    types = m.quants.get(quant, {}).get("tensor_types")
    if types:
        # real tensors: each one's type from the first matching pattern, bytes as ggml counts them
        rules = [(re.compile(rx), str(t)) for rx, t in types]

        def typed(name: str, shape: tuple[int, ...]) -> TensorInfo:
            t = next((t for rx, t in rules if rx.search(name)), "f32")
            return TensorInfo(name=name, ggml_type=t, shape=shape, n_bytes=tensor_bytes(t, shape), offset=-1)

        tensors = tuple(typed(n, shape) for n, shape in params)
        return tensors, file_bytes, (f"{size_source}; tensor bytes from their types ({sum(t.n_bytes for t in tensors):,} "
                                     f"B of tensors, the rest of the file is metadata)")
    sizes = [(n, math.prod(shape)) for n, shape in params]
    total_params = sum(v for _, v in sizes)
    scale = file_bytes / total_params if total_params else 0
    return tuple(_tensor(n, int(v * scale)) for n, v in sizes), file_bytes, size_source


def _recurrent(ssm: dict[str, Any] | None) -> RecurrentSpec | None:
    if not ssm:
        return None
    d_conv, inner = int(ssm["conv_kernel"]), int(ssm["inner_size"])
    st, g = int(ssm["state_size"]), int(ssm["group_count"])
    return RecurrentSpec(d_conv, inner, st, g, int(ssm["time_step_rank"]), (d_conv - 1) * (inner + 2 * g * st), st * inner)


def build_spec(m: CatalogueModel, quant: str) -> ModelSpec:
    """The ModelSpec of a catalogue model at ``quant``: its shape from the entry, tensors named as
    llama.cpp's GGUFs name them, sizes from the published file size (or the catalogue's tensor
    types), with where each figure comes from (``ModelSpec.origin``)."""
    e = m.entry
    sh = _EntryShape.of(e)
    tensors, file_bytes, size_source = _tensors(m, quant, _params(sh, bool(e.get("tied_embeddings"))))
    n_all = sh.n_main + sh.nextn
    layers = tuple(LayerSpec(il, sh.kind(il), sh.nh, sh.nkv, sh.hd, sh.hd, il >= sh.n_main) for il in range(n_all))
    return ModelSpec(
        path=f"{m.id}:{quant.lower()}", files=(), architecture=sh.arch, name=m.name,
        file_type=None, n_layer=n_all, nextn_layers=sh.nextn, n_ctx_train=int(e["n_ctx_train"]),
        n_embd=sh.embd, n_vocab=sh.vocab, n_ff=sh.n_ff, layers=layers,
        swa_window=sh.swa_window or None, recurrent=_recurrent(sh.ssm),
        rope=RopeSpec(None, None, None, None, None), n_expert=sh.n_exp,
        n_expert_used=int(e.get("n_expert_used", 0)), n_ff_expert=sh.ff_exp or None,
        tensors=tensors, weights_bytes=sum(t.n_bytes for t in tensors), file_bytes=file_bytes,
        origin=CatalogueOrigin(summary=f"catalogue entry: weights {size_source}; shapes: {m.source}",
                               size_source=size_source, size_estimated=m.size_estimated(quant),
                               size_spread=_size_spread(m, quant),
                               typed_tensors=bool(m.quants.get(quant, {}).get("tensor_types"))),
    )


def _size_spread(m: CatalogueModel, quant: str) -> float | None:
    """The relative range of a catalogue size whose reading is uncertain (its ``spread``)."""
    sp = m.quants.get(quant, {}).get("spread")
    return float(sp) if sp else None


@dataclass(frozen=True)
class MMProjInfo:
    """An mmproj to plan for: weights and worst-case compute (FA on/off)."""

    label: str
    weights_bytes: int
    compute_fa_on: int
    compute_fa_off: int
    source: str


def catalogue_mmproj(m: CatalogueModel, kind: str) -> MMProjInfo | None:
    mm = m.entry.get("mmproj")
    if not mm:
        return None
    k = kind.lower()
    if k in ("catalogue", "auto", "default"):
        k = "f16" if "f16" in mm else next(iter(x for x in mm if not x.startswith("compute")))
    item = mm.get(k)
    if not isinstance(item, dict):
        return None
    MiB = 1 << 20
    return MMProjInfo(
        label=f"{m.id} mmproj {k}", weights_bytes=int(item["bytes"]),
        compute_fa_on=int(mm.get("compute_fa_on_mib", 0)) * MiB,
        compute_fa_off=int(mm.get("compute_fa_off_mib", 0)) * MiB,
        source=f"weights: {item.get('source', '')}; compute: {mm.get('compute_source', '')}",
    )
