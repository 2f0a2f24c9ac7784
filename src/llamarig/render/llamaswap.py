"""A llama-swap (github.com/mostlygeek/llama-swap) config entry: ``cmd:`` with ``${PORT}`` (the
port llama-swap assigns and proxies to), bound to 127.0.0.1 since llama-swap is the front door."""

from __future__ import annotations

import json

from llamarig.i18n import _
from llamarig.render.common import RenderSpec


def _yaml_word(t: str) -> str:
    if t == "${PORT}":
        return t
    if t and all(c.isalnum() or c in "-_./:,=+@" for c in t):
        return t
    return json.dumps(t)  # a double-quoted word; llama-swap splits cmd like a shell


def render_llamaswap(spec: RenderSpec, model_id: str | None = None, ttl: int | None = None) -> str:
    cmd = spec.command().set("--port", "${PORT}").set("--host", "127.0.0.1")
    s2 = RenderSpec(spec.binary, tuple(cmd.server_args()), spec.name, spec.figures, spec.env, spec.schema,
                    spec.version, spec.wrappers, lang=spec.lang, parsed=cmd)
    mid = model_id or spec.name
    out = s2.comments(s2.header())
    out += spec.comments(["", _("merge this entry under `models:` of your llama-swap config.yaml"), ""]
            + s2.flag_table())
    head = " ".join(_yaml_word(t) for t in (*spec.wrappers, spec.binary))
    out += ["models:", f"  {json.dumps(mid)}:", "    cmd: |", f"      {head}"]
    for g in s2.groups():
        out.append("      " + " ".join(_yaml_word(t) for t in g))
    if spec.env:
        out.append("    env:")
        out += [f"      - {json.dumps(f'{k}={v}')}" for k, v in spec.env]
    if ttl:
        out.append(f"    ttl: {ttl}")
    return "\n".join(spec.local(out)) + "\n"
