"""The source-derived schema (llamarig.flags.from_source) reproduces what the real binary's
--help says for build 11434: the method is validated before it is used on other builds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamarig.flags.from_source import parse_arg_cpp, schema_from_source, strip_comments
from llamarig.flags.schema import load_bundled


def _source_tree() -> Path | None:
    marker = Path(os.environ.get("LLAMARIG_CACHE", Path.home() / ".cache" / "llamarig")) / "llama.cpp-11434" / "source-tree"
    if not marker.is_file():
        return None
    p = Path(marker.read_text().strip())
    return p if (p / "common" / "arg.cpp").is_file() else None


def test_parse_small_snippet() -> None:
    text = '''
    add_opt(common_arg(
        {"-c", "--ctx-size"}, "N",
        string_format("size of the prompt context (default: %d)", params.n_ctx),
        [](common_params & params, int value) { params.n_ctx = value; }
    ).set_env("LLAMA_ARG_CTX_SIZE"));
    add_opt(common_arg(
        // a comment, with a comma
        {"-kvu", "--kv-unified"}, {"-no-kvu", "--no-kv-unified"},
        "use single unified KV buffer",
        [](common_params & params, bool value) { params.kv_unified = value; }
    ).set_examples({LLAMA_EXAMPLE_SERVER}));
    add_opt(common_arg(
        {"-p", "--prompt"}, "PROMPT", "prompt",
        [](common_params & params, const std::string & value) { params.prompt = value; }
    ).set_excludes({LLAMA_EXAMPLE_SERVER}));
    add_opt(common_arg(
        {"--metrics"}, "enable metrics",
        [](common_params & params) { params.endpoint_metrics = true; }
    ).set_examples({LLAMA_EXAMPLE_SERVER}));
    '''
    opts = {o.name: o for o in parse_arg_cpp(text)}
    assert set(opts) == {"--ctx-size", "--kv-unified", "--metrics"}
    assert opts["--ctx-size"].kind == "value" and opts["--ctx-size"].env == "LLAMA_ARG_CTX_SIZE"
    assert opts["--kv-unified"].negations == ("-no-kvu", "--no-kv-unified")
    assert opts["--metrics"].kind == "flag"
    assert strip_comments('a "//x" // y\nb /* z */ c') == 'a "//x" \nb  c'


def test_source_schema_equals_binary_schema_for_11434() -> None:
    tree = _source_tree()
    if tree is None:
        pytest.skip("llama.cpp 11434 source tree not present")
    s = schema_from_source(tree / "common" / "arg.cpp", 11434)
    b = load_bundled()  # generated from the real binary's --help

    def key(o):
        return (o.all_spellings, o.kind, o.env, o.removed, o.deprecated)

    assert {o.name: key(o) for o in s.options} == {o.name: key(o) for o in b.options}
