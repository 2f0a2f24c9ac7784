"""Renderers: syntax of every format, `llamarig check` with zero errors, systemd-analyze."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from llamarig.app.check import check
from llamarig.flags.argv import Command
from llamarig.flags.schema import load_bundled
from llamarig.render.bash import render_bash
from llamarig.render.common import RenderSpec, uses_mlock
from llamarig.render.compose import render_compose
from llamarig.render.llamaswap import render_llamaswap
from llamarig.render.systemd import render_systemd, systemd_quote

SCHEMA = load_bundled()
BIN = "/opt/llama.cpp/bin/llama-server"
ARGS = ("-m", "/models/Qwen3.6-27B-IQ4_NL.gguf", "--mmproj", "/models/mmproj-F16.gguf", "-c", "105000",
        "-np", "1", "-ngl", "99", "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0", "--jinja",
        "--load-mode", "mlock", "-a", "qwen 100% $HOME", "--host", "127.0.0.1", "--port", "8080")



def _comments(text: str) -> str:
    """A rendered file's comments as running text (they wrap at 80 columns)."""
    return " ".join(ln.lstrip("#").strip() for ln in text.splitlines() if ln.lstrip().startswith("#"))

def spec(**kw: object) -> RenderSpec:
    d: dict = dict(binary=BIN, args=ARGS, name="qwen", figures=("plan: fits", "speed: 40 tok/s"),
                   env=(("CUDA_VISIBLE_DEVICES", "0"),), schema=SCHEMA)
    d.update(kw)
    return RenderSpec(**d)  # type: ignore[arg-type]


def _errors(text: str, kind: str | None = None) -> list:
    rep = check(text, schema=SCHEMA, kind=kind, cores=8)
    parsed, findings = rep.parsed, rep.findings
    assert parsed.invocations, text
    return [f for f in findings if f.severity == "error"]


def test_flag_groups_and_values() -> None:
    cmd = Command.parse(["-m", "a.gguf", "--jinja", "-ts", "3,1", "--rope-scale", "-1.5", "-c", "1"], SCHEMA)
    assert cmd.groups() == [["-m", "a.gguf"], ["--jinja"], ["-ts", "3,1"], ["--rope-scale", "-1.5"], ["-c", "1"]]
    # llama-server has no --opt=value syntax (common/arg.cpp): `--port=2` is one unknown word
    assert Command.parse(["--port", "1", "--port=2"], SCHEMA).get("--port") == "1"
    assert Command.parse(["--port", "1", "-c", "5"], SCHEMA).set("--port", "${PORT}").server_args() == \
        ["-c", "5", "--port", "${PORT}"]
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


def test_wrappers_and_directory_round_trip() -> None:
    """A spec with the script's wrappers and directory renders them, and reading the output back
    gives the same wrappers, directory and binary (bash and systemd)."""
    from llamarig.flags.readers import parse_text

    s = spec(wrappers=("/usr/bin/stdbuf", "-oL", "-eL", "taskset", "-c", "0-7"), workdir="/srv/my llm",
             binary="/srv/my llm/llama3-server")
    for text in (render_bash(s), render_systemd(s)):
        inv = parse_text(text).invocations[0]
        assert inv.wrappers == list(s.wrappers) and inv.cwd == "/srv/my llm", text
        assert inv.program == s.binary and [w.text for w in inv.args] == list(ARGS)
    assert "WorkingDirectory=/srv/my llm\n" in render_systemd(s)
    cmd = next(ln for ln in render_llamaswap(s).splitlines() if "llama3-server" in ln)
    assert cmd.split()[:6] == ["/usr/bin/stdbuf", "-oL", "-eL", "taskset", "-c", "0-7"]


def test_from_script_keeps_cd_wrappers_and_binary(synth_model, with_bin: Path, cli, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's script `cd ~ && /usr/bin/stdbuf -oL -eL ./llama3-server ...`: the output runs the
    script's own binary, in the script's directory, behind its wrapper, and says so; the rendered
    launcher really starts that server (and stops it by its pid)."""
    from tests.render.conftest import SHAPES

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (home / "llama3-server").symlink_to(with_bin)
    shutil.copy(synth_model("llama", **SHAPES["llama"]), home / "tiny.gguf")
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\ncd ~ && /usr/bin/stdbuf -oL -eL ./llama3-server -m tiny.gguf -c 1024 "
                      "--port 18417 -t 1\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = cli("render", "-o", str(tmp_path / "l.sh"), "--from-script", str(script))
    assert code == 0, err
    out = (tmp_path / "l.sh").read_text()
    assert f"  cd {home}\n  exec /usr/bin/stdbuf -oL -eL {home}/llama3-server \\\n" in out, out
    assert f"-m {home}/tiny.gguf" in out
    said = _comments(out)  # comments wrap at 80 columns: read them as sentences
    assert f"directory: the script's `cd ~` kept ({home})" in said
    assert "wrappers: the script's `/usr/bin/stdbuf -oL -eL` kept" in said
    assert f"binary: the script's ./llama3-server ({home}/llama3-server) kept" in said
    assert str(with_bin.parent) not in out  # never the build cache
    code, unit, err = cli("render", "-f", "systemd", "--from-script", str(script))
    assert code == 0, err
    assert f"WorkingDirectory={home}\n" in unit and f"ExecStart=/usr/bin/stdbuf -oL -eL {home}/llama3-server \\" in unit
    # the launcher runs: stdbuf execs the server, so the PID file holds llama-server's own pid
    env = {**os.environ, "LLAMARIG_RUN_DIR": str(tmp_path / "run")}
    pid_file = tmp_path / "run" / "llama-server-18417.pid"
    try:
        r = subprocess.run(["bash", str(tmp_path / "l.sh"), "start"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        pid = int(pid_file.read_text())
        assert Path(f"/proc/{pid}/cwd").resolve() == home.resolve()
        assert Path(f"/proc/{pid}/exe").resolve() == with_bin.resolve()
        r = subprocess.run(["bash", str(tmp_path / "l.sh"), "stop"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0 and "stopped" in r.stdout, r.stdout + r.stderr
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_from_script_bare_name_stays_a_name(with_bin: Path, cli, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`nohup llama-server ...` with no llama-server on PATH: the output runs `llama-server` from
    PATH as the script does (not the build cache), and says which flags it was checked against."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    script = tmp_path / "run.sh"
    script.write_text("nohup llama-server -hf ggml-org/tiny -c 1024 > srv.log 2>&1 &\n")
    code, out, err = cli("render", "--from-script", str(script))
    assert code == 0, err
    assert "  exec nohup llama-server \\\n" in out
    assert "binary: the script's llama-server kept" in out and "flags: checked against" in out


# ---------------------------------------------------------------- the final command is checked


def test_render_refuses_check_errors_in_a_direct_command(synth_model, with_bin: Path, cli, tmp_path: Path) -> None:
    from tests.render.conftest import SHAPES

    model = synth_model("llama", **SHAPES["llama"])
    out_file = tmp_path / "t.sh"
    for fmt in ("bash", "systemd", "compose", "llama-swap"):
        code, out, err = cli("render", "-f", fmt, "-o", str(out_file), str(model), "-c", "2048", "--bogus-flag", "3")
        assert code == 1 and out == "" and not out_file.exists(), (fmt, err)
        lines = err.strip().splitlines()
        assert lines[0].startswith("llamarig: error: [unknown-flag] `--bogus-flag`"), err
        assert "--force" in lines[-1] and str(with_bin) in lines[-1]  # the installed build's schema
        assert len(lines) == 2
    # a value llama-server rejects, and an error rule beyond the parse (-ctv q8_0 with -fa off)
    code, _, err = cli("render", str(model), "-c", "lots")
    assert code == 1 and "[invalid-value]" in err
    code, _, err = cli("render", str(model), "-c", "2048", "-fa", "off", "-ctv", "q8_0")
    assert code == 1 and "[quantized-v-fa-off]" in err
    # --force renders it anyway and says so
    code, out, err = cli("render", "--force", str(model), "-c", "2048", "--bogus-flag", "3")
    assert code == 0 and "--bogus-flag 3" in out
    assert "llamarig: warning: [unknown-flag]" in err and "--force: render anyway" in err
    # warnings are printed, the output is rendered
    code, out, err = cli("render", str(model), "-c", "2048", "--host", "0.0.0.0")
    assert code == 0 and "--host 0.0.0.0" in out
    assert "llamarig: warning: [public-no-api-key]" in err


def test_llamarig_options_after_the_model_are_refused(synth_model, with_bin: Path, cli, tmp_path: Path,
                                                      state_dir: Path) -> None:
    from tests.render.conftest import SHAPES

    model = synth_model("llama", **SHAPES["llama"])
    out_file = tmp_path / "tiny.sh"
    for extra in (["-o", str(out_file)], ["--out", str(out_file)], ["-f", "systemd"], ["--name=tiny"], ["--force"],
                  ["--gpu", "rtx3090", "-o", str(out_file)]):
        code, out, err = cli("render", "--name", "tiny", str(model), "-c", "2048", *extra)
        assert code == 2 and out == "" and not out_file.exists(), (extra, out, err)
        assert "put llamarig options before the model" in err and extra[0].split("=")[0] in err
        assert len(err.strip().splitlines()) == 1
    # what the plan is made on is taken after the model, as plan takes it (docs/render.md "Input")
    code, out, err = cli("render", str(model), "-c", "2048", "--gpu", "rtx3090", "--ram", "64G", "--lang", "zh")
    assert code == 0 and "CUDA0" in out and "RTX 3090" in out and "--gpu" not in out.split("\nexec")[-1], err
    # the explicit `--` form too
    code, _, err = cli("render", "--", str(with_bin), "-m", str(model), "-o", str(out_file))
    assert code == 2 and "put llamarig options before the model" in err
    # launch: refused before anything is started
    code, _, err = cli("launch", "-d", str(model), "-c", "512", "--ram", "1M")
    assert code == 2 and "--ram" in err and "put llamarig options before the model" in err
    code, _, err = cli("launch", "-d", str(model), "-c", "512", "--json")
    assert code == 2 and "--json" in err
    assert not list(state_dir.glob("launch-*"))
    # a llamarig option that is also a llama-server flag goes to the server, as documented
    code, out, err = cli("render", str(model), "-c", "2048", "--port", "18612")
    assert code == 0 and "--port 18612" in out, err
    # a value that looks like a llamarig option is a value, not an option
    code, out, err = cli("render", str(model), "-c", "2048", "-a", "--name")
    assert code == 0 and "-a --name" in out, err
    # the option where it belongs works
    code, _, err = cli("render", "--name", "tiny", "-o", str(out_file), str(model), "-c", "2048")
    assert code == 0 and out_file.is_file(), err


# ---------------------------------------------------------------- paths in the outputs


def test_rendered_paths_are_absolute(synth_model, with_bin: Path, cli, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.render.conftest import SHAPES

    src = synth_model("llama", **SHAPES["llama"])
    work = tmp_path / "work"
    (work / "loras").mkdir(parents=True)
    shutil.copy(src, work / "tiny.gguf")
    (work / "loras" / "a.gguf").write_bytes(b"")
    (work / "tmpl.jinja").write_text("{{ messages }}")
    monkeypatch.chdir(work)
    flags = ("tiny.gguf", "-c", "2048", "-np", "1", "-t", "2", "--lora", "loras/a.gguf,loras/b.gguf",
             "--lora-scaled", "loras/a.gguf:0.5", "--chat-template-file", "tmpl.jinja", "--log-file", "logs/srv.log",
             "--slot-save-path", "slots", "--hf-file", "q.gguf", "--port", "18613")
    want = {"-m": f"{work}/tiny.gguf", "--lora": f"{work}/loras/a.gguf,{work}/loras/b.gguf",
            "--lora-scaled": f"{work}/loras/a.gguf:0.5", "--chat-template-file": f"{work}/tmpl.jinja",
            "--log-file": f"{work}/logs/srv.log", "--slot-save-path": f"{work}/slots",
            "--hf-file": "q.gguf"}  # a file inside a Hugging Face repo: not a local path
    outs = {}
    for fmt in ("bash", "systemd", "llama-swap", "compose"):
        code, out, err = cli("render", "-f", fmt, "--name", "tiny", *flags)
        assert code == 0, (fmt, err)
        outs[fmt] = out
        assert "made absolute (against " in _comments(out)
    for fmt in ("bash", "systemd", "llama-swap"):
        rep = check(outs[fmt], schema=SCHEMA)
        parsed, findings = rep.parsed, rep.findings
        argv = parsed.invocations[0].argv
        for flag, value in want.items():
            assert argv[argv.index(flag) + 1] == value, (fmt, flag, argv)
        assert [f for f in findings if f.severity == "error"] == [], fmt
    p = tmp_path / "tiny.sh"
    p.write_text(outs["bash"])
    subprocess.run(["bash", "-n", str(p)], check=True)
    assert f"\nWorkingDirectory={work}\n" in outs["systemd"]
    if shutil.which("systemd-analyze"):
        unit = tmp_path / "tiny.service"
        unit.write_text(outs["systemd"])
        r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    # compose: the same files, through mounts (read-only unless llama-server writes there)
    svc = yaml.safe_load(outs["compose"])["services"]["tiny"]
    mounts = {v.split(":")[0]: v for v in svc["volumes"]}
    assert mounts[str(work)] == f"{work}:/models:ro"
    assert mounts[f"{work}/loras"] == f"{work}/loras:/models1:ro"
    assert mounts[f"{work}/logs"] == f"{work}/logs:/models2"  # --log-file: written
    assert mounts[f"{work}/slots"] == f"{work}/slots:/models3"
    cmd = svc["command"]
    assert cmd[cmd.index("-m") + 1] == "/models/tiny.gguf"
    assert cmd[cmd.index("--lora") + 1] == "/models1/a.gguf,/models1/b.gguf"
    assert cmd[cmd.index("--lora-scaled") + 1] == "/models1/a.gguf:0.5"
    assert cmd[cmd.index("--chat-template-file") + 1] == "/models/tmpl.jinja"
    assert cmd[cmd.index("--hf-file") + 1] == "q.gguf"
    assert _errors(outs["compose"]) == []


def test_catalogue_model_id_is_not_a_path(with_bin: Path, cli) -> None:
    """A launcher runs llama-server, which needs a file: a catalogue id (or plan's --mmproj f16
    shorthand) is refused with one line saying how to get the file, never written as a path."""
    code, out, err = cli("render", "--gpu", "rtx3090", "qwen3.6-27b:iq4_nl", "-c", "2048")
    assert code == 2 and out == "", out
    assert "catalogue id, not a file" in err and "download" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("render", "--gpu", "rtx3090", "/dev/null", "--mmproj", "f16")
    assert code == 2 and "--mmproj f16" in err and "./f16" not in out


def test_from_script_paths_resolve_against_the_script(synth_model, with_bin: Path, cli, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.render.conftest import SHAPES

    d = tmp_path / "deploy"
    d.mkdir()
    shutil.copy(synth_model("llama", **SHAPES["llama"]), d / "tiny.gguf")
    (d / "run.sh").write_text(f"{with_bin} -m tiny.gguf -c 1024 --log-file srv.log\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(d / "tiny.gguf", elsewhere / "tiny.gguf")  # a file of the same name here must not win
    monkeypatch.chdir(elsewhere)
    code, out, err = cli("render", "-f", "systemd", "--from-script", str(d / "run.sh"))
    assert code == 0, err
    assert f"-m {d}/tiny.gguf" in out  # the script's, not the current directory's
    assert f"--log-file {d}/srv.log" in out  # not there yet: still the script's directory
    assert f"WorkingDirectory={d}\n" in out
    # a `cd DIR` in the script: its relative paths are taken from DIR
    (d / "sub").mkdir()
    shutil.copy(d / "tiny.gguf", d / "sub" / "tiny.gguf")
    (d / "run2.sh").write_text(f"cd sub && {with_bin} -m tiny.gguf -c 1024\n")
    code, out, err = cli("render", "-f", "systemd", "--from-script", str(d / "run2.sh"))
    assert code == 0, err
    assert f"-m {d}/sub/tiny.gguf" in out


def test_working_directory_without_a_model_file() -> None:
    from llamarig.render.argv import working_directory

    assert working_directory(["-m", "/srv/m/a.gguf", "-c", "1"], SCHEMA) == "/srv/m"
    assert working_directory(["-hf", "user/repo"], SCHEMA) == str(Path.cwd())


def test_script_errors_are_reported_once_and_refused_by_launch(synth_model, with_bin: Path, cli, tmp_path: Path,
                                                                state_dir: Path) -> None:
    from tests.render.conftest import SHAPES

    model = synth_model("llama", **SHAPES["llama"])
    bad = tmp_path / "bad.sh"
    bad.write_text(f"{with_bin} -m {model} -c 1024 --bogus\n")
    code, out, err = cli("render", "--force", "--from-script", str(bad))
    assert code == 0 and "--bogus" in out
    assert err.count("[unknown-flag]") == 1 and "--force: render anyway" in err
    # launch takes the same input: refused before anything starts
    code, _, err = cli("launch", "-d", "--from-script", str(bad))
    assert code == 1 and "llamarig: error: [unknown-flag] `--bogus`" in err
    assert not list(state_dir.glob("launch-*"))


def test_compose_image_follows_the_devices_named() -> None:
    """-dev CUDA1,CUDA0 with no --gpu given: the CUDA image, not the CPU one."""
    from llamarig.app.render import compose_backend_for

    assert compose_backend_for(["-m", "m.gguf", "--device", "CUDA1,CUDA0"], None) == "cuda"
    assert compose_backend_for(["-m", "m.gguf", "-dev", "Vulkan0"], None) == "vulkan"
    assert compose_backend_for(["-m", "m.gguf"], None) == "cpu"


def test_compose_image_from_the_devices_end_to_end(synth_model, with_bin: Path, cli) -> None:
    """`render -f compose -- llama-server ... --device CUDA1,CUDA0` (two GPUs named, no --gpu):
    the service runs the CUDA image."""
    from tests.render.conftest import SHAPES

    model = synth_model("llama", **SHAPES["llama"])
    code, out, err = cli("render", "-f", "compose", "--", "llama-server", "-m", str(model), "-c", "1024",
                         "--device", "CUDA1,CUDA0")
    assert code == 0, err
    assert "image: ghcr.io/ggml-org/llama.cpp:server-cuda\n" in out


def test_from_unit_keeps_working_directory_and_wrapper(with_bin: Path, cli, tmp_path: Path) -> None:
    """A unit as input: its WorkingDirectory= and `stdbuf -oL` stay; its binary, not on this
    machine, stays its own, and the output says which flags it was checked against."""
    unit = tmp_path / "llm.service"
    unit.write_text("[Service]\nWorkingDirectory=-/srv/llm\n"
                    "ExecStart=/usr/bin/stdbuf -oL /opt/llama/llama-server -hf ggml-org/tiny -c 1024\n")
    code, out, err = cli("render", "-f", "systemd", "--from-script", str(unit))
    assert code == 0, err
    assert "WorkingDirectory=/srv/llm\n" in out
    assert "ExecStart=/usr/bin/stdbuf -oL /opt/llama/llama-server \\" in out
    assert "directory: the script's WorkingDirectory=/srv/llm kept (/srv/llm)" in _comments(out)
    assert "flags: checked against" in out and "(/opt/llama/llama-server is not on this machine)" in out
