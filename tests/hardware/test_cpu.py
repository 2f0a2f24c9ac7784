"""CPU features: the llama-server system_info line, /proc/cpuinfo, --cpu-features."""

from __future__ import annotations

import pytest

from llamarig.errors import InputError
from llamarig.hardware.cpu import (
    DEFAULT_FEATURES,
    from_cpuinfo,
    from_system_info,
    parse_cpu_features,
    system_info_line,
)
from llamarig.procs import exit_description

#: the portable test build's line (build 11434, x86-64-v3)
PORTABLE = ("0.00.002.569 I cmn  common_param: system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : "
            "SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 | "
            "OPENMP = 1 | REPACK = 1 | ")
#: a native build on a Sapphire Rapids Xeon
AMX = ("system_info: n_threads = 2 / 2 | CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | "
       "BMI2 = 1 | AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
       "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 |")


def test_system_info_portable_and_amx() -> None:
    p = from_system_info(PORTABLE)
    assert p.x86 and p.has("AVX2") and p.repack and not p.amx and not p.has("AVX512")
    assert p.source == "llama-server system_info"
    a = from_system_info(AMX)
    assert a.amx and a.has("AVX512_BF16")
    assert system_info_line("a\n" + PORTABLE + "\nb") == PORTABLE
    assert system_info_line("no such line") is None


def test_system_info_arm() -> None:
    line = "system_info: CPU : NEON = 1 | ARM_FMA = 1 | FP16_VA = 1 | MATMUL_INT8 = 1 | DOTPROD = 1 | SVE = 1 | SVE_CNT = 16 | REPACK = 1 |"
    c = from_system_info(line)
    assert c.arm and c.has("MATMUL_INT8") and c.sve_cnt == 16


def test_cpuinfo_as_a_native_build_sees_it() -> None:
    x = from_cpuinfo("processor: 0\nflags\t\t: fpu sse3 ssse3 avx avx2 fma f16c bmi2 avx512f avx512_vnni amx_int8 amx_tile\n",
                     "x86_64")
    assert x.amx and x.repack
    z = from_cpuinfo("flags : fpu pni ssse3 avx avx2 fma f16c bmi2\n", "x86_64")  # AMD EPYC Zen 2
    assert z.has("AVX2") and not z.has("AVX512") and not z.amx
    arm = from_cpuinfo("Features\t: fp asimd evtstrm aes asimddp i8mm sve\n", "aarch64")
    assert arm.arm and arm.has("DOTPROD") and arm.has("MATMUL_INT8") and arm.has("NEON")


def test_parse_cpu_features() -> None:
    c = parse_cpu_features("avx2,amx_int8")
    assert c.amx and c.has("AVX512") and c.x86 and c.source == "given: --cpu-features avx2,amx_int8"
    assert not parse_cpu_features("avx2 norepack").repack
    assert parse_cpu_features("neon,dotprod").arm
    with pytest.raises(InputError, match="unknown feature"):
        parse_cpu_features("avx9")
    with pytest.raises(InputError, match="x86 and Arm"):
        parse_cpu_features("avx2,neon")
    assert "assumed" in DEFAULT_FEATURES.source and DEFAULT_FEATURES.has("AVX2")


def test_exit_description() -> None:
    assert exit_description(0) == "exited with code 0"
    assert exit_description(1) == "exited with code 1"
    assert exit_description(-11) == "crashed (SIGSEGV)"
    assert exit_description(-6) == "crashed (SIGABRT)"
    assert exit_description(-9) == "was killed (SIGKILL)"
    assert exit_description(None) == "is still running"


def test_env_overrides_detection(monkeypatch) -> None:
    from llamarig.hardware.cpu import detect_cpu

    monkeypatch.setenv("LLAMARIG_CPU_FEATURES", "amx_int8")
    c = detect_cpu()
    assert c is not None and c.amx and "LLAMARIG_CPU_FEATURES" in c.source


def test_check_warns_of_the_amx_crash(tmp_path, monkeypatch) -> None:
    """check's amx-tile-crash rule, with this machine's CPU replaced by an AMX Xeon's."""
    from llamarig.flags import rules
    from llamarig.gguf import load_spec
    from llamarig.hardware.cpu import from_cpuinfo
    from llamarig.testing.synth import write_model

    path = write_model(tmp_path / "q8.gguf", "llama", weight_type="q8_0", n_embd=256, n_head=4, n_head_kv=2,
                       head_dim=64, n_ff=512, n_layer=2)
    spec = load_spec(path)
    amx = from_cpuinfo("flags : avx2 fma f16c avx512f avx512_vnni amx_int8\n", "x86_64")
    from llamarig.flags.readers import parse_argv
    from llamarig.flags.schema import load_bundled

    def findings(argv: list[str]) -> list[str]:
        _, fs = rules.lint(parse_argv(["llama-server", "-m", str(path), *argv]), load_bundled(),
                           rules.Context(model_spec=spec))
        return [f.rule for f in fs]

    monkeypatch.setattr(rules, "detect_cpu", lambda: amx)
    assert "amx-tile-crash" in findings(["-ngl", "0"])
    assert "amx-tile-crash" not in findings(["-ngl", "0", "--no-repack"])
    monkeypatch.setattr(rules, "detect_cpu", lambda: from_cpuinfo("flags : avx2 fma f16c\n", "x86_64"))
    assert "amx-tile-crash" not in findings(["-ngl", "0"])
