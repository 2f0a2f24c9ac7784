"""check --fix comments are never cut: a cut comment cut a KV type name in half ('iq4_n...')."""

from __future__ import annotations

from pathlib import Path

from llamarig.flags.fix import fix_text
from llamarig.flags.readers import parse_text
from llamarig.flags.rules import lint
from llamarig.flags.schema import load_bundled

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "seed000_105k.sh"


def test_fix_comments_are_whole_and_wrapped() -> None:
    schema = load_bundled()
    parsed = parse_text(FIXTURE.read_text())
    readings, findings = lint(parsed, schema)
    fixed = fix_text(parsed, readings, findings, schema)
    comments = [ln for ln in fixed.splitlines() if ln.startswith(("# llamarig", "#   "))]
    assert not any(ln.rstrip().endswith("...") for ln in comments), comments
    joined = " ".join(ln[1:].strip() for ln in comments)  # a comment's lines read as one sentence
    assert "`iq4_nl`, `q5_0`, `q5_1`" in joined  # the whole list of allowed KV types
    assert all(len(ln) <= 80 or " " not in ln[2:] for ln in comments)  # fits 80 columns (issue 33)


def _yaml_fix(text: str, tmp_path):  # type: ignore[no-untyped-def]
    from llamarig.flags.fix import fix_text
    from llamarig.flags.readers import parse_text
    from llamarig.flags.rules import Context, lint
    from llamarig.flags.schema import load_bundled

    schema = load_bundled()
    p = parse_text(text)
    readings, fs = lint(p, schema, Context(physical_cores=8))
    return fix_text(p, readings, fs, schema)


YAML_FIX = """\
services:
  list:
    image: ghcr.io/ggml-org/llama.cpp:server
    command:
      - -m
      - /models/a.gguf
      - -fa
      - --port
      - "8080"
      - --mlock
  flow:
    image: ghcr.io/ggml-org/llama.cpp:server
    command: ["-m", "/models/b.gguf", "--flash-attn", "--metrics"]
  string:
    image: ghcr.io/ggml-org/llama.cpp:server
    command: -m /models/c.gguf -ctk q2_K --port 8081
  block:
    image: ghcr.io/ggml-org/llama.cpp:server
    command: >
      -m '/models/my model.gguf'
      --ctx-size-draft 4096 --host 0.0.0.0 --api-key k
---
apiVersion: v1
kind: Pod
metadata:
  name: llm-pod
spec:
  containers:
    - image: ghcr.io/ggml-org/llama.cpp:server-cuda
      name: llama
      args:
      - --model
      - /models/d.gguf
      - --flash-attn
      - --n-gpu-layers
      - "99"
"""


def test_fix_writes_yaml_in_the_input_form(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """--fix on YAML writes YAML: a list stays a list (block or flow, every item a string for
    Kubernetes' []string), a string stays a string (a `>` block keeps its indicator); read back by
    a real YAML parser (PyYAML) and by llamarig, the commands are the corrected ones, without
    errors."""
    import yaml

    from llamarig.flags.readers import parse_text
    from llamarig.flags.rules import PARSE_RULES, Context, lint
    from llamarig.flags.schema import load_bundled

    fixed = _yaml_fix(YAML_FIX, tmp_path)
    compose, deploy = list(yaml.safe_load_all(fixed))
    svc = compose["services"]
    assert svc["list"]["command"] == ["-m", "/models/a.gguf", "-fa", "on", "--port", "8080", "--load-mode", "mlock"]
    assert svc["flow"]["command"] == ["-m", "/models/b.gguf", "--flash-attn", "on", "--metrics"]
    assert isinstance(svc["string"]["command"], str) and "-ctk q4_0" in svc["string"]["command"]
    assert svc["block"]["command"] == "-m '/models/my model.gguf' --host 0.0.0.0 --api-key k\n"
    args = deploy["spec"]["containers"][0]["args"]
    assert args == ["--model", "/models/d.gguf", "--flash-attn", "on", "--n-gpu-layers", "99"]
    assert all(isinstance(a, str) for a in args)  # `on` and 99 quoted: the API server wants strings
    assert "command: >\n" in fixed and 'command: ["-m"' in fixed
    assert "    # llamarig: `-fa` -> `-fa on` (it takes a value)\n    # llamarig: `--mlock` -> `--load-mode mlock`\n    command:\n" in fixed
    p = parse_text(fixed)
    _, fs = lint(p, load_bundled(), Context(physical_cores=8))
    assert [f for f in fs if f.rule in PARSE_RULES and f.severity == "error"] == []
    assert _yaml_fix(fixed, tmp_path) == fixed  # idempotent


def test_fix_writes_systemd_variables_back_as_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A unit's `${MODEL}`, `${PORT}` and `$$` are checked expanded, and --fix writes them back as
    written (systemd would expand `$ecret` as a variable)."""
    unit = ("[Service]\nEnvironment=PORT=8080 MODEL=/m/a.gguf\n"
            "ExecStart=/usr/bin/llama-server -m ${MODEL} --port ${PORT} --api-key $$ecret --mlock\n")
    fixed = _yaml_fix(unit, tmp_path)
    assert "  -m ${MODEL} \\\n  --port ${PORT} \\\n  --api-key $$ecret \\\n  --load-mode mlock\n" in fixed


def test_two_comments_sharing_a_continuation_line_both_stay_whole() -> None:
    """The K and V findings end in the same wrapped line (the allowed types): both keep it."""
    schema = load_bundled()
    parsed = parse_text("llama-server -m m.gguf -ctk q2_K -ctv q2_K -fa on\n")
    readings, findings = lint(parsed, schema)
    fixed = fix_text(parsed, readings, findings, schema)
    joined = " ".join(ln.removeprefix("#   ") for ln in fixed.splitlines())
    assert joined.count("`iq4_nl`, `q5_0`, `q5_1`") == 2, fixed


def test_chinese_fix_comments_wrap_between_characters_at_80_columns() -> None:
    from llamarig.text import cells as _cells

    schema = load_bundled()
    parsed = parse_text(FIXTURE.read_text())
    readings, findings = lint(parsed, schema)
    fixed = fix_text(parsed, readings, findings, schema, "zh")
    comments = [ln for ln in fixed.splitlines() if ln.startswith(("# llamarig", "#   ")) and "killall" not in ln]
    joined = " ".join(ln.removeprefix("#   ") for ln in comments)
    assert "不支持的缓存类型" in joined and "`iq4_nl`, `q5_0`, `q5_1`" in joined
    assert all(_cells(ln) <= 80 for ln in comments), [ln for ln in comments if _cells(ln) > 80]
