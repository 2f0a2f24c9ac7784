"""The field reports (tests/fixtures/seeds) as fixtures. The scripts of the RTX 3090 field report
(tests/fixtures/seeds/000_3d5d35932c1dd60e.txt) are in tests/flags/fixtures/seed000_*.sh as the
user had them (the chat rendering ate the `#` of the comment lines and some trailing
backslashes); seed002.sh is the launch of the two-GPU tensor-split report
(002_2e0f1c791d28df3e.txt), seed004.service the systemd unit of the 307K-context MTP report
(004_d9cc8479c3afbc2e.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamarig.flags.fix import fix_text
from llamarig.flags.readers import parse_text
from llamarig.flags.rules import Context, lint
from llamarig.flags.schema import load_bundled

FIX = Path(__file__).with_name("fixtures")
SCHEMA = load_bundled()


def check(name: str, cores: int | None = 6):
    text = (FIX / name).read_text(encoding="utf-8")
    parsed = parse_text(text)
    readings, findings = lint(parsed, SCHEMA, Context(physical_cores=cores))
    return parsed, readings, findings


def flagged(findings, flag: str, rule: str | None = None) -> bool:
    return any(f.flag == flag and (rule is None or f.rule == rule) for f in findings)


def test_seed_texts_contain_the_fixture_scripts(seeds_dir: Path) -> None:
    seed = (seeds_dir / "000_3d5d35932c1dd60e.txt").read_text(encoding="utf-8")
    for frag in ("--max-slots 8", "--slot-reclaim-timeout 2700", "--memory-usage high", "--low-vram off",
                 "--no-penalty-off", "--prompt-cache-full", "--no-check-tensors", "--max-batch-size 8192",
                 "--cache-type-k q2_K", "--metrics on", "--cache-reuse 105000", "--log_file",
                 "killall llama3-server", "LLAMA_SET_ROWS=0", "批处理拉满，3090算力最大化"):
        assert frag in seed, frag


def test_seed000_user_final_every_folklore_flag_reported() -> None:
    parsed, _, fs = check("seed000_user_final.sh")
    for flag in ("--max-slots", "--slot-reclaim-timeout", "--memory-usage", "--low-vram", "--no-penalty-off",
                 "--prompt-cache-full", "--no-check-tensors", "--max-batch-size"):
        assert flagged(fs, flag, "unknown-flag"), flag
    assert flagged(fs, "--cache-type-k", "invalid-value") and flagged(fs, "--cache-type-v", "invalid-value")
    assert flagged(fs, "--metrics", "flag-takes-no-value")
    assert flagged(fs, "--cache-reuse", "cache-reuse-mmproj")
    assert flagged(fs, "--log_file", "underscore-spelling")
    assert flagged(fs, "--host", "public-no-api-key")
    assert flagged(fs, "LLAMA_SET_ROWS", "dead-env-var")
    assert any(f.rule == "kill-by-name" and f.line == 2 for f in fs)
    max_slots = next(f for f in fs if f.flag == "--max-slots")
    assert "--parallel" in max_slots.message and max_slots.line == 23 and not max_slots.passed


def test_seed000_cut_off_continuation_found_at_the_right_line() -> None:
    parsed, _, fs = check("seed000_optimized.sh")
    inv = parsed.invocations[0]
    assert inv.line == 5 and inv.cut_line == 10
    assert inv.argv[:3] == ["./llama3-server", "-m", "/data/models/Qwen3.6-27B-Omnimerge-v4-IQ4_NLmanni.gguf"]
    assert inv.argv[-2:] == ["-n", "-1"]
    assert inv.orphans[0].text == "--batch-size" and inv.orphans[0].line == 11
    cut = [f for f in fs if f.rule == "continuation-broken"]
    assert len(cut) == 1 and cut[0].line == 10 and "comment" in cut[0].message
    orphan_lines = sorted(f.line for f in fs if f.rule == "orphan-flags")
    assert orphan_lines == [11, 13, 15, 17, 19, 21, 23, 25]
    assert inv.background  # the trailing & ends up on the last orphan
    assert flagged(fs, "--cache-reuse", "cache-reuse-mmproj")
    assert flagged(fs, "--cache-type-k", "invalid-value")


def test_seed000_105k_cache_reuse_and_extras() -> None:
    _, _, fs = check("seed000_105k.sh")
    assert any(f.rule == "cache-reuse-ge-ctx" and f.flag == "--cache-reuse" for f in fs)
    # "追加参数" fragments: flags with no command in front are checked as llama-server flags
    parsed, _, fs2 = check("seed000_extras.sh")
    assert parsed.invocations and all(inv.source == "fragment" for inv in parsed.invocations)
    for flag in ("--low-vram", "--no-penalty-off", "--prompt-cache-full", "--memory-usage",
                 "--max-batch-size", "--no-check-tensors"):
        assert flagged(fs2, flag, "unknown-flag"), flag


def test_seed000_original_no_mmap_and_threads() -> None:
    _, _, fs = check("seed000_original.sh", cores=6)
    assert flagged(fs, "--no-mmap", "unknown-flag")
    f = next(f for f in fs if f.flag == "--no-mmap")
    assert "--load-mode" in f.message
    assert not any(f.rule == "continuation-broken" for f in fs)


def test_seed002_and_004_read_correctly() -> None:
    parsed, _, fs = check("seed002.sh")
    assert len(parsed.invocations) == 1 and len(parsed.invocations[0].args) > 50
    assert not [f for f in fs if f.severity == "error"]
    assert flagged(fs, "--cache-reuse", "cache-reuse-mmproj")
    assert flagged(fs, "--host", "public-no-api-key")
    parsed, _, fs = check("seed004.service")
    assert parsed.kind == "systemd" and parsed.invocations[0].program.endswith("llama-server")
    assert parsed.invocations[0].line == 8
    assert not [f for f in fs if f.severity == "error"]
    assert not flagged(fs, "--host", "public-no-api-key")


def test_fix_output_has_no_errors_and_keeps_intent() -> None:
    for name in ("seed000_user_final.sh", "seed000_optimized.sh", "seed000_105k.sh", "seed000_original.sh"):
        parsed, readings, fs = check(name)
        fixed = fix_text(parsed, readings, fs, SCHEMA)
        p2 = parse_text(fixed)
        _, fs2 = lint(p2, SCHEMA, Context(physical_cores=6))
        assert not [f for f in fs2 if f.severity == "error"], (name, [f.message for f in fs2 if f.severity == "error"])
        assert len(p2.invocations) == 1
        argv = p2.invocations[0].argv
        assert "--batch-size" in argv and "--ctx-size" in argv and "-fa" in argv
        if name != "seed000_original.sh":
            assert "# 批处理" in fixed  # the user's own comments are kept, above the command
        assert "LLAMA_SET_ROWS=0 ./llama3-server" not in fixed
        assert not any(a.startswith("--max-slots") for a in argv)


@pytest.mark.server
def test_fixed_seed_starts_real_server(synth_model, llama_server, tmp_path: Path) -> None:
    """The --fix output of the RTX 3090 report's last script is accepted by the real llama-server: it
    starts with a tiny synthetic llama model in place of -m, without --mmproj, on loopback."""
    parsed, readings, fs = check("seed000_user_final.sh")
    fixed = fix_text(parsed, readings, fs, SCHEMA)
    inv = parse_text(fixed).invocations[0]
    args: list[str] = []
    words = [w.text for w in inv.args]
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-m", "--model", "--mmproj", "--host", "--port"):
            i += 2
            continue
        if w in ("--threads", "--threads-batch", "-t", "-tb"):
            args += [w, "2"]
            i += 2
            continue
        if w == "--log-file":
            args += [w, str(tmp_path / "server.log")]
            i += 2
            continue
        args.append(w)
        i += 1
    # head_dim 32: quantized K with flash attention needs head dims divisible by 32
    model = synth_model("llama", n_embd=128, n_head=4, n_head_kv=2, head_dim=32)
    srv = llama_server(model, *args)
    props = srv.get("/props")
    assert props is not None


@pytest.mark.parametrize("name", ["seed000_optimized.sh", "seed000_user_final.sh", "seed000_105k.sh",
                                  "seed000_original.sh", "seed002.sh", "seed004.service"])
def test_fix_is_idempotent(name: str) -> None:
    def fixed(text: str) -> str:
        p = parse_text(text)
        readings, fs = lint(p, SCHEMA, Context(physical_cores=6))
        return fix_text(p, readings, fs, SCHEMA)

    once = fixed((FIX / name).read_text(encoding="utf-8"))
    assert fixed(once) == once
