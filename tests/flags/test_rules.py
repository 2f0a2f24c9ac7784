"""Each rule on a minimal command; model-aware rules with synthetic GGUFs; load-time rules
checked against what the real llama-server does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llamarig.catalogue.gpus import find_gpu
from llamarig.flags.readers import parse_text
from llamarig.flags.rules import Context, lint
from llamarig.flags.schema import load_bundled
from llamarig.hardware.types import GPU

SCHEMA = load_bundled()


def rules_of(cmd: str, ctx: Context | None = None, loader=None) -> dict[str, list]:
    _, fs = lint(parse_text(cmd), SCHEMA, ctx or Context(physical_cores=8), loader)
    out: dict[str, list] = {}
    for f in fs:
        out.setdefault(f.rule, []).append(f)
    return out


def test_unknown_flag_closest_and_folklore() -> None:
    r = rules_of("llama-server -m m.gguf --ctx-sise 4096 --max-slots 4 --frobnicate")
    u = {f.flag: f for f in r["unknown-flag"]}
    assert "--ctx-size" in u["--ctx-sise"].message and u["--ctx-sise"].fix == "did you mean `--ctx-size`?"
    assert "--parallel" in u["--max-slots"].message and u["--max-slots"].fix == "replace with `--parallel 4`"
    assert u["--frobnicate"].fix == "remove it"
    assert "stray-argument" not in r  # the folklore value 4 is its value, not a stray word


def test_values() -> None:
    r = rules_of("llama-server -ctk q2_K -ctv Q8_0 -fit auto -sm rows -np 0 --reasoning-budget -2 -c 32k --temp hot")
    bad = {f.flag: f for f in r["invalid-value"]}
    assert bad["-ctk"].fix == "use `-ctk q4_0`" and bad["-ctv"].fix == "use `-ctv q8_0`"
    assert {"-fit", "-sm", "-np", "--reasoning-budget", "--temp"} <= set(bad)
    assert bad["-sm"].fix == "use `-sm row`"
    t = r["value-truncated"][0]
    assert t.flag == "-c" and "32768" in t.fix


def test_flag_value_and_missing_value() -> None:
    r = rules_of("llama-server --metrics on --jinja -fa -ngl 99 --port")
    assert r["flag-takes-no-value"][0].flag == "--metrics"
    mv = {f.flag for f in r["missing-value"]}
    assert mv == {"-fa", "--port"}
    assert "stray-argument" not in r  # -ngl 99 is read normally after -fa


def test_equals_removed_deprecated_duplicates() -> None:
    r = rules_of("llama-server --ctx-size=8192 --draft-max 8 -dt 0.1 -c 1024 -c 2048 --lora a --lora b "
                 "--log_file x.log")
    assert r["equals-syntax"][0].fix == "write `--ctx-size 8192`"
    assert "--spec-draft-n-max" in r["removed-flag"][0].fix
    assert r["deprecated-flag"][0].flag == "-dt"
    dup = r["duplicate-flag"]
    assert any(f.severity == "warning" and "`-c 2048`" in f.message for f in dup)
    assert any(f.severity == "info" and "appends" in f.message for f in dup)
    assert r["underscore-spelling"][0].fix == "write `--log-file`"


def test_combinations() -> None:
    r = rules_of("llama-server -m m.gguf --mmproj p.gguf --cache-reuse 256 -ctv q8_0 -fa off -b 512 -ub 1024 "
                 "-c 40000 -np 4 --cache-ram 0 --cache-idle-slots -sm tensor -ngl 99 -t 16 -ctk iq4_nl")
    assert "cache-reuse-mmproj" in r and "quantized-v-fa-off" in r and "ubatch-gt-batch" in r
    assert "cache-idle-slots-no-ram" in r and "split-tensor-fa-off" in r and "threads-above-cores" in r
    per = r["per-slot-ctx"][0]
    assert per.severity == "warning" and "10240 tokens" in per.message
    assert "ctx-padded" in r
    r = rules_of("llama-server -m m.gguf -c 8192 --cache-reuse 8192 -ctk iq4_nl -ctv iq4_nl -fa on")
    assert "cache-reuse-ge-ctx" in r and "kv-type-no-cuda-fa" in r
    r = rules_of("llama-server -m m.gguf -ctk q8_0 -ctv q4_0 -fa on --spec-type draft-mtp")
    assert "kv-pair-no-vec-kernel" in r and "mtp-draft-kv-f16" in r
    r = rules_of("llama-server -m m.gguf -c 65536 -np 4 --kv-unified")
    assert "per-slot-ctx" not in r


def test_env_and_safety() -> None:
    r = rules_of("LLAMA_SET_ROWS=0 LLAMA_ARG_CTX_SIZ=1 LLAMA_ARG_CTX_SIZE=2 GGML_CUDA_FORCE_MMQ=1 "
                 "LLAMA_FOO=1 GGML_CUDA_NO_PINNED=1 llama-server -c 4096 --host 0.0.0.0\n"
                 "pkill -f llama-server\n")
    assert {f.flag for f in r["dead-env-var"]} == {"LLAMA_SET_ROWS", "GGML_CUDA_FORCE_MMQ", "LLAMA_FOO"}
    assert "LLAMA_ARG_CTX_SIZE" in r["unknown-env-var"][0].message
    assert r["env-overridden"][0].flag == "LLAMA_ARG_CTX_SIZE"
    assert r["public-no-api-key"][0].flag == "--host"
    assert r["kill-by-name"][0].line == 2
    r = rules_of("llama-server --host 0.0.0.0 --api-key-file keys.txt")
    assert "public-no-api-key" not in r
    r = rules_of("llama-server --host 192.168.1.5 --tools all")
    assert r["public-tools"][0].severity == "error"


def _loader(path: Path):
    from llamarig.gguf.spec import load_spec

    spec = load_spec(path)

    def load(inv, ctx):
        from dataclasses import replace

        return replace(ctx, model_spec=spec)

    return load


def test_model_rules(synth_model) -> None:
    model = synth_model("llama", n_embd=128, n_head=4, n_head_kv=2, head_dim=32)  # n_ctx_train 4096
    r = rules_of(f"llama-server -m {model} --spec-type draft-mtp -c 16384 -np 1", loader=_loader(model))
    assert r["mtp-without-nextn"][0].severity == "error"
    above = r["slot-ctx-above-train"][0]
    assert "16384 > the model's training context 4096" in above.message
    r = rules_of(f"llama-server -m {model} -c 8192 -np 2", loader=_loader(model))
    assert "slot-ctx-above-train" not in r


def test_truncated_gguf_is_one_finding(synth_model, tmp_path: Path) -> None:
    """A -m GGUF that exists but cannot be read (a download cut short) is reported once, with
    the path and the reader's error, instead of the model rules going silent."""
    from llamarig.flags.model import model_loader

    whole = synth_model("llama", n_embd=128, n_head=4, n_head_kv=2, head_dim=32).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:200])
    cmd = f"llama-server -m {cut} --spec-type draft-mtp -c 16384 -np 1"
    r = rules_of(cmd, loader=model_loader(None, None))
    [f] = r["model-unreadable"]
    assert f.severity == "warning" and f.flag == "-m" and f.line == 1
    assert str(cut) in f.message and "truncated header" in f.message
    assert "mtp-without-nextn" not in r and "slot-ctx-above-train" not in r
    # the same file given to llamarig (`check --model`): the same finding, on the command's line
    r = rules_of("llama-server -c 4096", loader=model_loader(str(cut), None))
    assert [f.flag for f in r["model-unreadable"]] == [None]
    # a readable model gives none
    assert "model-unreadable" not in rules_of(cmd.replace(str(cut), str(synth_model("llama", n_embd=128, n_head=4, n_head_kv=2, head_dim=32))),
                                              loader=model_loader(None, None))


@pytest.mark.server
@pytest.mark.parametrize(("args", "log"), [
    (["--spec-type", "draft-mtp"], "context type MTP requested but model doesn't contain MTP layers"),
    (["-ctv", "q4_0", "-fa", "off"], "quantized V cache requires flash_attn to be enabled"),
])
def test_load_time_rules_match_real_server(server_bin: Path, synth_model, args, log) -> None:
    """The load-time errors llamarig predicts are what the real server prints (and it exits)."""
    model = synth_model("llama", n_embd=128, n_head=4, n_head_kv=2, head_dim=32)
    p = subprocess.run([str(server_bin), "-m", str(model), "-t", "1", "--port", "0", "--fit", "off", *args],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and log in p.stdout + p.stderr
    r = rules_of(f"llama-server -m {model} " + " ".join(args), loader=_loader(model))
    assert any(f.severity == "error" for fs in r.values() for f in fs)


@pytest.mark.server
def test_per_slot_context_matches_server_log(server_bin: Path, synth_model) -> None:
    model = synth_model("llama", n_embd=128, n_head=4, n_head_kv=2, head_dim=32)
    p = subprocess.Popen([str(server_bin), "-m", str(model), "-t", "1", "--port", "0", "-c", "3000", "-np", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = ""
        assert p.stdout is not None
        for line in p.stdout:
            out += line
            if "n_ctx_slot" in line or "error" in line.lower():
                break
    finally:
        p.kill()
        p.wait()
    # GGML_PAD(3000/3, 256) = 1024 per slot (src/llama-context.cpp)
    assert "n_slots = 3, n_ctx_slot = 1024" in out
    r = rules_of(f"llama-server -m {model} -c 3000 -np 3")
    assert "1024 tokens each" in r["per-slot-ctx"][0].message


def test_memory_plan_hook() -> None:
    from llamarig.plan.inputs import plan_for_check

    ctx = Context(physical_cores=8, gpus=(find_gpu("rtx3090"),), model_ref="qwen3.6-27b:iq4_nl", planner=plan_for_check)
    r = rules_of("llama-server -c 65536 -np 1 -ctk q4_0 -ctv q4_0 -fa on -ngl 99", ctx)
    mem = r["memory"][0]
    assert mem.message.startswith("memory plan (llamarig plan): fits."), mem.message
    r = rules_of("llama-server -c 65536", Context(physical_cores=8))
    assert "memory" not in r


def test_runtime_values_are_not_judged() -> None:
    r = rules_of('llama-server --port ${PORT} -c "$CTX" -t $(nproc) -ctk "$KV"')
    assert "invalid-value" not in r


def test_fix_systemd_environment_and_llama_swap() -> None:
    from llamarig.flags.fix import fix_text

    unit = "[Service]\nEnvironment=A=1 LLAMA_SET_ROWS=0\nExecStart=/opt/llama-server -m a.gguf --metrics on\n"
    p = parse_text(unit)
    readings, fs = lint(p, SCHEMA, Context(physical_cores=8))
    fixed = fix_text(p, readings, fs, SCHEMA)
    assert "Environment=A=1" in fixed and "LLAMA_SET_ROWS=0\n" not in fixed.split("# llamarig: was")[0]
    p2 = parse_text(fixed)
    assert p2.kind == "systemd" and p2.invocations[0].argv == ["/opt/llama-server", "-m", "a.gguf", "--metrics"]
    assert all(name != "LLAMA_SET_ROWS" for name, _, _ in p2.invocations[0].env)
    swap = "models:\n  m:\n    cmd: |\n      llama-server --port ${PORT}\n      -m q.gguf --max-slots 2\n"
    p = parse_text(swap)
    readings, fs = lint(p, SCHEMA, Context(physical_cores=8))
    fixed = fix_text(p, readings, fs, SCHEMA)
    assert "--port ${PORT}" in fixed and "--parallel 2" in fixed


def test_fix_keeps_redirections_and_background() -> None:
    from llamarig.flags.fix import fix_text

    text = "llama-server -m a.gguf \\\n# note\n  --metrics on > /tmp/s.log 2>&1 &\necho started\n"
    p = parse_text(text)
    readings, fs = lint(p, SCHEMA, Context(physical_cores=8))
    fixed = fix_text(p, readings, fs, SCHEMA)
    assert "  --metrics > /tmp/s.log 2>&1 &\necho started\n" in fixed
    p2 = parse_text(fixed)
    assert p2.invocations[0].argv == ["llama-server", "-m", "a.gguf", "--metrics"] and p2.invocations[0].background


def test_need_ctx() -> None:
    r = rules_of("llama-server -c 65536 -np 2", Context(physical_cores=8, need_ctx=40000))
    assert r["per-slot-ctx"][0].severity == "warning" and "40000" in r["per-slot-ctx"][0].message
    r = rules_of("llama-server -c 65536 -np 2", Context(physical_cores=8, need_ctx=30000))
    assert r["per-slot-ctx"][0].severity == "info"
    r = rules_of("llama-server -c 8192 -np 4 --kv-unified", Context(physical_cores=8, need_ctx=30000))
    assert r["per-slot-ctx"][0].severity == "warning" and "-c 8192" in r["per-slot-ctx"][0].message


def test_fix_keeps_quoting_and_the_surrounding_shell_text(tmp_path: Path) -> None:
    """--fix rewrites only the llama-server words: quoting as written, and what the line holds
    before the program (function wrapper, `cd ~ &&`, nohup, a container image) and after the
    command (`; }`, `&& echo`, a trailing comment, `&`) stays."""
    from llamarig.flags.fix import fix_text

    text = (
        'start() { llama-server -m "$1" --metrics on --port 8080; }\n'
        'cd ~ && nohup llama-server -m "/models/my model.gguf" --max-slots 8 -c 4096 > "/tmp/my log.txt" 2>&1 &\n'
        "llama-server -m x.gguf --port 8081 && echo ok  # trailing\n"
        "docker run --gpus all \\\n  -v /m:/models ghcr.io/ggml-org/llama.cpp:server -m /models/x.gguf --metrics on\n"
    )
    p = parse_text(text)
    readings, fs = lint(p, SCHEMA, Context(physical_cores=8))
    fixed = fix_text(p, readings, fs, SCHEMA)
    assert 'start() { llama-server \\\n  -m "$1" \\\n  --metrics \\\n  --port 8080; }\n' in fixed
    assert 'cd ~ && nohup llama-server \\\n  -m "/models/my model.gguf" \\\n' in fixed
    assert '  -c 4096 > "/tmp/my log.txt" 2>&1 &\n' in fixed
    assert "  --port 8081 && echo ok  # trailing\n" in fixed
    assert "docker run --gpus all \\\n  -v /m:/models ghcr.io/ggml-org/llama.cpp:server \\\n  -m /models/x.gguf" in fixed
    script = tmp_path / "fixed.sh"
    script.write_text(fixed)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    p2 = parse_text(fixed)
    assert [inv.argv[1:] for inv in p2.invocations] == [
        ["-m", "$1", "--metrics", "--port", "8080"],
        ["-m", "/models/my model.gguf", "--parallel", "8", "-c", "4096"],
        ["-m", "x.gguf", "--port", "8081"],
        ["-m", "/models/x.gguf", "--metrics"],
    ]
    assert p2.invocations[1].background and not p2.invocations[2].background


@pytest.mark.parametrize("redirects,expect", [
    ("", "terminal"), ("> s.log", "terminal"), ("> s.log 2>&1", None), ("2>&1 > s.log", "terminal"),
    ("&> s.log", None), ("2> err.log", None), ("> /dev/null 2>&1", "thrown away"),
])
def test_background_log_follows_stderr_redirections(redirects: str, expect: str | None) -> None:
    r = rules_of(f"llama-server -m a.gguf {redirects} &")
    if expect is None:
        assert "background-no-log" not in r
    else:
        assert expect in r["background-no-log"][0].message


def test_fix_requotes_a_word_whose_quote_never_closes() -> None:
    from llamarig.flags.fix import fix_text

    p = parse_text('llama-server -m "$1 --metrics on\n')
    readings, fs = lint(p, SCHEMA, Context(physical_cores=8))
    assert any(f.rule == "shell-syntax" for f in fs)
    fixed = fix_text(p, readings, fs, SCHEMA)
    assert subprocess.run(["bash", "-n"], input=fixed, text=True, capture_output=True).returncode == 0, fixed


def test_stoi_prefix_cites_arg_cpp_and_small_batch_aborts() -> None:
    r = rules_of("llama-server -m m.gguf --batch-size 2k")
    t = r["value-truncated"][0]
    assert "common/arg.cpp:859" in t.message and "std::stoi" in t.message and "uses 2" in t.message
    # -b 2 with the 4 auto slots: GGML_ASSERT at start (checked with the pinned binary)
    b = r["batch-below-slots"][0]
    assert b.severity == "error" and "src/llama-context.cpp:2275" in b.message and b.fix == "use `-b 2048` (the default)"
    assert "batch-below-slots" not in rules_of("llama-server -m m.gguf -b 2 -np 1")
    assert "batch-below-slots" not in rules_of("llama-server -m m.gguf -b 4")
    assert "std::stof" in rules_of("llama-server -m m.gguf --temp 0.7x")["value-truncated"][0].message


def test_json_values_split_by_the_shell() -> None:
    r = rules_of('llama-server -m m.gguf --chat-template-kwargs {"enable_thinking": false} --port 8080')
    f = r["invalid-value"][0]
    assert f.flag == "--chat-template-kwargs" and "split the unquoted JSON" in f.message
    assert f.fix == "quote it: `--chat-template-kwargs '{\"enable_thinking\": false}'`"
    assert "stray-argument" not in r  # `false}` is explained by the same finding
    assert "invalid-value" not in rules_of("llama-server -m m.gguf --chat-template-kwargs '{\"a\": 1}'")
    assert "invalid-json" in rules_of("llama-server -m m.gguf --ui-config '{bad'")
    assert rules_of("llama-server -m m.gguf -fa")["missing-value"][0].flag == "-fa"


def test_threads_rule_names_the_machine() -> None:
    text = "llama-server -m m.gguf -ngl 99 -t 12"
    _, fs = lint(parse_text(text), SCHEMA, Context(physical_cores=2, cores_source="this machine"))
    msg = next(f.message for f in fs if f.rule == "threads-above-cores")
    assert "this machine: 2 physical cores" in msg and "--cores" in msg
    _, fs = lint(parse_text(text), SCHEMA, Context(physical_cores=6, cores_source="--cores"))
    assert "--cores 6" in next(f.message for f in fs if f.rule == "threads-above-cores")


def test_duplicate_findings_stay_bounded() -> None:
    # n repeated options: O(n) output, not n findings each listing n lines
    def size(n: int) -> tuple[int, int]:
        text = "llama-server -m m.gguf \\\n" + "".join(f"  --temp 0.{i % 10} \\\n" for i in range(n)) + "  --port 1\n"
        dup = rules_of(text)["duplicate-flag"]
        return len(dup), sum(len(f.message) for f in dup)
    (n1, c1), (n2, c2) = size(1000), size(4000)
    assert n1 == n2 == 21 and c2 < c1 * 1.1
    few = rules_of("llama-server -c 1 -c 2 -c 3")["duplicate-flag"]
    assert [f.line for f in few] == [1, 1] and "lines 1, 1, 1" in few[0].message


@pytest.mark.server
def test_batch_below_slots_aborts_the_real_server(server_bin: Path, synth_model, tmp_path: Path) -> None:
    """What batch-below-slots says, with the pinned binary and a synthetic model: `-b 2k` is read
    as 2 by std::stoi, which is below the 4 auto slots, and the server aborts while starting."""
    model = synth_model("llama")
    cmd = [str(server_bin), "-m", str(model), "--batch-size", "2k", "--host", "127.0.0.1", "--port", "0"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, errors="replace", cwd=tmp_path,
                       stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and "GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)" in p.stdout + p.stderr
    r = rules_of(" ".join(cmd))
    assert "batch-below-slots" in r and "value-truncated" in r


def test_amx_rule_names_the_machine_it_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llamarig.flags import rules
    from llamarig.gguf import load_spec
    from llamarig.hardware.cpu import from_cpuinfo
    from llamarig.testing.synth import write_model

    path = write_model(tmp_path / "q8.gguf", "llama", weight_type="q8_0", n_embd=256, n_head=4, n_head_kv=2,
                       head_dim=64, n_ff=512, n_layer=2)
    monkeypatch.setattr(rules, "detect_cpu", lambda: from_cpuinfo("flags : avx2 fma f16c avx512f avx512_vnni amx_int8\n", "x86_64"))
    monkeypatch.setattr("shutil.which", lambda name: None)  # no nvidia-smi here

    def amx(argv: list[str], gpus: tuple[GPU, ...] = ()) -> list[str]:
        _, fs = lint(parse_text(" ".join(["llama-server", "-m", str(path), *argv])), SCHEMA,
                     Context(model_spec=load_spec(path), gpus=gpus))
        return [f.message for f in fs if f.rule == "amx-tile-crash"]

    msg = amx([])[0]
    assert "this machine (the one running `llamarig check`" in msg and "no nvidia-smi" in msg
    assert amx([], gpus=(find_gpu("rtx3090"),)) == []  # a target GPU: the weights do not stay on this CPU
    assert "no nvidia-smi" not in amx(["-ngl", "0"], gpus=(find_gpu("rtx3090"),))[0]
