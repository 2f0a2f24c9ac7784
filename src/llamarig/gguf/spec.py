"""ModelSpec: what a model is, as llama.cpp reads it from the GGUF header.

Key names and per-architecture defaults follow llama.cpp (build 11434):
src/llama-arch.cpp (key names, recurrent/hybrid archs), src/llama-model.cpp (load_hparams),
src/llama-hparams.cpp (n_embd_k_gqa, n_embd_r/n_embd_s, set_swa_pattern) and the per-arch
src/models/*.cpp (gemma3 SWA period, qwen35 recurrent layer rule).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from llamarig.diagnostics import Diagnostic, warning
from llamarig.errors import GGUFError, one_line
from llamarig.gguf.reader import ArrayInfo, GGUFHeader, MetadataValue, TensorInfo, read_header
from llamarig.i18n import _

LayerKind = Literal["attention", "swa", "recurrent"]

#: llm_arch_is_recurrent (src/llama-arch.cpp)
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
#: llm_arch_is_hybrid (src/llama-arch.cpp)
HYBRID_ARCHS = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h",
    "nemotron_h_moe", "qwen3next", "qwen35", "qwen35moe", "qwen4exp", "kimi-linear",
    "bailingmoe3", "kimi-k3", "glm5-next", "deepseek4", "minimax-01",
})
#: archs whose recurrent layers follow full_attention_interval (src/models/qwen35.cpp etc.)
INTERVAL_HYBRIDS = frozenset({"qwen3next", "qwen35", "qwen35moe"})
#: default SWA period (n_pattern) and dense_first per arch, from each src/models/<arch>.cpp
#: ``load_swa_pattern(ml, n_pattern, dense_first)`` call (llama-model.cpp load_swa_pattern);
#: a sliding_window_pattern key in the file overrides the period.
SWA_DEFAULT_PERIOD: dict[str, tuple[int, bool]] = {
    "afmoe": (4, False), "cohere2": (4, False), "cohere2moe": (4, True), "exaone-moe": (4, False),
    "exaone4": (4, False), "gemma-embedding": (6, False), "gemma2": (2, False),
    "gemma3": (6, False), "gemma3n": (5, False), "laguna": (4, True), "llama4": (4, False),
    "mellum": (4, False), "modern-bert": (3, True), "muse-glimmer": (4, False),
    "olmo2": (4, False), "gpt-oss": (2, False), "plamo3": (8, False),
    "smallthinker": (4, True),
}
#: gemma2 defaults n_swa to 4096 when the key is missing (src/models/gemma2.cpp)
SWA_DEFAULT_WINDOW = {"gemma2": 4096}
#: causal decoder archs whose ``load_arch_hparams`` (src/models/<arch>.cpp) reads no KV-shape key
#: beyond the generic ones this module reads (block_count, head_count[_kv] scalar or per layer,
#: key/value_length, embedding_length, expert_*, nextn_predict_layers): no sliding window, MLA
#: (kv_lora_rank), recurrent, shared-KV or chunked-attention keys. Encoders, diffusion, audio and
#: draft-head archs are left out on purpose: their memory is not that of a KV-cached decoder.
GENERIC_ATTENTION_ARCHS = frozenset({
    "apertus", "arcee", "arctic", "baichuan", "bailingmoe", "bailingmoe2", "bitnet", "bloom",
    "chameleon", "chatglm", "codeshell", "cogvlm", "command-r", "dbrx", "deci", "deepseek",
    "dots1", "ernie4_5", "exaone", "falcon", "gemma", "glm4", "glm4moe", "gpt2", "gptneox",
    "granite", "granitemoe", "grok", "hunyuan-moe", "hy_v3", "internlm2", "jais", "jais2", "llama",
    "maincoder", "minicpm", "minimax-m2", "mistral3", "mpt", "nemotron", "olmo", "olmoe",
    "openelm", "orion", "phi2", "phimoe", "plamo", "qwen", "qwen2", "qwen2moe", "qwen2vl", "qwen3",
    "qwen3moe", "qwen3vl", "qwen3vlmoe", "refact", "seed_oss", "smollm3", "stablelm", "starcoder",
    "starcoder2", "xverse",
})
#: every architecture this module has rules for: the generic decoders above plus the archs named
#: in the recurrent, hybrid and sliding-window tables, and ``clip`` (mmproj). Any other
#: architecture is read from the generic keys with a warning.
MODELLED_ARCHS = (GENERIC_ATTENTION_ARCHS | RECURRENT_ARCHS | HYBRID_ARCHS
                  | frozenset(SWA_DEFAULT_PERIOD) | frozenset(SWA_DEFAULT_WINDOW) | {"clip"})

_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class LayerSpec:
    index: int
    kind: LayerKind
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    nextn: bool = False  # an MTP (nextn) layer, not part of the main context's n_layer()

    @property
    def n_embd_k_gqa(self) -> int:
        """K row width (llama-hparams.cpp n_embd_k_gqa)."""
        return self.head_dim_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.head_dim_v * self.n_head_kv


@dataclass(frozen=True)
class RecurrentSpec:
    """Mamba / gated-delta-net state dimensions (ssm.* keys)."""

    conv_kernel: int
    inner_size: int
    state_size: int
    group_count: int
    time_step_rank: int
    n_embd_r: int  # conv state floats per sequence per layer (llama-hparams.cpp n_embd_r)
    n_embd_s: int  # ssm state floats per sequence per layer (llama-hparams.cpp n_embd_s)


@dataclass(frozen=True)
class RopeSpec:
    dimension_count: int | None
    freq_base: float | None
    scaling_type: str | None
    scaling_factor: float | None
    original_context_length: int | None


@dataclass(frozen=True)
class ProjectorSpec:
    """A multimodal projector (mmproj, general.architecture == 'clip')."""

    projector_type: str | None
    has_vision: bool
    has_audio: bool
    image_size: int | None
    patch_size: int | None
    n_embd: int | None
    n_layer: int | None
    n_head: int | None
    n_ff: int | None
    projection_dim: int | None


#: the diagnostic code of the header reader's warnings in a plan
MODEL_HEADER = "model-header"


@dataclass(frozen=True)
class RemoteRead:
    """What reading a remote header cost (llamarig.hub): where from, bytes and requests, seconds,
    headers taken from the cache or fetched."""

    reference: str
    hub: str  # hf | ms | url
    commit: str
    bytes_fetched: int
    requests: int
    seconds: float
    headers_cached: int
    headers_fetched: int
    file_bytes: int
    files: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"reference": self.reference, "hub": self.hub, "commit": self.commit,
                "bytes_fetched": self.bytes_fetched, "requests": self.requests, "seconds": self.seconds,
                "headers_cached": self.headers_cached, "headers_fetched": self.headers_fetched,
                "file_bytes": self.file_bytes, "files": list(self.files)}


@dataclass(frozen=True)
class CatalogueOrigin:
    """Where a spec built from a catalogue entry (no file read) gets its figures."""

    #: the shapes' sources and the file size's, as inspect shows them
    summary: str
    #: where the file size comes from
    size_source: str
    #: the size is a range: bits per weight, or a rounded published figure (``size_spread``)
    size_estimated: bool
    #: the relative range of an estimated size (None: the planner's default)
    size_spread: float | None
    #: tensor bytes from the catalogue's tensor types (else the published file size spread over the
    #: tensors by parameter count)
    typed_tensors: bool


@dataclass(frozen=True)
class ModelSpec:
    path: str
    files: tuple[str, ...]
    architecture: str
    name: str | None
    file_type: int | None
    n_layer: int  # block_count: every block in the file, MTP (nextn) layers included
    nextn_layers: int
    n_ctx_train: int | None
    n_embd: int | None
    n_vocab: int | None
    n_ff: int | None
    layers: tuple[LayerSpec, ...]
    swa_window: int | None
    recurrent: RecurrentSpec | None
    rope: RopeSpec
    n_expert: int
    n_expert_used: int
    n_ff_expert: int | None
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    weights_bytes: int
    file_bytes: int
    projector: ProjectorSpec | None = None
    #: an MTP-only "sidecar" file (the 307K-context MTP field report's (tests/fixtures/seeds/004_d9cc8479c3afbc2e.txt) --model-draft mtp-*.gguf): nextn blocks without the
    #: trunk; llama.cpp recognises it by the missing blk.0.attn_norm.weight (src/llama-model.cpp)
    mtp_sidecar: bool = False
    #: what the header reader could not determine (an unknown architecture, missing keys, ...)
    warnings: tuple[str, ...] = ()
    #: the GGUF header's key/value metadata (small arrays decoded, large ones as ArrayInfo)
    metadata: dict[str, MetadataValue] = field(default_factory=dict, repr=False, compare=False)
    #: a spec built from a catalogue entry: where its figures come from; None for a file
    origin: CatalogueOrigin | None = field(default=None, repr=False, compare=False)
    #: for a header read over HTTP (llamarig.hub): where from, bytes and requests, seconds, cache
    remote: RemoteRead | None = field(default=None, repr=False, compare=False)

    @property
    def tensor_count(self) -> int:
        return len(self.tensors)

    @property
    def n_layer_main(self) -> int:
        """llama_hparams::n_layer(): block_count minus MTP layers."""
        return self.n_layer - self.nextn_layers

    @property
    def source(self) -> Literal["file", "catalogue"]:
        """``catalogue`` for a spec built from a catalogue entry (no file read), else ``file``."""
        return "catalogue" if self.origin is not None else "file"

    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """The header reader's warnings as diagnostics (code ``model-header``)."""
        return tuple(warning(MODEL_HEADER, w) for w in self.warnings)

    @property
    def notices(self) -> tuple[str, ...]:
        """What inspect shows under the tables: the header's warnings, and for a catalogue entry
        where its sizes and shapes come from."""
        return (*self.warnings, *((self.origin.summary,) if self.origin is not None else ()))

    @property
    def is_mmproj(self) -> bool:
        return self.projector is not None

    @property
    def is_recurrent_or_hybrid(self) -> bool:
        return any(layer.kind == "recurrent" for layer in self.layers)

    def to_json(self, with_tensors: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "path": self.path,
            "files": list(self.files),
            "architecture": self.architecture,
            "name": self.name,
            "file_type": self.file_type,
            "n_layer": self.n_layer,
            "n_layer_main": self.n_layer_main,
            "nextn_layers": self.nextn_layers,
            "n_ctx_train": self.n_ctx_train,
            "n_embd": self.n_embd,
            "n_vocab": self.n_vocab,
            "n_ff": self.n_ff,
            "layers": [
                {
                    "index": ly.index,
                    "kind": ly.kind,
                    "n_head": ly.n_head,
                    "n_head_kv": ly.n_head_kv,
                    "head_dim_k": ly.head_dim_k,
                    "head_dim_v": ly.head_dim_v,
                    "nextn": ly.nextn,
                }
                for ly in self.layers
            ],
            "swa_window": self.swa_window,
            "recurrent": None if self.recurrent is None else vars(self.recurrent).copy(),
            "rope": vars(self.rope).copy(),
            "n_expert": self.n_expert,
            "n_expert_used": self.n_expert_used,
            "n_ff_expert": self.n_ff_expert,
            "weights_bytes": self.weights_bytes,
            "file_bytes": self.file_bytes,
            "tensor_count": self.tensor_count,
            "projector": None if self.projector is None else vars(self.projector).copy(),
            "mtp_sidecar": self.mtp_sidecar,
            "source": self.source,
            "warnings": list(self.notices),
        }
        if self.remote is not None:
            d["remote"] = self.remote.to_json()
        if with_tensors:
            d["tensors"] = [
                {"name": t.name, "type": t.ggml_type, "shape": list(t.shape), "bytes": t.n_bytes}
                for t in self.tensors
            ]
        return d


# ----------------------------------------------------------------------------- helpers


def split_files(path: str | Path) -> list[Path]:
    """All files of a split model (``name-00001-of-00003.gguf``), in order; else ``[path]``."""
    p = Path(path)
    m = _SPLIT_RE.match(p.name)
    if not m:
        return [p]
    count = int(m["count"])
    if count < 1 or count > 9999:
        return [p]
    return [p.with_name(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def load_spec(path: str | Path) -> ModelSpec:
    """Read a GGUF file (or every part of a split model) into a ModelSpec."""
    files = split_files(path)
    headers = []
    for f in files:
        if len(files) > 1 and not f.exists():
            raise GGUFError(f, _("split part missing (needed for {name})").format(name=Path(path).name))
        headers.append(read_header(f))
    return spec_from_headers(headers, str(path))


def _get(md: dict[str, Any], key: str, default: Any = None) -> Any:
    v = md.get(key, default)
    return default if isinstance(v, ArrayInfo) else v


def _int(md: dict[str, Any], key: str, default: int | None = None) -> int | None:
    v = _get(md, key)
    if v is None:
        return default
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
        return int(max(v))
    return default


def _per_layer(md: dict[str, Any], key: str, n: int, default: int | None, warns: list[str]) -> list[int | None]:
    """A hyperparameter that may be a scalar or a per-layer array (llama-model.cpp get_key_or_arr)."""
    v = md.get(key)
    if v is None:
        return [default] * n
    if isinstance(v, list):
        vals: list[int | None] = [int(x) for x in v if isinstance(x, (int, float))]
        if len(vals) < n:
            warns.append(f"{key} has {len(vals)} entries for {n} layers; padding with the last")
            vals = vals + [vals[-1] if vals else (default or 0)] * (n - len(vals))
        return vals[:n]
    if isinstance(v, (int, float)):
        return [int(v)] * n
    warns.append(f"{key} has an unexpected value; ignored")
    return [default] * n


def _swa_layers(arch: str, md: dict[str, Any], n_main: int, window: int | None, warns: list[str]) -> list[bool]:
    """Which layers use sliding-window attention (llama-hparams.cpp set_swa_pattern)."""
    if not window:
        return [False] * n_main
    pat = md.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pat, list):
        flags = [bool(x) for x in pat][:n_main]
        return flags + [False] * (n_main - len(flags))
    default = SWA_DEFAULT_PERIOD.get(arch)
    period: int | None = pat if isinstance(pat, int) and not isinstance(pat, bool) else None
    if period is None and default is not None:
        period = default[0]
    if period is None:
        warns.append(
            f"{arch}: sliding_window={window} but no sliding_window_pattern and no known default; "
            "treating every layer as full attention"
        )
        return [False] * n_main
    if period < 0:
        return [False] * n_main
    if period == 0:
        # set_swa_pattern: n_pattern == 0 makes every layer SWA
        return [True] * n_main
    dense_first = default[1] if default is not None else False
    if dense_first:
        return [il % period != 0 for il in range(n_main)]
    # set_swa_pattern: layer il is SWA iff il % period < period - 1 (period 1 = all SWA... llama
    # treats n_pattern == 0 as all-SWA; period 1 leaves all layers full).
    return [il % period < period - 1 for il in range(n_main)]


def _recurrent_layers(arch: str, md: dict[str, Any], n_main: int, head_kv: list[int | None], warns: list[str]) -> list[bool]:
    if arch in RECURRENT_ARCHS:
        return [True] * n_main
    if arch not in HYBRID_ARCHS:
        return [False] * n_main
    arr = md.get(f"{arch}.attention.recurrent_layers")
    if isinstance(arr, list):
        flags = [bool(x) for x in arr][:n_main]
        return flags + [False] * (n_main - len(flags))
    if arch in INTERVAL_HYBRIDS:
        # src/models/qwen35.cpp: recurrent iff (i + 1) % full_attention_interval != 0
        interval = _int(md, f"{arch}.full_attention_interval", 4) or 4
        return [(i + 1) % interval != 0 for i in range(n_main)]
    # jamba / granitehybrid / nemotron_h / falcon-h1 …: a per-layer head_count_kv of 0 marks
    # the recurrent layers (llama-model.cpp recurrent_layer_arr from n_head_kv_arr).
    if isinstance(md.get(f"{arch}.attention.head_count_kv"), list):
        return [not kv for kv in head_kv[:n_main]]
    warns.append(f"{arch}: hybrid architecture without a known recurrent-layer rule; assuming none")
    return [False] * n_main


def _recurrent_spec(arch: str, md: dict[str, Any]) -> RecurrentSpec | None:
    d_conv = _int(md, f"{arch}.ssm.conv_kernel")
    d_inner = _int(md, f"{arch}.ssm.inner_size")
    d_state = _int(md, f"{arch}.ssm.state_size")
    if d_conv is None or d_inner is None or d_state is None:
        return None
    groups = _int(md, f"{arch}.ssm.group_count", 0) or 0
    dt_rank = _int(md, f"{arch}.ssm.time_step_rank", 0) or 0
    # llama-hparams.cpp n_embd_r / n_embd_s (Mamba2 and gated delta net share the formula)
    n_embd_r = (d_conv - 1) * (d_inner + 2 * groups * d_state) if d_conv > 0 else 0
    n_embd_s = d_state * d_inner
    return RecurrentSpec(d_conv, d_inner, d_state, groups, dt_rank, n_embd_r, n_embd_s)


def _projector(md: dict[str, Any]) -> ProjectorSpec:
    def vint(key: str) -> int | None:
        return _int(md, f"clip.vision.{key}")

    return ProjectorSpec(
        projector_type=_get(md, "clip.projector_type") or _get(md, "clip.vision.projector_type"),
        has_vision=bool(_get(md, "clip.has_vision_encoder", vint("embedding_length") is not None)),
        has_audio=bool(_get(md, "clip.has_audio_encoder", False)),
        image_size=vint("image_size"),
        patch_size=vint("patch_size"),
        n_embd=vint("embedding_length"),
        n_layer=vint("block_count"),
        n_head=vint("attention.head_count"),
        n_ff=vint("feed_forward_length"),
        projection_dim=vint("projection_dim"),
    )


def _architecture(headers: Sequence[GGUFHeader], tensors: tuple[TensorInfo, ...], warns: list[str]) -> str:
    """general.architecture, after the checks every model's header must pass."""
    first = headers[0]
    md = first.metadata
    arch = _get(md, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(first.path, _("no general.architecture in the header"))
    split_count = _int(md, "split.count", 1) or 1
    if split_count != len(headers):
        raise GGUFError(first.path, _("split.count is {split_count} but {n_headers} file(s) were found").format(split_count=split_count, n_headers=len(headers)))
    if not tensors:
        raise GGUFError(first.path, _("has no tensors: a header or vocab-only file without weights, which llama.cpp cannot "
                                      "load as a model"))
    if arch not in MODELLED_ARCHS:
        warns.append(
            f"architecture '{one_line(arch, 60)}' is not one llamarig models: layers and KV shape are "
            "read from the generic keys, so memory figures for it are generic guesses"
        )
    return arch


def _block_count(md: dict[str, Any], a: str, path: Path | str, warns: list[str]) -> tuple[int, int]:
    """(n_layer, nextn_layers): llama-model.cpp load_hparams requires block_count and
    GGML_ASSERT(n_layer_all > 0)."""
    n_layer = _int(md, f"{a}.block_count")
    if n_layer is None:
        raise GGUFError(path, _("no {a}.block_count in the header (llama.cpp requires it: 'key not found in model')").format(a=a))
    if n_layer <= 0 or n_layer > 100_000:
        raise GGUFError(path, _("{a}.block_count = {n_layer} is not plausible").format(a=a, n_layer=n_layer))
    for key in ("context_length", "embedding_length"):
        if _get(md, f"{a}.{key}") is None:
            warns.append(f"no {a}.{key} in the header: llama.cpp requires it and will refuse to load this file")
    nextn = _int(md, f"{a}.nextn_predict_layers", 0) or 0
    if nextn < 0 or nextn > n_layer:
        warns.append(f"{a}.nextn_predict_layers = {nextn} is out of range; ignored")
        nextn = 0
    return n_layer, nextn


def _layer_specs(md: dict[str, Any], a: str, n_layer: int, n_main: int, window: int | None,
                 warns: list[str]) -> tuple[list[LayerSpec], bool]:
    """Every layer's kind (attention, SWA, recurrent; the nextn layers attention) and shape, and
    whether any layer is SWA."""
    n_embd = _int(md, f"{a}.embedding_length")
    heads = _per_layer(md, f"{a}.attention.head_count", n_layer, None, warns)
    heads_kv = _per_layer(md, f"{a}.attention.head_count_kv", n_layer, None, warns)
    heads_kv = [kv if kv is not None else h for kv, h in zip(heads_kv, heads, strict=True)]
    if a not in RECURRENT_ARCHS and all(h is None for h in heads):
        warns.append(f"{a}: no {a}.attention.head_count in the header")
    kl, vl = _int(md, f"{a}.attention.key_length"), _int(md, f"{a}.attention.value_length")
    kl_swa, vl_swa = _int(md, f"{a}.attention.key_length_swa"), _int(md, f"{a}.attention.value_length_swa")
    swa = _swa_layers(a, md, n_main, window, warns)
    rec = _recurrent_layers(a, md, n_main, heads_kv, warns)
    layers: list[LayerSpec] = []
    for il in range(n_layer):
        h = heads[il] or 0
        hk = heads_kv[il] if heads_kv[il] is not None else h
        is_nextn = il >= n_main
        kind: LayerKind = "recurrent" if not is_nextn and rec[il] else (
            "swa" if not is_nextn and swa[il] else "attention")
        head_dim = n_embd // h if n_embd and h else 0
        dk = kl if kl is not None else head_dim
        dv = vl if vl is not None else head_dim
        if kind == "swa":
            dk = kl_swa if kl_swa is not None else dk
            dv = vl_swa if vl_swa is not None else dv
        layers.append(LayerSpec(il, kind, h, hk or 0, dk, dv, is_nextn))
    return layers, any(swa)


def _n_vocab(md: dict[str, Any], a: str) -> int | None:
    n_vocab = _int(md, f"{a}.vocab_size")
    if n_vocab is None:
        tok = md.get("tokenizer.ggml.tokens")
        n_vocab = tok.count if isinstance(tok, ArrayInfo) else (len(tok) if isinstance(tok, list) else None)
    return n_vocab


def _rope(md: dict[str, Any], a: str) -> RopeSpec:
    return RopeSpec(
        dimension_count=_int(md, f"{a}.rope.dimension_count"),
        freq_base=_get(md, f"{a}.rope.freq_base"),
        scaling_type=_get(md, f"{a}.rope.scaling.type"),
        scaling_factor=_get(md, f"{a}.rope.scaling.factor"),
        original_context_length=_int(md, f"{a}.rope.scaling.original_context_length"),
    )


def _clip_spec(md: dict[str, Any], common: dict[str, Any]) -> ModelSpec:
    """A projector (mmproj) file: its vision tower's shape."""
    return ModelSpec(
        architecture="clip", name=_get(md, "general.name"), file_type=_int(md, "general.file_type"),
        n_layer=_int(md, "clip.vision.block_count", 0) or 0, nextn_layers=0, n_ctx_train=None,
        n_embd=_int(md, "clip.vision.embedding_length"), n_vocab=None, n_ff=_int(md, "clip.vision.feed_forward_length"),
        layers=(), swa_window=None, recurrent=None, rope=RopeSpec(None, None, None, None, None), n_expert=0,
        n_expert_used=0, n_ff_expert=None, projector=_projector(md), **common)


def spec_from_headers(headers: Sequence[GGUFHeader], path: str | None = None) -> ModelSpec:
    """Build a ModelSpec from the header(s) of one model (all parts of a split model)."""
    first = headers[0]
    md = first.metadata
    warns: list[str] = list(w for h in headers for w in h.warnings)
    tensors = tuple(t for h in headers for t in h.tensors)
    a = _architecture(headers, tensors, warns)
    common: dict[str, Any] = dict(path=path or str(first.path), files=tuple(str(h.path) for h in headers),
                                  tensors=tensors, weights_bytes=sum(t.n_bytes for t in tensors),
                                  file_bytes=sum(h.file_size for h in headers), metadata=md)
    if a == "clip":
        return _clip_spec(md, {**common, "warnings": tuple(warns)})
    n_layer, nextn = _block_count(md, a, first.path, warns)
    window = _int(md, f"{a}.attention.sliding_window", SWA_DEFAULT_WINDOW.get(a))
    if window is not None and window <= 0:
        window = None
    layers, any_swa = _layer_specs(md, a, n_layer, n_layer - nextn, window, warns)
    recurrent = _recurrent_spec(a, md)
    if any(ly.kind == "recurrent" for ly in layers) and recurrent is None and a not in ("rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "lfm2", "lfm2moe"):
        warns.append(f"{a}: recurrent layers but no ssm.* keys; recurrent state unknown")
    return ModelSpec(
        architecture=a, name=_get(md, "general.name"), file_type=_int(md, "general.file_type"), n_layer=n_layer,
        nextn_layers=nextn, n_ctx_train=_int(md, f"{a}.context_length"), n_embd=_int(md, f"{a}.embedding_length"),
        n_vocab=_n_vocab(md, a), n_ff=_int(md, f"{a}.feed_forward_length"), layers=tuple(layers),
        swa_window=window if any_swa else None, recurrent=recurrent, rope=_rope(md, a),
        n_expert=_int(md, f"{a}.expert_count", 0) or 0, n_expert_used=_int(md, f"{a}.expert_used_count", 0) or 0,
        n_ff_expert=_int(md, f"{a}.expert_feed_forward_length"), projector=None,
        mtp_sidecar=nextn > 0 and not any(t.name == "blk.0.attn_norm.weight" for t in tensors),
        warnings=tuple(warns), **common,
    )
