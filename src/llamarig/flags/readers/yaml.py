"""Reading a YAML file, document by document: a llama-swap config (a ``models:`` mapping), a
docker-compose file (a ``services:`` mapping), Kubernetes manifests (``kind: Deployment`` ...,
with the ConfigMaps of the same file) or a Helm values file (any other mapping with
``command``/``args``/``extraArgs``). Lists are read as argv lists, one item one word, with the
item's line; strings as shell text. Not YAML, or nothing of the above: None.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from llamarig.flags.parsed import Parsed
from llamarig.flags.readers import yaml_nodes as Y
from llamarig.flags.readers.compose import read_compose, read_dotenv
from llamarig.flags.readers.containers import Found, merge_found
from llamarig.flags.readers.kubernetes import (
    config_maps,
    is_workload,
    read_helm_values,
    read_kubernetes,
)
from llamarig.flags.readers.llama_swap import read_llama_swap

if TYPE_CHECKING:
    from yaml.nodes import Node


def _document(d: Node, src: Y.Source, cms: dict[str, list[tuple[str, str, int]]], origin: Path | None) -> tuple[str, Found]:
    """What one YAML document is (llama-swap, compose, a Kubernetes workload, Helm values; "" for
    none of them) and the commands in it."""
    if Y.is_map(Y.get(d, "models")):
        return "llama-swap", read_llama_swap(d, src)
    if Y.is_map(Y.get(d, "services")):
        return "compose", read_compose(d, src, read_dotenv(origin))
    if is_workload(d):
        return "kubernetes", read_kubernetes(d, src, cms)
    if Y.text_of(Y.get(d, "kind")) is None or Y.get(d, "apiVersion") is None:
        more = read_helm_values(d, src)
        return ("helm-values" if more[0] else ""), more
    return "", ([], [])


def parse_yaml(text: str, origin: Path | None = None) -> Parsed | None:
    """Every llama-server command of the file's documents; None when the text is not YAML or
    holds no mapping."""
    docs = Y.compose(text)
    if not docs or not any(Y.is_map(d) for d in docs):
        return None
    src = Y.Source(text)
    cms = config_maps(docs)
    found: Found = ([], [])
    kinds: list[str] = []
    for d in docs:
        if Y.is_map(d):
            kind, more = _document(d, src, cms, origin)
            if kind:
                kinds.append(kind)
            merge_found(found, more)
    if not kinds:
        if not found[1]:
            return None
        kinds.append("yaml")
    kind = kinds[0] if len(set(kinds)) == 1 else "yaml"
    return Parsed(kind, found[0], found[1], [], src.lines())
