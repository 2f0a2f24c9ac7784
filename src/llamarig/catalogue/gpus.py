"""The built-in GPU catalogue (src/llamarig/data/gpus.json): names, VRAM, bandwidth, sources."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from importlib import resources

from llamarig.diagnostics import Diagnostic, info
from llamarig.errors import InputError, UnknownNameError
from llamarig.hardware.types import GPU
from llamarig.i18n import _, unknown_name
from llamarig.units import GiB, MiB


def _norm(s: str) -> str:
    s = s.lower()
    s = re.sub(r"\b(nvidia|geforce|amd|radeon|apple|tesla)\b", "", s)
    s = s.replace("rtx", "").replace("gb", "g")
    return re.sub(r"[^a-z0-9]", "", s)


def _cc(v: str | None) -> int | None:
    """"9.0" -> 900 (major x 100 + minor x 10, as ggml-cuda's cc)."""
    if not v:
        return None
    major, minor = str(v).split(".")
    return int(major) * 100 + int(minor) * 10


@lru_cache(maxsize=1)
def load_gpus() -> tuple[GPU, ...]:
    data = json.loads(resources.files("llamarig.data").joinpath("gpus.json").read_text())
    out = []
    for e in data["gpus"]:
        out.append(GPU(
            id=e["id"], name=e["name"], backend=e["backend"],
            memory_bytes=int(e["memory_mib"]) * MiB, bandwidth_gbs=e.get("bandwidth_gbs"),
            fp16_tflops=e.get("fp16_tflops"), overhead_bytes=int(e.get("overhead_mib", 0)) * MiB,
            unified_memory=bool(e.get("unified_memory", False)),
            system_memory_bytes=int(e["system_memory_mib"]) * MiB if e.get("system_memory_mib") else None,
            source=e.get("source", ""), aliases=tuple(e.get("aliases", ())),
            compute_capability=_cc(e.get("compute_capability")),
        ))
    return tuple(out)


@lru_cache(maxsize=1)
def _index() -> dict[str, GPU]:
    idx: dict[str, GPU] = {}
    for g in load_gpus():
        for key in (g.id, g.name, *g.aliases):
            idx.setdefault(_norm(key), g)
    return idx


def find_gpu(name: str) -> GPU:
    """Exact id/alias/name match after normalisation ('RTX 3090', 'rtx3090', '3090')."""
    key = _norm(name)
    idx = _index()
    if key in idx:
        return idx[key]
    # unique prefix / containment match ("a100" already aliased; "4060" -> 4060 ti)
    cands = {g.id: g for k, g in idx.items() if key and (k.startswith(key) or key in k)}
    if len(cands) == 1:
        return next(iter(cands.values()))
    close = difflib.get_close_matches(key, list(idx), n=8, cutoff=0.5)
    sugg: list[str] = []
    for c in close:
        if idx[c].id not in sugg:
            sugg.append(idx[c].id)
    for gid in cands:
        if gid not in sugg:
            sugg.append(gid)
    raise unknown_name(_("GPU"), name, sugg[:4])


def parse_gpu_arg(text: str) -> GPU:
    """``NAME`` or ``NAME:VRAM_GB`` (VRAM in GiB as the card is marketed, e.g. 3090:24)."""
    name, _sep, vram = text.partition(":")
    if not name.strip():
        raise InputError(_("--gpu '{text}': expected NAME or NAME:VRAM_GB (see `llamarig gpus`)").format(text=text))
    try:
        g = find_gpu(name.strip())
    except UnknownNameError:
        if not vram:
            raise
        # an unknown card with an explicit size: plan memory anyway, no speed data
        g = GPU(id=_norm(name) or "gpu", name=name.strip(), backend="CUDA", memory_bytes=0,
                bandwidth_gbs=None, fp16_tflops=None, overhead_bytes=300 * MiB,
                source="user-given size (not in the catalogue)")
    if vram:
        try:
            gb = float(vram)
        except ValueError:
            raise InputError(_("--gpu '{text}': VRAM '{vram}' is not a number of GB").format(text=text, vram=vram)) from None
        if gb <= 0 or gb > 4096:
            raise InputError(_("--gpu '{text}': VRAM {vram} GB is not plausible").format(text=text, vram=vram))
        g = replace(g, memory_bytes=int(gb * GiB))
    return g


def gpu_match_note(name: str) -> str | None:
    """When ``name`` (not an exact id or full name) also matches other catalogue entries by
    prefix ('A100' -> the 40 GB card, but the 80 GB one too), say which was taken and the others."""
    text = name.strip()
    try:
        g = find_gpu(text)
    except UnknownNameError:
        return None
    if text.lower() in (g.id.lower(), g.name.lower()):
        return None
    key = _norm(text)
    others = [o for o in load_gpus() if o.id != g.id
              and any(_norm(k).startswith(key) for k in (o.id, o.name, *o.aliases))]
    if not key or not others:
        return None
    alts = ", ".join(f"{o.id} ({o.memory_bytes / GiB:g} GiB)" for o in others)
    return (f"--gpu {text}: took {g.id} ({g.name}, {g.memory_bytes / GiB:g} GiB); it also matches {alts} "
            "(give the id to choose)")


#: the diagnostic code of a --gpu name that matched several catalogue entries
GPU_NAME_MATCH = "gpu-name-match"


def read_gpu_args(texts: Sequence[str]) -> tuple[tuple[GPU, ...], tuple[Diagnostic, ...]]:
    """``--gpu NAME[:VRAM_GB]`` words as GPU values (parse_gpu_arg), and a note for each name that
    matches several catalogue entries (which one was taken)."""
    notes = (gpu_match_note(t.partition(":")[0]) for t in texts)
    return tuple(parse_gpu_arg(t) for t in texts), tuple(info(GPU_NAME_MATCH, n) for n in notes if n)
