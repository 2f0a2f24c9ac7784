"""The flag schema: parsed from the real binary's --help, cached per binary, bundled for 11434."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from llamarig.errors import ServerError
from llamarig.flags import schema as schema_mod
from llamarig.flags.schema import (
    bundled_builds,
    load_bundled,
    load_schema,
    parse_help,
    parse_version,
    schema_from_binary,
)

HELP_SNIPPET = """----- common params -----

-h,    --help, --usage                  print usage and exit
-c,    --ctx-size N                     size of the prompt context (default: 0, 0 = loaded from model)
                                        (env: LLAMA_ARG_CTX_SIZE)
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
                                        (env: LLAMA_ARG_FLASH_ATTN)
-ctk,  --cache-type-k TYPE              KV cache data type for K
                                        allowed values: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1
                                        (default: f16)
                                        (env: LLAMA_ARG_CACHE_TYPE_K)
-kvu,  --kv-unified, -no-kvu, --no-kv-unified
                                        use single unified KV buffer shared across all sequences (default:
                                        enabled if number of slots is auto)
--no-host                               bypass host buffer allowing extra buffers to be used
--control-vector-layer-range START END
                                        layer range to apply the control vector(s) to
"""


def test_parse_help_layout() -> None:
    opts = {o.name: o for o in parse_help(HELP_SNIPPET)}
    c = opts["--ctx-size"]
    assert c.spellings == ("-c", "--ctx-size") and c.kind == "value" and c.env == "LLAMA_ARG_CTX_SIZE"
    assert c.default == "0"
    assert opts["--flash-attn"].allowed == ("on", "off", "auto")
    k = opts["--cache-type-k"]
    assert k.value_kind == "kvtype" and "q8_0" in k.allowed and k.default == "f16"
    u = opts["--kv-unified"]
    assert u.kind == "bool_pair" and u.negations == ("-no-kvu", "--no-kv-unified")
    assert opts["--no-host"].kind == "flag" and opts["--no-host"].spellings == ("--no-host",)
    assert opts["--control-vector-layer-range"].kind == "two_values"


def test_parse_version() -> None:
    assert parse_version("version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU") == ("0.6.0-dev", 0, "unknown")
    assert parse_version("version: 5200 (abc1234)") == ("5200", 5200, "abc1234")
    assert parse_version("garbage") == (None, None, None)


def test_bundled_schema() -> None:
    assert 11434 in bundled_builds()
    s = load_bundled()
    assert s.build == 11434 and s.source == "bundled" and len(s.options) == 256
    opt, positive = s.lookup("--log_file")
    assert opt.name == "--log-file" and positive
    opt, positive = s.lookup("-nocb")
    assert opt.name == "--cont-batching" and not positive
    assert s.get("--temp").value_kind == "float"
    assert s.get("--spec-type").appending and not s.get("--ctx-size").appending
    assert s.by_env["LLAMA_ARG_NO_KV_UNIFIED"].name == "--kv-unified"
    assert load_bundled(99999).build == 11434 and load_bundled(1).build == bundled_builds()[0]
    assert load_bundled(11000).build == 10502 and "not newer than 11000" in load_bundled(11000).origin


@pytest.mark.server
def test_real_binary_matches_bundled(server_bin: Path) -> None:
    real = schema_from_binary(server_bin)
    bundled = load_bundled()
    assert real.build == 11434  # "build 0" from an sdist build, identified by its flag set
    assert real.fingerprint() == bundled.fingerprint()
    assert {o.name: (o.all_spellings, o.kind, o.env, o.allowed, o.value_kind) for o in real.options} == \
        {o.name: (o.all_spellings, o.kind, o.env, o.allowed, o.value_kind) for o in bundled.options}


@pytest.mark.server
def test_cache_per_binary(server_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_mod, "schema_cache_dir", lambda: tmp_path / "schemas")
    copy = tmp_path / "bin" / "llama-server"
    copy.parent.mkdir()
    shutil.copy2(server_bin, copy)
    s1 = load_schema(copy)
    assert s1.source == "binary"
    files = list((tmp_path / "schemas").glob("*.json"))
    assert len(files) == 1
    s2 = load_schema(copy)
    assert s2.source == "cache" and s2.fingerprint() == s1.fingerprint()
    os.utime(copy, ns=(1, 1))  # a changed binary (mtime) is read again
    assert load_schema(copy).source == "binary"
    assert len(list((tmp_path / "schemas").glob("*.json"))) == 2


def test_no_binary_falls_back_to_bundled(monkeypatch: pytest.MonkeyPatch) -> None:
    def none(*a, **k):
        raise ServerError("no binary")

    monkeypatch.setattr(schema_mod, "find_binary", none)
    assert load_schema().source == "bundled"


def test_explicit_missing_binary_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError):
        load_schema(tmp_path / "nope")


def test_not_a_llama_server(tmp_path: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    with pytest.raises(ServerError):
        schema_from_binary(fake)


def test_unusable_discovered_binary_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    monkeypatch.setattr(schema_mod, "find_binary", lambda name, explicit=None: fake)
    monkeypatch.setattr(schema_mod, "schema_cache_dir", lambda: tmp_path / "schemas")
    s = load_schema()
    assert s.source == "bundled" and "unusable" in s.origin and s.lookup("-c") is not None
