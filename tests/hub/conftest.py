"""A local hub (llamarig.testing.hub) serving synthetic GGUFs; HF_ENDPOINT and MODELSCOPE_ENDPOINT
point at it, the header cache is private to the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llamarig.hub import fetch, resolve
from llamarig.testing.hub import LocalHub
from llamarig.testing.synth import write_mmproj, write_model


@pytest.fixture(scope="session")
def hub_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Repo path -> synthetic file: three architectures, one split in five parts, an mmproj."""
    d = tmp_path_factory.mktemp("hubfiles")
    files = {
        "Tiny-Q4_0.gguf": write_model(d / "Tiny-Q4_0.gguf", "qwen3", weight_type="q4_0"),
        "Tiny-Q8_0.gguf": write_model(d / "Tiny-Q8_0.gguf", "llama", weight_type="q8_0"),
        "Tiny-F16.gguf": write_model(d / "Tiny-F16.gguf", "gemma3", weight_type="f16"),
    }
    first = write_model(d / "split" / "Tiny-BF16.gguf", "qwen35", weight_type="bf16", split_max_tensors=12)
    for p in sorted(first.parent.glob("Tiny-BF16-*-of-*.gguf")):
        files[f"BF16/{p.name}"] = p
    files["mmproj-F16.gguf"] = write_mmproj(d / "mmproj-F16.gguf")
    files["vision/Vision-Q8_0.gguf"] = write_model(d / "Vision-Q8_0.gguf", "qwen35", weight_type="q8_0")
    return files


@pytest.fixture
def hub(hub_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHub]:
    with LocalHub() as h:
        models = {k: v for k, v in hub_files.items() if not k.startswith(("mmproj", "vision/"))}
        h.add_repo("acme/Tiny-GGUF", models)
        h.add_repo("acme/Vision-GGUF", {"vision/Vision-Q8_0.gguf": hub_files["vision/Vision-Q8_0.gguf"],
                                        "mmproj-F16.gguf": hub_files["mmproj-F16.gguf"]})
        h.add_repo("acme/Gated-GGUF", {"Tiny-Q4_0.gguf": hub_files["Tiny-Q4_0.gguf"]}, gated=True)
        h.plain["tiny.gguf"] = hub_files["Tiny-Q8_0.gguf"]
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", h.url)
        monkeypatch.delenv("MODEL_ENDPOINT", raising=False)  # llama-server's -hf: MODEL_ENDPOINT, else HF_ENDPOINT
        monkeypatch.setenv("LLAMARIG_HEADER_CACHE", str(tmp_path / "headers"))
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved login from this machine
        monkeypatch.setattr(fetch, "FIRST_RANGE", 4096)  # small files: the growth is what is tested
        resolve._memo.clear()
        yield h
        resolve._memo.clear()
