"""Renderers: syntax of every format, `llamarig check` with zero errors, systemd-analyze."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from llamarig.cli.check_cmd import run_check
from llamarig.flags.schema import load_bundled
from llamarig.render.bash import render_bash
from llamarig.render.common import RenderSpec, flag_groups, get_value, set_value, uses_mlock
from llamarig.render.compose import render_compose
from llamarig.render.llamaswap import render_llamaswap
from llamarig.render.systemd import render_systemd, systemd_quote

SCHEMA = load_bundled()
BIN = "/opt/llama.cpp/bin/llama-server"
ARGS = ("-m", "/models/Qwen3.6-27B-IQ4_NL.gguf", "--mmproj", "/models/mmproj-F16.gguf", "-c", "105000",
        "-np", "1", "-ngl", "99", "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0", "--jinja",
        "--load-mode", "mlock", "-a", "qwen 100% $HOME", "--host", "127.0.0.1", "--port", "8080")


def spec(**kw: object) -> RenderSpec:
    d: dict = dict(binary=BIN, args=ARGS, name="qwen", figures=("plan: fits", "speed: 40 tok/s"),
                   env=(("CUDA_VISIBLE_DEVICES", "0"),), schema=SCHEMA)
    d.update(kw)
    return RenderSpec(**d)  # type: ignore[arg-type]


def _errors(text: str, kind: str | None = None) -> list:
    parsed, _, findings = run_check(text, SCHEMA, kind=kind, cores=8)
    assert parsed.invocations, text
    return [f for f in findings if f.severity == "error"]


def test_flag_groups_and_values() -> None:
    g = flag_groups(["-m", "a.gguf", "--jinja", "-ts", "3,1", "--rope-scale", "-1.5", "-c", "1"], SCHEMA)
    assert g == [["-m", "a.gguf"], ["--jinja"], ["-ts", "3,1"], ["--rope-scale", "-1.5"], ["-c", "1"]]
    assert get_value(["--port", "1", "--port=2"], "--port") == "2"
    assert set_value(["--port", "1", "-c", "5"], ("--port",), "${PORT}") == ["-c", "5", "--port", "${PORT}"]
    assert uses_mlock(ARGS) and not uses_mlock(["--load-mode", "mmap"])


def test_bash_launcher(tmp_path: Path) -> None:
    text = render_bash(spec())
    p = tmp_path / "qwen.sh"
    p.write_text(text)
    subprocess.run(["bash", "-n", str(p)], check=True)
    assert _errors(text) == []
    lines = text.splitlines()
    # one flag per continued line, and never a comment between continued lines
    for a, b in zip(lines, lines[1:], strict=False):
        if a.endswith("\\"):
            assert not b.lstrip().startswith("#") and b.strip(), (a, b)
    assert "rendered by llamarig 0.1.0" in text and "plan: fits" in text
    assert "killall" not in text and "pkill" not in text
    assert 'kill -TERM "$pid"' in text


def test_systemd_unit(tmp_path: Path) -> None:
    text = render_systemd(spec())
    assert "LimitMEMLOCK=infinity" in text and "Restart=on-failure" in text
    assert '"qwen 100%% $$HOME"' in text  # systemd specifier and variable escapes
    assert "Environment=CUDA_VISIBLE_DEVICES=0" in text
    assert _errors(text, "systemd") == []
    no_mlock = render_systemd(spec(args=("-m", "/m.gguf")))
    assert "LimitMEMLOCK" not in no_mlock


def test_systemd_quote() -> None:
    assert systemd_quote("-c") == "-c"
    assert systemd_quote('a "b"') == '"a \\"b\\""'
    assert systemd_quote("50%") == "50%%"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (apt-get install systemd)")
def test_systemd_analyze_verify(tmp_path: Path, server_bin: Path) -> None:
    unit = tmp_path / "llamarig-test.service"
    unit.write_text(render_systemd(spec(binary=str(server_bin), env=())))
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_compose_service() -> None:
    text = render_compose(spec(), "cuda")
    doc = yaml.safe_load(text)
    svc = doc["services"]["qwen"]
    assert svc["image"] == "ghcr.io/ggml-org/llama.cpp:server-cuda"
    assert svc["volumes"] == ["/models:/models:ro"]
    assert svc["ports"] == ["127.0.0.1:8080:8080"]
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert svc["ulimits"]["memlock"] == -1
    cmd = svc["command"]
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0" and cmd[cmd.index("-m") + 1] == "/models/Qwen3.6-27B-IQ4_NL.gguf"
    assert _errors(text) == []
    cpu = yaml.safe_load(render_compose(spec(args=("-m", "/data/x/m.gguf", "--slot-save-path", "/var/slots")),
                                        "cpu"))["services"]["qwen"]
    assert cpu["image"] == "ghcr.io/ggml-org/llama.cpp:server" and "deploy" not in cpu
    assert cpu["volumes"] == ["/data/x:/models:ro", "/var/slots:/models1"]
    assert "/models1" in cpu["command"]


def test_llamaswap_entry() -> None:
    text = render_llamaswap(spec())
    doc = yaml.safe_load(text)
    cmd = doc["models"]["qwen"]["cmd"]
    assert "--port ${PORT}" in cmd and "--port 8080" not in cmd
    assert _errors(text) == []


def test_render_cli_from_plan(synth_model, with_bin: Path, cli, tmp_path: Path) -> None:
    from tests.render.conftest import SHAPES

    model = synth_model("llama", **SHAPES["llama"])
    for fmt in ("bash", "systemd", "compose", "llama-swap"):
        code, out, err = cli("render", "-f", fmt, str(model), "-c", "2048", "-np", "1", "-t", "2")
        assert code == 0, err
        assert "llamarig 0.1.0" in out and "verdict: fits" in out and "KV K f16 / V f16" in out
        assert "decode" in out  # the speed model's figure
    code, out, err = cli("render", "--ram", "1M", str(model), "-c", "2048")
    assert code == 1 and "does not fit" in err


def test_render_from_script_roundtrip(synth_model, with_bin: Path, cli, tmp_path: Path) -> None:
    from tests.render.conftest import SHAPES

    model = synth_model("llama", **SHAPES["llama"])
    code, out, _ = cli("render", "-o", str(tmp_path / "a.sh"), "--", str(with_bin), "-m", str(model), "-c", "1024")
    assert code == 0 and (tmp_path / "a.sh").stat().st_mode & 0o111
    code, out, err = cli("render", "-f", "systemd", "--from-script", str(tmp_path / "a.sh"))
    assert code == 0, err
    assert f"-m {model}" in out and "-c 1024" in out
    bad = tmp_path / "bad.sh"
    bad.write_text(f"{with_bin} -m {model} \\\n  -c 1024 \\\n  # comment\n  -np 2\n")
    code, _, err = cli("render", "--from-script", str(bad))
    assert code == 1 and "check error" in err
    code, out, err = cli("render", "--fix", "--from-script", str(bad))
    assert code == 0, err
    assert "repaired with `llamarig check --fix`" in out and "-np 2" in out and _errors(out) == []
    code, _, err = cli("render", "--from-script", str(tmp_path / "missing.sh"))
    assert code == 2
