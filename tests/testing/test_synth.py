"""Synthetic GGUF writers vs. llamarig.gguf.load_spec (no server).

Each case writes a model with a given shape and checks that load_spec reports exactly that shape.
The expected layer kinds are computed here from llama.cpp's rules, independently of the writer:
gemma3 SWA (src/llama-hparams.cpp set_swa_pattern, default period 6 from src/models/gemma3.cpp)
and qwen35 recurrent layers (src/models/qwen35.cpp: recurrent iff (il + 1) % interval != 0).
"""

from __future__ import annotations

import struct
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from llamarig.gguf import load_spec
from llamarig.testing.synth import (
    ARCHITECTURES,
    SynthShape,
    SynthVisionShape,
    default_shape,
    tiny_png,
    vocabulary,
    write_mmproj,
    write_model,
)

N_VOCAB = len(vocabulary()[0])


def expected_kinds(arch: str, s: SynthShape) -> list[str]:
    """Kinds of the main layers, from llama.cpp's rules (not from the writer)."""
    n = s.n_layer
    if arch == "gemma3":
        if s.swa_window <= 0:
            return ["attention"] * n
        if s.swa_pattern is not None:
            return ["swa" if f else "attention" for f in s.swa_pattern]
        period = 6 if s.swa_period is None else s.swa_period
        return ["swa" if (period == 0 or il % period < period - 1) else "attention" for il in range(n)]
    if arch in ("qwen35", "qwen35moe"):
        if s.recurrent_layers is not None:
            return ["recurrent" if f else "attention" for f in s.recurrent_layers]
        k = s.full_attention_interval
        return ["recurrent" if (il + 1) % k != 0 else "attention" for il in range(n)]
    return ["attention"] * n


CASES: list[tuple[str, dict[str, object]]] = [
    ("llama", {}),
    ("llama", {"n_layer": 3, "n_head": 8, "n_head_kv": 8, "head_dim": 8}),
    ("qwen3", {}),
    ("qwen3", {"n_head": 8, "n_head_kv": 1, "head_dim": 32, "n_embd": 128}),
    ("gemma3", {}),
    ("gemma3", {"n_layer": 8, "swa_period": 4, "swa_window": 64}),
    ("gemma3", {"n_layer": 4, "swa_pattern": (True, False, True, False)}),
    ("gemma3", {"n_layer": 3, "swa_window": 0}),
    ("gemma3", {"n_layer": 3, "swa_period": 0}),
    ("qwen35", {}),
    ("qwen35", {"n_layer": 8, "full_attention_interval": 2, "nextn_layers": 1}),
    ("qwen35", {"n_layer": 5, "recurrent_layers": (True, False, True, True, False), "nextn_layers": 1}),
    (
        "qwen35",
        {"ssm_state_size": 32, "ssm_group_count": 1, "ssm_time_step_rank": 2, "ssm_conv_kernel": 3,
         "n_head": 2, "n_head_kv": 1, "head_dim": 32, "n_rot": 16},
    ),
    ("qwen3moe", {}),
    ("qwen3moe", {"n_expert": 8, "n_expert_used": 3, "n_ff_expert": 32, "n_layer": 3}),
    ("qwen35moe", {"nextn_layers": 1}),
]


def _id(case: tuple[str, dict[str, object]]) -> str:
    arch, kw = case
    return arch + "".join(f"-{k}={v}" for k, v in kw.items()).replace(" ", "")


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_load_spec_reports_the_written_shape(tmp_path: Path, case: tuple[str, dict[str, object]]) -> None:
    arch, kw = case
    s = replace(default_shape(arch), **kw)  # type: ignore[arg-type]
    spec = load_spec(write_model(tmp_path / "m.gguf", arch, s))

    assert spec.architecture == arch
    assert spec.warnings == ()
    assert spec.n_layer == s.n_layer + s.nextn_layers
    assert spec.n_layer_main == s.n_layer
    assert spec.nextn_layers == s.nextn_layers
    assert spec.n_embd == s.n_embd
    assert spec.n_vocab == N_VOCAB
    assert spec.n_ctx_train == s.n_ctx_train
    assert spec.n_ff == s.n_ff
    assert spec.rope.dimension_count == (s.n_rot if s.n_rot is not None else s.head_dim)

    kinds = expected_kinds(arch, s) + ["attention"] * s.nextn_layers
    assert [ly.kind for ly in spec.layers] == kinds
    assert [ly.nextn for ly in spec.layers] == [False] * s.n_layer + [True] * s.nextn_layers
    for ly in spec.layers:
        assert (ly.n_head, ly.n_head_kv, ly.head_dim_k, ly.head_dim_v) == (
            s.n_head, s.n_head_kv, s.head_dim, s.head_dim
        )
        assert ly.n_embd_k_gqa == s.n_head_kv * s.head_dim

    assert spec.swa_window == (s.swa_window if "swa" in kinds else None)

    if arch in ("qwen3moe", "qwen35moe"):
        assert (spec.n_expert, spec.n_expert_used, spec.n_ff_expert) == (
            s.n_expert, s.n_expert_used, s.n_ff_expert
        )
    else:
        assert (spec.n_expert, spec.n_expert_used) == (0, 0)

    if arch in ("qwen35", "qwen35moe"):
        r = spec.recurrent
        assert r is not None
        inner = s.ssm_state_size * s.ssm_time_step_rank
        assert (r.conv_kernel, r.inner_size, r.state_size, r.group_count, r.time_step_rank) == (
            s.ssm_conv_kernel, inner, s.ssm_state_size, s.ssm_group_count, s.ssm_time_step_rank
        )
        # llama-hparams.cpp n_embd_r / n_embd_s
        assert r.n_embd_r == (s.ssm_conv_kernel - 1) * (inner + 2 * s.ssm_group_count * s.ssm_state_size)
        assert r.n_embd_s == s.ssm_state_size * inner
        sections = spec.metadata[f"{arch}.rope.dimension_sections"]
        assert len(sections) == 4 and sum(sections) == spec.rope.dimension_count // 2
    else:
        assert spec.recurrent is None


def test_qwen35_tensors_follow_load_arch_tensors(tmp_path: Path) -> None:
    """Names and ggml shapes of src/models/qwen35.cpp load_block_trunk / load_block_mtp."""
    s = replace(default_shape("qwen35"), nextn_layers=1)
    spec = load_spec(write_model(tmp_path / "q.gguf", "qwen35", s))
    t = {x.name: x.shape for x in spec.tensors}
    e, kd, vd = s.n_embd, s.ssm_state_size * s.ssm_group_count, s.ssm_state_size * s.ssm_time_step_rank
    # gated-delta-net layer 0
    assert t["blk.0.attn_qkv.weight"] == (e, 2 * kd + vd)
    assert t["blk.0.attn_gate.weight"] == (e, vd)
    assert t["blk.0.ssm_conv1d.weight"] == (s.ssm_conv_kernel, 2 * kd + vd)
    assert t["blk.0.ssm_dt.bias"] == (s.ssm_time_step_rank,)
    assert t["blk.0.ssm_a"] == (s.ssm_time_step_rank,)
    assert t["blk.0.ssm_beta.weight"] == (e, s.ssm_time_step_rank)
    assert t["blk.0.ssm_alpha.weight"] == (e, s.ssm_time_step_rank)
    assert t["blk.0.ssm_norm.weight"] == (s.ssm_state_size,)
    assert t["blk.0.ssm_out.weight"] == (vd, e)
    assert "blk.0.attn_q.weight" not in t
    # full-attention layer 3: Q carries the output gate (2x)
    assert t["blk.3.attn_q.weight"] == (e, 2 * s.n_head * s.head_dim)
    assert t["blk.3.attn_output.weight"] == (s.n_head * s.head_dim, e)
    assert t["blk.3.attn_q_norm.weight"] == (s.head_dim,)
    assert "blk.3.ssm_a" not in t
    # the MTP block
    assert t["blk.4.nextn.eh_proj.weight"] == (2 * e, e)
    for n in ("enorm", "hnorm", "shared_head_norm"):
        assert t[f"blk.4.nextn.{n}.weight"] == (e,)
    assert t["blk.4.attn_q.weight"] == (e, 2 * s.n_head * s.head_dim)
    # conv kernel stays F32 whatever the weight type
    types = {x.name: x.ggml_type.lower() for x in spec.tensors}
    assert types["blk.0.ssm_conv1d.weight"] == "f32"


@pytest.mark.parametrize("wtype,file_type", [("f16", 1), ("q8_0", 7), ("q4_0", 2), ("f32", 0)])
def test_weight_types(tmp_path: Path, wtype: str, file_type: int) -> None:
    spec = load_spec(write_model(tmp_path / "w.gguf", "qwen3moe", weight_type=wtype))
    types = {x.name: x.ggml_type.lower() for x in spec.tensors}
    assert spec.file_type == file_type
    assert types["token_embd.weight"] == wtype
    assert types["blk.0.ffn_up_exps.weight"] == wtype
    assert types["blk.0.attn_norm.weight"] == "f32"
    assert types["blk.0.ffn_gate_inp.weight"] == "f32"


def test_quantized_weight_with_odd_row_falls_back_to_f16(tmp_path: Path) -> None:
    # head_dim 8 * 2 heads = 16 columns: not a multiple of the 32-weight q8_0 block
    spec = load_spec(write_model(tmp_path / "o.gguf", "llama", weight_type="q8_0", n_head=2, n_head_kv=2, head_dim=8,
                                 n_rot=8))
    types = {x.name: x.ggml_type.lower() for x in spec.tensors}
    assert types["blk.0.attn_output.weight"] == "f16"
    assert types["blk.0.attn_q.weight"] == "q8_0"


def test_every_architecture_has_a_default_that_writes(tmp_path: Path) -> None:
    for arch in ARCHITECTURES:
        p = write_model(tmp_path / f"{arch}.gguf", arch)
        assert p.stat().st_size < 2 * 1024 * 1024  # tiny by design
        assert load_spec(p).warnings == ()


@pytest.mark.parametrize(
    "arch,kw,match",
    [
        ("llama", {"nextn_layers": 1}, "nextn_layers"),
        ("gemma3", {"swa_pattern": (True,)}, "swa_pattern"),
        ("qwen35", {"ssm_time_step_rank": 3, "ssm_group_count": 2}, "multiple"),
        ("qwen35", {"recurrent_layers": (True,)}, "recurrent_layers"),
        ("qwen3moe", {"n_expert_used": 5}, "n_expert_used"),
        ("qwen3", {"weight_type": "q5_k"}, "weight_type"),
        ("qwen3", {"n_layer": 0}, "n_layer"),
        ("qwen35", {"mtp_only": True}, "mtp_only"),
        ("llama", {"n_head": 4, "n_head_kv": 3}, "n_head_kv"),
        ("qwen35", {"n_rot": 32}, "n_rot"),
    ],
)
def test_bad_shapes_are_rejected(tmp_path: Path, arch: str, kw: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        write_model(tmp_path / "bad.gguf", arch, **kw)


def test_unknown_architecture(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="no synthetic writer"):
        write_model(tmp_path / "x.gguf", "gpt-17")


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = write_model(tmp_path / "a.gguf", "qwen35", nextn_layers=1)
    b = write_model(tmp_path / "b.gguf", "qwen35", nextn_layers=1)
    c = write_model(tmp_path / "c.gguf", "qwen35", nextn_layers=1, seed=1)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()


def test_docs_example_runs_and_prints_what_it_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/synth.md: the python example runs; each ``# ...`` line after a print is its output."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the example's mkdtemp lands here
    doc = (Path(__file__).resolve().parents[2] / "docs" / "synth.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    lines = code.splitlines()
    expected = [
        lines[i + 1][2:] for i, line in enumerate(lines[:-1])
        if line.startswith("print(") and lines[i + 1].startswith("# ")
    ]
    assert expected
    exec(compile(code, "docs/synth.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == expected


def test_mmproj_load_spec(tmp_path: Path) -> None:
    v = SynthVisionShape(n_embd=64, n_head=4, n_ff=96, n_layer=2, image_size=96, projection_dim=128)
    spec = load_spec(write_mmproj(tmp_path / "mmproj.gguf", v))
    assert spec.architecture == "clip" and spec.is_mmproj and spec.warnings == ()
    pj = spec.projector
    assert pj is not None
    assert (pj.projector_type, pj.has_vision, pj.has_audio) == ("qwen3vl_merger", True, False)
    assert (pj.n_embd, pj.n_head, pj.n_ff, pj.n_layer) == (64, 4, 96, 2)
    assert (pj.image_size, pj.patch_size, pj.projection_dim) == (96, 16, 128)
    t = {x.name: x for x in spec.tensors}
    assert t["mm.2.bias"].shape == (128,)  # clip_n_mmproj_embd: what must equal the text n_embd
    assert t["v.position_embd.weight"].shape == (64, (96 // 16) ** 2)
    assert t["v.position_embd.weight"].ggml_type.lower() == "f32"


@pytest.mark.parametrize(
    "kw,match",
    [({"n_embd": 24, "n_head": 4}, "multiple of 4"), ({"image_size": 40}, "image_size"),
     ({"weight_type": "q2_k"}, "weight_type")],
)
def test_mmproj_bad_shapes(tmp_path: Path, kw: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        write_mmproj(tmp_path / "bad.gguf", **kw)


def test_tiny_png_is_a_valid_png() -> None:
    data = tiny_png(5, 3)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (5, 3)
    idat_len = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT"
    raw = zlib.decompress(data[41 : 41 + idat_len])
    assert len(raw) == 3 * (1 + 5 * 3)


def test_mtp_sidecar_holds_only_the_mtp_block(tmp_path: Path) -> None:
    """conversion/qwen.py mtp_only: embeddings, output norm/head and the nextn block(s)."""
    full = load_spec(write_model(tmp_path / "full.gguf", "qwen35", nextn_layers=1))
    side = load_spec(write_model(tmp_path / "side.gguf", "qwen35", nextn_layers=1, mtp_only=True))
    assert (side.n_layer, side.nextn_layers) == (full.n_layer, 1)
    keep = {"token_embd.weight", "output_norm.weight", "output.weight"}
    expected = {t.name for t in full.tensors if t.name in keep or t.name.startswith("blk.4.")}
    assert {t.name for t in side.tensors} == expected
    assert side.weights_bytes < full.weights_bytes


@pytest.mark.parametrize("wtype", ["q4_0", "f16"])
def test_sparse_fill_is_the_same_file_without_its_data(tmp_path: Path, wtype: str) -> None:
    """fill="sparse": the header byte for byte as the tiled file, the same length, the tensor data
    a hole (zeros, no disk blocks for a large model)."""
    kw: dict[str, object] = dict(nextn_layers=1, weight_type=wtype, n_vocab=4096)
    tiled = write_model(tmp_path / "t.gguf", "qwen35", fill="tiled", **kw)
    sparse = write_model(tmp_path / "s.gguf", "qwen35", fill="sparse", **kw)
    t, s = tiled.read_bytes(), sparse.read_bytes()
    assert len(t) == len(s)
    head = len(t) - sum((x.n_bytes + 31) // 32 * 32 for x in load_spec(tiled).tensors)  # data, 32-aligned
    assert s[:head] == t[:head]
    assert s[head:] == bytes(len(s) - head) != t[head:]
    assert [(x.name, x.ggml_type, x.shape) for x in load_spec(sparse).tensors] == \
        [(x.name, x.ggml_type, x.shape) for x in load_spec(tiled).tensors]
