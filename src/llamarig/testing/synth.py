"""Small random-weight GGUF models of real llama.cpp architectures.

Used by the tests (every model here must load and generate in the real llama-server) and by
examples. Tensor names and required keys follow llama.cpp's src/llama-arch.cpp,
src/llama-model.cpp and src/models/<arch>.cpp in the vendored tree (build 11434).

The tokenizer is a tiny but valid byte-level BPE ("gpt2" model): the 256 byte symbols, a few
merges, and the ChatML control tokens, with a ChatML chat template.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from llamarig.extras import needed

with needed("synth"):
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.gguf_writer import GGUFWriter
    from gguf.quants import quantize


__all__ = [
    "ARCHITECTURES",
    "SynthShape",
    "SynthVisionShape",
    "default_shape",
    "tiny_png",
    "write_mmproj",
    "write_model",
]


@dataclass(frozen=True)
class SynthShape:
    """The shape of a synthetic model. Fields an architecture does not use are ignored.

    Defaults are tiny: every default file is under 2 MiB (tests/testing/test_synth.py).
    """

    n_layer: int = 2  # main (trunk) layers; MTP layers are added on top (nextn_layers)
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16  # attention.key_length == attention.value_length
    n_ff: int = 128
    n_ctx_train: int = 4096
    #: rope.dimension_count; None = head_dim (qwen35 uses a partial rotary, 1/4 of head_dim)
    n_rot: int | None = None
    #: qwen35 rope.dimension_sections (exactly 4 entries, IMRoPE); None = n_rot/2 split 3 ways
    #: like the real [11, 11, 10, 0] of a 64-dim rotary
    rope_sections: tuple[int, ...] | None = None
    # sliding window (gemma3)
    swa_window: int = 128  # attention.sliding_window; 0 = no SWA (every layer full attention)
    #: attention.sliding_window_pattern as a scalar period; None = key omitted (gemma3 then
    #: uses its built-in period 6: src/models/gemma3.cpp load_swa_pattern(ml, 6))
    swa_period: int | None = None
    #: attention.sliding_window_pattern as a per-layer bool array (True = SWA); wins over
    #: swa_period
    swa_pattern: tuple[bool, ...] | None = None
    # experts (qwen3moe, qwen35moe)
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_expert: int = 64
    n_ff_shexp: int = 64  # qwen35moe shared expert
    # hybrid recurrent (qwen35): gated delta net
    full_attention_interval: int = 4  # layer il is full attention iff (il + 1) % interval == 0
    #: attention.recurrent_layers as an explicit per-layer array (main layers only; MTP layers
    #: are padded with False); None = key omitted, full_attention_interval decides
    recurrent_layers: tuple[bool, ...] | None = None
    ssm_conv_kernel: int = 4
    ssm_state_size: int = 16  # head_k_dim == head_v_dim
    ssm_group_count: int = 2  # num_k_heads
    ssm_time_step_rank: int = 4  # num_v_heads (a multiple of num_k_heads)
    # MTP / nextn layers appended after the main layers (qwen35, qwen35moe only)
    nextn_layers: int = 0
    #: write only the MTP "sidecar" (conversion/qwen.py mtp_only: token_embd, output_norm,
    #: output and the nextn blocks, no trunk layers), used with --model-draft ... --spec-type
    #: draft-mtp next to a model of the same shape; needs nextn_layers > 0
    mtp_only: bool = False
    # weights
    weight_type: str = "f16"  # f32, f16, bf16, q8_0, q4_0 (2-D/3-D weights; norms stay f32)
    #: "random": every weight drawn; "tiled": 64 random rows per tensor, repeated (full-size
    #: shapes in seconds, same tensor table and bytes; speed and buffers do not depend on values);
    #: "sparse": the header only, the tensor data a hole of the right size (the file is truncated
    #: to its full length, so it takes no disk space): for what reads headers (plan), not a server
    fill: str = "random"
    #: pad the vocabulary to this many tokens (filler tokens; 0 = the small synthetic vocabulary),
    #: so the embeddings and output head have a real model's size
    n_vocab: int = 0
    seed: int = 0
    extra_tokens: tuple[str, ...] = field(default=())

    @property
    def ssm_inner_size(self) -> int:
        """ssm.inner_size = head_v_dim * num_v_heads (conversion/qwen.py); llama.cpp's loader
        takes head_v_dim = ssm.state_size, so the two must agree (src/models/qwen35.cpp)."""
        return self.ssm_state_size * self.ssm_time_step_rank

    @property
    def rotary_dim(self) -> int:
        return self.n_rot if self.n_rot is not None else self.head_dim

    @property
    def mrope_sections(self) -> tuple[int, int, int, int]:
        if self.rope_sections is not None:
            t = tuple(int(x) for x in self.rope_sections)
            return (t + (0, 0, 0, 0))[:4]  # type: ignore[return-value]
        h = self.rotary_dim // 2
        return ((h + 2) // 3, (h + 1) // 3, h // 3, 0)


# ------------------------------------------------------------------------------ tokenizer

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_MERGES = ("Ġ t", "Ġ a", "h e", "i n", "r e", "o n", "Ġt he", "e r", "Ġ s", "a t")


def _bytes_to_unicode() -> list[str]:
    """GPT-2's reversible byte -> printable unicode map (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def vocabulary(extra: tuple[str, ...] = ()) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types (1 normal, 3 control) and merges of the synthetic tokenizer."""
    tokens = _bytes_to_unicode()
    for m in _MERGES:
        merged = m.replace(" ", "")
        if merged not in tokens:
            tokens.append(merged)
    tokens += [t for t in extra if t not in tokens]
    types = [1] * len(tokens)
    for s in SPECIAL_TOKENS:
        tokens.append(s)
        types.append(3)
    return tokens, types, list(_MERGES)


# ------------------------------------------------------------------------------ writer

_QTYPES = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "bf16": GGMLQuantizationType.BF16,
    "q8_0": GGMLQuantizationType.Q8_0,
    "q4_0": GGMLQuantizationType.Q4_0,
}
#: general.file_type (llama_ftype, include/llama.h; gguf-py LlamaFileType)
_FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}
#: weights per quantization block (ggml/src/ggml.c type_traits blck_size)
_BLOCK = {"q8_0": 32, "q4_0": 32}


#: tensors per file when write_model writes a split model (0: one file); set for one call
_split_max_tensors = 0


class _GGUFBuilder:
    def __init__(self, path: Path, arch: str, shape: SynthShape) -> None:
        # gguf-py writes NAME-0000i-of-0000n.gguf with split.* keys, as llama.cpp's gguf-split does
        self.w = GGUFWriter(str(path), arch, split_max_tensors=_split_max_tensors)
        self.arch = arch
        self.shape = shape
        self.rng = np.random.default_rng(shape.seed)
        self.qtype = _QTYPES[shape.weight_type]

    # -- keys
    def key(self, name: str, value: object) -> None:
        """``{arch}.name`` with a type chosen from the Python value."""
        k = f"{self.arch}.{name}"
        if isinstance(value, bool):
            self.w.add_bool(k, value)
        elif isinstance(value, int):
            self.w.add_uint32(k, value)
        elif isinstance(value, float):
            self.w.add_float32(k, value)
        elif isinstance(value, str):
            self.w.add_string(k, value)
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], bool):
            self.w.add_array(k, [bool(v) for v in value])
        elif isinstance(value, (list, tuple)):
            self.w.add_array(k, [int(v) for v in value])
        else:
            raise TypeError(k)

    # -- tensors
    def tensor(
        self, name: str, *shape: int, norm: bool = False, f32: bool = False, data: np.ndarray | None = None
    ) -> None:
        """A tensor with ggml shape ``shape`` (ne0 first, as llama.cpp's create_tensor).

        Norm weights are ~1, everything else ~N(0, 0.02). 1-D tensors, norms and ``f32`` ones
        stay F32 (as llama-quantize keeps them); a weight whose row (ne0) is not a multiple of
        the quantization block falls back to F16, as llama-quantize does.
        """
        np_shape = tuple(reversed(shape))
        if self.shape.fill == "sparse":
            self._hole(name, shape, f32 or norm or len(shape) == 1)
            return
        if data is None and self.shape.fill == "tiled" and not (f32 or norm or len(shape) == 1):
            self._tiled(name, shape)
            return
        if data is None:
            if norm:
                data = (1.0 + 0.01 * self.rng.standard_normal(np_shape)).astype(np.float32)
            else:
                data = (0.02 * self.rng.standard_normal(np_shape)).astype(np.float32)
        data = np.ascontiguousarray(data.reshape(np_shape), dtype=np.float32)
        if f32 or norm or len(shape) == 1:
            self.w.add_tensor(name, data)
            return
        qt = self.qtype
        block = _BLOCK.get(self.shape.weight_type)
        if block and shape[0] % block != 0:
            qt = GGMLQuantizationType.F16
        if qt == GGMLQuantizationType.F32:
            self.w.add_tensor(name, data)
        elif qt == GGMLQuantizationType.F16:
            self.w.add_tensor(name, data.astype(np.float16))
        else:
            q = quantize(data, qt)
            self.w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)

    def _qtype_for(self, ne0: int) -> GGMLQuantizationType:
        block = _BLOCK.get(self.shape.weight_type)
        return GGMLQuantizationType.F16 if block and ne0 % block != 0 else self.qtype

    def _hole(self, name: str, shape: tuple[int, ...], f32: bool) -> None:
        """The tensor's entry only (type and size as :meth:`tensor` writes them); its data is
        the hole :meth:`finish` leaves."""
        qt = GGMLQuantizationType.F32 if f32 else self._qtype_for(shape[0])
        n = 1
        for d in shape:
            n *= d
        block, type_size = GGML_QUANT_SIZES[qt]
        self.w.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), n // block * type_size, raw_dtype=qt)

    def _tiled(self, name: str, shape: tuple[int, ...]) -> None:
        """64 random rows of ``shape[0]`` weights, quantized once and repeated to every row."""
        ne0 = shape[0]
        rows = 1
        for d in shape[1:]:
            rows *= d
        block = (0.02 * self.rng.standard_normal((min(rows, 64), ne0))).astype(np.float32)
        qt = self._qtype_for(ne0)
        if qt == GGMLQuantizationType.F32:
            q = block
        elif qt == GGMLQuantizationType.F16:
            q = block.astype(np.float16)
        else:
            q = quantize(block, qt)
        full = np.tile(q, (-(-rows // q.shape[0]), 1))[:rows]
        np_shape = tuple(reversed(shape[1:])) + (full.shape[1],)
        full = np.ascontiguousarray(full.reshape(np_shape))
        if qt in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            self.w.add_tensor(name, full)
        else:
            self.w.add_tensor(name, full, raw_shape=full.shape, raw_dtype=qt)

    def tokenizer(self, pre: str) -> int:
        extra = self.shape.extra_tokens
        base = len(vocabulary(extra)[0])
        if self.shape.n_vocab > base:
            extra = extra + tuple(f"<|pad{i}|>" for i in range(self.shape.n_vocab - base))
        tokens, types, merges = vocabulary(extra)
        w = self.w
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        eot = tokens.index("<|im_end|>")
        w.add_bos_token_id(tokens.index("<|endoftext|>"))
        w.add_eos_token_id(eot)
        w.add_eot_token_id(eot)
        w.add_pad_token_id(tokens.index("<|endoftext|>"))
        w.add_add_bos_token(False)
        w.add_chat_template(CHATML_TEMPLATE)
        return len(tokens)

    def common(self, name: str, pre: str = "default") -> int:
        """Keys every architecture here reads (llama-model.cpp llama_model_base::load_hparams)."""
        s = self.shape
        w = self.w
        w.add_name(name)
        w.add_file_type(_FILE_TYPES[s.weight_type])
        n_vocab = self.tokenizer(pre)
        self.key("context_length", s.n_ctx_train)
        self.key("embedding_length", s.n_embd)
        self.key("block_count", s.n_layer + s.nextn_layers)
        if s.nextn_layers:
            self.key("nextn_predict_layers", s.nextn_layers)
        self.key("attention.head_count", s.n_head)
        self.key("attention.head_count_kv", s.n_head_kv)
        self.key("attention.key_length", s.head_dim)
        self.key("attention.value_length", s.head_dim)
        self.key("attention.layer_norm_rms_epsilon", 1e-6)
        self.key("rope.freq_base", 10000.0)
        self.key("rope.dimension_count", s.rotary_dim)
        return n_vocab

    def embeddings(self, n_vocab: int, tied: bool = False) -> None:
        s = self.shape
        self.tensor("token_embd.weight", s.n_embd, n_vocab)
        self.tensor("output_norm.weight", s.n_embd, norm=True)
        if not tied:
            self.tensor("output.weight", s.n_embd, n_vocab)

    def attention(self, il: int, qk_norm: bool = False, gated_q: bool = False) -> None:
        s = self.shape
        p = f"blk.{il}"
        q_out = s.n_head * s.head_dim * (2 if gated_q else 1)
        self.tensor(f"{p}.attn_q.weight", s.n_embd, q_out)
        self.tensor(f"{p}.attn_k.weight", s.n_embd, s.n_head_kv * s.head_dim)
        self.tensor(f"{p}.attn_v.weight", s.n_embd, s.n_head_kv * s.head_dim)
        self.tensor(f"{p}.attn_output.weight", s.n_head * s.head_dim, s.n_embd)
        if qk_norm:
            self.tensor(f"{p}.attn_q_norm.weight", s.head_dim, norm=True)
            self.tensor(f"{p}.attn_k_norm.weight", s.head_dim, norm=True)

    def ffn(self, il: int, n_ff: int | None = None) -> None:
        s = self.shape
        p = f"blk.{il}"
        ff = n_ff or s.n_ff
        self.tensor(f"{p}.ffn_gate.weight", s.n_embd, ff)
        self.tensor(f"{p}.ffn_up.weight", s.n_embd, ff)
        self.tensor(f"{p}.ffn_down.weight", ff, s.n_embd)

    def experts(self, il: int) -> None:
        """Routed experts (src/models/qwen3moe.cpp, qwen35moe.cpp load_arch_tensors)."""
        s = self.shape
        p = f"blk.{il}"
        # the router stays F32, as in llama-quantize's output
        self.tensor(f"{p}.ffn_gate_inp.weight", s.n_embd, s.n_expert, f32=True)
        self.tensor(f"{p}.ffn_gate_exps.weight", s.n_embd, s.n_ff_expert, s.n_expert)
        self.tensor(f"{p}.ffn_up_exps.weight", s.n_embd, s.n_ff_expert, s.n_expert)
        self.tensor(f"{p}.ffn_down_exps.weight", s.n_ff_expert, s.n_embd, s.n_expert)

    def shared_expert(self, il: int) -> None:
        s = self.shape
        p = f"blk.{il}"
        self.tensor(f"{p}.ffn_gate_inp_shexp.weight", s.n_embd, f32=True)
        self.tensor(f"{p}.ffn_gate_shexp.weight", s.n_embd, s.n_ff_shexp)
        self.tensor(f"{p}.ffn_up_shexp.weight", s.n_embd, s.n_ff_shexp)
        self.tensor(f"{p}.ffn_down_shexp.weight", s.n_ff_shexp, s.n_embd)

    def finish(self) -> None:
        w = self.w
        w.write_header_to_file()
        w.write_kv_data_to_file()
        if self.shape.fill == "sparse":
            w.write_ti_data_to_file()
            assert w.fout is not None
            for fout, tensors in zip(w.fout, w.tensors, strict=True):
                start = GGUFWriter.ggml_pad(fout.tell(), w.data_alignment)
                fout.truncate(start + sum(GGUFWriter.ggml_pad(ti.nbytes, w.data_alignment) for ti in tensors.values()))
            w.close()
            return
        w.write_tensors_to_file()
        w.close()


def _no_nextn(arch: str, s: SynthShape) -> None:
    if s.nextn_layers:
        raise ValueError(f"{arch}: nextn_layers is only supported for qwen35 / qwen35moe")


def _llama(path: Path, s: SynthShape) -> None:
    _no_nextn("llama", s)
    b = _GGUFBuilder(path, "llama", s)
    n_vocab = b.common("synth-llama")
    b.key("feed_forward_length", s.n_ff)
    b.key("vocab_size", n_vocab)
    b.embeddings(n_vocab)
    for il in range(s.n_layer):
        b.tensor(f"blk.{il}.attn_norm.weight", s.n_embd, norm=True)
        b.attention(il)
        b.tensor(f"blk.{il}.ffn_norm.weight", s.n_embd, norm=True)
        b.ffn(il)
    b.finish()


def _qwen3(path: Path, s: SynthShape) -> None:
    _no_nextn("qwen3", s)
    b = _GGUFBuilder(path, "qwen3", s)
    n_vocab = b.common("synth-qwen3", pre="qwen2")
    b.key("feed_forward_length", s.n_ff)
    b.embeddings(n_vocab)
    for il in range(s.n_layer):
        b.tensor(f"blk.{il}.attn_norm.weight", s.n_embd, norm=True)
        b.attention(il, qk_norm=True)
        b.tensor(f"blk.{il}.ffn_norm.weight", s.n_embd, norm=True)
        b.ffn(il)
    b.finish()


def _gemma3(path: Path, s: SynthShape) -> None:
    """gemma3 (src/models/gemma3.cpp): every layer has q/k norms, a post-attention norm and a
    post-FFW norm; SWA layers follow attention.sliding_window + sliding_window_pattern (default
    period 6: five SWA layers, then one full layer); the output is tied to token_embd."""
    _no_nextn("gemma3", s)
    if s.swa_pattern is not None and len(s.swa_pattern) != s.n_layer:
        raise ValueError(f"gemma3: swa_pattern has {len(s.swa_pattern)} entries for {s.n_layer} layers")
    b = _GGUFBuilder(path, "gemma3", s)
    n_vocab = b.common("synth-gemma3")
    b.key("feed_forward_length", s.n_ff)
    if s.swa_window > 0:
        b.key("attention.sliding_window", s.swa_window)
        if s.swa_pattern is not None:
            b.key("attention.sliding_window_pattern", [bool(x) for x in s.swa_pattern])
        elif s.swa_period is not None:
            b.key("attention.sliding_window_pattern", s.swa_period)
        b.key("rope.freq_base_swa", 10000.0)
    b.embeddings(n_vocab, tied=True)
    for il in range(s.n_layer):
        p = f"blk.{il}"
        b.tensor(f"{p}.attn_norm.weight", s.n_embd, norm=True)
        b.attention(il, qk_norm=True)
        b.tensor(f"{p}.post_attention_norm.weight", s.n_embd, norm=True)
        b.tensor(f"{p}.ffn_norm.weight", s.n_embd, norm=True)
        b.ffn(il)
        b.tensor(f"{p}.post_ffw_norm.weight", s.n_embd, norm=True)
    b.finish()


def _qwen3moe(path: Path, s: SynthShape) -> None:
    """qwen3moe (src/models/qwen3moe.cpp): qwen3 attention + routed experts, no shared one."""
    _no_nextn("qwen3moe", s)
    _check_experts("qwen3moe", s)
    b = _GGUFBuilder(path, "qwen3moe", s)
    n_vocab = b.common("synth-qwen3moe", pre="qwen2")
    b.key("feed_forward_length", s.n_ff)
    b.key("expert_count", s.n_expert)
    b.key("expert_used_count", s.n_expert_used)
    b.key("expert_feed_forward_length", s.n_ff_expert)
    b.embeddings(n_vocab)
    for il in range(s.n_layer):
        b.tensor(f"blk.{il}.attn_norm.weight", s.n_embd, norm=True)
        b.attention(il, qk_norm=True)
        b.tensor(f"blk.{il}.ffn_norm.weight", s.n_embd, norm=True)
        b.experts(il)
    b.finish()


def _check_experts(arch: str, s: SynthShape) -> None:
    # llama-model.cpp load_hparams: 0 < n_expert_used <= n_expert
    if s.n_expert <= 0 or not 0 < s.n_expert_used <= s.n_expert:
        raise ValueError(f"{arch}: need 0 < n_expert_used ({s.n_expert_used}) <= n_expert ({s.n_expert})")


def qwen35_recurrent_flags(s: SynthShape) -> list[bool]:
    """Which main layers are gated-delta-net layers (src/models/qwen35.cpp load_arch_hparams)."""
    if s.recurrent_layers is not None:
        return [bool(x) for x in s.recurrent_layers]
    return [(il + 1) % s.full_attention_interval != 0 for il in range(s.n_layer)]


def _check_qwen35(arch: str, s: SynthShape, moe: bool) -> None:
    """What llama.cpp asserts of a qwen35 / qwen35moe shape."""
    if s.recurrent_layers is not None and len(s.recurrent_layers) != s.n_layer:
        raise ValueError(f"{arch}: recurrent_layers has {len(s.recurrent_layers)} entries for {s.n_layer} layers")
    if s.full_attention_interval <= 0:
        raise ValueError(f"{arch}: full_attention_interval must be > 0")
    if s.ssm_group_count <= 0 or s.ssm_time_step_rank % s.ssm_group_count != 0:
        # qwen35.cpp build_layer_attn_linear: GGML_ASSERT(num_v_heads % num_k_heads == 0)
        raise ValueError(f"{arch}: ssm_time_step_rank must be a multiple of ssm_group_count")
    if s.rope_sections is not None and len(s.rope_sections) > 4:
        raise ValueError(f"{arch}: rope_sections has more than 4 entries")
    if s.mtp_only and s.nextn_layers <= 0:
        raise ValueError(f"{arch}: mtp_only needs nextn_layers > 0")
    if moe:
        _check_experts(arch, s)


def _qwen35_keys(b: _GGUFBuilder, s: SynthShape, arch: str, moe: bool, rec: list[bool]) -> int:
    """The header's keys; the vocabulary size."""
    n_vocab = b.common(f"synth-{arch}", pre="qwen35")  # llama-vocab.cpp knows "qwen35"
    b.key("feed_forward_length", s.n_ff)
    if moe:
        b.key("expert_count", s.n_expert)
        b.key("expert_used_count", s.n_expert_used)
        b.key("expert_feed_forward_length", s.n_ff_expert)
        b.key("expert_shared_feed_forward_length", s.n_ff_shexp)
    b.key("rope.dimension_sections", list(s.mrope_sections))
    b.key("ssm.conv_kernel", s.ssm_conv_kernel)
    b.key("ssm.inner_size", s.ssm_inner_size)
    b.key("ssm.state_size", s.ssm_state_size)
    b.key("ssm.time_step_rank", s.ssm_time_step_rank)
    b.key("ssm.group_count", s.ssm_group_count)
    if s.recurrent_layers is not None:
        # get_key_or_arr wants exactly block_count entries; MTP layers are never recurrent
        b.key("attention.recurrent_layers", rec + [False] * s.nextn_layers)
    else:
        b.key("full_attention_interval", s.full_attention_interval)
    return n_vocab


def _delta_net(b: _GGUFBuilder, s: SynthShape, p: str) -> None:
    """A gated-delta-net layer's tensors."""
    key_dim = s.ssm_state_size * s.ssm_group_count
    value_dim = s.ssm_state_size * s.ssm_time_step_rank
    conv_dim = 2 * key_dim + value_dim
    nv = s.ssm_time_step_rank
    b.tensor(f"{p}.attn_qkv.weight", s.n_embd, conv_dim)
    b.tensor(f"{p}.attn_gate.weight", s.n_embd, value_dim)
    # the conv kernel, dt bias and A stay F32 (ggml_ssm_conv; as in real quants)
    b.tensor(f"{p}.ssm_conv1d.weight", s.ssm_conv_kernel, conv_dim, f32=True)
    b.tensor(f"{p}.ssm_dt.bias", nv)
    # ssm_a = -exp(A_log) (conversion/qwen.py): negative decay rates
    a = -np.exp(0.1 * b.rng.standard_normal(nv)).astype(np.float32)
    b.tensor(f"{p}.ssm_a", nv, data=a)
    b.tensor(f"{p}.ssm_beta.weight", s.n_embd, nv)
    b.tensor(f"{p}.ssm_alpha.weight", s.n_embd, nv)
    b.tensor(f"{p}.ssm_norm.weight", s.ssm_state_size, norm=True)
    b.tensor(f"{p}.ssm_out.weight", value_dim, s.n_embd)


def _qwen35_family(path: Path, s: SynthShape, arch: str, moe: bool) -> None:
    """qwen35 / qwen35moe (src/models/qwen35.cpp, qwen35moe.cpp): gated-delta-net layers plus a
    gated full-attention layer every ``full_attention_interval``; IMRoPE with 4 required
    rope.dimension_sections; optional MTP (nextn) blocks after the main layers."""
    _check_qwen35(arch, s, moe)
    b = _GGUFBuilder(path, arch, s)
    rec = qwen35_recurrent_flags(s)
    b.embeddings(_qwen35_keys(b, s, arch, moe, rec))

    def ffn(il: int) -> None:
        if moe:
            b.experts(il)
            b.shared_expert(il)
        else:
            b.ffn(il)

    # an MTP-only sidecar has no trunk: qwen35.cpp load_arch_tensors detects it by the missing
    # blk.0.attn_norm.weight and makes the trunk tensors optional
    for il in range(0 if s.mtp_only else s.n_layer):
        p = f"blk.{il}"
        b.tensor(f"{p}.attn_norm.weight", s.n_embd, norm=True)
        b.tensor(f"{p}.post_attention_norm.weight", s.n_embd, norm=True)
        if rec[il]:
            _delta_net(b, s, p)
        else:
            b.attention(il, qk_norm=True, gated_q=True)
        ffn(il)
    for il in range(s.n_layer, s.n_layer + s.nextn_layers):
        # load_block_mtp: a full-attention block plus the nextn projection and norms
        p = f"blk.{il}"
        b.tensor(f"{p}.attn_norm.weight", s.n_embd, norm=True)
        b.tensor(f"{p}.post_attention_norm.weight", s.n_embd, norm=True)
        b.attention(il, qk_norm=True, gated_q=True)
        ffn(il)
        b.tensor(f"{p}.nextn.eh_proj.weight", 2 * s.n_embd, s.n_embd)
        b.tensor(f"{p}.nextn.enorm.weight", s.n_embd, norm=True)
        b.tensor(f"{p}.nextn.hnorm.weight", s.n_embd, norm=True)
        b.tensor(f"{p}.nextn.shared_head_norm.weight", s.n_embd, norm=True)
    b.finish()


def _qwen35(path: Path, s: SynthShape) -> None:
    _qwen35_family(path, s, "qwen35", moe=False)


def _qwen35moe(path: Path, s: SynthShape) -> None:
    _qwen35_family(path, s, "qwen35moe", moe=True)


#: architecture name -> (writer, default shape)
ARCHITECTURES: dict[str, tuple[Callable[[Path, SynthShape], None], SynthShape]] = {
    "llama": (_llama, SynthShape()),
    "qwen3": (_qwen3, SynthShape()),
    # 6 layers: period 6 gives five SWA layers and one full-attention layer
    "gemma3": (_gemma3, SynthShape(n_layer=6)),
    # 4 layers: three gated-delta-net layers, then one full-attention layer
    "qwen35": (_qwen35, SynthShape(n_layer=4, n_rot=8)),
    "qwen3moe": (_qwen3moe, SynthShape()),
    "qwen35moe": (_qwen35moe, SynthShape(n_layer=4, n_rot=8)),
}


def default_shape(arch: str) -> SynthShape:
    return ARCHITECTURES[arch][1]


def write_model(path: str | Path, arch: str, shape: SynthShape | None = None, *, split_max_tensors: int = 0,
                **overrides: object) -> Path:
    """Write a synthetic GGUF of ``arch`` to ``path`` and return the path.

    ``split_max_tensors``: write a split model of that many tensors per file
    (``NAME-00001-of-0000N.gguf`` …) and return the first part's path.

    ``overrides`` replace fields of the architecture's default shape (or of ``shape``), e.g.
    ``write_model(p, "gemma3", n_layer=6, swa_window=64)``. Raises KeyError for an unknown
    architecture and ValueError for a shape llama.cpp would reject.
    """
    if arch not in ARCHITECTURES:
        raise KeyError(f"no synthetic writer for '{arch}' (have: {', '.join(sorted(ARCHITECTURES))})")
    fn, default = ARCHITECTURES[arch]
    s = shape or default
    if overrides:
        s = replace(s, **overrides)  # type: ignore[arg-type]
    if s.weight_type not in _QTYPES:
        raise ValueError(f"weight_type '{s.weight_type}' is not one of {', '.join(_QTYPES)}")
    if s.n_layer <= 0 or s.nextn_layers < 0:
        raise ValueError("n_layer must be > 0 and nextn_layers >= 0")
    if s.n_head <= 0 or s.n_head_kv <= 0 or s.n_head % s.n_head_kv:
        # grouped-query attention: each KV head serves n_head / n_head_kv query heads
        raise ValueError(f"n_head ({s.n_head}) must be a multiple of n_head_kv ({s.n_head_kv})")
    if s.rotary_dim <= 0 or s.rotary_dim > s.head_dim or s.rotary_dim % 2:
        raise ValueError(f"n_rot ({s.rotary_dim}) must be even and at most head_dim ({s.head_dim})")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    global _split_max_tensors
    _split_max_tensors = split_max_tensors
    try:
        fn(p, s)
    finally:
        _split_max_tensors = 0
    if split_max_tensors:
        parts = sorted(p.parent.glob(f"{p.stem}-*-of-*.gguf"))
        return parts[0] if parts else p
    return p


# ------------------------------------------------------------------------------ mmproj (clip)


@dataclass(frozen=True)
class SynthVisionShape:
    """A tiny Qwen3-VL-style vision tower + merger ("qwen3vl_merger"), the projector type the
    converter writes for Qwen3.5 / Qwen3.6 (conversion/qwen3vl.py Qwen3VLVisionModel)."""

    n_embd: int = 32  # clip.vision.embedding_length
    n_head: int = 2  # head dim n_embd / n_head must be a multiple of 4 (4 M-RoPE sections)
    n_ff: int = 64
    n_layer: int = 1
    image_size: int = 64  # position embeddings for (image_size / patch_size)^2 patches
    patch_size: int = 16
    spatial_merge_size: int = 2  # the merger concatenates 2x2 patches
    projection_dim: int = 64  # must equal the text model's n_embd (mtmd.cpp checks it)
    weight_type: str = "f16"
    seed: int = 0


def write_mmproj(path: str | Path, shape: SynthVisionShape | None = None, **overrides: object) -> Path:
    """Write a synthetic mmproj (``general.architecture = clip``, projector ``qwen3vl_merger``)
    that llama-server loads with ``--mmproj`` next to a qwen35 model of the same n_embd.

    Keys and tensors follow tools/mtmd/clip.cpp (load_hparams, load_tensors: QWEN3VL),
    tools/mtmd/clip-impl.h (names) and tools/mtmd/models/qwen3vl.cpp (the graph).
    """
    v = shape or SynthVisionShape()
    if overrides:
        v = replace(v, **overrides)  # type: ignore[arg-type]
    if v.weight_type not in _QTYPES:
        raise ValueError(f"weight_type '{v.weight_type}' is not one of {', '.join(_QTYPES)}")
    if v.n_head <= 0 or v.n_embd % v.n_head or (v.n_embd // v.n_head) % 4:
        raise ValueError("vision n_embd / n_head must be a whole multiple of 4")
    if v.image_size % (v.patch_size * v.spatial_merge_size):
        raise ValueError("image_size must be a multiple of patch_size * spatial_merge_size")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    b = _GGUFBuilder(p, "clip", SynthShape(weight_type=v.weight_type, seed=v.seed))
    w = b.w
    w.add_name("synth-mmproj")
    w.add_file_type(_FILE_TYPES[v.weight_type])
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "qwen3vl_merger")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.embedding_length", v.n_embd)
    w.add_uint32("clip.vision.feed_forward_length", v.n_ff)
    w.add_uint32("clip.vision.block_count", v.n_layer)
    w.add_uint32("clip.vision.attention.head_count", v.n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.projection_dim", v.projection_dim)
    w.add_uint32("clip.vision.image_size", v.image_size)
    w.add_uint32("clip.vision.patch_size", v.patch_size)
    w.add_uint32("clip.vision.spatial_merge_size", v.spatial_merge_size)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    e, ps = v.n_embd, v.patch_size
    n_pos = (v.image_size // ps) ** 2
    merged = e * v.spatial_merge_size**2
    # patch embedding: a Conv3D split into two Conv2D kernels along time (conversion/qwen3vl.py);
    # the patch-embedding conv kernels are written F32 whatever weight_type says
    b.tensor("v.patch_embd.weight", ps, ps, 3, e, f32=True)
    b.tensor("v.patch_embd.weight.1", ps, ps, 3, e, f32=True)
    b.tensor("v.patch_embd.bias", e)
    b.tensor("v.position_embd.weight", e, n_pos, f32=True)  # ggml_interpolate needs F32
    for il in range(v.n_layer):
        pre = f"v.blk.{il}"
        b.tensor(f"{pre}.ln1.weight", e, norm=True)
        b.tensor(f"{pre}.ln1.bias", e)
        b.tensor(f"{pre}.attn_qkv.weight", e, 3 * e)
        b.tensor(f"{pre}.attn_qkv.bias", 3 * e)
        b.tensor(f"{pre}.attn_out.weight", e, e)
        b.tensor(f"{pre}.attn_out.bias", e)
        b.tensor(f"{pre}.ln2.weight", e, norm=True)
        b.tensor(f"{pre}.ln2.bias", e)
        b.tensor(f"{pre}.ffn_up.weight", e, v.n_ff)
        b.tensor(f"{pre}.ffn_up.bias", v.n_ff)
        b.tensor(f"{pre}.ffn_down.weight", v.n_ff, e)
        b.tensor(f"{pre}.ffn_down.bias", e)
    b.tensor("v.post_ln.weight", e, norm=True)
    b.tensor("v.post_ln.bias", e)
    b.tensor("mm.0.weight", merged, merged)
    b.tensor("mm.0.bias", merged)
    b.tensor("mm.2.weight", merged, v.projection_dim)
    b.tensor("mm.2.bias", v.projection_dim)
    b.finish()
    return p


def tiny_png(width: int = 64, height: int = 64) -> bytes:
    """A small RGB PNG (a colour gradient), for sending an image to a server with an mmproj."""
    rows = []
    for y in range(height):
        row = bytearray(b"\x00")  # filter type 0 (none)
        for x in range(width):
            row += bytes(((x * 255) // max(width - 1, 1), (y * 255) // max(height - 1, 1), 128))
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")
