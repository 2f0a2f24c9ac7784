"""A GGUF shaped like a real 27B hybrid release (Qwen3.6-27B-like), with a sparse data section.

The header is complete and realistic: the full 64-layer qwen35 tensor table (48 gated-delta-net
layers + 16 full-attention layers, IQ4_NL weights, f32 norms) and a realistic tokenizer (about
150 000 tokens, as many merges, a token-type array). The tensor data is a hole (a sparse file), so
the file reports ~15 GB but takes a few MB of disk. Used by benchmarks and planner tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from llamarig.extras import needed

with needed("synth"):
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.constants import GGML_QUANT_SIZES


# Qwen3.6-27B (Qwen3.5-27B family) hyperparameters, from the model's public config.json
N_LAYER = 64
N_EMBD = 5120
N_FF = 17408
N_HEAD = 24
N_HEAD_KV = 4
HEAD_DIM = 256
FULL_ATTN_INTERVAL = 4
SSM_CONV = 4
SSM_STATE = 128  # linear_key_head_dim
SSM_GROUPS = 16  # linear_num_key_heads
SSM_DT_RANK = 48  # linear_num_value_heads
SSM_INNER = SSM_STATE * SSM_DT_RANK  # 6144 = linear_value_head_dim * num_value_heads
N_CTX_TRAIN = 262144


def _tensor_table(n_vocab: int, nextn: int) -> list[tuple[str, tuple[int, ...], GGMLQuantizationType]]:
    q = GGMLQuantizationType.IQ4_NL
    f32 = GGMLQuantizationType.F32
    t: list[tuple[str, tuple[int, ...], GGMLQuantizationType]] = [
        ("token_embd.weight", (N_EMBD, n_vocab), GGMLQuantizationType.Q4_K),
        ("output_norm.weight", (N_EMBD,), f32),
        ("output.weight", (N_EMBD, n_vocab), GGMLQuantizationType.Q6_K),
    ]
    conv_dim = SSM_INNER + 2 * SSM_GROUPS * SSM_STATE
    for il in range(N_LAYER + nextn):
        p = f"blk.{il}"
        t.append((f"{p}.attn_norm.weight", (N_EMBD,), f32))
        recurrent = il < N_LAYER and (il + 1) % FULL_ATTN_INTERVAL != 0
        if recurrent:
            t += [
                (f"{p}.attn_qkv.weight", (N_EMBD, conv_dim), q),
                (f"{p}.attn_gate.weight", (N_EMBD, SSM_INNER), q),
                (f"{p}.ssm_conv1d.weight", (SSM_CONV, conv_dim), f32),
                (f"{p}.ssm_dt.bias", (SSM_DT_RANK,), f32),
                (f"{p}.ssm_a", (SSM_DT_RANK,), f32),
                (f"{p}.ssm_beta.weight", (N_EMBD, SSM_DT_RANK), q),
                (f"{p}.ssm_alpha.weight", (N_EMBD, SSM_DT_RANK), q),
                (f"{p}.ssm_norm.weight", (SSM_STATE,), f32),
                (f"{p}.ssm_out.weight", (SSM_INNER, N_EMBD), q),
            ]
        else:
            t += [
                (f"{p}.attn_q.weight", (N_EMBD, 2 * N_HEAD * HEAD_DIM), q),
                (f"{p}.attn_k.weight", (N_EMBD, N_HEAD_KV * HEAD_DIM), q),
                (f"{p}.attn_v.weight", (N_EMBD, N_HEAD_KV * HEAD_DIM), q),
                (f"{p}.attn_output.weight", (N_HEAD * HEAD_DIM, N_EMBD), q),
                (f"{p}.attn_q_norm.weight", (HEAD_DIM,), f32),
                (f"{p}.attn_k_norm.weight", (HEAD_DIM,), f32),
            ]
        t += [
            (f"{p}.post_attention_norm.weight", (N_EMBD,), f32),
            (f"{p}.ffn_gate.weight", (N_EMBD, N_FF), q),
            (f"{p}.ffn_up.weight", (N_EMBD, N_FF), q),
            (f"{p}.ffn_down.weight", (N_FF, N_EMBD), q),
        ]
        if il >= N_LAYER:
            t += [
                (f"{p}.nextn.eh_proj.weight", (2 * N_EMBD, N_EMBD), q),
                (f"{p}.nextn.enorm.weight", (N_EMBD,), f32),
                (f"{p}.nextn.hnorm.weight", (N_EMBD,), f32),
                (f"{p}.nextn.shared_head_norm.weight", (N_EMBD,), f32),
            ]
    return t


def write_qwen36_like(path: str | Path, n_vocab: int = 151_936, n_merges: int = 151_387, nextn: int = 0) -> Path:
    """Write the header of a Qwen3.6-27B-like IQ4_NL GGUF; the data section is sparse."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(p), "qwen35")
    a = "qwen35"
    w.add_name("Qwen3.6-27B-like synthetic header")
    w.add_file_type(25)  # MOSTLY_IQ4_NL
    w.add_uint32(f"{a}.block_count", N_LAYER + nextn)
    w.add_uint32(f"{a}.context_length", N_CTX_TRAIN)
    w.add_uint32(f"{a}.embedding_length", N_EMBD)
    w.add_uint32(f"{a}.feed_forward_length", N_FF)
    w.add_uint32(f"{a}.attention.head_count", N_HEAD)
    w.add_uint32(f"{a}.attention.head_count_kv", N_HEAD_KV)
    w.add_uint32(f"{a}.attention.key_length", HEAD_DIM)
    w.add_uint32(f"{a}.attention.value_length", HEAD_DIM)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{a}.rope.freq_base", 10_000_000.0)
    w.add_uint32(f"{a}.rope.dimension_count", 64)
    w.add_array(f"{a}.rope.dimension_sections", [11, 11, 10, 0])
    w.add_uint32(f"{a}.full_attention_interval", FULL_ATTN_INTERVAL)
    w.add_uint32(f"{a}.ssm.conv_kernel", SSM_CONV)
    w.add_uint32(f"{a}.ssm.state_size", SSM_STATE)
    w.add_uint32(f"{a}.ssm.group_count", SSM_GROUPS)
    w.add_uint32(f"{a}.ssm.time_step_rank", SSM_DT_RANK)
    w.add_uint32(f"{a}.ssm.inner_size", SSM_INNER)
    if nextn:
        w.add_uint32(f"{a}.nextn_predict_layers", nextn)
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 12, size=n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(["x" * int(n) + str(i) for i, n in enumerate(lens)])
    w.add_token_types([1] * n_vocab)
    w.add_token_merges([f"a{i} b{i}" for i in range(n_merges)])
    w.add_eos_token_id(n_vocab - 1)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}" * 40)
    total = 0
    for name, shape, qt in _tensor_table(n_vocab, nextn):
        block, size = GGML_QUANT_SIZES[qt]
        n_el = int(np.prod(shape))
        nbytes = n_el // block * size
        np_shape = tuple(reversed(shape))
        # the writer wants a byte-shape for quantized types: (…, ne0 / block * size)
        byte_shape = np_shape[:-1] + (np_shape[-1] // block * size,)
        w.add_tensor_info(name, byte_shape if qt != GGMLQuantizationType.F32 else np_shape,
                          np.dtype(np.uint8) if qt != GGMLQuantizationType.F32 else np.dtype(np.float32),
                          nbytes, raw_dtype=qt)
        total += nbytes + (-nbytes % 32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    # the data section: a hole of the right size
    with open(p, "r+b") as f:
        f.seek(0, os.SEEK_END)
        end = f.tell()
        data_start = end + (-end % 32)
        f.truncate(data_start + total)
    return p
