"""FastLLM's ``ftllm server``: its flags checked against FastLLM's own argument parser at the
pinned release (src/llamarig/data/engines/fastllm-0.1.7.1.json: tools/fastllm_pytools/util.py
``make_normal_parser`` + ``add_server_args`` of https://github.com/ztxz16/fastllm at v0.1.7.1,
which tools/fastllm_pytools/cli.py gives the ``server``/``serve`` subcommands), and what has a
llama-server equivalent translated into llama-server's flags.

What FastLLM's options mean is read from its source at that release: ``--device "{'cuda:0':3,
'cuda:1':2}"`` runs 3/5 of the layers on cuda:0 and 2/5 on cuda:1 (README.md "如何设定运行设备",
tools/fastllm_pytools/util.py ``make_normal_llm_model``: ``llm.set_device_map``), ``cudapp=N``
and ``cudapp=a:b:c`` are its short forms (``expand_cudapp_device``); ``--max_batch`` is the
number of requests served at once ("每次最多同时推理的询问数量", ``model.set_max_batch``), so
it is llama-server's ``-np``, not its ``--batch-size``; ``--tokens`` sizes the paged KV cache in
tokens, shared by all requests; ``--kv_cache_dtype`` is auto, float16, bfloat16 or fp8_e4m3.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from llamarig.flags.engines.parser import EngineParser, EngineUse, load_parser
from llamarig.flags.parsed import Invocation
from llamarig.i18n import N_, _

__all__ = ["FASTLLM_FOLKLORE", "RELEASE", "Translation", "fastllm_parser", "fix_fastllm", "read_fastllm",
           "translate_fastllm", "translation_of"]

#: the FastLLM release whose parser the flags are checked against
RELEASE = "0.1.7.1"
#: subcommands of `ftllm` whose parser is the server's (tools/fastllm_pytools/cli.py)
SERVER_COMMANDS = ("server", "serve")


def fastllm_parser() -> EngineParser:
    return load_parser("fastllm", RELEASE)


@dataclass(frozen=True)
class FastllmLore:
    """A FastLLM option people (and chatbots) write that ftllm does not have: what it was meant
    to do, and FastLLM's own option for it (None: there is none)."""

    intent: str
    real: str | None = None


# checked against the parser of the pinned release (none of these is an option string of
# make_normal_parser/add_server_args): the RTX 3090 field report's FastLLM plan, and the vLLM
# spellings it borrows
FASTLLM_FOLKLORE: dict[str, FastllmLore] = {
    "--max-batch-size": FastllmLore(N_("requests served at once"), "--max_batch"),
    "--max-batch": FastllmLore(N_("requests served at once"), "--max_batch"),
    "--gpu-memory-utilization": FastllmLore(N_("share of each GPU's memory to use"), "--gpu_mem_ratio"),
    "--gpu-mem-ratio": FastllmLore(N_("share of each GPU's memory to use"), "--gpu_mem_ratio"),
    "--quantization": FastllmLore(N_("weight type"), "--dtype"),
    "--tensor-parallel-size": FastllmLore(N_("tensor parallelism (FastLLM's, over threads, is `--tp DEVICES`; "
                                             "without it there is none, which is what 1 means)")),
    "--kv-cache-dtype": FastllmLore(N_("KV cache type"), "--kv_cache_dtype"),
    "--max-seq-len": FastllmLore(N_("the longest sequence")),
    "--max-model-len": FastllmLore(N_("the longest sequence")),
    "--cache-mode": FastllmLore(N_("where the KV cache lives")),
    "--num-workers": FastllmLore(N_("worker threads per GPU")),
    "--fast-communication": FastllmLore(N_("faster transfers between GPUs")),
    "--cache-split": FastllmLore(N_("spread the KV cache over the GPUs")),
    "--cache-prefix": FastllmLore(N_("a shared prefix cache"), "--prefix_cache"),
}


def read_fastllm(inv: Invocation) -> tuple[str, list[EngineUse]]:
    """The subcommand of an ``ftllm`` command and its words (cut-off ones included, as meant)
    as the server's parser reads them; no uses for a subcommand that is not the server."""
    words = inv.intended_args
    if not words:
        return "", []
    sub = words[0].text
    if sub not in SERVER_COMMANDS:
        return sub, []
    return sub, fastllm_parser().read(words[1:], len(inv.args) - 1)


@dataclass(frozen=True)
class Translation:
    """An engine's command in llama-server's terms: ``args`` (without the program; ``-m
    MODEL.gguf`` stands for the GGUF to use when it is not given), the engine's model and the
    GGUF that stands for it (``model``), and one note per option with no equivalent or a
    choice made (catalogue messages)."""

    engine: str
    args: tuple[str, ...]
    model: str
    notes: tuple[str, ...]

    def command(self) -> str:
        return " ".join(["llama-server", *self.args])


#: FastLLM options whose value passes to a llama-server option as it is
_SAME = {"--threads": "--threads", "-t": "--threads", "--host": "--host", "--port": "--port",
         "--api_key": "--api-key", "--model_name": "--alias", "--temperature": "--temp", "--top_p": "--top-p",
         "--top_k": "--top-k", "--repeat_penalty": "--repeat-penalty", "--chat_template": "--chat-template-file",
         "--lora": "--lora", "--chunked_prefill_size": "--batch-size"}
_KV = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}
_WEIGHTS = {"int8": "Q8_0", "fp8": "Q8_0", "float8": "Q8_0", "int4": "Q4_0", "int4g": "Q4_K_M", "float16": "F16",
            "bfloat16": "BF16", "half": "F16"}


@dataclass
class _Meant:
    """What a FastLLM command asks for, read from its options (real or folklore)."""

    model: str = ""
    dtype: str = ""
    device: str = ""
    max_batch: int | None = None
    seq_len: int | None = None
    tokens: int | None = None
    kv: str = ""
    mtp: int = 0


def translate_fastllm(uses: list[EngineUse], model: str | None = None) -> Translation:
    """The llama-server command that does what the ``ftllm server`` command ``uses`` asks for,
    where llama-server can. ``model``: the GGUF (or catalogue id) to name with ``-m``."""
    m = _Meant(seq_len=seq_len_of(uses))
    args: list[str] = []
    notes: list[str] = []
    for u in uses:
        _take(u, m, args, notes)
    head = ["-m", model or "MODEL.gguf"]
    head += _devices(m.device, notes)
    if m.max_batch:
        head += ["-np", str(m.max_batch)]
    head += _context(m, notes)
    if m.kv in _KV:
        head += ["-ctk", _KV[m.kv], "-ctv", _KV[m.kv]]
    elif m.kv and m.kv != "auto":
        notes.append(_("`--kv_cache_dtype {kv}`: llama-server has no such KV type; the nearest is `-ctk q8_0 -ctv "
                       "q8_0`").format(kv=m.kv))
    if m.mtp > 0:
        head += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(m.mtp)]
    weights = _WEIGHTS.get(m.dtype.lower(), "") if m.dtype else ""
    hint = _("FastLLM loads {model}; llama-server needs a GGUF of the same model{quant}").format(
        model=m.model or "?", quant=_(" ({dtype} weights: a {gguf} GGUF)").format(dtype=m.dtype, gguf=weights)
        if weights else "")
    return Translation("fastllm", tuple(head + args), hint, tuple(notes))


def _take(u: EngineUse, m: _Meant, args: list[str], notes: list[str]) -> None:
    """What one option asks for: noted in ``m``, passed on in ``args``, or a note."""
    name = u.option.name if u.option is not None else FASTLLM_FOLKLORE.get(u.spelling, FastllmLore("")).real
    value = u.value
    if u.option is None and not u.spelling.startswith("-"):
        m.model = m.model or u.spelling
        return
    if name in _SAME and value is not None:
        args += [_SAME[name], value]
        return
    if not _remember(name, value, m):
        _no_equivalent(u, notes)


def _remember(name: str | None, value: str | None, m: _Meant) -> bool:
    """Options the translation reads as a whole (devices, sizes, types); whether ``name`` is one."""
    if name == "--tp" and value in (None, "", "1", "0"):
        return True  # one device, no tensor parallelism: llama-server's default too
    if value is None:
        return False
    ints = {"--max_batch": "max_batch", "--tokens": "tokens", "--mtp": "mtp"}
    if name in ints:
        setattr(m, ints[name], _int(value))
        return True
    texts = {"--device": "device", "--dtype": "dtype", "--kv_cache_dtype": "kv", "-p": "model", "--path": "model"}
    if name in texts:
        setattr(m, texts[name], value)
        return True
    return False


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _no_equivalent(u: EngineUse, notes: list[str]) -> None:
    lore = FASTLLM_FOLKLORE.get(u.spelling)
    if u.spelling in ("--max-seq-len", "--max-model-len"):
        return  # read by _context from the words themselves
    what = f"{u.spelling} {u.value}" if u.value is not None else u.spelling
    if lore is not None and lore.real is None:
        notes.append(_("`{what}` ({intent}): not a FastLLM option, and llama-server needs nothing for it").format(
            what=what, intent=_(lore.intent)))
    elif u.spelling in ("--gpu-memory-utilization", "--gpu_mem_ratio"):
        notes.append(_("`{what}`: llama-server sizes its buffers itself; `--fit` (on by default) leaves "
                       "`--fit-target` MiB free on each GPU (1024 by default) only by what it may change: the "
                       "context while -c is unset (common/fit.cpp:455), the layers while -ngl, -ts and -ot are "
                       "unset (common/fit.cpp:464-486); with both set it changes nothing").format(what=what))
    else:
        notes.append(_("`{what}`: no llama-server equivalent").format(what=what))


def _devices(device: str, notes: list[str]) -> list[str]:
    """``--device`` as llama-server's device list and split: a map of CUDA devices to shares of
    the layers is ``-sm layer -ts`` (with ``-dev`` when not the devices in order)."""
    if not device or device in ("cuda", "auto"):
        return []
    if device == "cpu":
        return ["-ngl", "0"]
    shares = _shares(device)
    if shares is None:
        notes.append(_("`--device {device}`: no llama-server equivalent written here; see `-dev`, `-sm`, "
                       "`-ts`").format(device=device))
        return []
    ids = [k for k, _w in shares]
    out = ["-ngl", "all"]
    if ids != list(range(len(ids))):
        out += ["-dev", ",".join(f"CUDA{i}" for i in ids)]
    if len(ids) > 1:
        out += ["-sm", "layer", "-ts", ",".join(_num(w) for _k, w in shares)]
    return out


def _shares(device: str) -> list[tuple[int, float]] | None:
    """``{'cuda:0':22, 'cuda:1':22}``, ``cudapp=3``, ``cudapp=1:2:3``, ``cuda:1``: (CUDA index,
    share of the layers) in FastLLM's order; None for anything else (multicuda, numa, cpu)."""
    if device.startswith("cudapp="):
        spec = device.removeprefix("cudapp=")
        try:
            if "," in spec:
                return [(int(x), 1.0) for x in spec.split(",")]
            if ":" in spec:
                return [(i, float(w)) for i, w in enumerate(spec.split(":"))]
            return [(i, 1.0) for i in range(int(spec))]
        except ValueError:
            return None
    if device.startswith("cuda:") and device[5:].isdigit():
        return [(int(device[5:]), 1.0)]
    try:
        value = ast.literal_eval(device)  # a Python literal, as FastLLM reads it
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or not value:
        return None
    out: list[tuple[int, float]] = []
    for k, w in value.items():
        if not (isinstance(k, str) and k.startswith("cuda:") and k[5:].isdigit() and isinstance(w, (int, float))):
            return None
        out.append((int(k[5:]), float(w)))
    return out


def _num(w: float) -> str:
    return str(int(w)) if w == int(w) else str(w)


def _context(m: _Meant, notes: list[str]) -> list[str]:
    """The context: FastLLM's paged cache holds ``--tokens`` tokens shared by every request, as
    llama-server's one pool with ``-kvu``; a "longest sequence" becomes the same shared pool."""
    size = m.tokens or m.seq_len
    if not size:
        return []
    if m.max_batch and m.max_batch > 1:
        notes.append(_("`-c {c} -kvu`: one pool of {c} tokens shared by the {n} slots, as FastLLM's paged cache; "
                       "for {c} tokens in every slot at once write `-c {total}`").format(
                           c=size, n=m.max_batch, total=size * m.max_batch))
        return ["-c", str(size), "-kvu"]
    return ["-c", str(size)]


def seq_len_of(uses: list[EngineUse]) -> int | None:
    """The length a ``--max-seq-len N`` (not a FastLLM option) asks for."""
    for u in uses:
        if u.spelling in ("--max-seq-len", "--max-model-len") and u.value is not None:
            return _int(u.value)
    return None


def fix_fastllm(inv: Invocation) -> tuple[list[list[str]], list[str]]:
    """An ``ftllm server`` command as FastLLM's parser takes it: its words grouped one option
    per group (the first group: the subcommand and the model), an option FastLLM spells
    otherwise renamed, one it does not have removed; and a comment per change (catalogue
    messages)."""
    sub, uses = read_fastllm(inv)
    groups: list[list[str]] = [[sub]] if sub else []
    comments: list[str] = []
    for u in uses:
        words = [u.spelling, *(v.text for v in u.values)]
        shown = " ".join(words)
        lore = FASTLLM_FOLKLORE.get(u.spelling)
        if not u.problem and u.option is None and len(groups) == 1:  # the model, after the subcommand
            groups[0].append(u.spelling)
        elif not u.problem:
            groups.append(words)
        elif u.option is None and lore is not None and lore.real is not None:
            new = [lore.real, *(v.text for v in u.values)]
            groups.append(new)
            comments.append(_("`{old}` -> `{new}`: FastLLM's option for {intent}").format(
                old=shown, new=" ".join(new), intent=_(lore.intent)))
        elif u.option is None and lore is not None:
            comments.append(_("removed `{what}`: not an option of ftllm server (meant: {intent})").format(
                what=shown, intent=_(lore.intent)))
        else:
            comments.append(_("removed `{what}`: ftllm server refuses it (\"{problem}\")").format(
                what=shown, problem=u.problem))
    return groups, comments


def translation_of(inv: Invocation, model: str | None = None) -> Translation | None:
    """The llama-server equivalent of another engine's command, when llamarig writes one (an
    ``ftllm server`` command); ``model``: what ``-m`` names."""
    if inv.engine != "fastllm":
        return None
    uses = read_fastllm(inv)[1]
    return translate_fastllm(uses, model) if uses else None
