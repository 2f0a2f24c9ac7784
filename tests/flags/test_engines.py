"""Other engines' commands (llamarig.flags.engines): named, FastLLM's flags checked against
FastLLM's own parser at the pinned release, translated into llama-server's; the RTX 3090 field
report's FastLLM plan as the chat pasted it (tests/fixtures/pasted)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from llamarig.app.check import check, fix
from llamarig.flags.engines.fastllm import RELEASE, fastllm_parser
from llamarig.flags.readers import parse_text
from llamarig.flags.reading import read_script
from llamarig.flags.schema import load_bundled
from llamarig.testing.plans import gpus_of

ROOT = Path(__file__).resolve().parents[2]
PASTED = ROOT / "tests" / "fixtures" / "pasted"
DATA = ROOT / "src" / "llamarig" / "data" / "engines" / f"fastllm-{RELEASE}.json"
SCHEMA = load_bundled()


def _check(text: str, **kw: object):
    return check(text, schema=SCHEMA, cores=6, **kw)  # type: ignore[arg-type]


def test_fastllm_options_are_data_with_their_source() -> None:
    doc = json.loads(DATA.read_text(encoding="utf-8"))
    assert doc["release"] == "v0.1.7.1" and re.fullmatch(r"[0-9a-f]{40}", doc["commit"])
    assert doc["repository"] == "https://github.com/ztxz16/fastllm"
    for o in doc["options"]:
        assert re.fullmatch(r"tools/fastllm_pytools/util\.py:\d+ \((make_normal_parser|add_server_args)\)", o["where"])
    names = {n for o in doc["options"] for n in o["names"]}
    assert {"--device", "--max_batch", "--dtype", "--gpu_mem_ratio", "--kv_cache_dtype", "--tokens", "--tp"} <= names


@pytest.mark.parametrize("flag", ["--tensor-parallel-size", "--cache-mode", "--max-batch-size", "--max-seq-len",
                                  "--quantization", "--gpu-memory-utilization", "--num-workers",
                                  "--fast-communication", "--cache-split", "--cache-prefix"])
def test_the_reports_fastllm_options_do_not_exist(flag: str) -> None:
    """Every FastLLM option of the report's plan but --device, checked against the parser of the
    pinned release (none of them is an option string, nor a prefix argparse would accept)."""
    opt, _inline, problem = fastllm_parser().lookup(flag)
    assert opt is None and problem.startswith("unrecognized arguments")


def test_argparse_rules() -> None:
    p = fastllm_parser()
    assert p.lookup("--device")[0] is not None
    assert p.lookup("--max_batch=8")[0] is not None and p.lookup("--max_batch=8")[1] == "8"
    assert p.lookup("--max_b")[0] is not None  # a unique prefix (allow_abbrev)
    opt, _v, problem = p.lookup("--cache")  # cache_history, cache_fast, cache_dir
    assert opt is None and problem.startswith("ambiguous option")
    assert p.lookup("--prefix-cache")[0] is not None  # FastLLM's one hyphenated alias


@pytest.mark.parametrize("name", ["seed000_fastllm.pasted.sh", "seed000_fastllm.hash.sh",
                                  "seed000_fastllm.repaired.sh"])
def test_fastllm_plan_named_linted_translated(name: str) -> None:
    rep = _check((PASTED / name).read_text(encoding="utf-8"))
    rules = {f.rule for f in rep.findings}
    assert "engine" in rules and "no-invocation" not in rules
    assert not rep.parsed.invocations  # never read as llama-server
    unknown = {f.flag: f.line for f in rep.findings if f.rule == "engine-unknown-flag"}
    assert unknown == {"--tensor-parallel-size": 9, "--cache-mode": 10, "--max-batch-size": 11, "--max-seq-len": 12,
                       "--quantization": 13, "--gpu-memory-utilization": 14}
    fixes = {f.flag: f.fix for f in rep.findings if f.rule == "engine-unknown-flag"}
    assert fixes["--max-batch-size"] == "write `--max_batch 8`" and fixes["--quantization"] == "write `--dtype int8`"
    (tr,) = [f for f in rep.findings if f.rule == "engine-translation"]
    assert "-sm layer -ts 22,22,20" in tr.message and "-np 8" in tr.message and "-c 32768" in tr.message
    assert "--batch-size" not in tr.message  # 8 concurrent requests, not an 8-token batch


def test_backslash_comment_breaks_the_repaired_command() -> None:
    """`\\ # comment`: the backslash escapes a blank, the comment's words are arguments and the
    line ends the command, even with every continuation repaired."""
    text = (PASTED / "seed000_fastllm.repaired.sh").read_text(encoding="utf-8")
    r = read_script(text)
    assert [n.line for n in r.line_notes if n.kind == "comment-after-backslash"] == [8, 9, 10]
    # as bash reads it: ftllm gets ` #` and the comment's words, and line 9 on never reach it
    raw = parse_text(text).others[0]
    assert [w.text for w in raw.args][-2:] == [" #", "核心分层配置"] and raw.orphans
    # as meant: one FastLLM command with every option
    (meant,) = r.others
    assert meant.engine == "fastllm" and [w.text for w in meant.args][-2:] == ["--gpu-memory-utilization", "0.85"]


def test_fastllm_fix_is_fastllm_and_checks_clean(tmp_path: Path) -> None:
    rep = _check((PASTED / "seed000_fastllm.pasted.sh").read_text(encoding="utf-8"))
    fixed = fix(rep).text
    script = tmp_path / "fixed.sh"
    script.write_text(fixed, encoding="utf-8")
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    code = re.sub(r"(?m)^\s*#.*$", "", fixed)
    assert "ftllm server Qwen/Qwen3.6-27B-INT8" in code and "--max_batch 8" in code and "--dtype int8" in code
    assert "llama-server" not in code  # the equivalent is a comment, never a command without a model
    assert "#   llama-server -m MODEL.gguf -ngl all -sm layer -ts 22,22,20 -np 8 -c 32768 -kvu" in fixed
    again = _check(fixed)
    assert not again.errors and not again.parsed.invocations and len(again.parsed.others) == 1


def test_translation_planned_on_the_given_gpus() -> None:
    rep = _check((PASTED / "seed000_fastllm.repaired.sh").read_text(encoding="utf-8"),
                 gpus=gpus_of(["rtx5070ti", "rtx5060ti16", "rtx4060ti16"]), model="qwen3.6-27b:q8_0")
    (mem,) = [f for f in rep.findings if f.rule == "memory"]
    assert mem.message.startswith("memory plan (llamarig plan): fits") and mem.message.count("GiB needed") == 3


@pytest.mark.parametrize("command,engine", [
    ("vllm serve Qwen/Qwen3-8B --max-model-len 8192", "vLLM"),
    ("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B", "vLLM"),
    ("python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --port 30000", "SGLang"),
    ("ollama serve", "Ollama"),
    ("ollama run qwen3:8b", "Ollama"),
    ("lms server start --port 1234", "LM Studio"),
    ("lms load qwen3-8b --gpu max", "LM Studio"),
])
def test_other_engines_are_named(command: str, engine: str) -> None:
    rep = _check(command + "\n")
    (f,) = rep.findings
    assert f.rule == "engine" and f"starts {engine} (" in f.message and not rep.errors


def test_ollama_modelfile_named_with_its_flags() -> None:
    rep = _check("FROM ./qwen3-8b-q4_k_m.gguf\nPARAMETER num_ctx 16384\nPARAMETER temperature 0.7\n")
    (f,) = rep.findings
    assert f.rule == "engine" and "`llama-server -m ./qwen3-8b-q4_k_m.gguf -c 16384 --temp 0.7`" in f.message
