"""The llama-server settings that decide memory, as a frozen dataclass, and a parser for them.

Spellings, defaults and value rules follow common/arg.cpp and common/common.h of llama.cpp
build 11434 (common/arg.cpp at build 11434). Only the flags that
change memory are modelled; every other llama-server flag is accepted and ignored (listed in
``ServerConfig.ignored``) so that a whole command line can be pasted after ``--``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Literal, get_args

from llamarig.diagnostics import Diagnostic, warning
from llamarig.errors import InputError
from llamarig.flags.argv import Arg, Command, looks_like_option
from llamarig.flags.knowledge import FOLKLORE
from llamarig.flags.schema import Schema, load_bundled
from llamarig.gguf.ggml_types import KV_CACHE_TYPES, TYPE_SIZES, CacheType
from llamarig.i18n import _
from llamarig.plan.flash_attn import FlashAttn, kv_layout_fa

#: --spec-type values (common/speculative.cpp:72-84)
SPEC_TYPES = (
    "none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
)
#: spec types that keep recurrent rollback snapshots (common.h:399-405, common.cpp:1693)
ROLLBACK_SPEC_TYPES = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})
#: -sm values (common/arg.cpp)
SplitMode = Literal["none", "layer", "row", "tensor"]
SPLIT_MODES: tuple[SplitMode, ...] = get_args(SplitMode)
#: diagnostic codes of what llama-server would reject or misread in a pasted command
REMOVED_FLAG = "removed-flag"
UNKNOWN_FLAG = "unknown-flag"
INT_SUFFIX = "int-suffix"
#: --load-mode values (common/arg.cpp)
LoadMode = Literal["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"]
LOAD_MODES: tuple[LoadMode, ...] = get_args(LoadMode)
_TRUTHY = ("on", "enabled", "true", "1")
_FALSEY = ("off", "disabled", "false", "0")


@dataclass(frozen=True)
class ServerConfig:
    """llama-server settings (llama-server's own defaults, common.h / server.cpp)."""

    n_ctx: int = 0  # -c; 0 = n_ctx_train (and --fit may lower it)
    n_parallel: int = -1  # -np; -1 = auto: 4 slots, unified KV (tools/server/server.cpp:168-173)
    kv_unified: bool | None = None  # -kvu / -no-kvu; None = not given
    kv_unified_per_slot: int = 0
    cache_type_k: CacheType = "f16"
    cache_type_v: CacheType = "f16"
    cache_type_k_draft: CacheType = "f16"  # -ctkd: NOT inherited from -ctk (speculative.cpp:2559)
    cache_type_v_draft: CacheType = "f16"
    flash_attn: FlashAttn = "auto"  # -fa (plan/flash_attn.py: the rule)
    n_batch: int = 2048
    n_ubatch: int = 512
    n_gpu_layers: int = -1  # -1 auto, -2 all, N
    split_mode: SplitMode = "layer"
    tensor_split: tuple[float, ...] = ()
    main_gpu: int = 0
    n_cpu_moe: int = 0
    n_cpu_ffn: int = 0  # -ncffn: dense FFN weights of the first N layers on the CPU
    cpu_moe: bool = False
    override_tensor: tuple[tuple[str, str], ...] = ()
    no_kv_offload: bool = False
    #: --op-offload / --no-op-offload: a GPU takes over an op whose weight stays in host memory
    #: for batches of 32 rows or more (cparams.op_offload, common/common.cpp:1717; the scheduler's
    #: offload_op, ggml-backend.cpp:1100-1118)
    op_offload: bool = True
    swa_full: bool = False
    cache_ram_mib: int = 8192
    ctx_checkpoints: int = 32
    checkpoint_min_step: int = 8192
    spec_types: tuple[str, ...] = ()
    spec_draft_n_max: int = 3
    load_mode: LoadMode = "auto"
    fit: bool = True
    fit_target_mib: tuple[int, ...] = (1024,)  # -fitt: free memory to leave per device
    fit_ctx: int = 4096  # -fitc: smallest context --fit may choose
    mmproj_offload: bool = True
    repack: bool = True  # -nr/--no-repack turns off the CPU's extra buffer types (AMX, CPU_REPACK)
    no_host: bool = False  # --no-host: no pinned host buffer ahead of the extra buffer types
    model: str | None = None  # -m
    mmproj: str | None = None  # --mmproj
    image_max_tokens: int = 0  # --image-max-tokens (0: the projector's own limit; common/arg.cpp)
    draft_model: str | None = None  # -md
    devices: tuple[str, ...] = ()  # -dev
    # draft model placement (common/arg.cpp:4126-4262; common/speculative.cpp:2536-2551)
    n_gpu_layers_draft: int = -1  # -ngld: -1 auto (all), -2 all, N
    devices_draft: tuple[str, ...] = ()  # -devd; empty = follows -dev
    override_tensor_draft: tuple[tuple[str, str], ...] = ()  # -otd
    cpu_moe_draft: bool = False  # -cmoed
    n_cpu_moe_draft: int = 0  # -ncmoed
    # -t / -tb: -1 = llama-server's default, the machine's physical cores (common/common.cpp:294-299,
    # 205-232); -tb defaults to -t (common/common.cpp:1699-1700); <= 0 given = all logical CPUs
    # (common/arg.cpp:1520-1537). Decode runs on -t threads, batches on -tb (src/llama-context.cpp:2612).
    threads: int = -1
    threads_batch: int = -1
    hf_repo: str | None = None  # -hf OWNER/REPO[:QUANT] (plan reads its header: llamarig.hub)
    hf_file: str | None = None  # -hff FILE inside the -hf repo
    model_url: str | None = None  # -mu URL (llama-server downloads it)
    rpc: tuple[str, ...] = ()
    embeddings: bool = False
    set_flags: frozenset[str] = field(default_factory=frozenset)  # fields given explicitly
    ignored: tuple[str, ...] = ()  # flags seen but irrelevant to memory
    #: what llama-server itself would reject (or misread) in a pasted command
    problems: tuple[Diagnostic, ...] = ()

    # ------------------------------------------------------------------ derived
    @property
    def flash_attn_enabled(self) -> bool:
        """The KV cache and compute buffers are laid out for flash attention: unless -fa off, auto
        included (plan/flash_attn.py kv_layout_fa; how attention then runs per backend, auto
        turning itself off where a device has no kernel, is flash_attn.kv_path)."""
        return kv_layout_fa(self.flash_attn)

    @property
    def mtp(self) -> bool:
        return "draft-mtp" in self.spec_types

    @property
    def rollback_spec(self) -> bool:
        return any(t in ROLLBACK_SPEC_TYPES for t in self.spec_types)

    @classmethod
    def from_command(cls, cmd: Command, base: ServerConfig | None = None, strict: bool = False) -> ServerConfig:
        """The settings a parsed llama-server command runs with (over ``base``'s); ``strict``:
        a flag the planner does not read, or a stray word, is an InputError."""
        return _from_command(cmd, base, strict)

    def with_(self, **kw: object) -> ServerConfig:
        return replace(self, **kw)  # type: ignore[arg-type]

    def argv(self, model: str | None = None) -> list[str]:
        """The llama-server arguments that reproduce this config (explicit settings only)."""
        return [*_model_argv(self, model), *(w for write in _ARGV for w in write(self))]


def _model_argv(cfg: ServerConfig, model: str | None) -> list[str]:
    out: list[str] = []
    m = model or cfg.model
    if cfg.hf_repo:  # llama-server downloads it (common/arg.cpp -hf, -hff)
        out += ["-hf", cfg.hf_repo] + (["-hff", cfg.hf_file] if cfg.hf_file else [])
    elif m and m.startswith(("http://", "https://")):
        out += ["-mu", m]
    elif m:
        out += ["-m", m]
    if cfg.mmproj:
        out += ["--mmproj", cfg.mmproj]
    if cfg.draft_model:
        out += ["-md", cfg.draft_model]
    return out


_Write = Callable[[ServerConfig], list[str]]


def _given(fld: str, flag: str, fmt: Callable[[object], str] = str) -> _Write:
    """``flag value`` when the setting was given explicitly."""
    return lambda c: [flag, fmt(getattr(c, fld))] if fld in c.set_flags else []


def _nonzero(fld: str, flag: str, fmt: Callable[[object], str] = str) -> _Write:
    """``flag value`` when the setting is set (non-zero, non-empty)."""
    return lambda c: [flag, fmt(getattr(c, fld))] if getattr(c, fld) else []


def _switch(fld: str, flag: str, when: bool = True) -> _Write:
    """``flag`` alone when the setting is ``when``."""
    return lambda c: [flag] if bool(getattr(c, fld)) is when else []


def _each(fld: str, flag: str) -> _Write:
    """``flag PATTERN=BUFT`` for each tensor override."""
    return lambda c: [w for pat, buft in getattr(c, fld) for w in (flag, f"{pat}={buft}")]


def _layers(v: object) -> str:
    return {-1: "auto", -2: "all"}.get(v, str(v)) if isinstance(v, int) else str(v)


def _joined(v: object) -> str:
    return ",".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def _kvu(c: ServerConfig) -> list[str]:
    return [] if c.kv_unified is None else (["-kvu"] if c.kv_unified else ["-no-kvu"])


#: how each setting is written back as llama-server arguments, in argv order
_ARGV: tuple[_Write, ...] = (
    _given("n_ctx", "-c"), _given("n_parallel", "-np"), _kvu, _given("kv_unified_per_slot", "--kv-unified-per-slot"),
    _given("flash_attn", "-fa"), _given("cache_type_k", "-ctk"), _given("cache_type_v", "-ctv"),
    _given("cache_type_k_draft", "-ctkd"), _given("cache_type_v_draft", "-ctvd"), _given("n_batch", "-b"),
    _given("n_ubatch", "-ub"), _given("threads", "-t"), _given("threads_batch", "-tb"),
    _given("n_gpu_layers", "-ngl", _layers), _given("split_mode", "-sm"),
    _nonzero("tensor_split", "-ts", lambda v: ",".join(f"{x:g}" for x in v) if isinstance(v, tuple) else str(v)),
    _given("main_gpu", "-mg"), _switch("cpu_moe", "-cmoe"), _nonzero("n_cpu_moe", "--n-cpu-moe"),
    _nonzero("n_cpu_ffn", "--n-cpu-ffn"), _each("override_tensor", "-ot"), _switch("no_kv_offload", "-nkvo"),
    _switch("op_offload", "--no-op-offload", False), _switch("swa_full", "--swa-full"), _given("cache_ram_mib", "--cache-ram"),
    _given("ctx_checkpoints", "--ctx-checkpoints"), _given("checkpoint_min_step", "--checkpoint-min-step"),
    _nonzero("spec_types", "--spec-type", _joined), _given("spec_draft_n_max", "--spec-draft-n-max"),
    _given("load_mode", "--load-mode"), _given("fit", "--fit", lambda v: "on" if v else "off"),
    _given("fit_target_mib", "-fitt", _joined), _given("fit_ctx", "-fitc"),
    _nonzero("image_max_tokens", "--image-max-tokens"), _switch("mmproj_offload", "--no-mmproj-offload", False),
    _switch("repack", "--no-repack", False), _switch("no_host", "--no-host"), _nonzero("devices", "-dev", _joined),
    _nonzero("rpc", "--rpc", _joined), _given("n_gpu_layers_draft", "-ngld", _layers),
    _nonzero("devices_draft", "-devd", _joined), _each("override_tensor_draft", "-otd"),
    _switch("cpu_moe_draft", "-cmoed"), _nonzero("n_cpu_moe_draft", "-ncmoed"),
)


# ---------------------------------------------------------------------------- parsing


def _int(flag: str, v: str, minimum: int | None = None) -> int:
    m = re.match(r"\s*[-+]?\d+", v)  # std::stoi: leading integer, rest ignored (arg.cpp)
    if not m:
        raise InputError(_("{flag} {value}: not an integer").format(flag=flag, value=v))
    n = int(m.group(0))
    if not -(2**31) <= n < 2**31:
        # std::stoi throws std::out_of_range beyond a 32-bit int, and llama-server exits
        # (common/arg.cpp:796, 859: "error while handling argument")
        raise InputError(_("{flag} {value}: out of range: llama-server reads it with std::stoi (a 32-bit int, at "
                           "most {int_max}) and refuses to start").format(flag=flag, value=v, int_max=2 ** 31 - 1))
    if minimum is not None and n < minimum:
        raise InputError(_("{flag} {value}: must be >= {minimum}").format(flag=flag, value=v, minimum=minimum))
    return n


def _int_tail_problem(flag: str, v: str) -> str | None:
    """llama-server reads integers with std::stoi (common/arg.cpp:796, 859): a trailing suffix such
    as the 'k' of '8k' is dropped without a word. Say so."""
    m = re.match(r"\s*[-+]?\d+", v)
    if m and m.end() != len(v):
        return (f"{flag} {v}: llama-server's std::stoi reads only the leading {int(m.group(0))} "
                f"(suffixes such as k are not understood): planned as {flag} {int(m.group(0))}")
    return None


@lru_cache(maxsize=1)
def bundled_schema() -> Schema | None:
    """The bundled flag schema of the pinned build (llamarig.flags.schema), or None."""
    try:
        return load_bundled()
    except (InputError, OSError, ValueError, KeyError):
        return None


def _kv_type(flag: str, v: str) -> CacheType:
    # matching is exact and case-sensitive (common/arg.cpp kv_cache_type_from_str)
    if v not in KV_CACHE_TYPES:
        raise InputError(
            _("{flag} {value}: llama-server rejects this KV cache type ('Unsupported cache type'); "
              "accepted: {kv_cache_types}").format(flag=flag, value=v, kv_cache_types=', '.join(KV_CACHE_TYPES))
        )
    return v


def _bool_value(flag: str, v: str) -> bool:
    if v in _TRUTHY:
        return True
    if v in _FALSEY:
        return False
    raise InputError(_("{flag} {value}: expected on|off").format(flag=flag, value=v))


def _ngl(flag: str, v: str) -> int:
    if v == "auto":
        return -1
    if v == "all":
        return -2
    return _int(flag, v)


def _ot(flag: str, v: str) -> tuple[tuple[str, str], ...]:
    out = []
    for part in v.split(","):
        if "=" not in part:
            raise InputError(_("{flag} {part}: expected <tensor name pattern>=<buffer type>").format(flag=flag, part=part))
        pat, buft = part.rsplit("=", 1)
        try:
            re.compile(pat)
        except re.error as e:
            raise InputError(_("{flag} {part}: bad regular expression ({error})").format(flag=flag, part=part, error=e)) from None
        out.append((pat, buft))
    return tuple(out)


#: llama-server option (the schema's canonical name, llamarig.flags.schema) -> (field, kind).
#: Spellings, aliases, negations and how many values an option takes come from the flag schema
#: of the pinned build; this map says only which ServerConfig field an option sets and how its
#: value reads. kind: int, int0 (>=0), int1 (>=1), kv, true (a flag), bool (True for the
#: positive spelling, False for a negation), notbool (the reverse), fa, ngl, ts, ot, otd, spec,
#: specdefault, sm, lm, onoff, mibs, list, path
_FIELDS: dict[str, tuple[str, str]] = {
    "--ctx-size": ("n_ctx", "int0"),
    "--parallel": ("n_parallel", "int1"),
    "--kv-unified": ("kv_unified", "bool"),
    "--kv-unified-per-slot": ("kv_unified_per_slot", "int0"),
    "--cache-type-k": ("cache_type_k", "kv"),
    "--cache-type-v": ("cache_type_v", "kv"),
    "--spec-draft-type-k": ("cache_type_k_draft", "kv"),
    "--spec-draft-type-v": ("cache_type_v_draft", "kv"),
    "--flash-attn": ("flash_attn", "fa"),
    "--batch-size": ("n_batch", "int0"),
    "--ubatch-size": ("n_ubatch", "int0"),
    "--gpu-layers": ("n_gpu_layers", "ngl"),
    "--split-mode": ("split_mode", "sm"),
    "--tensor-split": ("tensor_split", "ts"),
    "--main-gpu": ("main_gpu", "int"),
    "--n-cpu-moe": ("n_cpu_moe", "int0"),
    "--n-cpu-ffn": ("n_cpu_ffn", "int0"),  # common/arg.cpp:2780-2789
    "--cpu-moe": ("cpu_moe", "true"),
    "--override-tensor": ("override_tensor", "ot"),
    "--kv-offload": ("no_kv_offload", "notbool"),
    "--op-offload": ("op_offload", "bool"),
    "--swa-full": ("swa_full", "true"),
    "--cache-ram": ("cache_ram_mib", "int"),
    "--ctx-checkpoints": ("ctx_checkpoints", "int0"),
    "--checkpoint-min-step": ("checkpoint_min_step", "int0"),
    "--spec-type": ("spec_types", "spec"),
    "--spec-draft-n-max": ("spec_draft_n_max", "int0"),
    "--load-mode": ("load_mode", "lm"),
    "--fit": ("fit", "onoff"),
    "--fit-target": ("fit_target_mib", "mibs"),
    "--fit-ctx": ("fit_ctx", "int0"),
    "--mmproj-offload": ("mmproj_offload", "bool"),
    "--repack": ("repack", "bool"),
    "--no-host": ("no_host", "true"),
    "--model": ("model", "path"),
    "--mmproj": ("mmproj", "path"),
    "--image-max-tokens": ("image_max_tokens", "int0"),
    "--spec-draft-model": ("draft_model", "path"),
    "--device": ("devices", "list"),
    "--rpc": ("rpc", "list"),
    "--embedding": ("embeddings", "true"),
    "--spec-default": ("spec_types", "specdefault"),
    # draft model placement (common/arg.cpp:4126-4145, 4238-4262)
    "--spec-draft-ngl": ("n_gpu_layers_draft", "ngl"),
    "--spec-draft-device": ("devices_draft", "list"),
    "--spec-draft-override-tensor": ("override_tensor_draft", "otd"),
    "--spec-draft-cpu-moe": ("cpu_moe_draft", "true"),
    "--spec-draft-n-cpu-moe": ("n_cpu_moe_draft", "int0"),
    "--hf-repo": ("hf_repo", "path"),
    "--threads": ("threads", "int"),
    "--threads-batch": ("threads_batch", "int"),
    "--hf-file": ("hf_file", "path"),
    "--model-url": ("model_url", "path"),
}


#: folklore flags the planner recognises as removed (--mlock and --no-mmap still set the load
#: mode they meant, below); what to write instead is llamarig.flags.knowledge.FOLKLORE's advice.
#: Flags llama-server itself lists as removed (--draft, --draft-max, ...) are read from the schema.
_FOLKLORE_FLAGS = frozenset({"--mlock", "--no-mmap", "--low-vram", "-cd", "--ctx-size-draft"})


def _removed_advice(tok: str) -> str | None:
    """What to write instead of a flag llama-server no longer takes: the schema's own hint for an
    option it marks removed (common/arg.cpp: "the argument has been removed. use ..."), or
    FOLKLORE's real way for the folklore flags; None for a flag that is not removed."""
    name = _norm(tok)
    if name in _FOLKLORE_FLAGS:
        lore = FOLKLORE[name]
        return f"use {' '.join(lore.replace)}" if lore.replace else lore.real
    schema = bundled_schema()
    hit = schema.lookup(tok) if schema is not None else None
    if hit is None or not hit[0].removed:
        return None
    text = " ".join((hit[0].help or "").split("(env:")[0].split())
    return text.removeprefix("the argument has been removed. ").rstrip(".") or "removed"


def _norm(tok: str) -> str:
    # '--' spellings have '_' replaced by '-' (common/arg.cpp:826-828)
    return tok.replace("_", "-") if tok.startswith("--") else tok


def _option(tok: str) -> tuple[str, str, bool, int] | None:
    """(field, kind, positive spelling, number of values) of a token the planner reads, from the
    flag schema (spellings, negations, value counts) and _FIELDS; None for other tokens."""
    schema = bundled_schema()
    hit = schema.lookup(tok) if schema is not None else None
    if hit is None:
        return None
    opt, positive = hit
    entry = _FIELDS.get(opt.name)
    if entry is None:
        return None
    return entry[0], entry[1], positive, opt.n_values if positive else 0


def is_server_flag(tok: str) -> bool:
    return _option(tok) is not None


def flag_takes_value(tok: str) -> bool:
    """A llama-server flag the planner reads that consumes the next argument."""
    o = _option(tok)
    return o is not None and o[3] > 0


def parse_server_args(argv: Sequence[str], base: ServerConfig | None = None,
                      strict: bool = False) -> ServerConfig:
    """Parse llama-server arguments into a ServerConfig (later flags override earlier ones):
    :meth:`ServerConfig.from_command` on ``Command.parse(argv)``.

    ``strict``: ``argv`` has no program and unknown flags are errors (the direct ``llamarig plan
    ... -c N`` form); otherwise a first word that is not an option is the program, and unknown
    flags are skipped and listed in ``ignored`` (a pasted llama-server command).
    """
    schema = bundled_schema()
    cmd = Command.parse(argv, schema, program=False if strict else None)
    return ServerConfig.from_command(cmd, base=base, strict=strict)


def _int1(tok: str, v: str) -> int:
    n = _int(tok, v)
    if n == 0 or n < -1:
        raise InputError(_("{tok} {value}: must be a positive number of slots (or -1 for auto)").format(tok=tok, value=v))
    return n


def _fa(tok: str, v: str) -> FlashAttn:
    if v in _TRUTHY:
        return "on"
    if v in _FALSEY:
        return "off"
    if v in ("auto", "-1"):
        return "auto"
    raise InputError(_("{tok} {value}: expected on|off|auto").format(tok=tok, value=v))


def _ts(tok: str, v: str) -> tuple[float, ...]:
    try:
        ts = tuple(float(x) for x in re.split(r"[,/]", v) if x != "")
    except ValueError:
        raise InputError(_("{tok} {value}: expected numbers like 3,1").format(tok=tok, value=v)) from None
    if any(x < 0 for x in ts):
        raise InputError(_("{tok} {value}: split ratios must be >= 0").format(tok=tok, value=v))
    return ts


def _sm(tok: str, v: str) -> str:
    if v not in SPLIT_MODES:
        raise InputError(_("{tok} {value}: expected one of {split_modes}").format(tok=tok, value=v, split_modes=', '.join(SPLIT_MODES)))
    return v


def _lm(tok: str, v: str) -> str:
    if v not in LOAD_MODES:
        raise InputError(_("{tok} {value}: expected one of {load_modes}").format(tok=tok, value=v, load_modes=', '.join(LOAD_MODES)))
    return v


def _mibs(tok: str, v: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in re.split(r"[,/]", v) if x != "")
    except ValueError:
        raise InputError(_("{tok} {value}: expected MiB values like 1024 or 512,1024").format(tok=tok, value=v)) from None


def _spec(tok: str, v: str) -> list[str]:
    names = [x.strip() for x in v.split(",") if x.strip()]
    for spec_name in names:
        if spec_name not in SPEC_TYPES:
            raise InputError(_("{tok} {spec_name}: unknown speculative type (accepted: {spec_types})").format(tok=tok, spec_name=spec_name, spec_types=', '.join(SPEC_TYPES)))
    # 'none' in a flag's list adds only 'none' (arg.cpp:4277-4281)
    return ["none"] if "none" in names else names


#: how a value of each kind of _FIELDS reads (kinds that add to a list are _Reading's)
_VALUE: dict[str, Callable[[str, str], object]] = {
    "int": _int, "int0": lambda t, v: _int(t, v, 0), "int1": _int1, "kv": _kv_type, "fa": _fa, "ngl": _ngl,
    "ts": _ts, "sm": _sm, "lm": _lm, "onoff": _bool_value, "mibs": _mibs,
    "list": lambda t, v: tuple(x for x in v.split(",") if x), "path": lambda t, v: v,
}
_INT_KINDS = ("int", "int0", "int1", "ngl")
#: kinds without a value: true (set by the flag), bool (True for the positive spelling, False for
#: a negation), notbool (the reverse)
_FLAG_KINDS: dict[str, Callable[[bool], bool]] = {"true": lambda p: True, "bool": lambda p: p, "notbool": lambda p: not p}


class _Reading:
    """One pass over a command's options into the fields of a ServerConfig (over ``base``'s)."""

    def __init__(self, base: ServerConfig, schema: Schema | None, strict: bool) -> None:
        self.base, self.schema, self.strict = base, schema, strict
        self.vals: dict[str, object] = {}
        self.set_flags = set(base.set_flags)
        self.ignored = list(base.ignored)
        self.problems = list(base.problems)
        self.lists: dict[str, list[object]] = {"spec_types": list(base.spec_types),
                                               "override_tensor": list(base.override_tensor),
                                               "override_tensor_draft": list(base.override_tensor_draft)}

    def read(self, arg: Arg) -> None:
        tok = arg.spelling
        advice = _removed_advice(tok)
        if advice is not None:
            self._removed(tok, advice)
            return
        found = _option(tok)
        if found is None:
            self._unknown(arg)
            return
        self._option(tok, arg, *found)

    def _removed(self, tok: str, advice: str) -> None:
        if self.strict:
            raise InputError(_("{flag}: removed from llama-server ({advice})").format(flag=tok, advice=advice))
        self.problems.append(warning(REMOVED_FLAG, _(
            "{flag}: removed from llama-server ({advice}); llama-server would exit with 'invalid "
            "argument'").format(flag=tok, advice=advice)))
        name = _norm(tok)
        if name in ("--no-mmap", "--mlock"):  # they still set the load mode they meant
            self.vals["load_mode"] = "none" if name == "--no-mmap" else "mlock"
            self.set_flags.add("load_mode")

    def _unknown(self, arg: Arg) -> None:
        tok = arg.spelling
        if not looks_like_option(tok):
            if self.strict:  # a stray word (in a pasted command the first token is the binary itself)
                raise InputError(_("'{tok}': unexpected argument (llama-server takes no positional arguments)").format(tok=tok))
            return
        if self.strict:
            raise InputError(_("{tok}: not a llama-server flag that plan understands (paste a whole command after '--' "
                               "to have unrelated flags ignored)").format(tok=tok))
        if arg.opt is not None or self.schema is None:
            self.ignored.append(tok)
        else:
            self.problems.append(warning(UNKNOWN_FLAG, _(
                "{flag}: not a llama-server flag of build {build}: llama-server would refuse to start "
                "('error: invalid argument: {flag}', common/arg.cpp:830)").format(flag=tok, build=self.schema.build)))

    def _option(self, tok: str, arg: Arg, fld: str, kind: str, positive: bool, n_values: int) -> None:
        value = ""
        if n_values:
            if len(arg.values) < n_values:
                raise InputError(_("{tok}: missing value").format(tok=tok))
            value = arg.values[0]
        self.set_flags.add(fld)
        if kind in _INT_KINDS:
            tail = _int_tail_problem(tok, value)
            if tail and warning(INT_SUFFIX, tail) not in self.problems:
                self.problems.append(warning(INT_SUFFIX, tail))
        if kind in _FLAG_KINDS:  # a flag, or one spelling of a pair
            self.vals[fld] = _FLAG_KINDS[kind](positive)
        elif kind in ("ot", "otd"):
            self.lists["override_tensor" if kind == "ot" else "override_tensor_draft"].extend(_ot(tok, value))
        elif kind == "spec":
            self.lists["spec_types"].extend(_spec(tok, value))
        elif kind == "specdefault":
            self.lists["spec_types"].append("ngram-mod")  # --spec-default (arg.cpp:4747-4762)
        else:
            self.vals[fld] = _VALUE[kind](tok, value)

    def config(self) -> ServerConfig:
        vals = dict(self.vals)
        vals["spec_types"] = tuple(t for t in self.lists["spec_types"] if t != "none")
        vals["override_tensor"] = tuple(self.lists["override_tensor"])
        vals["override_tensor_draft"] = tuple(self.lists["override_tensor_draft"])
        vals.update(set_flags=frozenset(self.set_flags), ignored=tuple(self.ignored), problems=tuple(self.problems))
        out = replace(self.base, **vals)  # type: ignore[arg-type]
        validate(out)
        return out


def _from_command(cmd: Command, base: ServerConfig | None = None, strict: bool = False) -> ServerConfig:
    reading = _Reading(base or ServerConfig(), cmd.schema, strict)
    for arg in cmd.args:
        reading.read(arg)
    return reading.config()


def validate(cfg: ServerConfig) -> None:
    """Contradictions llama-server itself rejects (cited)."""
    quant_v = TYPE_SIZES[cfg.cache_type_v][0] > 1
    if quant_v and cfg.flash_attn == "off":
        # llama-context.cpp:3843-3852: quantized V needs flash attention
        raise InputError(
            _("-ctv {cache_type_v} with -fa off: llama-server refuses a quantized V cache without "
              "flash attention (use -fa on/auto or an f16/bf16/f32 V cache)").format(cache_type_v=cfg.cache_type_v)
        )
    if cfg.split_mode == "tensor" and cfg.flash_attn == "off":
        raise InputError(_("-sm tensor with -fa off: SPLIT_MODE_TENSOR requires flash attention "
                           "(llama-context.cpp:3824-3836)"))
    if cfg.n_parallel > 256:
        # LLAMA_MAX_SEQ (src/llama-cparams.h:8), checked in llama-context.cpp:102-105
        raise InputError(_("-np {n_parallel}: llama.cpp allows at most 256 sequences (n_seq_max must be <= 256)").format(n_parallel=cfg.n_parallel))
    if cfg.n_batch == 0 and cfg.n_ubatch == 0:
        raise InputError(_("-b 0 -ub 0: n_batch and n_ubatch cannot both be 0 (llama-context.cpp:3809)"))
