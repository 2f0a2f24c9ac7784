"""docs/gateway.md examples: the config reference validates, and the quick start runs as written
(the CLI in a subprocess, a fake backend, urllib for curl, ``llamarig gateway status``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamarig.cli.gateway_cmd import gateway_cmd
from llamarig.errors import InputError
from llamarig.gateway.config import load_config
from llamarig.testing.server import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "gateway.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def test_config_reference_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALICE_KEY", "sk-alice-from-env")
    (ref,) = [b for b in blocks("toml") if "inherit_default_tiers" in b]
    p = tmp_path / "ref.toml"
    p.write_text(ref)
    cfg = load_config(p)
    assert cfg.backends[0].name == "gpu0" and cfg.keys[0].key == "sk-alice-from-env"
    assert cfg.tiers["B"].sampling == {"temperature": 0.7}
    out = CliRunner().invoke(gateway_cmd, ["--config", str(p), "--check"])
    assert out.exit_code == 0 and '"key": "***"' in out.output and "sk-alice" not in out.output


def test_the_field_reports_proxy_as_a_config(tmp_path: Path) -> None:
    """docs/gateway.md writes the 32 GB card field report's proxy (tests/fixtures/seeds/004_*.txt,
    三) as a llamarig config: its six tiers with their numbers, C2's widening, cron locked small
    and capped, content rules in Chinese and English. Loaded with the gateway's own loader."""
    from llamarig.gateway.tiers import decide

    (doc,) = [b for b in blocks("toml") if "field report's proxy" in b]
    p = tmp_path / "proxy.toml"
    p.write_text(doc)
    cfg = load_config(p)
    t = cfg.tiers
    assert [(n, t[n].max_tokens, t[n].thinking, t[n].reasoning_budget, t[n].reasoning_effort)
            for n in ("B", "C1", "C2", "D", "A", "V")] == [
        ("B", 4096, False, None, None), ("C1", 6144, True, 2048, "medium"), ("C2", 6144, True, 4096, None),
        ("D", 6144, True, 2048, "medium"), ("A", 2048, False, None, None), ("V", 4096, False, None, None)]
    assert (t["C2"].long_output_max_tokens, t["C2"].long_output_timeout_s, t["C2"].max_slots) == (32768, 1800.0, 3)
    c = cfg.cron
    assert (c.max_tokens, c.max_tokens_thinking, c.priority, c.max_slots, c.max_pool_share) == (1024, 2048, 10, 1, 0.25)
    assert (c.yields, c.yield_after_s, c.queue_timeout_s, t["C2"].pin_ttl_s) == (True, 30, 600, 2700)
    assert (cfg.server.port, cfg.backends[0].url, cfg.backends[0].log) == (8001, "http://127.0.0.1:8002",
                                                                          "/home/yijingu/logs/llama-server.log")

    def tier(text: str, headers: dict[str, str] | None = None, **body: object) -> tuple[str, int, bool]:
        d = decide({"messages": [{"role": "user", "content": text}], **body}, headers or {}, cfg)
        return d.tier, d.max_tokens, d.cron

    assert tier("请帮我格式化这段 JSON") == ("A", 2048, False)
    assert tier("Format this table as markdown") == ("A", 2048, False)
    assert tier("深度分析一下这份财报") == ("D", 6144, False)
    assert tier("分析一下这个日志") == ("C1", 6144, False)
    assert tier("你好") == ("B", 4096, False)
    assert tier("写个脚本", max_tokens=32768, tools=[{"type": "function"}]) == ("C2", 32768, False)  # widened
    assert tier("nightly digest", {"x-llamarig-source": "cron-digest"}, max_tokens=32768) == ("B", 1024, True)
    assert tier("nightly digest", {"x-llamarig-source": "CRON-digest"}, max_tokens=32768) == ("B", 1024, True)
    d = decide({"messages": [{"role": "system", "content": "你是一个编程助手"}, {"role": "user", "content": "改代码"}]},
               {}, cfg)
    assert (d.tier, d.reason) == ("C2", "system_prompt")
    out = CliRunner().invoke(gateway_cmd, ["--config", str(p), "--check"])
    assert out.exit_code == 0, out.output


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("server:\n  port: banana\n")
    r = subprocess.run([sys.executable, "-m", "llamarig.cli.main", "gateway", "--config", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "server.port: expected an integer" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "llamarig.cli.main", "gateway"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no backend" in r.stderr
    r = subprocess.run([sys.executable, "-m", "llamarig.cli.main", "gateway", "status", "--url", f"http://127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "cannot reach the gateway" in r.stderr
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "llamarig.cli.main", "gateway", "--backend", "http://127.0.0.1:9",
                            "--port", str(busy)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "cannot listen" in r.stderr and r.stderr.count("\n") == 1


def test_quick_start_runs(tmp_path: Path) -> None:
    (qs,) = [b for b in blocks("bash") if "fakebackend" in b]
    bport, gport = free_port(), free_port()
    procs = []
    try:
        for line in qs.splitlines():
            line = line.split("#")[0].strip().rstrip("&").strip()
            if line.startswith("python -m llamarig.gateway.fakebackend"):
                argv = [sys.executable, *line.split()[1:]]
            elif line.startswith("llamarig gateway --backend"):
                argv = [sys.executable, "-m", "llamarig.cli.main", *line.split()[1:]]
            else:
                continue
            argv = [a.replace("8081", str(bport)).replace("8000", str(gport)) for a in argv]
            procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            time.sleep(0.3)
        assert len(procs) == 2
        url = f"http://127.0.0.1:{gport}"
        end = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 65536}
        req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.headers["X-Llamarig-Tier"] == "B"
            assert int(r.headers["X-Llamarig-Reserved"]) == 4096 + 6  # fake counts 2 bytes + 4
        out = subprocess.run([sys.executable, "-m", "llamarig.cli.main", "gateway", "status", "--url", url],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "b0" in out.stdout and "up" in out.stdout
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def test_sighup_reload_in_the_cli(tmp_path: Path, lt: object) -> None:
    import signal

    fb = lt.fake(tokens=2)  # type: ignore[attr-defined]
    port = free_port()
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(f"backends:\n  - url: {fb.url}\ntiers:\n  B: {{max_tokens: 100}}\n")
    p = subprocess.Popen([sys.executable, "-m", "llamarig.cli.main", "gateway", "--config", str(cfg), "--port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"

    def tier_b() -> int:
        with urllib.request.urlopen(url + "/gateway/status", timeout=5) as r:
            return int(json.loads(r.read())["tiers"]["B"]["max_tokens"])

    try:
        end = time.monotonic() + 30
        while True:
            try:
                assert tier_b() == 100
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.2)
        cfg.write_text(f"backends:\n  - url: {fb.url}\ntiers:\n  B: {{max_tokens: 200}}\n")
        p.send_signal(signal.SIGHUP)
        end = time.monotonic() + 10
        while tier_b() != 200 and time.monotonic() < end:
            time.sleep(0.1)
        assert tier_b() == 200
        cfg.write_text("tiers: [broken\n")
        p.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert tier_b() == 200  # the old config keeps running
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=15)
    assert "config reload failed, keeping the running config" in err and "not valid YAML" in err
    assert "Traceback" not in err


def test_replicas_compose_file_parses_and_each_gateway_command_checks() -> None:
    """The "Several replicas" compose file (no container runtime here): it parses, Valkey is a
    service, and every gateway's command passes `llamarig gateway ... --check` with the shared
    ledger set."""
    import yaml

    (compose,) = [b for b in blocks("yaml") if "valkey/valkey" in b]
    doc = yaml.safe_load(compose)
    services = doc["services"]
    assert services["valkey"]["image"].startswith("valkey/valkey")
    gws = {n: s for n, s in services.items() if s.get("command", [])[:2] == ["llamarig", "gateway"]}
    assert len(gws) == 3
    for name, svc in gws.items():
        out = CliRunner().invoke(gateway_cmd, [*svc["command"][2:], "--check"])
        assert out.exit_code == 0, out.output
        cfg = json.loads(out.output)
        assert cfg["ledger"]["url"] == "redis://valkey:6379/0" and cfg["ledger"]["replica"] == name
        assert [b["url"] for b in cfg["backends"]] == ["http://10.0.0.5:8080", "http://10.0.0.6:8080"]
    (dockerfile,) = blocks("dockerfile")
    assert "[gateway,ledger]" in dockerfile  # the image needs the gateway and the shared ledger


def test_ledger_url_password_is_not_printed() -> None:
    out = CliRunner().invoke(gateway_cmd, ["--backend", "http://127.0.0.1:9", "--ledger",
                                           "redis://:s3cret-pw@10.0.0.9:6379/0", "--check"])
    assert out.exit_code == 0 and "s3cret-pw" not in out.output
    assert json.loads(out.output)["ledger"]["url"] == "redis://:***@10.0.0.9:6379/0"


def test_ledger_url_port_must_be_a_port() -> None:
    for url in ("redis://10.0.0.9:99999/0", "redis://10.0.0.9:x/0"):
        out = CliRunner().invoke(gateway_cmd, ["--backend", "http://127.0.0.1:9", "--ledger", url, "--check"])
        assert isinstance(out.exception, InputError) and "redis://HOST:PORT/DB" in str(out.exception), out.output
        assert out.exception.exit_code == 2
    out = CliRunner().invoke(gateway_cmd, ["--backend", "http://127.0.0.1:9", "--ledger", "redis://valkey/0", "--check"])
    assert out.exit_code == 0, out.output  # the port defaults to 6379, as the redis client says


def test_ledger_option_errors_are_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "llamarig.cli.main", "gateway", "--backend", "http://127.0.0.1:9",
                        "--ledger", "valkey://x", "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--ledger" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    # without the redis client (the gateway runs without it unless --ledger is given)
    code = ("import sys; sys.modules['redis'] = None; sys.argv[0] = 'llamarig'; "
            "from llamarig.cli.main import main; main()")
    r = subprocess.run([sys.executable, "-c", code, "gateway", "--backend", "http://127.0.0.1:9", "--port", "0",
                        "--ledger", "redis://127.0.0.1:9/0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "pip install 'llamarig[ledger]'" in r.stderr and "Traceback" not in r.stderr, r.stderr
