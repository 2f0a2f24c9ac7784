"""Plans on real GGUF headers: the 27B-shaped synthetic header, an mmproj file, a draft model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGUFWriter

from llamarig.catalogue.gpus import parse_gpu_arg
from llamarig.cli.main import main
from llamarig.gguf import load_spec
from llamarig.hardware import Hardware
from llamarig.plan import memory as M
from llamarig.plan.config import parse_server_args
from llamarig.plan.planner import PlanInputs, make_plan
from llamarig.testing.bigheader import write_qwen36_like

MiB = 1 << 20


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return load_spec(write_qwen36_like(tmp_path_factory.mktemp("big") / "q36.gguf"))


def test_header_facts(big) -> None:
    """The unit facts hold for the header itself, not only for the catalogue entry."""
    assert M.kv_bytes_per_token(big, "q4_0", "q4_0") == 18432
    assert M.recurrent_bytes_per_seq(big) == int(149.625 * MiB)
    assert f"{M.recurrent_checkpoint_bytes(big) / MiB:.3f}" == "149.626"


def test_header_placement_is_tensor_exact(big) -> None:
    hw = Hardware((parse_gpu_arg("rtx3090"),))
    p = make_plan(PlanInputs(big, parse_server_args(["-c", "65536", "-np", "1", "-ngl", "40"]), hw))
    d = p.devices[0]
    # -ngl 40: layers 25..63 + output on the GPU; the rest (and token_embd) on the CPU
    on_gpu = [t for t in big.tensors
              if t.name.startswith("output") or (t.name.startswith("blk.") and int(t.name.split(".")[1]) >= 25)]
    assert d.get("weights") == sum(M.cuda_alloc_bytes(t) for t in on_gpu)
    assert 0 <= d.get("weights") - sum(t.n_bytes for t in on_gpu) <= 128 * len(on_gpu)
    attn_on_gpu = sum(1 for ly in big.layers if ly.kind == "attention" and ly.index >= 25)
    assert d.get("kv") == attn_on_gpu * 65536 * 4096
    assert p.host.get("kv") == (16 - attn_on_gpu) * 65536 * 4096
    assert d.lines["compute"].method == "modelled"
    assert "op offload" in d.lines["compute"].formula


def _write_mmproj(path) -> str:
    w = GGUFWriter(str(path), "clip")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "qwen3vl_merger")
    for k, v in (("image_size", 448), ("patch_size", 16), ("embedding_length", 128),
                 ("block_count", 2), ("attention.head_count", 4), ("feed_forward_length", 256)):
        w.add_uint32(f"clip.vision.{k}", v)
    w.add_tensor("v.patch_embd.weight", np.zeros((128, 768), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_mmproj_file_and_draft(tmp_path, synth_model, capsys) -> None:
    mm = _write_mmproj(tmp_path / "mmproj.gguf")
    model = synth_model("llama")
    rc = main(["plan", str(model), "--mmproj", mm, "--draft", "qwen3-8b:q4_k_m", "--gpu", "rtx3090",
               "-c", "4096", "--json"])
    assert rc in (None, 0)
    js = json.loads(capsys.readouterr().out)
    d = js["devices"][0]
    assert d["mmproj"] >= 128 * 768 * 2
    assert d["draft"] > 4e9  # the draft model's weights + its KV
    assert "-md" in js["command"] and "--mmproj" in js["command"]


def test_mmproj_as_model_is_rejected(tmp_path, capsys) -> None:
    mm = _write_mmproj(tmp_path / "mmproj.gguf")
    with pytest.raises(SystemExit) as e:
        main(["plan", mm])
    assert e.value.code == 2
    assert "mmproj" in capsys.readouterr().err


def test_detect_runs(capsys) -> None:
    rc = main(["plan", "llama3.1-8b", "--detect", "-c", "8192", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc in (None, 0, 1)
    assert d["host"]["capacity"] and d["host"]["capacity"] > 0
