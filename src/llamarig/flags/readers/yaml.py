"""Reading a YAML file: a llama-swap config (a ``models:`` mapping) or a docker-compose file (a
``services:`` mapping); anything else is not read as YAML."""

from __future__ import annotations

from llamarig.flags.parsed import Parsed
from llamarig.flags.readers.compose import read_compose
from llamarig.flags.readers.llama_swap import read_llama_swap


def parse_yaml(text: str) -> Parsed | None:
    """docker-compose ``services.*.command`` / llama-swap ``models.*.cmd``; None if neither."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    lines = text.split("\n")
    if isinstance(data.get("models"), dict):
        return read_llama_swap(data, lines)
    if isinstance(data.get("services"), dict):
        return read_compose(data, lines)
    return None
