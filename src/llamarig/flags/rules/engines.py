"""Other inference servers' commands (llamarig.flags.engines): which engine it is (``engine``),
FastLLM's flags against FastLLM's own parser at the pinned release (``engine-unknown-flag``,
``engine-invalid-value``, ``engine-stray-argument``), and its llama-server equivalent
(``engine-translation``), planned on the given GPUs (``memory``, with ``check --gpu`` and
``--model``)."""

from __future__ import annotations

from llamarig.flags.argv import read_invocation
from llamarig.flags.engines import ENGINES, looks_like_modelfile
from llamarig.flags.engines.fastllm import (
    FASTLLM_FOLKLORE,
    fastllm_parser,
    read_fastllm,
    translate_fastllm,
)
from llamarig.flags.engines.parser import EngineParser, EngineUse
from llamarig.flags.findings import Finding, Severity
from llamarig.flags.parsed import Invocation, Word
from llamarig.flags.rules.context import Context, Subject
from llamarig.flags.rules.memory import memory_plan
from llamarig.flags.schema import Schema
from llamarig.i18n import _

__all__ = ["engine_findings", "modelfile_findings"]


def engine_findings(inv: Invocation, schema: Schema, ctx: Context) -> list[Finding]:
    """What check says of another engine's command."""
    engine = ENGINES[inv.engine]
    sub, uses = read_fastllm(inv) if inv.engine == "fastllm" else ("", [])
    shown = _shown(inv)
    if not uses:
        return [Finding("engine", Severity.INFO, inv.line, None, _(
            "`{command}` starts {engine} ({url}), not llama-server: llamarig checks llama-server's flags, not "
            "{engine}'s").format(command=shown, engine=engine.name, url=engine.url), None, None)]
    parser = fastllm_parser()
    out = [Finding("engine", Severity.INFO, inv.line, None, _(
        "`{command}` starts {engine} ({url}), not llama-server: its flags are checked against {engine}'s own "
        "parser (ftllm {sub} {release}), and its llama-server equivalent is below").format(
            command=shown, engine=engine.name, url=engine.url, sub=sub, release=parser.label), None, None)]
    out += [f for u in uses if (f := _use_finding(u, parser)) is not None]
    out += _translation(inv, uses, schema, ctx)
    return out


def _shown(inv: Invocation) -> str:
    """The words that name the engine's command: `ftllm server`, `lms server start`, `python -m
    vllm.entrypoints.openai.api_server`."""
    words = [w.text for w in inv.args]
    if "-m" in words[:2] and words.index("-m") + 1 < len(words):
        return " ".join([inv.program, "-m", words[words.index("-m") + 1]])
    lead = []
    for w in words[:2]:
        if w.startswith("-") or "/" in w or ":" in w:
            break
        lead.append(w)
    return " ".join([inv.program, *lead])


def _use_finding(u: EngineUse, parser: EngineParser) -> Finding | None:
    """What FastLLM's parser says of one word, as a finding."""
    if not u.problem:
        return None
    if u.option is None and u.spelling.startswith("-") and "ambiguous" not in u.problem:
        return _unknown(u, parser)
    rule = "engine-stray-argument" if u.option is None and not u.spelling.startswith("-") else "engine-invalid-value"
    return Finding(rule, Severity.ERROR, u.line, u.spelling, _(
        "ftllm server {release} refuses `{word}`: \"{problem}\" (argparse, exit 2)").format(
            release=parser.release, word=u.spelling, problem=u.problem),
        _("remove it") if rule == "engine-stray-argument" else None, None, u.passed)


def _unknown(u: EngineUse, parser: EngineParser) -> Finding:
    """An option FastLLM's parser does not have: what it was meant for, and FastLLM's own option
    for that when there is one."""
    lore = FASTLLM_FOLKLORE.get(u.spelling)
    real = lore.real if lore is not None else None
    if real is None and u.spelling.startswith("--"):  # `--max-batch`: FastLLM writes `--max_batch`
        alt = "--" + u.spelling[2:].replace("-", "_")
        hit = parser.lookup(alt)[0]
        real = hit.name if hit is not None and hit.name == alt else None
    value = f" {u.value}" if u.value is not None else ""
    msg = _("`{flag}` is not an option of ftllm server {release}: it stops with \"unrecognized arguments\" "
            "(argparse, exit 2)").format(flag=u.spelling, release=parser.label)
    if real is not None:
        where = parser.lookup(real)[0]
        msg += _("; FastLLM's option for {intent} is `{real}` ({where})").format(
            intent=_(lore.intent) if lore is not None else real, real=real, where=where.where if where else "")
        fix = _("write `{real}{value}`").format(real=real, value=value)
    else:
        if lore is not None:
            msg += _("; meant: {intent}, which FastLLM has no option for").format(intent=_(lore.intent))
        fix = _("remove it")
    return Finding("engine-unknown-flag", Severity.ERROR, u.line, u.spelling, msg, fix, None, u.passed)


def _translation(inv: Invocation, uses: list[EngineUse], schema: Schema, ctx: Context) -> list[Finding]:
    """The llama-server equivalent, and with GPUs and a model given, its memory plan."""
    gguf = ctx.model_ref if ctx.model_ref and ctx.model_ref.endswith(".gguf") else None
    tr = translate_fastllm(uses, gguf)
    detail = _("; ").join([tr.model, *tr.notes])
    gpus = " ".join(f"--gpu {g}" for g in ctx.gpus) or "--gpu GPU ..."
    plan_args = " ".join(a for a in tr.args[2:])
    out = [Finding("engine-translation", Severity.INFO, inv.line, None, _(
        "the llama-server equivalent: `{command}` ({detail})").format(command=tr.command(), detail=detail),
        _("plan it: `llamarig plan {model} {args} {gpus}`").format(
            model=ctx.model_ref or "MODEL.gguf", args=plan_args, gpus=gpus), None)]
    if ctx.gpus and ctx.model_ref:
        server = Invocation("llama-server", [Word(a, inv.line) for a in tr.args], inv.line, inv.line)
        reading = read_invocation(server, schema)
        out += memory_plan(Subject(server, schema, reading, None, ctx, lambda: None))
    return out


#: Modelfile PARAMETERs (https://github.com/ollama/ollama/blob/main/docs/modelfile.md) and the
#: llama-server option that sets the same
_MODELFILE = {"num_ctx": "-c", "num_gpu": "-ngl", "num_thread": "-t", "num_predict": "-n", "seed": "--seed",
              "temperature": "--temp", "top_p": "--top-p", "top_k": "--top-k", "min_p": "--min-p",
              "repeat_penalty": "--repeat-penalty", "repeat_last_n": "--repeat-last-n"}


def modelfile_findings(lines: list[str]) -> list[Finding]:
    """An Ollama Modelfile: named, and its FROM and PARAMETERs as llama-server flags."""
    text = "\n".join(lines)
    if not looks_like_modelfile(text):
        return []
    args: list[str] = []
    first = 1
    for n, raw in enumerate(lines, 1):
        words = raw.split()
        if len(words) >= 2 and words[0].upper() == "FROM":
            first = n
            args[:0] = ["-m", words[1] if words[1].endswith(".gguf") else "MODEL.gguf"]
        elif len(words) >= 3 and words[0].upper() == "PARAMETER" and words[1] in _MODELFILE:
            args += [_MODELFILE[words[1]], words[2]]
    engine = ENGINES["ollama"]
    return [Finding("engine", Severity.INFO, first, None, _(
        "this is an {engine} Modelfile ({url}), not a llama-server command; its FROM and PARAMETER lines as "
        "llama-server flags: `{command}`").format(engine=engine.name, url=engine.url,
                                                   command=" ".join(["llama-server", *args])), None, None)]
