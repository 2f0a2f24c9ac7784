"""Random and garbled scripts never raise: each gives findings or a clean error."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamarig.flags.fix import fix_text
from llamarig.flags.readers import parse_text
from llamarig.flags.rules import Context, lint
from llamarig.flags.schema import load_bundled

SCHEMA = load_bundled()
TOKENS = ["llama-server", "./llama3-server", "-m", "a.gguf", "--mmproj", "-c", "8192", "-np", "0", "-ctk",
          "q2_K", "-fa", "off", "on", "--metrics", "--max-slots", "\\\n", "\n", "# c\n", "'", '"', "$(", ")",
          "`", "&", "&&", ";", "|", "<<EOF\n", "EOF\n", "2>&1", ">", "{", "}", "=", "--x=1", "LLAMA_SET_ROWS=0",
          "killall", "cd ~", "ExecStart=", "[Service]\n", "services:\n", "models:\n", "  cmd: |\n", "command:",
          "\\", " ", "\t", "-", "--", "--host", "0.0.0.0", "-sm", "tensor", "--spec-type", "draft-mtp", "$'\\x'",
          "中文", "\x00", "\r\n", "--cache-reuse", "99999999999999999999", "-t", "k"]


def _check(text: str) -> None:
    parsed = parse_text(text)
    readings, findings = lint(parsed, SCHEMA, Context(physical_cores=4))
    for f in findings:
        assert f.severity in ("error", "warning", "info") and isinstance(f.line, int)
    fix_text(parsed, readings, findings, SCHEMA)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_token_soup_never_raises(text: str) -> None:
    _check(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_random_text_never_raises(text: str) -> None:
    _check(text)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data: bytes) -> None:
    _check(data.decode("utf-8", errors="replace"))


def test_pathological_inputs() -> None:
    for text in ["", "\\", "'", '"unterminated', "$(", "<<EOF", "llama-server " + "-c " * 5000,
                 "llama-server \\\n" * 2000, "services: [1, 2", "models:\n  x:\n    cmd: 'llama-server \"\n",
                 "[Service]\nExecStart=llama-server -c 'x\n", "\n" * 10000]:
        _check(text)


# YAML documents of the shapes the readers look for (Kubernetes, Helm values, compose,
# llama-swap), with wrong types anywhere: never an exception
_KEYS = ["services", "models", "macros", "cmd", "command", "entrypoint", "args", "extraArgs", "env", "envFrom",
         "environment", "kind", "apiVersion", "containers", "initContainers", "spec", "template", "jobTemplate",
         "image", "name", "value", "valueFrom", "configMapRef", "metadata", "data", "startPort", "items", "<<"]
_SCALARS = st.one_of(st.sampled_from(["llama-server", "-m", "a.gguf", "--port", "${PORT}", "${m}", "$(X)", "$$(Y)",
                                      "sh", "-c", "Deployment", "Pod", "List", "ConfigMap", "v1",
                                      "ghcr.io/ggml-org/llama.cpp:server", "llama-server -fa ${nope} \\\n -c 1",
                                      "${env.HOME}", "{", "'", "", "--chat-template-kwargs", "{\"a\": 1}"]),
                     st.integers(-2, 99999), st.booleans(), st.none())
_YAML = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(st.sampled_from(_KEYS), inner, max_size=5)), max_leaves=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_KEYS), _YAML, min_size=1, max_size=6))
def test_yaml_shapes_never_raise(doc: dict) -> None:
    import yaml

    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    _check(text)
    _check(text + "---\n" + text)


_SHELL = ["llama-server", "-m", "a.gguf", "args=(", ")", "args+=(", '"${args[@]}"', "${args[*]}", "$ARGS",
          "ARGS=", "\"", "'", "${X:-", "}", "${#args[@]}", "${args[", "${!x}", "$((1+2))", "$1", '"$@"', "$*",
          "export", "local", "declare -a", "unset", "read -r X", "X+=", "-ctk", "q4_0", "\n", "\\\n", "# c\n",
          "$(nproc)", "`date`", "${X:=1}", "${X:+y}", "${X:?}", "${X%.*}", "[0]=a", "=", "$"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_SHELL), max_size=50).map(" ".join))
def test_shell_variable_soup_never_raises(text: str) -> None:
    _check(text)
