"""llama-server's own --models-preset INI file, read as common/preset.cpp reads it (llamarig.flags.
readers.ini, llamarig.flags.preset), and checked against what the real router does with it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llamarig.flags.readers import detect_kind, parse_text
from llamarig.flags.rules import Context, lint
from llamarig.flags.schema import load_bundled

SCHEMA = load_bundled()
HERE = Path(__file__).parent
README = (HERE / "fixtures" / "corpus" / "models-preset-readme.ini").read_text(encoding="utf-8")


def argvs(text: str) -> list[tuple[str, list[str]]]:
    p = parse_text(text)
    lint(p, SCHEMA, Context(physical_cores=8))  # the argv is made with the build's options
    return [(inv.label, inv.argv[1:]) for inv in p.invocations]


def test_readme_example() -> None:
    """tools/server/README.md "Model presets" (llama.cpp@11434, lines 1918-1946): [*] first, the
    preset's own keys win, `c` and LLAMA_ARG_CACHE_RAM are spellings, `jinja = true` a flag,
    `model-draft` twice keeps the last; `version` is skipped and makes no preset."""
    assert detect_kind(README) == "ini"
    assert argvs(README) == [
        ("[ggml-org/MY-MODEL-GGUF:Q8_0]", ["--chat-template", "chatml", "--n-gpu-layers", "123", "--jinja", "-c",
                                           "4096", "--cache-ram", "0", "--model-draft",
                                           "/Users/abc/my-models/draft.gguf"]),
        ("[custom_model]", ["-c", "8192", "--n-gpu-layers", "8", "--model", "/Users/abc/my-awesome-model-Q4_K_M.gguf"]),
    ]


def test_values_flags_and_file_errors() -> None:
    text = ("[m]\nmodel = /m/a.gguf   ; a comment\napi-key = abc#123\nno-warmup = true\nkv-unified = off\n"
            "jinja = 0\nload-on-startup = true\n-c = 1\n[m]\nport = 1\n")
    p = parse_text(text)
    _, fs = lint(p, SCHEMA, Context(physical_cores=8))
    assert p.invocations[0].argv[1:] == ["--port", "1"]  # [m] written again: started over
    kinds = {(f.rule, f.line) for f in fs}
    assert ("shell-syntax", 8) in kinds  # `-c = 1` is not a key: the router refuses the file
    assert ("preset-section-again", 9) in kinds
    assert ("value-truncated", 3) in kinds  # `abc#123` is read `abc`
    p = parse_text(text.replace("-c = 1\n[m]\nport = 1\n", ""))
    lint(p, SCHEMA, Context(physical_cores=8))
    # false: the negative spelling (`jinja = 0` is --no-jinja); load-on-startup is the router's own
    assert p.invocations[0].argv[1:] == ["--model", "/m/a.gguf", "--api-key", "abc", "--no-warmup",
                                         "--no-kv-unified", "--no-jinja"]


CASES = [
    ("[m1]\nmodel = /nonexistent/a.gguf\nc = 4096\njinja = true\nno-warmup = true\nLLAMA_ARG_CACHE_RAM = 0\n", False),
    ("[*]\nc = 4096\n[m1]\nmodel = /nonexistent/a.gguf\nctx-size-draft = 4096\n", True),  # removed flag
    ("[m1]\nmodel = /nonexistent/a.gguf\nflash-attn\n", True),  # not key = value
    ("[m1]\nmodel = /nonexistent/a.gguf\nno-mmap = true\n", True),  # --no-mmap is gone in 11434
    ("[m1]\nmodel = /nonexistent/a.gguf\nn-gpu-layer = 99\n", True),  # misspelt
    (README, False),
]


@pytest.mark.server
@pytest.mark.parametrize(("text", "refused"), CASES)
def test_router_refuses_exactly_what_check_reports(text: str, refused: bool, server_bin: Path,
                                                   tmp_path: Path) -> None:
    """The real llama-server in router mode (`--models-preset FILE`): it exits with "failed to
    initialize router models" for exactly the files llamarig reports an error in; a file it
    accepts keeps it running (stopped by the timeout)."""
    f = tmp_path / "presets.ini"
    f.write_text(text)
    try:
        p = subprocess.run([str(server_bin), "--models-preset", str(f), "--port", "0", "--offline"],
                           capture_output=True, text=True, timeout=6, errors="replace", stdin=subprocess.DEVNULL,
                           cwd=tmp_path)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired:  # subprocess.run killed it: it was serving
        out, rc = "", None
    assert (rc is not None and "failed to initialize router models" in out) == refused, out[-600:]
    parsed = parse_text(f.read_text(), origin=f)
    _, fs = lint(parsed, SCHEMA, Context(physical_cores=8))
    errors = [f for f in fs if f.severity.value == "error"]
    assert bool(errors) == refused, [(x.rule, x.line, x.message[:80]) for x in errors]


def test_a_script_naming_a_preset_file_next_to_it(tmp_path: Path) -> None:
    """`llama-server --models-preset models.ini` in a script: the file next to the script is read
    too, its presets checked on its own lines; --fix leaves it alone."""
    from llamarig.flags.fix import fix_text

    (tmp_path / "models.ini").write_text("[*]\nc = 4096\n\n[m1]\nmodel = /m/a.gguf\nctx-size-draft = 4096\n")
    script = tmp_path / "run.sh"
    text = "llama-server --models-preset models.ini --port 8080\n"
    script.write_text(text)
    p = parse_text(text, origin=script)
    readings, fs = lint(p, SCHEMA, Context(physical_cores=8))
    assert [inv.label for inv in p.invocations] == ["", "[m1] in models.ini (--models-preset on line 1)"]
    assert p.invocations[1].argv[1:] == ["-c", "4096", "--model", "/m/a.gguf", "--ctx-size-draft", "4096"]
    assert [(f.rule, f.line, f.invocation) for f in fs if f.severity.value == "error"] == [("unknown-flag", 6, 1)]
    fixed = fix_text(p, readings, fs, SCHEMA)
    assert "--models-preset models.ini" in fixed and "ctx-size" not in fixed  # the INI is not written here
    assert len(parse_text(text).invocations) == 1  # without the script's path: not looked for
