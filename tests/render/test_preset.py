"""`render --format preset`: llama-server's own router preset (the INI `--models-preset` reads).
The real llama-server (build 11434) is started in router mode with the rendered file: it must
list the model, load it on startup with the rendered options, and answer a request for it."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from llamarig.flags.argv import Command
from llamarig.flags.schema import load_bundled
from llamarig.render.common import RenderSpec
from llamarig.render.preset import render_preset

from .conftest import SHAPES

SCHEMA = load_bundled()


def _spec(args: tuple[str, ...], **kw: object) -> RenderSpec:
    d: dict = dict(binary="/opt/llama.cpp/bin/llama-server", args=args, name="llama-server-8080", schema=SCHEMA)
    d.update(kw)
    return RenderSpec(**d)  # type: ignore[arg-type]


def _sections(text: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    cur = ""
    for line in text.splitlines():
        if not line or line.startswith(";"):
            continue
        if line.startswith("["):
            cur = line.strip("[]")
            out[cur] = {}
            continue
        k, v = line.split(" = ", 1)
        out.setdefault(cur, {})[k] = v
    return out


def test_sections_and_keys() -> None:
    text = render_preset(_spec(("-m", "/m/q.gguf", "-c", "8192", "-np", "2", "-no-kvu", "-fa", "on", "-t", "8",
                                "-ot", "a=CPU", "-ot", "b=CPU", "--host", "0.0.0.0", "--port", "9000",
                                "--api-key", "k", "--jinja")), "q")
    s = _sections(text)
    assert s[""] == {"version": "1"}
    assert s["*"] == {"flash-attn": "on", "threads": "8"}  # the machine's options
    assert s["q"] == {"model": "/m/q.gguf", "ctx-size": "8192", "parallel": "2", "kv-unified": "false",
                      "override-tensor": "a=CPU,b=CPU", "jinja": "true", "load-on-startup": "true"}
    # the router's own options go on its command line, written in a comment
    assert "--models-preset FILE.ini --host 0.0.0.0 --port 9000 --api-key k" in text


@pytest.mark.parametrize("args, why", [
    (("-m", "/m.gguf", "--chat-template", "x #y"), "';' or '#' after a blank"),
    (("-m", "/m.gguf", "--bogus", "1"), "not flags of this llama-server"),
    (("-m", "/m.gguf", "--control-vector-layer-range", "1", "3"), "two values"),
    (("-m", "/m.gguf", "--samplers", " top_k"), "start or end with a blank"),
])
def test_what_a_preset_cannot_say_is_refused(args: tuple[str, ...], why: str) -> None:
    from llamarig.errors import InputError

    with pytest.raises(InputError, match=why):
        render_preset(_spec(args), "m")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
    return kids


@pytest.mark.server
def test_real_router_loads_the_rendered_preset(synth_model, server_bin: Path, with_bin: Path, cli,
                                               tmp_path: Path, llama_server) -> None:
    model = synth_model("llama", **SHAPES["llama"])
    ini = tmp_path / "models.ini"
    code, _out, err = cli("render", "-f", "preset", "-o", str(ini), str(model), "-c", "2048", "-np", "1",
                          "-no-kvu", "-fa", "on", "-t", "2", "-ctk", "q8_0", "-ctv", "q8_0", "--jinja",
                          "--temp", "0.7", "-a", "tiny-chat", "--metrics")
    assert code == 0, err
    text = ini.read_text()
    assert "[tiny-chat]" in text and "[*]" in text and f"--models-preset {ini}" in text
    router = llama_server(None, "--models-preset", str(ini))  # no model: router mode (server.cpp:150-153)
    children: list[int] = []
    try:
        deadline = time.monotonic() + 120
        entry: dict = {}
        while time.monotonic() < deadline:
            entry = next(m for m in router.get("/models")["data"] if m["id"] == "tiny-chat")
            if entry["status"]["value"] in ("loaded", "failed"):
                break
            time.sleep(0.2)
        children = _children(router.proc.pid)
        assert entry["status"]["value"] == "loaded", entry
        # the child runs every rendered option ([*] cascaded under the model's section)
        got = Command.parse(entry["status"]["args"], SCHEMA, program=True)
        for name, value in (("--ctx-size", "2048"), ("--parallel", "1"), ("--flash-attn", "on"), ("--threads", "2"),
                            ("--cache-type-k", "q8_0"), ("--cache-type-v", "q8_0"), ("--temp", "0.7"),
                            ("--model", str(model.resolve()))):
            assert got.get(name) == value, (name, entry["status"]["args"])
        assert got.enabled("--kv-unified") is False and got.has("--jinja") and got.has("--metrics")
        answer = router.post("/v1/chat/completions", {"model": "tiny-chat", "max_tokens": 4,
                                                      "messages": [{"role": "user", "content": "hi"}]})
        assert answer["choices"]
    finally:
        router.stop()
        for pid in children:  # the router stops its children; one that outlived it is stopped here, by pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"child {pid} outlived the router")
