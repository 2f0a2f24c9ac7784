"""YAML launch files read as the tools that run them read them: Kubernetes and Helm values
(argv lists, `$(VAR)`), docker compose (list and string forms, entrypoint + command), llama-swap
(macros, `${PORT}`), each word with the line it is written on."""

from __future__ import annotations

from llamarig.flags.readers import parse_text
from llamarig.flags.rules import PARSE_RULES, Context, lint
from llamarig.flags.schema import load_bundled

SCHEMA = load_bundled()


def args_lines(text: str) -> list[list[tuple[str, int]]]:
    return [[(w.text, w.line) for w in inv.args] for inv in parse_text(text).invocations]


def parse_errors(text: str) -> list[tuple[str, str | None, int]]:
    _, fs = lint(parse_text(text), SCHEMA, Context(physical_cores=8))
    return [(f.rule, f.flag, f.line) for f in fs if f.rule in PARSE_RULES and f.severity == "error"]


DEPLOYMENT = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: llama-config
data:
  N_CTX: "32768"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: llama
spec:
  template:
    spec:
      containers:
        - name: server
          image: ghcr.io/ggml-org/llama.cpp:server-cuda
          envFrom:
            - configMapRef:
                name: llama-config
          env:
            - name: PORT
              value: "8080"
          args:
            - "--model"
            - "/models/q.gguf"
            - --ctx-size
            - $(N_CTX)
            - --port
            - $(PORT)
            - -fa
"""


def test_kubernetes_args_are_an_argv_list() -> None:
    p = parse_text(DEPLOYMENT)
    assert p.kind == "kubernetes"
    inv = p.invocations[0]
    assert inv.label == "Deployment/llama container server"
    assert [(w.text, w.line) for w in inv.args] == [
        ("--model", 25), ("/models/q.gguf", 26), ("--ctx-size", 27), ("32768", 28), ("--port", 29),
        ("8080", 30), ("-fa", 31)]
    assert ("N_CTX", "32768", 6) in inv.env and ("PORT", "8080", 22) in inv.env
    # the only parse error: the bare -fa at the end (not "stray argument -" on every item)
    assert parse_errors(DEPLOYMENT) == [("missing-value", "-fa", 31)]


def test_kubernetes_command_replaces_entrypoint_and_unknown_refs() -> None:
    text = ("kind: Pod\napiVersion: v1\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
            "    image: busybox\n    command: [\"/app/llama-server\"]\n    args: [\"-m\", \"$(MODEL)\", \"--port\", 8080,"
            " \"$$(LITERAL)\"]\n")
    p = parse_text(text)
    inv = p.invocations[0]
    assert inv.argv == ["/app/llama-server", "-m", "$(MODEL)", "--port", "8080", "$(LITERAL)"]
    kinds = {(n.kind, n.severity) for n in p.notes}
    assert ("unknown-variable", "info") in kinds  # $(MODEL) is not defined: passed as written
    assert ("yaml-not-string", "error") in kinds  # 8080 unquoted: the API server rejects it


def test_kubernetes_shell_command_is_read_as_bash() -> None:
    text = ("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n"
            "      containers:\n        - name: c\n          image: ubuntu\n          command: [\"/bin/sh\", \"-ec\"]\n"
            "          args:\n            - |\n              cd /models\n              llama-server -m q.gguf \\\n"
            "                --port 8080\n")
    p = parse_text(text)
    assert [(inv.argv, inv.line) for inv in p.invocations] == [
        (["llama-server", "-m", "q.gguf", "--port", "8080"], 14)]


def test_helm_values_lists_and_map_form() -> None:
    text = ("image:\n  repository: ghcr.io/ggml-org/llama.cpp\n  tag: server\nserver:\n  args:\n"
            "    - --model\n    - /models/q.gguf\n  extraArgs: [\"-c\", \"8192\", \"--metrics\"]\n")
    p = parse_text(text)
    assert p.kind == "helm-values"
    assert args_lines(text) == [[("--model", 6), ("/models/q.gguf", 7), ("-c", 8), ("8192", 8), ("--metrics", 8)]]
    # rockofox/helm-llama-cpp: a mapping of `--key value`, rendered in key order
    text = ("image:\n  repository: \"ghcr.io/ggerganov/llama.cpp\"\n  tag: \"server\"\nllama:\n  args:\n"
            "    model: \"/models/q.gguf\"\n    n-predict: \"-1\"\n    jinja: \"\"\n    parallel: \"2\"\n")
    assert args_lines(text) == [[("--jinja", 8), ("--model", 6), ("/models/q.gguf", 6), ("--n-predict", 7),
                                 ("-1", 7), ("--parallel", 9), ("2", 9)]]


def test_compose_list_form_and_entrypoint() -> None:
    text = ("services:\n  llm:\n    image: ghcr.io/ggml-org/llama.cpp:server\n    command:\n"
            "      - -m\n      - /models/a.gguf\n      - --port\n      - \"8080\"\n"
            "  shell:\n    image: ubuntu\n    entrypoint: [\"/bin/bash\", \"-c\"]\n"
            "    command: [\"exec llama-server -m b.gguf --metrics\"]\n"
            "  reset:\n    image: ghcr.io/ggml-org/llama.cpp:server\n    entrypoint: ''\n"
            "    command: >\n      /app/llama-server\n      -m c.gguf\n")
    p = parse_text(text)
    assert p.kind == "compose"
    assert [(inv.label, inv.argv) for inv in p.invocations] == [
        ("llm", ["(entrypoint of ghcr.io/ggml-org/llama.cpp:server)", "-m", "/models/a.gguf", "--port", "8080"]),
        ("shell", ["llama-server", "-m", "b.gguf", "--metrics"]),
        ("reset", ["/app/llama-server", "-m", "c.gguf"])]
    assert [w.line for w in p.invocations[0].args] == [5, 6, 7, 8]
    assert [w.line for w in p.invocations[2].args] == [18, 18]
    assert not parse_errors(text)


def test_compose_merge_key_and_program_given_to_server_entrypoint() -> None:
    text = ("x-common: &common\n  image: ghcr.io/ggml-org/llama.cpp:server-cuda\nservices:\n  main:\n"
            "    <<: *common\n    command: [\"llama-server\", \"-m\", \"/m.gguf\"]\n")
    p = parse_text(text)
    inv = p.invocations[0]
    assert inv.argv[1:] == ["llama-server", "-m", "/m.gguf"]  # the image's entrypoint gets `llama-server`
    assert ("stray-argument", "llama-server", 6) in parse_errors(text)
    assert any(n.kind == "entrypoint-is-server" for n in p.notes)


SWAP = """\
startPort: 9000
macros:
  "server": >
    /opt/llama-server
    --port ${PORT}
  "ctx": 8192
  "base": "${server} --ctx-size ${ctx} --no-mmap"
models:
  "qwen":
    macros:
      "ctx": 32768
    cmd: |
      # comment lines are dropped
      ${base}
      --model /models/${MODEL_ID}.gguf
  "gemma":
    cmd: ${server} -m g.gguf ${later}
"""


def test_llama_swap_macros_ports_and_lines() -> None:
    p = parse_text(SWAP)
    assert p.kind == "llama-swap"
    qwen, gemma = p.invocations
    assert qwen.argv == ["/opt/llama-server", "--port", "9001", "--ctx-size", "32768", "--no-mmap",
                         "--model", "/models/qwen.gguf"]
    # words from a macro are on the macro's line; the model's own `ctx` overrides the global one
    assert [w.line for w in qwen.args] == [5, 5, 7, 11, 7, 15, 15]
    assert qwen.line == 4
    # ${PORT}: sorted model ids that use it get startPort, startPort + 1 ...
    assert gemma.argv[:3] == ["/opt/llama-server", "--port", "9000"]
    assert any(n.kind == "unknown-macro" and "${later}" in n.message and n.severity == "error" for n in p.notes)
    errs = parse_errors(SWAP)
    assert ("unknown-flag", "--no-mmap", 7) in errs  # the removed flag inside a macro is seen


def test_llama_swap_macro_declared_after_use_and_env_macro() -> None:
    text = ("macros:\n  a: \"--port ${b}\"\n  b: 8080\nmodels:\n  m:\n    cmd: llama-server ${a} -m ${env.MODELS}/q.gguf\n")
    p = parse_text(text)
    assert p.invocations[0].argv == ["llama-server", "--port", "${b}", "-m", "${env.MODELS}/q.gguf"]
    msgs = [n.message for n in p.notes]
    assert any("declared before it" in m for m in msgs)
    assert any("${env.MODELS}" in m for m in msgs)


def test_llama_swap_docker_run_cmd() -> None:
    text = ("models:\n  d:\n    cmd: |\n      docker run --rm -p ${PORT}:8080 -e LLAMA_ARG_CTX_SIZE=4096\n"
            "      ghcr.io/ggml-org/llama.cpp:server\n      --model /models/x.gguf\n")
    inv = parse_text(text).invocations[0]
    assert [w.text for w in inv.args] == ["--model", "/models/x.gguf"]
    assert ("LLAMA_ARG_CTX_SIZE", "4096") in [(n, v) for n, v, _ in inv.env]


def test_yaml_words_are_found_in_linear_time() -> None:
    # a long folded command: every word on its own line, found without rescanning the text
    n = 20000
    text = "models:\n  m:\n    cmd: >\n      llama-server\n" + "".join(f"      --temp 0.{i % 10}\n" for i in range(n))
    inv = parse_text(text).invocations[0]
    assert len(inv.args) == 2 * n and inv.args[-1].line == 4 + n


COMPOSE_VARS = """\
services:
  llm:
    image: ghcr.io/ggml-org/llama.cpp:${TAG:-server-cuda}
    command: >
      -m ${MODEL} -c ${CTX:-4096} --port ${PORT-8080}
      -a "${ALIAS:-my model}" --api-key $$ecret ${EMPTY:-x} ${EMPTY-y} ${NOPE}
  two:
    image: ghcr.io/ggml-org/llama.cpp:server
    command: ["-m", "${MODEL}", "-c", "$CTX", "--temp", "${TEMP:?set TEMP}"]
    environment:
      LLAMA_ARG_THREADS: ${THREADS:-4}
"""


def test_compose_interpolation_from_dotenv(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The compose spec's interpolation
    (https://github.com/compose-spec/compose-spec/blob/main/spec.md#interpolation), values from
    the .env next to the file, before a string command is split; each value on the `$`'s line."""
    (tmp_path / ".env").write_text("MODEL=/models/a.gguf\nCTX=8192\nEMPTY=\n# comment\n")
    f = tmp_path / "compose.yaml"
    f.write_text(COMPOSE_VARS)
    p = parse_text(COMPOSE_VARS, origin=f)
    one, two = p.invocations
    assert [(w.text, w.line) for w in one.args] == [
        ("-m", 5), ("/models/a.gguf", 5), ("-c", 5), ("8192", 5), ("--port", 5), ("8080", 5),
        ("-a", 6), ("my model", 6), ("--api-key", 6), ("$ecret", 6), ("x", 6)]  # ${EMPTY-y}: set, empty
    assert one.program.endswith("llama.cpp:server-cuda)")
    assert two.argv[1:] == ["-m", "/models/a.gguf", "-c", "8192", "--temp", ""]
    assert ("LLAMA_ARG_THREADS", "4", 11) in two.env
    notes = {(n.line, n.severity.value): n.message for n in p.notes if n.kind == "unknown-variable"}
    assert set(notes) == {(6, "warning"), (9, "error")}
    assert "`$NOPE` has no default" in notes[(6, "warning")] and "spec.md#interpolation" in notes[(6, "warning")]
    assert "required variable TEMP is missing a value: set TEMP" in notes[(9, "error")]
    # no .env: every variable without a default is reported, and says there is no .env
    p = parse_text(COMPOSE_VARS)
    assert [w.text for w in p.invocations[0].args[:3]] == ["-m", "-c", "4096"]  # `-m ${MODEL} -c`: empty
    assert any("(none found)" in n.message for n in p.notes)


def test_kubernetes_configmap_key_ref_in_the_same_file() -> None:
    """env valueFrom.configMapKeyRef of a ConfigMap defined in the same multi-document file is
    known to `$(VAR)`; a Secret's is not (kept as written, with a note); `$$(VAR)` is literal."""
    text = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: llm-config}
data:
  ctx: "16384"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: llm}
spec:
  template:
    spec:
      containers:
        - name: server
          image: ghcr.io/ggml-org/llama.cpp:server
          env:
            - name: CTX
              valueFrom: {configMapKeyRef: {name: llm-config, key: ctx}}
            - name: KEY
              valueFrom: {secretKeyRef: {name: llm-secret, key: api-key}}
          args: ["-c", "$(CTX)", "--api-key", "$(KEY)", "-a", "$$(CTX)"]
"""
    p = parse_text(text)
    (inv,) = p.invocations
    assert inv.argv[1:] == ["-c", "16384", "--api-key", "$(KEY)", "-a", "$(CTX)"]
    assert ("CTX", "16384", 17) in inv.env
    assert any("$(KEY)" in n.message for n in p.notes if n.kind == "unknown-variable")


def test_a_syntax_note_carries_its_own_fix() -> None:
    """A preset line that is not INI and a compose interpolation docker compose refuses are
    shell-syntax findings, but "fix the quoting" is not their repair: the reader says what is."""
    schema = load_bundled()
    ini = "[a]\nmodel = x.gguf\nbogus line\n"
    _r, fs = lint(parse_text(ini, "ini"), schema, Context(physical_cores=8))
    assert [f.fix for f in fs if f.rule == "shell-syntax"] == [
        "write it as `key = value` or `[section]`, or comment it out with `;` or `#`"]
    compose = ("services:\n  llm:\n    image: ghcr.io/ggml-org/llama.cpp:server\n"
               "    command: [\"-m\", \"/m/a.gguf\", \"-c\", \"${1x}\"]\n")
    _r, fs = lint(parse_text(compose, "yaml"), schema, Context(physical_cores=8))
    assert [f.fix for f in fs if f.rule == "shell-syntax"] == [
        "write `${NAME}` or `${NAME:-default}`, and `$$` for a literal `$`"]
