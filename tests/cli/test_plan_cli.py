"""`llamarig plan / models / gpus` end to end (in-process), including bad input."""

from __future__ import annotations

import json

import pytest

from llamarig.cli.main import main

README_CMD = ["plan", "qwen3.6-27b:iq4_nl", "--mmproj", "f16", "--gpu", "rtx3090", "-c", "105000"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    try:
        rc = main(list(args))  # standalone_mode=False: click returns Exit codes
        code = rc if isinstance(rc, int) else 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_readme_command(capsys) -> None:
    code, out, _ = run(capsys, *README_CMD)
    assert code == 0
    lines = out.splitlines()
    # the answer first: fits and the free memory in the first line
    assert lines[0].startswith("fits: CUDA0") and "free" in lines[0] + lines[1]
    # the range the estimate allows: the IQ4_NL file size (+-0.32 %: the model page's rounded
    # '15.8GB'), on the line under the verdict; the compute buffer of a qwen35 model wholly on
    # one CUDA GPU is replayed (exact, tests/plan/test_h200_evidence.py), so it has no range
    assert "GiB free" in lines[0] and lines[1] == "free is a range: the file size is an estimate"
    assert "CUDA0" in out and "KV cache" in out and "recurrent state" in out
    assert "formula" not in out.lower().split("formulas and sources")[0]  # formulas only with --why
    code, out, _ = run(capsys, *README_CMD, "--why")
    assert code == 0 and "149.626 MiB" in out and "B/cell" in out


def test_json_schema(capsys) -> None:
    code, out, _ = run(capsys, *README_CMD, "-np", "1", "-ctk", "q4_0", "-ctv", "q4_0", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["kv_bytes_per_token"] == 18432
    assert d["n_ctx"] == 105216 and d["n_parallel"] == 1 and d["kv_unified"] is False
    dev = d["devices"][0]
    assert dev["total"] == sum(dev[k] for k in ("weights", "kv", "recurrent", "compute", "mmproj", "draft", "other"))
    assert d["command"][:1] == ["llama-server"] and "-ctk" in d["command"]


def test_does_not_fit_exits_1(capsys) -> None:
    # -ngl given: --fit keeps every layer on the GPU (common/fit.cpp:463-465) -> a shortfall
    code, out, _ = run(capsys, "plan", "qwen3.6-27b:q8_0", "--gpu", "4060ti", "-c", "262144", "-np", "1", "-ngl", "99")
    assert code == 1
    assert "does not fit" in out and "short by" in out
    # without -ngl, --fit moves layers to the CPU: llama-server starts, slowly
    code, out, _ = run(capsys, "plan", "qwen3.6-27b:q8_0", "--gpu", "4060ti", "-c", "262144", "-np", "1", "--json")
    assert code == 0
    d = json.loads(out)
    assert any("--fit would place" in n for n in d["notes"])
    assert any("decode will be much slower" in w for w in d["warnings"])


def test_pasted_command(capsys, tmp_path) -> None:
    code, out, _ = run(capsys, "plan", "--gpu", "rtx3090", "--json", "--", "./llama-server", "-m",
                       "qwen3.6-27b:iq4_nl", "--host", "0.0.0.0", "-c", "65000", "--parallel", "1",
                       "--cache-type-k", "q4_0", "--cache-type-v", "q4_0", "-ngl", "99", "-fa", "on",
                       "--metrics", "--temp", "0.95")
    assert code == 0
    d = json.loads(out)
    assert d["n_ctx"] == 65024 and d["cache_type_k"] == "q4_0"


@pytest.mark.parametrize(("args", "needle"), [
    (["plan", "qwen3.6-28b"], "not a catalogue id (did you mean"),
    (["plan", "qwen3.6-27b", "--gpu", "rtx3080"], "unknown GPU"),
    (["plan", "qwen3.6-27b", "-ctk", "q2_K"], "accepted: f32"),
    (["plan", "qwen3.6-27b", "-ctv", "q4_0", "-fa", "off"], "flash attention"),
    (["plan", "qwen3.6-27b", "--frobnicate"], "not a llama-server flag"),
    (["plan", "/nonexistent/model.gguf"], "model.gguf"),
    (["plan", "qwen3.6-27b", "-np", "0"], "-np"),
    (["plan", "qwen3.6-27b", "--ram", "lots"], "not a size"),
    (["plan", "llama3.1-8b", "--mmproj", "f16"], "mmproj"),
])
def test_bad_input_exit_2(capsys, args: list[str], needle: str) -> None:
    code, _, err = run(capsys, *args)
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_synthetic_gguf(capsys, synth_model) -> None:
    path = synth_model("llama")
    code, out, _ = run(capsys, "plan", str(path), "-c", "2048", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["devices"] == [] and d["host"]["kv"] == 2 * 2048 * 2 * 32 * 2


def test_models_and_gpus(capsys) -> None:
    code, out, _ = run(capsys, "models", "--json")
    models = json.loads(out)
    assert code == 0 and len(models) >= 17
    assert all(m["source"] for m in models)
    code, out, _ = run(capsys, "gpus", "--json")
    assert code == 0 and any(g["id"] == "rtx3090" for g in json.loads(out))
    code, out, _ = run(capsys, "models")
    assert "qwen3.6-27b" in out
    assert len(out.splitlines()) <= 80 and "maxtext" not in out  # one entry per row, no sources
    code, out, _ = run(capsys, "models", "gemma3-27b")
    assert code == 0 and "maxtext" in out  # one entry: its sources
    code, out, _ = run(capsys, "models", "--sources")
    assert code == 0 and "maxtext" in out
    code, out, _ = run(capsys, "gpus")
    assert code == 0 and "rtx3090" in out and len(out.splitlines()) <= 80
    code, out, _ = run(capsys, "gpus", "rtx3090")
    assert code == 0 and "sources:" in out


def test_help(capsys) -> None:
    code, out, _ = run(capsys, "plan", "--help")
    assert code == 0 and "--gpu NAME[:VRAM_GB]" in out


SEED_000 = ("LLAMA_SET_ROWS=0 ./llama3-server -m qwen3.6-27b:iq4_nl --mmproj f16 --host 0.0.0.0 "
            "--port 12026 --fit on --ctx-size 65000 -n -1 --batch-size 4096 --ubatch-size 2048 "
            "--cache-type-k q4_0 --cache-type-v q4_0 --cache-reuse 1024 --parallel 1 --threads 4 "
            "--temp 0.95 --top_p 0.95 --top_k 20 --repeat_penalty 1.02 --metrics --jinja --seed 42 "
            "--cont-batching --threads-batch 4 --reasoning-budget 512 -ngl 99 --reasoning on -fa on "
            "--reasoning-format deepseek --no-mmap --log-file /tmp/llama-p100.log")
SEED_002 = ("llama-server --device CUDA1,CUDA0 --model qwen3.8-27b:q4_k_m --mmproj bf16 "
            "--cache-type-k q8_0 --cache-type-v q8_0 --fit off --flash-attn on --jinja "
            "--spec-default --spec-type draft-mtp --spec-draft-n-max 2 --batch-size 2048 "
            "--ubatch-size 1024 -ngl 99 --split-mode tensor --ctx-checkpoints 32 --cache-ram 24576 "
            "--cache-idle-slots --parallel 2 --kv-unified --cache-prompt --cache-reuse 256 --metrics "
            "--ctx-size 163840 --host 0.0.0.0 --port 11707")


def test_seed_000_command(capsys) -> None:
    code, out, _ = run(capsys, "plan", "--gpu", "rtx3090", "--ram", "64G", "--json", "--", *SEED_000.split())
    assert code == 0
    d = json.loads(out)
    assert d["kv_bytes_per_token"] == 18432 and d["n_ubatch"] == 2048
    assert any("--no-mmap" in w for w in d["warnings"])
    assert "--load-mode" in d["command"]
    assert d["host"]["weights_mmap"] is False


def test_seed_002_command(capsys) -> None:
    code, out, _ = run(capsys, "plan", "--gpu", "5090", "--gpu", "5090", "--json", "--", *SEED_002.split())
    assert code == 0
    d = json.loads(out)
    assert [x["name"] for x in d["devices"]] == ["CUDA1", "CUDA0"]  # -dev order
    assert d["n_rs_seq"] == 2 and d["n_parallel"] == 2 and d["kv_unified"] is True
    # MTP: every checkpoint carries the draft context's whole KV of the slot
    assert d["checkpoint_bytes"] > d["recurrent_bytes_per_seq"] + 163840 * 4096
    assert sum(x["draft"] for x in d["devices"]) > 0


def test_model_after_flags(capsys) -> None:
    code, out, _ = run(capsys, "plan", "-c", "4096", "-np", "1", "llama3.1-8b", "--gpu", "3090", "--json")
    assert code == 0 and json.loads(out)["n_ctx"] == 4096


def test_growth_is_not_a_start_requirement(capsys) -> None:
    """The 32 GB field report's production config (tests/fixtures/seeds/004_d9cc8479c3afbc2e.txt)
    with 64 GB of RAM: it runs, so plan must not say 'does not fit' because 32 checkpoints x 4
    slots and the 16 GiB prompt cache could fill RAM over a long session; that is a warning."""
    argv = ["plan", "--gpu", "rtx4080super:32", "--ram", "64G", "qwen3.8-27b:ud-q4_k_xl", "--mmproj", "f16",
            "-c", "307200", "-np", "4", "-kvu", "-b", "8192", "-ub", "1024", "-ngl", "99", "--cache-ram", "16384",
            "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on", "--spec-type", "draft-mtp", "--spec-draft-n-max", "4"]
    code, out, _ = run(capsys, *argv, "--json")
    d = json.loads(out)
    h = d["host"]
    assert code == 0 and d["fits"], d["shortfalls"]
    assert h["start_total"] + h["growth"] == h["total"] and h["growth"] >= h["checkpoints"] > 0
    assert h["free_at_start"] > 0 > h["free"]
    assert any("can grow to" in w for w in d["warnings"])
    code, out, _ = run(capsys, *argv)
    assert out.splitlines()[0].startswith("fits:") and "can grow by" in out


def test_plan_refuses_what_llama_server_refuses(capsys) -> None:
    """-c 99999999999 is out of std::stoi's range: llama-server refuses to start, so plan says so
    (exit 2, one line) instead of planning 6 million GiB of KV."""
    code, out, err = run(capsys, "plan", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", "-c", "99999999999")
    assert code == 2 and "out of range" in err and "std::stoi" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("own", [["--json"], [], ["--gpu", "rtx3090", "--ram", "16G", "--json"]])
def test_dashdash_command_after_an_own_option(capsys, synth_model, own: list[str]) -> None:
    """`plan [OPTIONS] -- llama-server -m M ...` with any options before `--`, or none: the
    command after --, not `llama-server` as the model."""
    path = synth_model("llama")
    code, out, err = run(capsys, "plan", *own, "--", "llama-server", "-m", str(path), "-c", "4096",
                         "--host", "127.0.0.1")
    assert code == 0, err
    if "--json" in own:
        assert json.loads(out)["model"] == str(path)
    else:
        assert out.splitlines()[0].startswith("fits:") and str(path) in out


def test_estimated_file_sizes_are_labelled_and_ranged(capsys) -> None:
    """A catalogue size from bits per weight is an estimate (+-6 %: the UD-Q4_K_XL estimate of
    Qwen3.8-27B was 4.8 % below the published file), so its weights are 'estimated' and the verdict
    gives the free range; a published byte count is exact."""
    code, out, _ = run(capsys, "plan", "qwen3.6-27b:q4_k_m", "--gpu", "rtx3090", "-c", "65536", "--json")
    dev = json.loads(out)["devices"][0]
    assert dev["formulas"]["weights"]["method"] == "estimated" and dev["formulas"]["weights"]["spread"] == 0.06
    lo, hi = dev["free_range"]
    assert lo < dev["free"] < hi
    code, out, _ = run(capsys, "plan", "qwen3.6-27b:q4_k_m", "--gpu", "rtx3090", "-c", "65536")
    assert "GiB free" in out.splitlines()[0]
    assert out.splitlines()[1] == "free is a range: the file size is an estimate"
    code, out, _ = run(capsys, "plan", "qwen3.8-27b:ud-q4_k_xl", "--gpu", "rtx3090", "-c", "65536", "--json")
    d = json.loads(out)
    w = d["devices"][0]["formulas"]["weights"]
    # a published total, split modelled: no range from the weights; the compute buffer of a qwen35
    # model wholly on one CUDA GPU is replayed through the scheduler (exact): no range at all
    assert w["method"] == "modelled" and "spread" not in w
    c = d["devices"][0]["formulas"]["compute"]
    assert c["method"] == "exact" and "spread" not in c and d["devices"][0]["free_range"] is None
    # a compute buffer that is modelled on a GPU carries the +-15 % GPU spread
    code, out, _ = run(capsys, "plan", "mistral-small-24b:q8_0", "--gpu", "rtx3090", "-c", "4096", "--json")
    dm = json.loads(out)["devices"][0]
    lo, hi = dm["free_range"]
    assert dm["formulas"]["compute"]["spread"] == 0.15 and hi - lo >= 2 * int(dm["compute"] * 0.15)
    loaded = sum(x["weights"] for x in d["devices"]) + d["host"]["weights"]
    assert 0.95 * 17559178144 < loaded <= 17559178144 * 1.001  # the MTP block is not loaded without draft-mtp


SEED_SCRIPT = "tests/fixtures/seeds/000_run105k.sh"  # verbatim from the RTX 3090 field report, `#` restored


def test_from_script_plans_what_llama_server_receives(capsys) -> None:
    """The RTX 3090 field report's script: a comment line cuts its `\\` continuation at line 10,
    so llama-server runs with 4 slots and f16 KV, not the meant -np 1 and q2_K; plan prices what
    runs, says so first, and names what the meant command would change. explain's KV figure
    for what runs is the same number (one model of what runs)."""
    code, out, _ = run(capsys, "plan", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", "--from-script", SEED_SCRIPT,
                       "--json")
    plan = json.loads(out)
    assert code == 0 and plan["n_parallel"] == 4 and plan["cache_type_k"] == "f16" and plan["kv_unified"]
    assert plan["notes"][0].startswith(f"planned: {SEED_SCRIPT} line 5, the command llama-server receives")
    codes = [d["code"] for d in plan["diagnostics"]]
    assert codes[0] == "script-command" and "script-cut" in codes
    (cut,) = [w for w in plan["warnings"] if "the script meant more" in w]
    assert "cut off at line 10" in cut and "q2_K" in cut
    code, out, _ = run(capsys, "explain", "--bundled", "--json", "--model", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090",
                       SEED_SCRIPT)
    runs = json.loads(out)["invocations"][0]["runs"]
    assert runs["n_parallel"] == 4 and runs["kv_bytes"] == sum(d["kv"] for d in plan["devices"]) + plan["host"]["kv"]


def test_from_script_human_view_opens_with_the_verdict(capsys) -> None:
    code, out, _ = run(capsys, "plan", "qwen3.6-27b:iq4_nl", "--gpu", "rtx3090", "--from-script", SEED_SCRIPT)
    assert code == 0 and out.startswith("fits: CUDA0")
    flat = " ".join(out.split())
    assert "the command llama-server receives" in flat and "cut off at line 10" in flat


@pytest.mark.parametrize("args, needle", [
    (["--from-script", "tests/fixtures/pasted/seed000_105k.pasted.sh"], "receives no model"),
    (["--from-script", "tests/fixtures/pasted/seed000_fastllm.pasted.sh"], "is FastLLM, not llama-server; plan its "
     "llama-server equivalent: llamarig plan --gpu ... -- llama-server -m qwen3.6-27b:iq4_nl -ngl all -sm layer "
     "-ts 22,22,20 -np 8"),
    (["--from-script", SEED_SCRIPT, "--invocation", "3"], "no llama-server command number 3"),
    (["--from-script", SEED_SCRIPT, "--invocation", "x"], "--invocation x"),
    (["--from-script", SEED_SCRIPT, "--", "llama-server", "-c", "1"], "not both"),
])
def test_from_script_bad_input_is_one_line_exit_2(capsys, args: list[str], needle: str) -> None:
    code, out, err = run(capsys, "plan", "qwen3.6-27b:iq4_nl", *args)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and not out


def test_script_deployment_in_the_library() -> None:
    import llamarig

    d = llamarig.script_deployment(SEED_SCRIPT, model="qwen3.6-27b:iq4_nl",
                                   hardware=llamarig.machine([llamarig.gpu("rtx3090")]))
    assert [x.code for x in d.diagnostics][:1] == ["script-command"] and "script-cut" in [x.code for x in d.diagnostics]
    assert d.config.n_parallel == -1 and d.config.cache_type_k == "f16"  # -np unset: auto, 4 slots
    assert llamarig.plan_command(d).fits
