"""Unit facts of the mmproj memory model (llamarig.plan.mmproj.projector)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llamarig.gguf import load_spec
from llamarig.plan.mmproj.projector import (
    MiB,
    MMProjShape,
    estimate_mmproj,
    mmproj_info_from_spec,
    shape_from_spec,
    warmup_geometry,
)
from llamarig.testing.synth import write_mmproj

BASE = MMProjShape(weights_bytes=1000, n_embd=32, n_head=2, n_ff=64, n_layer=1, patch_size=16, image_size=64)


def test_qwen_vl_warmup_is_46x46_merged_tokens() -> None:
    # clip.cpp:1679 set_warmup_n_tokens(46*46); clip-model.h:217 side = t * patch * n_merge
    assert warmup_geometry(BASE) == (46 * 16 * 2, 92 * 92)
    assert warmup_geometry(replace(BASE, image_size=768)) == (1472, 8464)  # image_size does not enter


def test_image_max_tokens_caps_the_warmup() -> None:
    assert warmup_geometry(replace(BASE, image_max_tokens=256)) == (16 * 16 * 2, 32 * 32)
    assert warmup_geometry(replace(BASE, image_max_tokens=100)) == (10 * 16 * 2, 20 * 20)
    assert warmup_geometry(replace(BASE, image_max_tokens=5000)) == (1472, 8464)  # above 46*46: no cap


def test_patch_embedding_phase_is_exact_sum() -> None:
    # image 1472^2*3 f32 + positions 4N i32 + f16 im2col N*16*16*3 + matmul N*E f32
    n = 8464
    want = 1472 * 1472 * 12 + 16 * n + n * 768 * 2 + 4 * n * 32
    assert estimate_mmproj(BASE, flash_attn=True).compute_bytes == want
    assert round(want / MiB, 2) == 38.36  # the real llama-server's log for this shape


def test_flash_attention_off_adds_the_kq_matrix() -> None:
    s = replace(BASE, n_layer=2)
    on, off = estimate_mmproj(s, True), estimate_mmproj(s, False)
    kq = 4 * 2 * 8464 * 8464
    assert off.compute_bytes - kq > 0 and off.compute_bytes > on.compute_bytes
    assert "KQ" in off.formula and "FA on" in on.formula
    assert on.weights_bytes == off.weights_bytes == 1000


def test_bf16_patch_kernel_uses_f32_im2col() -> None:
    f16 = estimate_mmproj(BASE, True).compute_bytes
    bf16 = estimate_mmproj(replace(BASE, patch_kernel_type="bf16"), True).compute_bytes
    assert bf16 - f16 == 8464 * 768 * 2


def test_other_projectors_say_they_are_approximate() -> None:
    est = estimate_mmproj(replace(BASE, projector_type="gemma3", image_size=896, patch_size=14), True)
    assert est.warmup_image_size == 896 and est.n_patches == 64 * 64
    assert est.method.startswith("approximate")


@pytest.mark.parametrize("fa", [True, False])
def test_compute_grows_with_width_and_patches(fa: bool) -> None:
    small = estimate_mmproj(replace(BASE, n_layer=4, n_embd=256, n_ff=1024), fa).compute_bytes
    wide = estimate_mmproj(replace(BASE, n_layer=4, n_embd=512, n_ff=2048), fa).compute_bytes
    fewer = estimate_mmproj(replace(BASE, n_layer=4, n_embd=256, n_ff=1024, image_max_tokens=256), fa).compute_bytes
    assert wide > small > fewer


def test_info_from_a_synthetic_file(tmp_path: Path) -> None:
    spec = load_spec(write_mmproj(tmp_path / "mm.gguf", n_embd=64, n_head=4, n_ff=128, n_layer=2))
    s = shape_from_spec(spec)
    assert (s.n_embd, s.n_head, s.n_ff, s.n_layer, s.patch_size, s.n_merge) == (64, 4, 128, 2, 16, 2)
    assert s.patch_kernel_type == "f32" and s.weights_bytes == spec.weights_bytes
    info = mmproj_info_from_spec(spec, "mm.gguf")
    assert info.weights_bytes == spec.weights_bytes
    assert info.compute_fa_off > info.compute_fa_on > 0
    assert "8464 patches" in info.source


def test_plan_follows_image_max_tokens(tmp_path) -> None:
    """`--image-max-tokens` in the llama-server command shrinks the planned projector compute
    (clip-model.h: the warmup image side is floor(sqrt(N)) patches)."""
    import json
    import subprocess
    import sys

    from llamarig.testing.synth import write_mmproj, write_model

    mm, m = write_mmproj(tmp_path / "mm.gguf"), write_model(tmp_path / "m.gguf", "qwen3")

    def host_mmproj(*extra: str) -> int:
        r = subprocess.run([sys.executable, "-m", "llamarig", "plan", str(m), "--mmproj", str(mm), "--json",
                            "--", "llama-server", "-c", "4096", *extra], capture_output=True, text=True, check=True)
        return json.loads(r.stdout)["host"]["mmproj"]

    full, small = host_mmproj(), host_mmproj("--image-max-tokens", "256")
    assert small < full / 4
