"""Other inference servers' commands, recognised where a user pastes them instead of
llama-server's: FastLLM (``ftllm server``), vLLM (``vllm serve``, ``python -m
vllm.entrypoints.openai.api_server``), SGLang (``python -m sglang.launch_server``), Ollama
(``ollama serve``/``run``, a Modelfile) and LM Studio (``lms server start``, ``lms load``).

The readers keep such a command as an :class:`~llamarig.flags.parsed.Invocation` whose
``engine`` names it (``Parsed.others``), so its flags are never judged as llama-server's;
:mod:`llamarig.flags.engines.fastllm` checks FastLLM's against FastLLM's own parser and
translates what has a llama-server equivalent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llamarig.flags.parsed import Word

__all__ = ["ENGINES", "Engine", "engine_of", "looks_like_modelfile"]


@dataclass(frozen=True)
class Engine:
    """An inference server other than llama-server: its id (``Invocation.engine``), its name
    as people write it, and where its project lives."""

    id: str
    name: str
    url: str


ENGINES: dict[str, Engine] = {e.id: e for e in (
    Engine("fastllm", "FastLLM", "https://github.com/ztxz16/fastllm"),
    Engine("vllm", "vLLM", "https://github.com/vllm-project/vllm"),
    Engine("sglang", "SGLang", "https://github.com/sgl-project/sglang"),
    Engine("ollama", "Ollama", "https://github.com/ollama/ollama"),
    Engine("lmstudio", "LM Studio", "https://lmstudio.ai/docs/cli"),
)}

#: program -> (engine, the subcommands that make it that engine's command; () = any)
_PROGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ftllm": ("fastllm", ()),  # tools/fastllm_pytools/cli.py: server, serve, run, chat, webui, ...
    "vllm": ("vllm", ()),  # vllm serve MODEL (vllm/entrypoints/cli)
    "sglang": ("sglang", ()),
    "ollama": ("ollama", ()),  # ollama serve | run MODEL | create -f Modelfile
    "lms": ("lmstudio", ("server", "load", "get", "ls", "ps", "unload")),  # lms server start, lms load MODEL
}
#: python -m MODULE
_MODULES = {
    "vllm.entrypoints.openai.api_server": "vllm", "vllm.entrypoints.api_server": "vllm",
    "sglang.launch_server": "sglang", "sglang_router.launch_server": "sglang",
    "ftllm.server": "fastllm", "ftllm": "fastllm",
}
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?(\.exe)?$")


def engine_of(prog: str, rest: list[Word]) -> str | None:
    """The engine a command starts (``prog`` and the words after it, as the shell gives them),
    or None when it is not one of :data:`ENGINES`."""
    name = prog.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    hit = _PROGRAMS.get(name.removesuffix(".exe"))
    if hit is not None:
        engine, subcommands = hit
        if not subcommands or (rest and rest[0].text in subcommands):
            return engine
        return None
    if _PYTHON_RE.match(name):
        words = [w.text for w in rest]
        if "-m" in words:
            i = words.index("-m")
            if i + 1 < len(words):
                return _MODULES.get(words[i + 1])
    return None


_MODELFILE_RE = re.compile(r"^\s*FROM\s+\S", re.M | re.I)
_MODELFILE_KEYS_RE = re.compile(r"^\s*(PARAMETER|TEMPLATE|SYSTEM|ADAPTER|LICENSE|MESSAGE)\s", re.M)


def looks_like_modelfile(text: str) -> bool:
    """An Ollama Modelfile (https://github.com/ollama/ollama/blob/main/docs/modelfile.md):
    a ``FROM`` line and at least one ``PARAMETER``/``TEMPLATE``/``SYSTEM``... line."""
    return bool(_MODELFILE_RE.search(text)) and bool(_MODELFILE_KEYS_RE.search(text))
