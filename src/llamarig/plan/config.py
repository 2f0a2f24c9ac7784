"""The llama-server settings that decide memory, as a frozen dataclass, and a parser for them.

Spellings, defaults and value rules follow common/arg.cpp and common/common.h of llama.cpp
build 11434 (common/arg.cpp at build 11434). Only the flags that
change memory are modelled; every other llama-server flag is accepted and ignored (listed in
``ServerConfig.ignored``) so that a whole command line can be pasted after ``--``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from llamarig.errors import InputError
from llamarig.flags.argv import Command, looks_like_option
from llamarig.flags.knowledge import FOLKLORE
from llamarig.flags.schema import load_bundled
from llamarig.gguf.ggml_types import KV_CACHE_TYPES, TYPE_SIZES
from llamarig.i18n import _

#: --spec-type values (common/speculative.cpp:72-84)
SPEC_TYPES = (
    "none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
    "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
)
#: spec types that keep recurrent rollback snapshots (common.h:399-405, common.cpp:1693)
ROLLBACK_SPEC_TYPES = frozenset({"draft-mtp", "draft-eagle3", "draft-dflash", "draft-dspark"})
SPLIT_MODES = ("none", "layer", "row", "tensor")
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
_TRUTHY = ("on", "enabled", "true", "1")
_FALSEY = ("off", "disabled", "false", "0")


@dataclass(frozen=True)
class ServerConfig:
    """llama-server settings (llama-server's own defaults, common.h / server.cpp)."""

    n_ctx: int = 0  # -c; 0 = n_ctx_train (and --fit may lower it)
    n_parallel: int = -1  # -np; -1 = auto: 4 slots, unified KV (tools/server/server.cpp:168-173)
    kv_unified: bool | None = None  # -kvu / -no-kvu; None = not given
    kv_unified_per_slot: int = 0
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    cache_type_k_draft: str = "f16"  # -ctkd: NOT inherited from -ctk (speculative.cpp:2559)
    cache_type_v_draft: str = "f16"
    flash_attn: str = "auto"  # on | off | auto
    n_batch: int = 2048
    n_ubatch: int = 512
    n_gpu_layers: int = -1  # -1 auto, -2 all, N
    split_mode: str = "layer"
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
    load_mode: str = "auto"
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
    problems: tuple[str, ...] = ()  # what llama-server itself would reject in a pasted command

    # ------------------------------------------------------------------ derived
    @property
    def flash_attn_enabled(self) -> bool:
        """auto resolves to enabled on CPU/CUDA/Metal unless the K/V types force the non-FA path
        (llama-context.cpp:509-560; ggml/src/ggml-cuda/fattn.cu). iq4_nl K with f16 V under CUDA disables it."""
        return self.flash_attn != "off"

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
        out: list[str] = []
        m = model or self.model
        if self.hf_repo:  # llama-server downloads it (common/arg.cpp -hf, -hff)
            out += ["-hf", self.hf_repo] + (["-hff", self.hf_file] if self.hf_file else [])
        elif m and m.startswith(("http://", "https://")):
            out += ["-mu", m]
        elif m:
            out += ["-m", m]
        if self.mmproj:
            out += ["--mmproj", self.mmproj]
        if self.draft_model:
            out += ["-md", self.draft_model]
        s = self.set_flags
        if "n_ctx" in s:
            out += ["-c", str(self.n_ctx)]
        if "n_parallel" in s:
            out += ["-np", str(self.n_parallel)]
        if self.kv_unified is not None:
            out += ["-kvu"] if self.kv_unified else ["-no-kvu"]
        if "kv_unified_per_slot" in s:
            out += ["--kv-unified-per-slot", str(self.kv_unified_per_slot)]
        if "flash_attn" in s:
            out += ["-fa", self.flash_attn]
        for f, flag in (("cache_type_k", "-ctk"), ("cache_type_v", "-ctv"),
                        ("cache_type_k_draft", "-ctkd"), ("cache_type_v_draft", "-ctvd")):
            if f in s:
                out += [flag, getattr(self, f)]
        if "n_batch" in s:
            out += ["-b", str(self.n_batch)]
        if "n_ubatch" in s:
            out += ["-ub", str(self.n_ubatch)]
        if "threads" in s:
            out += ["-t", str(self.threads)]
        if "threads_batch" in s:
            out += ["-tb", str(self.threads_batch)]
        if "n_gpu_layers" in s:
            ngl = {-1: "auto", -2: "all"}.get(self.n_gpu_layers, str(self.n_gpu_layers))
            out += ["-ngl", ngl]
        if "split_mode" in s:
            out += ["-sm", self.split_mode]
        if self.tensor_split:
            out += ["-ts", ",".join(f"{x:g}" for x in self.tensor_split)]
        if "main_gpu" in s:
            out += ["-mg", str(self.main_gpu)]
        if self.cpu_moe:
            out += ["-cmoe"]
        if self.n_cpu_moe:
            out += ["--n-cpu-moe", str(self.n_cpu_moe)]
        if self.n_cpu_ffn:
            out += ["--n-cpu-ffn", str(self.n_cpu_ffn)]
        for pat, buft in self.override_tensor:
            out += ["-ot", f"{pat}={buft}"]
        if self.no_kv_offload:
            out += ["-nkvo"]
        if not self.op_offload:
            out += ["--no-op-offload"]
        if self.swa_full:
            out += ["--swa-full"]
        if "cache_ram_mib" in s:
            out += ["--cache-ram", str(self.cache_ram_mib)]
        if "ctx_checkpoints" in s:
            out += ["--ctx-checkpoints", str(self.ctx_checkpoints)]
        if "checkpoint_min_step" in s:
            out += ["--checkpoint-min-step", str(self.checkpoint_min_step)]
        if self.spec_types:
            out += ["--spec-type", ",".join(self.spec_types)]
        if "spec_draft_n_max" in s:
            out += ["--spec-draft-n-max", str(self.spec_draft_n_max)]
        if "load_mode" in s:
            out += ["--load-mode", self.load_mode]
        if "fit" in s:
            out += ["--fit", "on" if self.fit else "off"]
        if "fit_target_mib" in s:
            out += ["-fitt", ",".join(str(x) for x in self.fit_target_mib)]
        if "fit_ctx" in s:
            out += ["-fitc", str(self.fit_ctx)]
        if self.image_max_tokens:
            out += ["--image-max-tokens", str(self.image_max_tokens)]
        if not self.mmproj_offload:
            out += ["--no-mmproj-offload"]
        if not self.repack:
            out += ["--no-repack"]
        if self.no_host:
            out += ["--no-host"]
        if self.devices:
            out += ["-dev", ",".join(self.devices)]
        if self.rpc:
            out += ["--rpc", ",".join(self.rpc)]
        if "n_gpu_layers_draft" in s:
            out += ["-ngld", {-1: "auto", -2: "all"}.get(self.n_gpu_layers_draft, str(self.n_gpu_layers_draft))]
        if self.devices_draft:
            out += ["-devd", ",".join(self.devices_draft)]
        for pat, buft in self.override_tensor_draft:
            out += ["-otd", f"{pat}={buft}"]
        if self.cpu_moe_draft:
            out += ["-cmoed"]
        if self.n_cpu_moe_draft:
            out += ["-ncmoed", str(self.n_cpu_moe_draft)]
        return out


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
def _schema() -> object | None:
    """The bundled flag schema of the pinned build (llamarig.flags.schema), or None."""
    try:
        return load_bundled()
    except (InputError, OSError, ValueError, KeyError):
        return None


def _kv_type(flag: str, v: str) -> str:
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
    schema = _schema()
    hit = schema.lookup(tok) if schema is not None else None  # type: ignore[attr-defined]
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
    schema = _schema()
    hit = schema.lookup(tok) if schema is not None else None  # type: ignore[attr-defined]
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
    schema = _schema()
    cmd = Command.parse(argv, schema, program=False if strict else None)  # type: ignore[arg-type]
    return ServerConfig.from_command(cmd, base=base, strict=strict)


def _from_command(cmd: Command, base: ServerConfig | None = None, strict: bool = False) -> ServerConfig:
    cfg = base or ServerConfig()
    vals: dict[str, object] = {}
    set_flags = set(cfg.set_flags)
    ignored: list[str] = list(cfg.ignored)
    problems: list[str] = list(cfg.problems)
    spec_types = list(cfg.spec_types)
    ots = list(cfg.override_tensor)
    otds = list(cfg.override_tensor_draft)
    schema = cmd.schema
    for arg in cmd.args:
        tok = arg.spelling
        name = _norm(tok)
        advice = _removed_advice(tok)
        if advice is not None:
            msg = _("{flag}: removed from llama-server ({advice})").format(flag=tok, advice=advice)
            if strict:
                raise InputError(msg)
            problems.append(_("{flag}: removed from llama-server ({advice}); llama-server would exit with 'invalid "
                              "argument'").format(flag=tok, advice=advice))
            if name in ("--no-mmap", "--mlock"):
                vals["load_mode"] = "none" if name == "--no-mmap" else "mlock"
                set_flags.add("load_mode")
            continue
        found = _option(tok)
        if found is None:
            if looks_like_option(tok):
                if strict:
                    raise InputError(
                        _("{tok}: not a llama-server flag that plan understands (paste a whole command after '--' "
                          "to have unrelated flags ignored)").format(tok=tok)
                    )
                if arg.opt is not None or schema is None:
                    ignored.append(tok)
                else:
                    problems.append(
                        _("{flag}: not a llama-server flag of build {build}: llama-server would refuse to start "
                          "('error: invalid argument: {flag}', common/arg.cpp:830)").format(
                            flag=tok, build=schema.build))
            elif strict:
                # a stray word (in a pasted command the first token is the binary itself)
                raise InputError(_("'{tok}': unexpected argument (llama-server takes no positional arguments)").format(tok=tok))
            continue
        fld, kind, positive, n_values = found
        if kind == "bool":
            kind = "true" if positive else "false"
        elif kind == "notbool":
            kind = "false" if positive else "true"
        value = ""
        if n_values:
            if len(arg.values) < n_values:
                raise InputError(_("{tok}: missing value").format(tok=tok))
            value = arg.values[0]
        set_flags.add(fld)
        if kind in ("int", "int0", "int1", "ngl"):
            tail = _int_tail_problem(tok, value)
            if tail and tail not in problems:
                problems.append(tail)
        if kind == "int":
            vals[fld] = _int(tok, value)
        elif kind == "int0":
            vals[fld] = _int(tok, value, 0)
        elif kind == "int1":
            n = _int(tok, value)
            if n == 0 or n < -1:
                raise InputError(_("{tok} {value}: must be a positive number of slots (or -1 for auto)").format(tok=tok, value=value))
            vals[fld] = n
        elif kind == "kv":
            vals[fld] = _kv_type(tok, value)
        elif kind == "true":
            vals[fld] = True
        elif kind == "false":
            vals[fld] = False
        elif kind == "fa":
            if value in _TRUTHY:
                vals[fld] = "on"
            elif value in _FALSEY:
                vals[fld] = "off"
            elif value in ("auto", "-1"):
                vals[fld] = "auto"
            else:
                raise InputError(_("{tok} {value}: expected on|off|auto").format(tok=tok, value=value))
        elif kind == "ngl":
            vals[fld] = _ngl(tok, value)
        elif kind == "ts":
            try:
                ts = tuple(float(x) for x in re.split(r"[,/]", value) if x != "")
            except ValueError:
                raise InputError(_("{tok} {value}: expected numbers like 3,1").format(tok=tok, value=value)) from None
            if any(x < 0 for x in ts):
                raise InputError(_("{tok} {value}: split ratios must be >= 0").format(tok=tok, value=value))
            vals[fld] = ts
        elif kind == "ot":
            ots.extend(_ot(tok, value))
        elif kind == "otd":
            otds.extend(_ot(tok, value))
        elif kind == "spec":
            names = [x.strip() for x in value.split(",") if x.strip()]
            for spec_name in names:
                if spec_name not in SPEC_TYPES:
                    raise InputError(_("{tok} {spec_name}: unknown speculative type (accepted: {spec_types})").format(tok=tok, spec_name=spec_name, spec_types=', '.join(SPEC_TYPES)))
            # 'none' in a flag's list adds only 'none' (arg.cpp:4277-4281)
            spec_types.extend(["none"] if "none" in names else names)
        elif kind == "specdefault":
            spec_types.append("ngram-mod")  # --spec-default (arg.cpp:4747-4762)
        elif kind == "sm":
            if value not in SPLIT_MODES:
                raise InputError(_("{tok} {value}: expected one of {split_modes}").format(tok=tok, value=value, split_modes=', '.join(SPLIT_MODES)))
            vals[fld] = value
        elif kind == "lm":
            if value not in LOAD_MODES:
                raise InputError(_("{tok} {value}: expected one of {load_modes}").format(tok=tok, value=value, load_modes=', '.join(LOAD_MODES)))
            vals[fld] = value
        elif kind == "onoff":
            vals[fld] = _bool_value(tok, value)
        elif kind == "mibs":
            try:
                vals[fld] = tuple(int(x) for x in re.split(r"[,/]", value) if x != "")
            except ValueError:
                raise InputError(_("{tok} {value}: expected MiB values like 1024 or 512,1024").format(tok=tok, value=value)) from None
        elif kind == "list":
            vals[fld] = tuple(x for x in value.split(",") if x)
        elif kind == "path":
            vals[fld] = value
    effective_spec = tuple(t for t in spec_types if t != "none")
    vals["spec_types"] = effective_spec
    vals["override_tensor"] = tuple(ots)
    vals["override_tensor_draft"] = tuple(otds)
    vals["set_flags"] = frozenset(set_flags)
    vals["ignored"] = tuple(ignored)
    vals["problems"] = tuple(problems)
    out = replace(cfg, **vals)  # type: ignore[arg-type]
    validate(out)
    return out


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
