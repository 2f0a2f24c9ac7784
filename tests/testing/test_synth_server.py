"""Every synthetic architecture loads and generates in the real llama-server.

Besides "it answers", the server's own log is checked against load_spec: the number of layers
llama.cpp puts in its recurrent-state buffer (llama_memory_recurrent) and in its KV caches
(llama_kv_cache; SWA / non-SWA for gemma3) must equal the layer kinds load_spec reports.
Log formats: src/llama-memory-recurrent.cpp and src/llama-kv-cache.cpp (LLAMA_LOG_INFO
"size = ... (N cells, L layers, ...)"), src/llama-kv-cache-iswa.cpp ("creating SWA KV cache").
"""

from __future__ import annotations

import base64
import re
from collections import Counter
from pathlib import Path

import pytest

from llamarig.errors import ServerError
from llamarig.gguf import load_spec
from llamarig.testing.synth import tiny_png, write_mmproj

pytestmark = pytest.mark.server

BASE_ARGS = ("-c", "512", "-np", "1")
PROMPT = "the cat sat on the mat"

# "llama_memory_recurrent: size =    0.01 MiB (     1 cells,   3 layers,  1 seqs ..."
RECURRENT_RE = re.compile(r"llama_memory_recurrent: size = .*?\(\s*(\d+) cells,\s*(\d+) layers")
# "... R (f32):    0.07 MiB, S (f32):    1.50 MiB, ..."
RS_SIZES_RE = re.compile(r"llama_memory_recurrent: size = .*R \(f32\):\s*([\d.]+) MiB, S \(f32\):\s*([\d.]+) MiB")
# "llama_kv_cache: size =    0.06 MiB (   512 cells,   1 layers,  1/1 seqs), K (f16): ..."
KV_RE = re.compile(r"llama_kv_cache: size = .*?\(\s*(\d+) cells,\s*(\d+) layers")


def _complete(srv, n_predict: int = 8) -> dict:
    body = {"prompt": PROMPT, "n_predict": n_predict, "ignore_eos": True, "temperature": 0.0}
    return srv.post("/completion", body)


def _check_generates(srv, model: Path) -> dict:
    res = _complete(srv)
    assert res["tokens_predicted"] == 8, res
    assert res["timings"]["predicted_n"] == 8
    assert isinstance(res["content"], str)
    props = srv.get("/props")
    assert Path(props["model_path"]).name == model.name
    return res


CASES: list[tuple[str, dict[str, object]]] = [
    ("llama", {}),
    ("qwen3", {}),
    ("gemma3", {}),
    ("qwen35", {}),
    ("qwen3moe", {}),
    ("qwen35moe", {}),
    # weight type variety: quantized weights through the same loaders
    ("qwen35", {"weight_type": "q8_0"}),
    ("qwen3moe", {"weight_type": "q4_0"}),
    ("gemma3", {"weight_type": "q8_0", "n_layer": 4, "swa_pattern": (True, False, True, False)}),
]


def _id(case: tuple[str, dict[str, object]]) -> str:
    arch, kw = case
    return arch + "".join(f"-{k}={v}" for k, v in kw.items()).replace(" ", "")


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_loads_and_generates(synth_model, llama_server, case: tuple[str, dict[str, object]]) -> None:
    arch, kw = case
    model = synth_model(arch, **kw)
    spec = load_spec(model)
    srv = llama_server(model, *BASE_ARGS, "-lv", "4")
    _check_generates(srv, model)
    log = srv.log
    kinds = Counter(ly.kind for ly in spec.layers if not ly.nextn)

    if kinds["recurrent"]:
        m = RECURRENT_RE.search(log)
        assert m, "no llama_memory_recurrent buffer in the log"
        # the printed layer count is hparams.n_layer() (main layers); the per-layer state is
        # only allocated for the recurrent ones (see test_recurrent_state_matches_load_spec)
        assert int(m.group(2)) == spec.n_layer_main
    else:
        assert "llama_memory_recurrent" not in log

    kv_layers = [int(n) for _, n in KV_RE.findall(log)]
    if kinds["swa"]:
        assert "SWA KV cache" in log
        # two caches, non-SWA first, then SWA (llama-kv-cache-iswa.cpp)
        assert kv_layers == [kinds["attention"], kinds["swa"]]
    else:
        assert "SWA KV cache" not in log
        assert kv_layers == [kinds["attention"]]

    # the loader counts the weights by type: quantized ones next to the F32 norms
    wtype = str(kw.get("weight_type", "f16"))
    assert re.search(rf"llama_model_loader: - type\s+{wtype}:\s+\d+ tensors", log)
    assert f"file type   = {wtype.upper()}" in log


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_mtp_speculative_decoding(synth_model, llama_server, arch: str) -> None:
    """nextn_layers=1 gives the MTP block `--spec-type draft-mtp` drafts with (the layout of
    Qwen3.6-27B); the response timings carry the draft statistics (server-common.cpp
    server_slot_stats::to_json: draft_n / draft_n_accepted, only when something was drafted)."""
    model = synth_model(arch, nextn_layers=1)
    spec = load_spec(model)
    assert spec.nextn_layers == 1 and spec.layers[-1].nextn
    srv = llama_server(model, *BASE_ARGS, "--spec-type", "draft-mtp", "-lv", "4")
    res = _check_generates(srv, model)
    # observed: build 11434 reports "none,draft-mtp" (the default "none" stays in the list)
    assert "draft-mtp" in res["generation_settings"]["speculative.types"].split(",")
    assert res["timings"]["draft_n"] > 0
    assert 0 <= res["timings"]["draft_n_accepted"] <= res["timings"]["draft_n"]
    log = srv.log
    assert "creating MTP draft context" in log
    # the MTP context holds one plain KV cache for the MTP block (llama-model.cpp create_memory:
    # "Dense MTP heads use a plain attention KV cache instead of the hybrid wrapper")
    attn_main = sum(1 for ly in spec.layers if ly.kind == "attention" and not ly.nextn)
    assert [int(n) for _, n in KV_RE.findall(log)] == [attn_main, 1]


def test_draft_mtp_without_nextn_layers_is_refused(synth_model, llama_server) -> None:
    """Observed: llama-server exits 1 ("context type MTP requested but model doesn't contain MTP
    layers", src/llama-context.cpp) when --spec-type draft-mtp meets a model without nextn."""
    model = synth_model("qwen35")
    with pytest.raises(ServerError, match="MTP"):
        llama_server(model, *BASE_ARGS, "--spec-type", "draft-mtp")


BIG_STATE = {"ssm_state_size": 128, "ssm_time_step_rank": 8, "ssm_group_count": 4}
# "... (     2 cells,   4 layers,  2 seqs  2 rs_seq), R (f32): ..."
RS_ROWS_RE = re.compile(r"llama_memory_recurrent: size = .*?\(\s*(\d+) cells,\s*\d+ layers,\s*(\d+) seqs\s+(\d+) rs_seq\)")


@pytest.mark.parametrize(
    "shape,args,rows",
    [
        # big enough states that the MiB figures in the log resolve single layers
        (BIG_STATE, ("-np", "1"), 1),
        ({**BIG_STATE, "n_layer": 6, "recurrent_layers": (True, False, True, True, True, False)},
         ("-np", "1"), 1),
        # speculative decoding keeps --spec-draft-n-max rollback snapshots per sequence
        # (common.h need_n_rs_seq; llama-memory-recurrent.cpp: mem_size * (1 + n_rs_seq) rows,
        # mem_size = n_seq_max): 2 slots x (1 + 2) rows
        ({**BIG_STATE, "nextn_layers": 1}, ("-np", "2", "--spec-type", "draft-mtp", "--spec-draft-n-max", "2"), 6),
    ],
    ids=["interval", "recurrent_layers-array", "mtp-np2-nmax2"],
)
def test_recurrent_state_matches_load_spec(
    synth_model, llama_server, shape: dict[str, object], args: tuple[str, ...], rows: int
) -> None:
    """llama.cpp allocates n_embd_r / n_embd_s f32 values per recurrent layer and state row
    (llama-memory-recurrent.cpp, llama-hparams.cpp): the R and S sizes it logs must equal
    load_spec's recurrent layer count x n_embd_r / n_embd_s x 4 bytes x rows."""
    model = synth_model("qwen35", **shape)
    spec = load_spec(model)
    assert spec.recurrent is not None
    n_rec = sum(1 for ly in spec.layers if ly.kind == "recurrent")
    srv = llama_server(model, "-c", "512", *args, "-lv", "4")  # the size lines are info-level
    _check_generates(srv, model)
    log = srv.log
    m = RS_SIZES_RE.search(log)
    assert m, "no llama_memory_recurrent size line"
    mib = 1024 * 1024
    assert m.group(1) == f"{n_rec * spec.recurrent.n_embd_r * 4 * rows / mib:.2f}"
    assert m.group(2) == f"{n_rec * spec.recurrent.n_embd_s * 4 * rows / mib:.2f}"
    cells, seqs, rs_seq = (int(x) for x in RS_ROWS_RE.search(log).groups())
    assert cells * (1 + rs_seq) == rows
    kv_layers = [int(n) for _, n in KV_RE.findall(log)]
    n_attn = sum(1 for ly in spec.layers if ly.kind == "attention" and not ly.nextn)
    assert kv_layers == [n_attn] + [1] * spec.nextn_layers * ("draft-mtp" in args)


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_mtp_sidecar_with_model_draft(synth_model, llama_server, arch: str) -> None:
    """An MTP-only sidecar (the seeds' `--model-draft .../MTP/mtp-*.gguf --spec-type draft-mtp`)
    next to a target without nextn layers: it loads (qwen35.cpp treats the trunk as optional when
    blk.0.attn_norm is missing) and drafts."""
    target = synth_model(arch)
    sidecar = synth_model(arch, nextn_layers=1, mtp_only=True)
    names = {t.name for t in load_spec(sidecar).tensors}
    assert "blk.0.attn_norm.weight" not in names and f"blk.{load_spec(target).n_layer}.nextn.eh_proj.weight" in names
    srv = llama_server(target, *BASE_ARGS, "--model-draft", str(sidecar), "--spec-type", "draft-mtp")
    res = _check_generates(srv, target)
    assert res["timings"]["draft_n"] > 0


def test_qwen35_mtp_with_mmproj_answers_an_image(synth_model, llama_server, tmp_path: Path) -> None:
    """The seeds' setup in miniature: a qwen35 hybrid with an MTP block, a qwen3vl_merger mmproj
    (--mmproj) and --spec-type draft-mtp; a chat request with an image gets an answer."""
    model = synth_model("qwen35", nextn_layers=1)
    mmproj = write_mmproj(tmp_path / "mmproj.gguf", projection_dim=load_spec(model).n_embd)
    srv = llama_server(model, "-c", "1024", "-np", "1", "--mmproj", str(mmproj), "--spec-type", "draft-mtp")
    props = srv.get("/props")
    assert props["modalities"]["vision"] is True
    image = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()

    def chat(content: object) -> dict:
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8, "ignore_eos": True}
        return srv.post("/v1/chat/completions", body)

    text_only = chat("what is this")
    with_image = chat([
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": image}},
    ])
    assert with_image["usage"]["completion_tokens"] == 8
    assert with_image["timings"]["draft_n"] > 0  # MTP drafted after an image prompt too
    # the image adds its tokens to the prompt
    assert with_image["usage"]["prompt_tokens"] > text_only["usage"]["prompt_tokens"]


SWA_SIZE_RE = re.compile(r"creating\s+SWA KV cache, size = (\d+) cells")
BASE_SIZE_RE = re.compile(r"creating non-SWA KV cache, size = (\d+) cells")


@pytest.mark.parametrize("swa_full", [False, True], ids=["swa", "swa-full"])
def test_gemma3_swa_cache_size(synth_model, llama_server, swa_full: bool) -> None:
    """llama-kv-cache-iswa.cpp: the SWA cache holds GGML_PAD(min(n_ctx, n_swa * n_seq(unified) +
    n_ubatch), 256) cells; --swa-full makes it as large as the base cache."""
    model = synth_model("gemma3")
    window = load_spec(model).swa_window
    assert window == 128
    args = ["-c", "2048", "-np", "1", "-b", "64", "-ub", "64", "-lv", "4"] + (["--swa-full"] if swa_full else [])
    srv = llama_server(model, *args)
    _check_generates(srv, model)
    log = srv.log
    expected = 2048 if swa_full else -(-min(2048, window + 64) // 256) * 256
    assert int(BASE_SIZE_RE.search(log).group(1)) == 2048
    assert int(SWA_SIZE_RE.search(log).group(1)) == expected


def test_draft_mtp_with_two_nextn_layers_aborts(synth_model, llama_server, tmp_path: Path) -> None:
    """Observed: qwen35 with nextn_predict_layers = 2 loads, but --spec-type draft-mtp aborts
    while loading (GGML_ASSERT(hparams.n_layer_nextn == 1 ...) in src/models/qwen35.cpp)."""
    model = synth_model("qwen35", nextn_layers=2)
    srv = llama_server(model, *BASE_ARGS)  # without MTP it is an ordinary model
    _check_generates(srv, model)
    srv.stop()
    with pytest.raises(ServerError, match=r"crashed \(SIGABRT\)"):
        llama_server(model, *BASE_ARGS, "--spec-type", "draft-mtp")
    logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("llama-server-*.log"))
    assert "only supports a single MTP block" in logs
