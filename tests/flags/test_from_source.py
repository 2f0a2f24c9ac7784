"""The source-derived schema (llamarig.flags.from_source) reproduces what the real binary's
--help says: for build 11434 (always built for the tests) and for every other build whose source
and binary are in the cache (e.g. `LLAMARIG_LLAMA_CPP_VERSION=9093 LLAMARIG_LLAMA_TARGETS=llama-server
scripts/get-llama-server`), so the method is validated before it is used on builds we only have
the source of."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from llamarig.flags.from_source import parse_arg_cpp, schema_from_source, strip_comments
from llamarig.flags.schema import bundled_builds, load_bundled, schema_from_binary

CACHE = Path(os.environ.get("LLAMARIG_CACHE", Path.home() / ".cache" / "llamarig"))


def _source_tree(build: int = 11434) -> Path | None:
    marker = CACHE / f"llama.cpp-{build}" / "source-tree"
    if not marker.is_file():
        return None
    p = Path(marker.read_text().strip())
    return p if (p / "common" / "arg.cpp").is_file() else None


def _cached_builds() -> list[int]:
    out = []
    for d in CACHE.glob("llama.cpp-*"):
        b = d.name.split("-")[-1]
        if b.isdigit() and (d / "bin" / "llama-server").is_file() and _source_tree(int(b)):
            out.append(int(b))
    return sorted(set(out) | {11434})


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


@pytest.mark.parametrize("build", _cached_builds())
def test_source_schema_equals_binary_schema(build: int) -> None:
    tree = _source_tree(build)
    binary = CACHE / f"llama.cpp-{build}" / "bin" / "llama-server"
    if not binary.exists():  # scripts/test builds the portable recipe
        binary = CACHE / f"llama.cpp-{build}" / "portable" / "bin" / "llama-server"
    if tree is None or not binary.is_file():
        pytest.skip(f"llama.cpp {build} source tree or binary not present")
    s = schema_from_source(tree / "common" / "arg.cpp", build)
    b = schema_from_binary(binary)

    def key(o):
        # a value hint computed at run time (`common_speculative_all_types_str()`) stays unevaluated
        hint = o.value_hint if o.value_hint and "(" not in o.value_hint else None
        return (o.all_spellings, o.negations, o.kind, o.env, o.removed, o.deprecated, hint)

    hints = {o.name: o.value_hint for o in s.options}
    b = replace(b, options=tuple(replace(o, value_hint=None) if "(" in (hints.get(o.name) or "") else o
                                 for o in b.options), by_spelling={}, by_env={}, memo={})

    src = {o.name: key(o) for o in s.options}
    # options registered only when the binary has a capability (9093: --rpc needs RPC support)
    conditional = {o.name for o in s.options if "registered only when" in o.help}
    binary_opts = {o.name: key(o) for o in b.options}
    assert {k: v for k, v in src.items() if k not in conditional or k in binary_opts} == binary_opts
    if build in bundled_builds():  # the bundled schema of that build says the same
        assert {o.name: key(o) for o in load_bundled(build).options}.keys() >= binary_opts.keys()
