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


class ModelLoader:
    """Loads the ModelSpec of ``-m`` (or ``--model`` given to llamarig) when it is a readable GGUF,
    or a catalogue id; one look per distinct ``-m`` and one load per file, not one per invocation."""

    def __init__(self, explicit_model: str | None, base_dir: Path | None) -> None:
        self.explicit_model = explicit_model
        self.base_dir = base_dir
        self._specs: dict[str, tuple[ModelSpec | None, str | None]] = {}  # path or catalogue id -> (spec, error)
        self._is_file: dict[Path, bool] = {}
        self._found: dict[str, str] = {}  # -m as written -> the file it names ("" none)

    def __call__(self, inv: Invocation, ctx: Context) -> Context:
        path = self.explicit_model if self.explicit_model is not None else _model_arg(inv)
        if not path:
            return ctx
        hit = self._file_for(path)
        if hit:
            spec, err = self._from_file(hit)
            return replace(ctx, model_spec=spec, model_path=hit, model_error=err)
        # not a file: a built-in catalogue id (qwen3.6-27b:iq4_nl), as `plan` accepts
        from llamarig.catalogue import models as catalogue  # lazy: 15 ms; -m not a file here

        if catalogue.is_catalogue_id(path):
            if path not in self._specs:
                m, quant = catalogue.find_model(path)
                self._specs[path] = (catalogue.build_spec(m, quant), None)
            spec, err = self._specs[path]
            return replace(ctx, model_spec=spec, model_error=err)
        if self.explicit_model:
            raise InputError(_("{model}: model file not found (nor a catalogue id: see `llamarig models`)").format(
                model=self.explicit_model))
        return ctx

    def _exists(self, p: Path) -> bool:
        hit = self._is_file.get(p)
        if hit is None:
            hit = self._is_file[p] = p.is_file()
        return hit

    def _file_for(self, path: str) -> str:
        hit = self._found.get(path)
        if hit is None:
            cands = [Path(os.path.expanduser(path))]
            if self.base_dir is not None and not Path(path).is_absolute():
                cands.append(self.base_dir / path)
            hit = self._found[path] = next((str(c) for c in cands if self._exists(c)), "")
        return hit

    def _from_file(self, key: str) -> tuple[ModelSpec | None, str | None]:
        if key not in self._specs:
            try:
                self._specs[key] = (load_spec(Path(key)), None)
            except LlamarigError as e:
                self._specs[key] = (None, str(e))
            except Exception as e:  # a broken file must not crash the linter
                self._specs[key] = (None, f"{key}: {e}")
        return self._specs[key]


def _model_arg(inv: Invocation) -> str | None:
    """The last ``-m``/``--model`` value the server receives."""
    path = None
    args = inv.intended_args
    for i, w in enumerate(args[:-1]):
        if w.text in ("-m", "--model"):
            path = args[i + 1].text
    return path


def model_loader(explicit_model: str | None, base_dir: Path | None) -> Callable[[Invocation, Context], Context]:
    """Load the ModelSpec of ``-m`` (or ``--model`` given to llamarig) when it is a readable GGUF."""
    return ModelLoader(explicit_model, base_dir)
