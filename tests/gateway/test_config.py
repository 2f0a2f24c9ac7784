"""Config parsing and validation: defaults are seed 004's tiers; every error names file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamarig.errors import InputError
from llamarig.gateway.config import DEFAULT_TIERS, build_config, load_config, with_overrides

TOML = """
[server]
port = 8001
request_log = "req.jsonl"

[[backends]]
url = "http://127.0.0.1:8002"
name = "gpu0"
pool_tokens = 307200

[[backends]]
url = "http://10.0.0.2:8002/"
name = "gpu1"

[admission]
queue_timeout_s = 10
prompt_tokens = "estimate"

[tiers.C2]
max_tokens = 8192

[tiers.X]
max_tokens = 100
thinking = false
[tiers.X.sampling]
temperature = 0.2

[routing.model_aliases]
"fast" = "X"

[[keys]]
key = "sk-alice-0123456789"
name = "alice"
tier = "C2"
max_concurrent = 2
"""


def test_defaults_are_seed_004_tiers() -> None:
    cfg = build_config(None)
    t = cfg.tiers
    assert (t["B"].max_tokens, t["B"].thinking) == (4096, False)
    assert (t["C1"].max_tokens, t["C1"].reasoning_budget, t["C1"].reasoning_effort) == (6144, 2048, "medium")
    assert (t["C2"].max_tokens, t["C2"].reasoning_budget, t["C2"].long_output_max_tokens,
            t["C2"].long_output_timeout_s) == (6144, 4096, 32768, 1800.0)
    assert (t["D"].max_tokens, t["D"].reasoning_budget) == (6144, 2048)
    assert set(t) == {"B", "C1", "C2", "D", "A", "V"}
    assert (cfg.cron.max_tokens, cfg.cron.max_tokens_thinking) == (1024, 2048)
    assert cfg.server.host == "127.0.0.1"


def test_toml_and_yaml(tmp_path: Path) -> None:
    p = tmp_path / "g.toml"
    p.write_text(TOML)
    cfg = load_config(p)
    assert cfg.server.port == 8001
    assert [b.name for b in cfg.backends] == ["gpu0", "gpu1"]
    assert cfg.backends[1].url == "http://10.0.0.2:8002"
    assert cfg.backends[0].pool_tokens == 307200
    assert cfg.tiers["C2"].max_tokens == 8192 and cfg.tiers["C2"].reasoning_budget == 4096  # merged
    assert cfg.tiers["X"].sampling == {"temperature": 0.2}
    assert cfg.routing.model_aliases == {"fast": "X"}
    assert cfg.keys[0].tier == "C2" and cfg.keys[0].max_concurrent == 2
    y = tmp_path / "g.yaml"
    y.write_text("backends:\n  - url: http://127.0.0.1:8080\ntiers:\n  B: {max_tokens: 512}\n")
    cy = load_config(y)
    assert cy.tiers["B"].max_tokens == 512 and cy.tiers["B"].thinking is False


@pytest.mark.parametrize("text,where", [
    ("[server]\nprot = 1\n", "server.prot: unknown key (did you mean 'port'?)"),
    ("[server]\nport = 'x'\n", "server.port: expected an integer"),
    ("[server]\nport = 70000\n", "server.port: must be <= 65535"),
    ("[[backends]]\nname = 'a'\n", "backends[0]: missing url"),
    ("[[backends]]\nurl = 'localhost:8080'\n", "backends[0].url: expected http://host:port"),
    ("[[backends]]\nurl = 'http://a:1'\nname='x'\n[[backends]]\nurl = 'http://b:1'\nname='x'\n", "duplicate backend name"),
    ("[tiers.B]\nmax_tokens = 0\n", "tiers.B.max_tokens: must be >= 1"),
    ("[tiers.NEW]\nthinking = true\n", "tiers.NEW: a new tier needs max_tokens"),
    ("[tiers.C2]\nreasoning_budget = 9000\n", "tiers.C2.reasoning_budget: 9000 must be below max_tokens 6144"),
    ("[routing]\ndefault_tier = 'Z'\n", "routing.default_tier: unknown tier 'Z'"),
    ("[routing]\nsystem_patterns = ['(']\n", "routing.system_patterns[0]: bad regular expression"),
    ("[admission]\nprompt_tokens = 'guess'\n", "admission.prompt_tokens: expected 'backend' or 'estimate'"),
    ("[[keys]]\nkey = 'short'\n", "keys[0].key: an API key must be at least 8 characters"),
    ("[[keys]]\nkey = 'longenough1'\ntier = 'Q'\n", "keys[0].tier: unknown tier 'Q'"),
    ("[server\n", "not valid TOML"),
    ("bogus = 1\n", "bogus: unknown key"),
])
def test_errors_name_file_and_key(tmp_path: Path, text: str, where: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_config(p)
    assert str(p) in str(e.value)
    assert where in str(e.value)
    assert "\n" not in str(e.value)


def test_yaml_errors(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("server: [1, 2\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_config(p)
    p.write_text("- 1\n- 2\n")
    with pytest.raises(InputError, match="top level must be a mapping"):
        load_config(p)
    with pytest.raises(InputError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_overrides_and_no_backend() -> None:
    cfg = build_config(None)
    with pytest.raises(InputError, match="no backend"):
        with_overrides(cfg)
    c2 = with_overrides(cfg, backends=["http://127.0.0.1:8080"], port=9000)
    assert c2.backends[0].url == "http://127.0.0.1:8080" and c2.server.port == 9000
    with pytest.raises(InputError, match="--backend"):
        with_overrides(cfg, backends=["127.0.0.1:8080"])
    assert DEFAULT_TIERS["B"].max_tokens == 4096


@pytest.mark.parametrize("text,where", [
    ("[tiers.B]\nmax_pool_share = 1.5\n", "tiers.B.max_pool_share: must be <= 1.0"),
    ("[tiers.B]\nmax_pool_share = 0\n", "tiers.B.max_pool_share: must be in (0, 1]"),
    ("[cron]\nmax_slots = -1\n", "cron.max_slots: must be >= 0"),
    ("[tiers.B]\nqueue_timeout_s = -1\n", "tiers.B.queue_timeout_s: must be >= 0.0"),
    ("[cron]\non_busy = 'drop'\n", "cron.on_busy: expected 'queue' or 'reject', got 'drop'"),
    ("[[routing.rules]]\ntier = 'A'\n", "routing.rules[0]: a rule needs exactly one of 'system' and 'user'"),
    ("[[routing.rules]]\ntier = 'A'\nuser = '('\n", "routing.rules[0].user: bad regular expression"),
    ("[[routing.rules]]\ntier = 'Q'\nuser = 'x'\n", "routing.rules[0].tier: unknown tier 'Q'"),
    ("[[routing.rules]]\nuser = 'x'\n", "routing.rules[0]: missing tier"),
    ("[routing]\nrules = 3\n", "routing.rules: expected a list ([[routing.rules]] in TOML), got integer"),
    ("[[backends]]\nurl = 'http://a:1'\nname = 'gpu0'\n[tiers.C2]\nbackends = ['gpu1']\n",
     "tiers.C2.backends: unknown backend 'gpu1' (did you mean 'gpu0'?)"),
    ("[[backends]]\nurl = 'http://a:1'\n[cron]\nbackends = ['x']\n", "cron.backends: unknown backend 'x'"),
])
def test_errors_of_caps_routes_and_rules(tmp_path: Path, text: str, where: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_config(p)
    assert where in str(e.value) and str(p) in str(e.value)


def test_caps_routes_rules_and_log_parse(tmp_path: Path) -> None:
    p = tmp_path / "g.toml"
    p.write_text("""
[[backends]]
url = "http://127.0.0.1:8080"
name = "gpu0"
log = "/var/log/llama-server.log"

[cron]
max_slots = 1
max_pool_share = 0.25
on_busy = "reject"

[tiers.C2]
max_slots = 3
backends = ["gpu0"]

[[routing.rules]]
name = "format"
user = '^(格式化|format)'
tier = "A"
""")
    cfg = load_config(p)
    assert cfg.backends[0].log == "/var/log/llama-server.log"
    assert (cfg.cron.max_slots, cfg.cron.max_pool_share, cfg.cron.on_busy) == (1, 0.25, "reject")
    assert cfg.tiers["C2"].backends == ("gpu0",) and cfg.tiers["C2"].max_tokens == 6144  # merged onto the default
    assert cfg.routing.rules[0].tier == "A" and cfg.routing.rules[0].name == "format"
    # --backend renames the backends: a route to a name that is gone is an error there
    with pytest.raises(InputError, match="tiers.C2.backends: unknown backend 'gpu0'"):
        with_overrides(cfg, backends=["http://127.0.0.1:9000"])
