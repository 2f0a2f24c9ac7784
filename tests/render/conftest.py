"""Shapes of the synthetic models the render and launch tests start."""

from __future__ import annotations

BASE = {"n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 512}
SHAPES = {
    "llama": dict(BASE, n_layer=4),
    "qwen35": dict(BASE, n_layer=4, ssm_state_size=64, ssm_group_count=2, ssm_time_step_rank=8),
}
