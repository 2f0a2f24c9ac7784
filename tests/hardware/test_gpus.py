"""GPU catalogue, --gpu parsing and local detection."""

from __future__ import annotations

import pytest

from llamarig.catalogue.gpus import find_gpu, load_gpus, parse_gpu_arg
from llamarig.detect import cpu_cores, detect, gpus_of, host_memory
from llamarig.errors import InputError, UnknownNameError
from llamarig.hardware.telemetry import parse_nvidia_smi

GiB = 1 << 30

REQUIRED = ["rtx3090", "rtx3090ti", "rtx4060ti16", "rtx4070tisuper", "rtx4080super", "rtx4090",
            "rtx5060ti16", "rtx5070ti", "rtx5080", "rtx5090", "p100", "v100", "a100-40", "a100-80",
            "l40s", "h100", "h200", "rx7900xtx", "m2max", "m2ultra", "m3max", "m3ultra", "m4max"]


def test_catalogue_complete_and_sourced() -> None:
    ids = {g.id for g in load_gpus()}
    assert set(REQUIRED) <= ids
    for g in load_gpus():
        assert g.source and g.memory_bytes > 0 and g.bandwidth_gbs and g.fp16_tflops


@pytest.mark.parametrize(("text", "gid"), [
    ("rtx3090", "rtx3090"), ("RTX 3090", "rtx3090"), ("3090", "rtx3090"),
    ("NVIDIA GeForce RTX 3090", "rtx3090"), ("3090ti", "rtx3090ti"), ("4060 Ti", "rtx4060ti16"),
    ("5070ti", "rtx5070ti"), ("A100-80G", "a100-80"), ("m4 max", "m4max"), ("7900xtx", "rx7900xtx"),
])
def test_fuzzy_names(text: str, gid: str) -> None:
    assert find_gpu(text).id == gid


def test_unknown_gpu_suggests() -> None:
    with pytest.raises(UnknownNameError) as e:
        find_gpu("rtx3080")
    assert e.value.suggestions
    assert "unknown GPU 'rtx3080'" in str(e.value)


def test_vram_override() -> None:
    g = parse_gpu_arg("3090:22")
    assert g.memory_bytes == 22 * GiB and g.id == "rtx3090"
    unknown = parse_gpu_arg("my-card:12")
    assert unknown.memory_bytes == 12 * GiB
    with pytest.raises(InputError):
        parse_gpu_arg("3090:lots")
    with pytest.raises(InputError):
        parse_gpu_arg("3090:-1")


def test_gpus_of_an_nvidia_smi_reading() -> None:
    raws = parse_nvidia_smi("0, NVIDIA GeForce RTX 3090, 300.5, 47, 1800, 9751, 1000, 24576, 98\n"
                            "1, Some Future GPU, [N/A], 40, 1, 2, 100, 8192, 5\n")
    gpus = gpus_of(raws, "nvidia-smi")
    assert [g.id for g in gpus][0] == "rtx3090" and gpus[0].memory_bytes == 24576 << 20
    assert gpus[1].memory_bytes == 8192 << 20 and gpus[1].bandwidth_gbs is None
    assert gpus[1].source == "nvidia-smi (not in the catalogue: no bandwidth/TFLOPS)"


def test_detect_reads_the_os() -> None:
    total, avail = host_memory()
    assert total and total > 0
    assert (cpu_cores() or 0) >= 1
    hw = detect()
    assert hw.ram_bytes == total
