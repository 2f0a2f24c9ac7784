"""Internal consistency of the built-in model catalogue (llamarig/data/models.json).

Every entry is loaded and built into a ModelSpec for each of its quants; the shapes are then checked
against each other and against the derived figures the entries cite (llama.cpp logs and seeds).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from llamarig.catalogue.models import bpw_table, build_spec, find_model, load_models
from llamarig.plan import memory as M

MiB = 1 << 20
RAW: dict[str, Any] = json.loads(resources.files("llamarig.data").joinpath("models.json").read_text())
ENTRIES = {e["id"]: e for e in RAW["models"]}
BASES = {k: e for k, e in ENTRIES.items() if "alias_of" not in e}
ALL_IDS = sorted(load_models())


def _spec(text: str):
    return build_spec(*find_model(text))


# --------------------------------------------------------------------------- every entry, every quant


@pytest.mark.parametrize("mid", ALL_IDS)
def test_every_entry_builds_for_every_quant(mid: str) -> None:
    m = load_models()[mid]
    assert m.quants, f"{mid} lists no quant"
    for q in m.quants:
        spec = build_spec(*find_model(f"{mid}:{q}"))
        assert spec.n_layer == int(m.entry["n_layer"]) + int(m.entry.get("nextn_layers", 0))
        assert len(spec.layers) == spec.n_layer
        assert spec.file_bytes > 0
        if m.quants[q].get("tensor_types"):
            # typed tensors: their bytes add up to the file less its metadata (tokenizer, keys)
            assert 0 < spec.file_bytes - spec.weights_bytes < 64 << 20
        else:
            assert spec.weights_bytes == pytest.approx(spec.file_bytes, rel=1e-6)
        assert spec.origin is not None and any("catalogue entry" in w for w in spec.notices)


@pytest.mark.parametrize("mid", ALL_IDS)
def test_every_entry_names_its_sources(mid: str) -> None:
    e = ENTRIES[mid]
    src = e.get("source", "")
    assert len(src) > 20, f"{mid}: no source"
    assert "(recalled)" not in src, f"{mid}: a shape source says only 'recalled'"
    for q, info in BASES.get(mid, {}).get("quants", {}).items():
        if info.get("bytes"):
            assert info.get("source"), f"{mid}:{q} gives bytes without a source"


@pytest.mark.parametrize("mid", sorted(BASES))
def test_size_is_a_listing_or_a_labelled_estimate(mid: str) -> None:
    m = load_models()[mid]
    bpw = bpw_table()
    for q, info in m.quants.items():
        n, how = m.file_bytes(q, bpw)
        if info.get("bytes") and info.get("spread"):
            # a figure whose reading is uncertain: an estimate, with its range and its reason
            assert n == int(info["bytes"]) and how.startswith("estimated: ") and info["source"] in how
        elif info.get("bytes"):
            assert n == int(info["bytes"]) and how == info["source"]
        else:
            assert how == f"estimated: {m.entry['params_b']}B params x {bpw[q]} bits/weight ({q})"
            assert n == int(float(m.entry["params_b"]) * 1e9 * bpw[q] / 8)


# --------------------------------------------------------------------------- shape plausibility


@pytest.mark.parametrize("mid", sorted(BASES))
def test_head_shapes_are_plausible(mid: str) -> None:
    e = BASES[mid]
    nh, nkv, hd, embd = e["n_head"], e["n_head_kv"], e["head_dim"], e["n_embd"]
    assert nh % nkv == 0, f"{mid}: {nh} heads not a multiple of {nkv} KV heads"
    assert hd in (64, 128, 256)
    assert 0.5 <= nh * hd / embd <= 2.0, f"{mid}: n_head x head_dim = {nh * hd} vs n_embd {embd}"
    assert e["n_ctx_train"] in (32768, 40960, 131072, 262144)
    if e.get("n_expert"):
        assert 0 < e["n_expert_used"] <= e["n_expert"] and e["n_ff_expert"] > 0


def _approx_params(e: dict[str, Any]) -> float:
    """Parameter count from the shapes alone (matrices only; norms, biases, routers left out)."""
    embd, nh, nkv, hd = e["n_embd"], e["n_head"], e["n_head_kv"], e["head_dim"]
    n, interval = e["n_layer"], e.get("full_attention_interval")
    gate = 2 if e["arch"] in ("qwen35", "qwen35moe") else 1
    attn = embd * nh * hd * gate + 2 * embd * nkv * hd + nh * hd * embd
    n_attn = n // interval if interval else n
    total = n_attn * attn
    if interval:
        s = e["ssm"]
        conv = s["inner_size"] + 2 * s["group_count"] * s["state_size"]
        total += (n - n_attn) * (embd * (conv + s["inner_size"]) + s["inner_size"] * embd)
    if e.get("n_expert"):
        ffn = 3 * e["n_expert"] * embd * e["n_ff_expert"]
        if e["arch"] == "qwen35moe":
            ffn += 3 * embd * e["n_ff"]  # the shared expert
    else:
        ffn = 3 * embd * e["n_ff"]
    total += n * ffn
    total += e["n_vocab"] * embd * (1 if e.get("tied_embeddings") else 2)
    return total


@pytest.mark.parametrize("mid", sorted(BASES))
def test_shapes_add_up_to_the_stated_parameter_count(mid: str) -> None:
    # a wrong layer count, width or FFN size moves this by far more than the 5 % allowed
    # (vision towers, norms and biases are not counted)
    e = BASES[mid]
    ratio = _approx_params(e) / (float(e["params_b"]) * 1e9)
    assert 0.95 <= ratio <= 1.05, f"{mid}: shapes give {_approx_params(e) / 1e9:.2f}B vs params_b {e['params_b']}"


# --------------------------------------------------------------------------- layer layouts


@pytest.mark.parametrize("mid", sorted(k for k, e in BASES.items() if e.get("full_attention_interval")))
def test_hybrid_layer_counts_sum_to_n_layer(mid: str) -> None:
    e = BASES[mid]
    spec = _spec(mid)
    main = [ly for ly in spec.layers if not ly.nextn]
    rec = sum(1 for ly in main if ly.kind == "recurrent")
    att = sum(1 for ly in main if ly.kind == "attention")
    assert rec + att == e["n_layer"] == len(main)
    assert att == e["n_layer"] // e["full_attention_interval"]
    assert all(main[i].kind == "attention" for i in range(e["full_attention_interval"] - 1, e["n_layer"],
                                                          e["full_attention_interval"]))
    assert sum(1 for ly in spec.layers if ly.nextn) == e.get("nextn_layers", 0)
    s = e["ssm"]
    # gated delta net: inner = v-heads (time_step_rank) x head dim (state_size)
    assert s["inner_size"] == s["time_step_rank"] * s["state_size"]


@pytest.mark.parametrize(("mid", "n_full", "n_swa"), [
    ("gemma3-12b", 8, 40), ("gemma3-27b", 10, 52),  # every 6th layer full (gemma3.cpp load_swa_pattern(ml, 6))
    ("gpt-oss-20b", 12, 12), ("gpt-oss-120b", 18, 18),  # alternating, layer 0 sliding
])
def test_swa_layouts(mid: str, n_full: int, n_swa: int) -> None:
    spec = _spec(mid)
    kinds = [ly.kind for ly in spec.layers]
    assert (kinds.count("attention"), kinds.count("swa")) == (n_full, n_swa)
    assert kinds[0] == "swa" and spec.swa_window == BASES[mid]["swa_window"]


# --------------------------------------------------------------------------- derived figures the sources give


def test_seed_model_kv_per_token_q4_0() -> None:
    # seed 004: 18 KB per token = 16 attention layers x (K + V) x row_size(q4_0, 4 x 256) = 16 x 2 x 576
    assert M.kv_bytes_per_token(_spec("qwen3.6-27b:iq4_nl"), "q4_0", "q4_0") == 18432
    assert M.kv_bytes_per_token(_spec("qwen3.8-27b"), "q4_0", "q4_0") == 18432  # nextn layers not counted


@pytest.mark.parametrize(("mid", "per_token"), [
    ("qwen3-30b-a3b", 98304),    # llama.cpp tools/fit-params/README.md: 384 MiB at 4096 cells, f16
    ("qwen3.6-35b-a3b", 20480),  # from the catalogue shape: 10 layers x 2 x 512 x 2 B
    ("gpt-oss-20b", 24576),      # 12 full layers x 2 x 512 x 2 B (ik_llama.cpp #822: 24 layers -> 6144 MiB at 131072)
])
def test_kv_per_token_f16(mid: str, per_token: int) -> None:
    assert M.kv_bytes_per_token(_spec(mid), "f16", "f16") == per_token


def test_gpt_oss_20b_all_layers_match_the_no_swa_log() -> None:
    # ik_llama.cpp #822 (no SWA support): 6144 MiB of KV at 131072 cells, f16
    spec = _spec("gpt-oss-20b")
    per_cell = sum(M.kv_bytes_per_cell(ly, "f16", "f16") for ly in spec.layers)
    assert per_cell * 131072 == 6144 * MiB


@pytest.mark.parametrize(("mid", "mib"), [
    ("qwen3.6-27b", 149.625),     # llama.cpp PR #23792 log: 448.88 MiB / 3 seqs
    ("qwen3.5-9b", 50.25),        # lmstudio-bug-tracker #1563: context checkpoint 50.251 MiB
    ("qwen3.6-35b-a3b", 62.8125),  # from the catalogue shape: 62.81 MiB per seq
])
def test_recurrent_state_per_sequence(mid: str, mib: float) -> None:
    assert M.recurrent_bytes_per_seq(_spec(mid)) == int(mib * MiB)


def test_alias_shares_its_base() -> None:
    a, b = load_models()["qwen3.5-35b-a3b"], load_models()["qwen3.6-35b-a3b"]
    assert a.entry is b.entry and a.arch == b.arch
