"""Small random-weight GGUF models of real llama.cpp architectures.

Used by the tests (every model here must load and generate in the real llama-server) and by
examples. Tensor names and required keys follow llama.cpp's src/llama-arch.cpp,
src/llama-model.cpp and src/models/<arch>.cpp in the vendored tree (build 11434).

The tokenizer is a tiny but valid byte-level BPE ("gpt2" model): the 256 byte symbols, a few
merges, and the ChatML control tokens, with a ChatML chat template.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

__all__ = ["ARCHITECTURES", "SynthShape", "write_model", "default_shape"]


@dataclass(frozen=True)
class SynthShape:
    """The shape of a synthetic model. Unused fields are ignored by an architecture."""

    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    n_ctx_train: int = 4096
    # sliding window (gemma3)
    swa_window: int = 128
    swa_period: int = 6
    # experts (qwen3moe)
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_expert: int = 64
    # hybrid recurrent (qwen35): gated delta net
    full_attention_interval: int = 4
    ssm_conv_kernel: int = 4
    ssm_state_size: int = 16  # head_k_dim
    ssm_group_count: int = 2  # num_k_heads
    ssm_time_step_rank: int = 4  # num_v_heads
    # MTP / nextn layers appended after the main layers
    nextn_layers: int = 0
    # weights
    weight_type: str = "f16"  # f32, f16, q8_0, q4_0
    seed: int = 0
    extra_tokens: tuple[str, ...] = field(default=())


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
    table = dict(zip(bs, cs))
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


class _Builder:
    def __init__(self, path: Path, arch: str, shape: SynthShape) -> None:
        self.w = GGUFWriter(str(path), arch)
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
        elif isinstance(value, list) and value and isinstance(value[0], bool):
            self.w.add_array(k, value)
        elif isinstance(value, list):
            self.w.add_array(k, [int(v) for v in value])
        else:
            raise TypeError(k)

    # -- tensors
    def tensor(self, name: str, *shape: int, norm: bool = False, f32: bool = False) -> None:
        """A tensor with ggml shape ``shape`` (ne0 first, as llama.cpp's create_tensor)."""
        np_shape = tuple(reversed(shape))
        if norm:
            data = (1.0 + 0.01 * self.rng.standard_normal(np_shape)).astype(np.float32)
        else:
            data = (0.02 * self.rng.standard_normal(np_shape)).astype(np.float32)
        if f32 or norm or len(shape) == 1:
            self.w.add_tensor(name, data)
            return
        qt = self.qtype
        if qt == GGMLQuantizationType.F32:
            self.w.add_tensor(name, data)
        elif qt == GGMLQuantizationType.F16:
            self.w.add_tensor(name, data.astype(np.float16))
        else:
            q = quantize(data, qt)
            self.w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)

    def tokenizer(self, pre: str) -> int:
        tokens, types, merges = vocabulary(self.shape.extra_tokens)
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
        s = self.shape
        w = self.w
        w.add_name(name)
        w.add_file_type(1 if s.weight_type == "f16" else 0)
        n_vocab = self.tokenizer(pre)
        self.key("context_length", s.n_ctx_train)
        self.key("embedding_length", s.n_embd)
        self.key("block_count", s.n_layer + s.nextn_layers)
        self.key("attention.head_count", s.n_head)
        self.key("attention.head_count_kv", s.n_head_kv)
        self.key("attention.key_length", s.head_dim)
        self.key("attention.value_length", s.head_dim)
        self.key("attention.layer_norm_rms_epsilon", 1e-6)
        self.key("rope.freq_base", 10000.0)
        self.key("rope.dimension_count", s.head_dim)
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

    def finish(self) -> None:
        w = self.w
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def _llama(path: Path, s: SynthShape) -> None:
    b = _Builder(path, "llama", s)
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
    b = _Builder(path, "qwen3", s)
    n_vocab = b.common("synth-qwen3", pre="qwen2")
    b.key("feed_forward_length", s.n_ff)
    b.embeddings(n_vocab)
    for il in range(s.n_layer):
        b.tensor(f"blk.{il}.attn_norm.weight", s.n_embd, norm=True)
        b.attention(il, qk_norm=True)
        b.tensor(f"blk.{il}.ffn_norm.weight", s.n_embd, norm=True)
        b.ffn(il)
    b.finish()


#: architecture name -> (writer, default shape)
ARCHITECTURES: dict[str, tuple[Callable[[Path, SynthShape], None], SynthShape]] = {
    "llama": (_llama, SynthShape()),
    "qwen3": (_qwen3, SynthShape()),
}


def default_shape(arch: str) -> SynthShape:
    return ARCHITECTURES[arch][1]


def write_model(path: str | Path, arch: str, shape: SynthShape | None = None, **overrides: object) -> Path:
    """Write a synthetic GGUF of ``arch`` to ``path`` and return the path.

    ``overrides`` replace fields of the architecture's default shape, e.g.
    ``write_model(p, "gemma3", n_layer=6, swa_window=64)``.
    """
    if arch not in ARCHITECTURES:
        raise KeyError(f"no synthetic writer for '{arch}' (have: {', '.join(sorted(ARCHITECTURES))})")
    fn, default = ARCHITECTURES[arch]
    s = shape or default
    if overrides:
        s = replace(s, **overrides)  # type: ignore[arg-type]
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fn(p, s)
    return p
