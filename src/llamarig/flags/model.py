"""The model a checked command loads: its GGUF header (or a catalogue entry) for the rules that
need it (llamarig.flags.rules.model)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from llamarig.errors import InputError, LlamarigError
from llamarig.flags.parsed import Invocation
from llamarig.flags.rules.context import Context
from llamarig.gguf.spec import load_spec
from llamarig.i18n import _

if TYPE_CHECKING:
    from llamarig.gguf.spec import ModelSpec


def model_loader(explicit_model: str | None, base_dir: Path | None) -> Callable[[Invocation, Context], Context]:
    """Load the ModelSpec of ``-m`` (or ``--model`` given to llamarig) when it is a readable GGUF."""
    cache: dict[str, tuple[ModelSpec | None, str | None]] = {}  # path or catalogue id -> (spec, error)
    is_file: dict[Path, bool] = {}  # one stat per path, not one per invocation naming it
    found: dict[str, str] = {}  # -m as written -> the file it names ("" none)

    def exists(p: Path) -> bool:
        hit = is_file.get(p)
        if hit is None:
            hit = is_file[p] = p.is_file()
        return hit

    def load(inv: Invocation, ctx: Context) -> Context:
        path = explicit_model
        if path is None:
            args = inv.intended_args
            for i, w in enumerate(args[:-1]):
                if w.text in ("-m", "--model"):
                    path = args[i + 1].text
        if not path:
            return ctx
        hit = found.get(path)
        if hit is None:  # one look per distinct -m, not one per invocation naming it
            cands = [Path(os.path.expanduser(path))]
            if base_dir is not None and not Path(path).is_absolute():
                cands.append(base_dir / path)
            hit = found[path] = next((str(c) for c in cands if exists(c)), "")
        if hit:
            key = hit
            if key not in cache:
                try:
                    cache[key] = (load_spec(Path(key)), None)
                except LlamarigError as e:
                    cache[key] = (None, str(e))
                except Exception as e:  # a broken file must not crash the linter
                    cache[key] = (None, f"{key}: {e}")
            spec, err = cache[key]
            return replace(ctx, model_spec=spec, model_path=key, model_error=err)
        # not a file: a built-in catalogue id (qwen3.6-27b:iq4_nl), as `plan` accepts
        from llamarig.catalogue import models as catalogue  # lazy: 15 ms; -m not a file here

        if catalogue.is_catalogue_id(path):
            if path not in cache:
                m, quant = catalogue.find_model(path)
                cache[path] = (catalogue.build_spec(m, quant), None)
            spec, err = cache[path]
            return replace(ctx, model_spec=spec, model_error=err)
        if explicit_model:
            raise InputError(_("{model}: model file not found (nor a catalogue id: see `llamarig models`)").format(
                model=explicit_model))
        return ctx

    return load


