"""A docker compose service for the official llama.cpp server images
(ghcr.io/ggml-org/llama.cpp:server, :server-cuda, :server-vulkan, :server-rocm; their ENTRYPOINT
is /app/llama-server and HEALTHCHECK curls :8080/health, see .devops/*.Dockerfile in llama.cpp).
Host files named in the flags (model, mmproj, draft, LoRA, template, ...: every path-valued option
of the flag schema, see llamarig.render.argv) are mounted read-only under /models, /models1, ...;
the directories of files llama-server writes (--log-file, --slot-save-path, ...) read-write."""

from __future__ import annotations

import json
import os
from pathlib import PurePosixPath

from llamarig.i18n import _
from llamarig.render.argv import PathOption, map_command
from llamarig.render.common import RenderSpec

IMAGES = {
    "cpu": "ghcr.io/ggml-org/llama.cpp:server",
    "cuda": "ghcr.io/ggml-org/llama.cpp:server-cuda",
    "vulkan": "ghcr.io/ggml-org/llama.cpp:server-vulkan",
    "rocm": "ghcr.io/ggml-org/llama.cpp:server-rocm",
}


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def render_compose(spec: RenderSpec, backend: str = "cpu", gpu_ids: tuple[str, ...] = ()) -> str:
    mounts: dict[str, str] = {}  # host dir -> container dir
    writable: set[str] = set()

    def mount(po: PathOption, value: str) -> str:
        p = PurePosixPath(os.path.abspath(os.path.expanduser(value)))
        host_dir = str(p if po.is_dir else p.parent)
        if host_dir not in mounts:
            mounts[host_dir] = "/models" if not mounts else f"/models{len(mounts)}"
        if po.written:
            writable.add(host_dir)
        return mounts[host_dir] if po.is_dir else f"{mounts[host_dir]}/{p.name}"

    # every local path option of the schema (llamarig.render.argv): its directory is mounted
    cmd = map_command(spec.command(), mount, spec.schema)
    port = spec.port
    host = spec.host
    publish_host = "127.0.0.1" if host in ("127.0.0.1", "localhost", "::1") else host
    # inside the container; published below
    cmd = cmd.set("--host", "0.0.0.0").set("--port", str(port))
    s2 = RenderSpec(spec.binary, tuple(cmd.server_args()), spec.name, spec.figures, spec.env, spec.schema,
                    spec.version, lang=spec.lang, parsed=cmd)
    image = IMAGES.get(backend, backend)
    out = s2.comments(s2.header())
    out += spec.comments([
        "", _("docker compose up -d   (image {image}: its entrypoint is /app/llama-server)").format(image=image), ""]
        + s2.flag_table())
    out += ["services:", f"  {spec.name}:", f"    image: {image}", "    restart: unless-stopped",
            "    ports:", f"      - {_q(f'{publish_host}:{port}:{port}')}"]
    if mounts:
        out.append("    volumes:")
        out += [f"      - {_q(f'{h}:{c}' + ('' if h in writable else ':ro'))}" for h, c in mounts.items()]
    if spec.env:
        out.append("    environment:")
        out += [f"      {k}: {_q(v)}" for k, v in spec.env]
    if spec.mlock:
        out += ["    ulimits:", "      memlock: -1"]
    out.append("    command:")
    for g in s2.groups():
        out.append("      # " + " ".join(g))
        out += [f"      - {_q(t)}" for t in g]
    if backend == "cuda":
        dev = ("        - driver: nvidia", "          count: all") if not gpu_ids else (
            "        - driver: nvidia", f"          device_ids: [{', '.join(_q(g) for g in gpu_ids)}]")
        out += ["    deploy:", "      resources:", "        reservations:", "          devices:",
                *("  " + d for d in dev), "            capabilities: [gpu]"]
    elif backend in ("vulkan", "rocm"):
        out += ["    devices:", "      - /dev/dri:/dev/dri"] + (["      - /dev/kfd:/dev/kfd"] if backend == "rocm" else [])
    out += ["    healthcheck:",
            f'      test: ["CMD", "curl", "-f", "http://localhost:{port}/health"]',
            "      interval: 30s", "      timeout: 5s", "      start_period: 600s", "      retries: 3"]
    return "\n".join(spec.local(out)) + "\n"


__all__ = ["IMAGES", "render_compose"]
