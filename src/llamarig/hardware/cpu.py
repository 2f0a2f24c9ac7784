"""The CPU features that decide where llama.cpp's CPU backend puts weights.

llama.cpp names its CPU features in the ``system_info`` line llama-server prints at start-up
(``CPU : SSE3 = 1 | AVX2 = 1 | ... | AMX_INT8 = 1 | REPACK = 1 |``, ggml/src/ggml-cpu/ggml-cpu.cpp
ggml_backend_cpu_get_features). Most of them are *compile-time* facts of the build
(``ggml_cpu_has_avx2()`` tests ``__AVX2__``, ggml-cpu.c), so the line describes the binary, and
``/proc/cpuinfo`` describes what a native build (``GGML_NATIVE=ON``, -march=native) would compile.

Three sources, in order of authority: a llama-server's own ``system_info`` line, the user's
``--cpu-features`` list, and ``/proc/cpuinfo`` here (``--detect``). Without any of them the
plan assumes :data:`DEFAULT_FEATURES` and says so.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass

from llamarig.errors import InputError
from llamarig.i18n import _

#: ggml feature names a plan uses (ggml-cpu.cpp ggml_backend_cpu_get_features)
X86_FEATURES = ("SSE3", "SSSE3", "AVX", "AVX_VNNI", "AVX2", "F16C", "FMA", "BMI2", "AVX512",
                "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_INT8")
ARM_FEATURES = ("NEON", "ARM_FMA", "FP16_VA", "MATMUL_INT8", "SVE", "DOTPROD", "SME", "SME2")
BUILD_FEATURES = ("REPACK", "KLEIDIAI", "OPENMP", "LLAMAFILE")

#: /proc/cpuinfo flag -> ggml feature a native build compiles for it
#: (ggml/src/ggml-cpu/CMakeLists.txt: -march=native on x86, -mcpu=native + check_arm_feature on Arm)
_CPUINFO_X86 = {
    "sse3": "SSE3", "pni": "SSE3", "ssse3": "SSSE3", "avx": "AVX", "avx_vnni": "AVX_VNNI",
    "avx2": "AVX2", "f16c": "F16C", "fma": "FMA", "bmi2": "BMI2", "avx512f": "AVX512",
    "avx512vbmi": "AVX512_VBMI", "avx512_vnni": "AVX512_VNNI", "avx512_bf16": "AVX512_BF16",
    "amx_int8": "AMX_INT8",
}
_CPUINFO_ARM = {
    "asimd": "NEON", "fphp": "FP16_VA", "asimdhp": "FP16_VA", "i8mm": "MATMUL_INT8", "sve": "SVE",
    "asimddp": "DOTPROD", "sme": "SME", "sme2": "SME2",
}
#: spellings accepted by --cpu-features, lower case -> ggml name
_ALIASES = {n.lower(): n for n in X86_FEATURES + ARM_FEATURES + BUILD_FEATURES}
_ALIASES.update({k: v for k, v in _CPUINFO_X86.items()})
_ALIASES.update({k: v for k, v in _CPUINFO_ARM.items()})
_ALIASES.update({"amx": "AMX_INT8", "avx512vnni": "AVX512_VNNI", "avx512bf16": "AVX512_BF16",
                 "dotprod": "DOTPROD", "matmul_int8": "MATMUL_INT8", "repack": "REPACK"})


@dataclass(frozen=True)
class CpuFeatures:
    """What the llama-server build can use on this CPU, in ggml's feature names."""

    arch: str  # "x86_64" | "aarch64" | other uname -m
    features: frozenset[str]
    source: str  # where the set came from, printed with every plan that uses it
    sve_cnt: int = 0  # SVE vector length in bytes (SVE_CNT in system_info)

    def has(self, name: str) -> bool:
        return name in self.features

    @property
    def x86(self) -> bool:
        return self.arch in ("x86_64", "amd64", "i686", "x86")

    @property
    def arm(self) -> bool:
        return self.arch in ("aarch64", "arm64")

    @property
    def amx(self) -> bool:
        """The AMX buffer type exists: built with AMX_INT8 and AVX512-VNNI
        (ggml-cpu/amx/amx.cpp:19 ``#if defined(__AMX_INT8__) && defined(__AVX512VNNI__)``)."""
        return self.has("AMX_INT8") and self.has("AVX512_VNNI")

    @property
    def repack(self) -> bool:
        """Built with GGML_CPU_REPACK (on by default, ggml/CMakeLists.txt:152)."""
        return self.has("REPACK")

    def describe(self) -> str:
        shown = [f for f in X86_FEATURES + ARM_FEATURES + BUILD_FEATURES if f in self.features]
        return _("{arch}: {features} ({source})").format(arch=self.arch, features=" ".join(shown) or _("no SIMD features"),
                                                          source=self.source)

    def to_json(self) -> dict[str, object]:
        return {"arch": self.arch, "features": sorted(self.features), "sve_cnt": self.sve_cnt,
                "source": self.source}


#: what a plan assumes when nothing tells it better: an x86-64 build with AVX2, no AVX-512/AMX
DEFAULT_FEATURES = CpuFeatures(
    "x86_64", frozenset({"SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "REPACK"}),
    _("assumed: x86-64 with AVX2, no AVX-512 or AMX; --cpu-features or --detect to change"))

_SYSINFO_RE = re.compile(r"\b([A-Z][A-Z0-9_]*) = ([0-9]+)")


def from_system_info(line: str, arch: str | None = None) -> CpuFeatures:
    """The features in a llama-server ``system_info:`` line (the CPU backend's part)."""
    feats: set[str] = set()
    sve_cnt = 0
    for name, val in _SYSINFO_RE.findall(line):
        if name == "SVE_CNT":
            sve_cnt = int(val)
        elif val != "0" and name in _ALIASES.values():
            feats.add(name)
    if arch is None:
        arch = "aarch64" if "NEON" in feats else ("x86_64" if feats & set(X86_FEATURES) else platform.machine())
    return CpuFeatures(arch, frozenset(feats), "llama-server system_info", sve_cnt)


def system_info_line(log: str) -> str | None:
    """The last ``system_info:`` line of a llama-server log."""
    found = None
    for ln in log.splitlines():
        if "system_info:" in ln:
            found = ln
    return found


def from_cpuinfo(text: str, arch: str | None = None) -> CpuFeatures:
    """What a native build (-march=native) of llama.cpp would compile on the CPU whose
    /proc/cpuinfo this is, with the default options (REPACK on, KleidiAI off)."""
    arch = arch or platform.machine()
    m = re.search(r"^(?:flags|Features)\s*:(.*)$", text, re.M)
    words = set(m.group(1).split()) if m else set()
    table = _CPUINFO_ARM if arch in ("aarch64", "arm64") else _CPUINFO_X86
    feats = {g for w, g in table.items() if w in words}
    if arch in ("aarch64", "arm64"):
        feats.add("NEON")
    feats.add("REPACK")
    return CpuFeatures(arch, frozenset(feats), "/proc/cpuinfo here, as a native build compiles it")


#: environment variable: the CPU features --detect reports (as --cpu-features spells them)
ENV_CPU_FEATURES = "LLAMARIG_CPU_FEATURES"


def detect_cpu() -> CpuFeatures | None:
    """This machine's CPU, as a native build sees it ($LLAMARIG_CPU_FEATURES, when set, wins);
    None where /proc/cpuinfo is unreadable."""
    given = os.environ.get(ENV_CPU_FEATURES)
    if given:
        c = parse_cpu_features(given)
        return CpuFeatures(c.arch, c.features, f"given: ${ENV_CPU_FEATURES}={given}", c.sve_cnt)
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return from_cpuinfo(f.read())
    except OSError:
        return None


def parse_cpu_features(text: str) -> CpuFeatures:
    """``--cpu-features avx2,amx_int8`` (cpuinfo or ggml spellings, comma or space separated).
    REPACK is on unless ``norepack`` is listed, as in a default build; Arm is implied by
    NEON/DOTPROD/I8MM/SVE."""
    feats: set[str] = {"REPACK"}
    unknown = []
    for word in re.split(r"[,\s]+", text.strip()):
        if not word:
            continue
        w = word.lower()
        if w in ("norepack", "no-repack", "-repack"):
            feats.discard("REPACK")
        elif w in ("none", "generic"):
            continue
        elif w in _ALIASES:
            feats.add(_ALIASES[w])
        else:
            unknown.append(word)
    if unknown:
        known = ", ".join(sorted(n.lower() for n in X86_FEATURES + ARM_FEATURES + BUILD_FEATURES))
        raise InputError(_("--cpu-features: unknown feature(s) {unknown} (known: {known})").format(unknown=', '.join(unknown), known=known))
    arm = bool(feats & set(ARM_FEATURES))
    if arm and feats & set(X86_FEATURES):
        raise InputError(_("--cpu-features: x86 and Arm features together; give one CPU's features"))
    # -march implies the smaller sets (AVX2 machines have AVX, AVX-512 ones AVX2, ...)
    if "AMX_INT8" in feats:
        feats |= {"AVX512", "AVX512_VNNI"}
    if "AVX512" in feats:
        feats.add("AVX2")
    if "AVX2" in feats:
        feats |= {"AVX", "FMA", "F16C", "SSE3", "SSSE3"}
    if arm:
        feats.add("NEON")
    return CpuFeatures("aarch64" if arm else "x86_64", frozenset(feats), f"given: --cpu-features {text}")
