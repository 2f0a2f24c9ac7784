"""``llamarig quality``: what a quantized KV cache changes, measured against f16 KV.

Method (printed with every report):

1. Next-token distributions, teacher-forced. The same model is started once per KV type
   (sequentially, same flags otherwise). For each of N fixed prompts the server decodes
   ``positions`` tokens with a ``logit_bias`` that forces the same token every step, so every
   KV type sees exactly the same context; ``n_probs`` returns the top-k of the model's raw
   (pre-sampling) distribution at each position (tools/server/server-context.cpp
   populate_token_probs; logit_bias acts in the sampler, after these probabilities are read).
   - top-1 agreement: share of positions whose most likely token equals f16's;
   - KL(f16 || type) over f16's top-k tokens: both distributions restricted to that set and
     renormalised; a token missing from the candidate's top-k gets the candidate's smallest
     returned probability (an upper bound), so the figure is an estimate of the truncated KL,
     not of the KL over the whole vocabulary;
   - top-k overlap: share of f16's top-k ids present in the candidate's top-k.
2. Needle retrieval: a sentence with a 5-digit number is put at several depths of a filler text;
   the model is asked to complete "The secret number is" greedily; found = the number appears in
   the answer; same-as-f16 = the greedy answer equals f16's. A synthetic (random-weight) model
   never finds the needle: only the same-as-f16 column means something for it.
"""

from __future__ import annotations

import math
import urllib.error
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from llamarig.errors import InputError, LlamarigError, ServerError
from llamarig.flags.argv import Command
from llamarig.gguf.ggml_types import KV_CACHE_TYPES
from llamarig.i18n import _, translator
from llamarig.tune.measure import prompt_text, start_owned

NEEDLE = 73914


@dataclass(frozen=True)
class NeedleResult:
    """The needle at one depth: found in the greedy answer, and that answer the same as f16's."""

    depth: float
    found: bool
    same_as_f16: bool
    answer: str

    def to_json(self) -> dict[str, Any]:
        return {"depth": self.depth, "found": self.found, "same_as_f16": self.same_as_f16, "answer": self.answer}


@dataclass(frozen=True)
class QualityRow:
    """One K/V type pair against f16: next-token agreement, KL divergence over f16's top-k,
    top-k overlap (over ``positions`` positions), and the needle at each depth."""

    type_k: str
    type_v: str
    top1_agreement: float
    kl_mean: float
    kl_max: float
    topk_overlap: float
    positions: int
    needle: tuple[NeedleResult, ...]

    def to_json(self) -> dict[str, Any]:
        return {"type_k": self.type_k, "type_v": self.type_v, "top1_agreement": self.top1_agreement,
                "kl_mean": self.kl_mean, "kl_max": self.kl_max, "topk_overlap": self.topk_overlap,
                "positions": self.positions, "needle": [n.to_json() for n in self.needle]}


@dataclass(frozen=True)
class QualityReport:
    """``llamarig quality``'s result: a row per K/V type pair (f16 first, the reference), how it
    was measured, and the method in words (``to_json()`` is ``quality --json``)."""

    rows: tuple[QualityRow, ...]
    prompts: int = 0
    prompt_words: int = 0
    positions_per_prompt: int = 0
    top_k: int = 0
    needle_words: int = 0
    depths: tuple[float, ...] = ()
    method: str = ""
    #: why nothing was measured (tune's quality floor with no quantized K/V type to probe)
    note: str = ""

    def row(self, type_k: str, type_v: str) -> QualityRow | None:
        return next((r for r in self.rows if (r.type_k, r.type_v) == (type_k, type_v)), None)

    def to_json(self) -> dict[str, Any]:
        if self.note and not self.rows:
            return {"rows": [], "note": self.note}
        return {"rows": [r.to_json() for r in self.rows], "prompts": self.prompts, "prompt_words": self.prompt_words,
                "positions_per_prompt": self.positions_per_prompt, "top_k": self.top_k,
                "needle_words": self.needle_words, "depths": list(self.depths), "method": self.method}


def parse_types(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        k, _sep, v = part.partition("/")
        v = v or k
        for t in (k, v):
            if t not in KV_CACHE_TYPES:
                raise InputError(_("--types {part}: {t} is not a KV cache type ({kv_cache_types})").format(part=part, t=t, kv_cache_types=', '.join(KV_CACHE_TYPES)))
        out.append((k, v))
    if not out:
        raise InputError(_("--types: give at least one KV cache type, e.g. q8_0,q4_0"))
    return out


def needle_prompt(n_words: int, depth: float) -> str:
    words = prompt_text(7, n_words).split()
    at = int(round(depth * len(words)))
    needle = f". The secret number is {NEEDLE}. "
    hay = " ".join(words[:at]) + needle + " ".join(words[at:])
    return hay + "\nQuestion: what is the secret number?\nAnswer: The secret number is"


def _probs(entry: dict[str, Any]) -> dict[int, float]:
    return {int(t["id"]): math.exp(float(t["logprob"])) for t in entry.get("top_logprobs", [])}


def kl_topk(p: dict[int, float], q: dict[int, float]) -> float:
    """KL(P||Q) over P's support (see the module docstring for the missing-token rule)."""
    if not p:
        return float("nan")
    floor = min(q.values()) if q else 1e-12
    ps = {i: v for i, v in p.items()}
    qs = {i: q.get(i, floor) for i in ps}
    zp, zq = sum(ps.values()), sum(qs.values())
    return sum((pv / zp) * math.log((pv / zp) / max(qs[i] / zq, 1e-30)) for i, pv in ps.items())


def _post(srv: Any, path: str, body: dict[str, Any]) -> Any:
    try:
        return srv.post(path, body, timeout=600)
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        raise ServerError(_("llama-server answered {code} to {path}: {detail}").format(code=e.code, path=path, detail=detail)) from None
    except (OSError, ValueError) as e:
        raise ServerError(_("llama-server request {path} failed: {error}").format(path=path, error=e)) from None


def _run_type(binary: str, base: Sequence[str], k: str, v: str, prompts: list[str], positions: int, top_k: int,
              needles: list[str]) -> dict[str, Any]:
    args = Command.parse(base, program=False).set("-ctk", k).set("-ctv", v).server_args()
    try:
        srv = start_owned(binary, args)
    except LlamarigError as e:
        raise ServerError(_("KV {key}/{value}: {error}").format(key=k, value=v, error=e)) from None
    try:
        tok = _post(srv, "/tokenize", {"content": " the", "with_pieces": True})["tokens"]
        forced = int(tok[0]["id"] if isinstance(tok[0], dict) else tok[0])
        dists = []
        for p in prompts:
            r = _post(srv, "/completion", {"prompt": p, "n_predict": positions, "n_probs": top_k, "temperature": 0,
                                         "logit_bias": [[forced, 1000]], "cache_prompt": False})
            dists.append([_probs(e) for e in (r.get("completion_probabilities") or [])])
        answers = []
        for p in needles:
            r = _post(srv, "/completion", {"prompt": p, "n_predict": 8, "temperature": 0, "cache_prompt": False})
            answers.append(str(r.get("content", "")))
    finally:
        srv.stop()
    return {"dists": dists, "answers": answers}


def run_quality(binary: str, base_args: Sequence[str], types: list[tuple[str, str]], *, n_prompts: int = 8,
                prompt_words: int = 200, top_k: int = 10, positions: int = 4, needle_words: int = 400,
                depths: Sequence[float] = (0.1, 0.5, 0.9),
                progress: Callable[[str], None] | None = None) -> QualityReport:
    """Start the model once per K/V type pair (f16 first) and measure what each changes."""
    prompts = [prompt_text(i, prompt_words) for i in range(n_prompts)]
    needles = [needle_prompt(needle_words, d) for d in depths]
    say = progress or (lambda _m: None)
    say("KV f16/f16 (reference)")
    ref = _run_type(binary, base_args, "f16", "f16", prompts, positions, top_k, needles)
    rows = [QualityRow("f16", "f16", 1.0, 0.0, 0.0, 1.0, sum(len(d) for d in ref["dists"]),
                       tuple(NeedleResult(d, str(NEEDLE) in a, True, a)
                             for d, a in zip(depths, ref["answers"], strict=True)))]
    for k, v in types:
        say(f"KV {k}/{v}")
        got = _run_type(binary, base_args, k, v, prompts, positions, top_k, needles)
        rows.append(_compare(k, v, ref, got, depths))
    return QualityReport(tuple(rows), n_prompts, prompt_words, positions, top_k, needle_words, tuple(depths),
                         " ".join((__doc__ or "").split("Method (printed with every report):", 1)[1].split()))


def _compare(k: str, v: str, ref: dict[str, Any], got: dict[str, Any], depths: Sequence[float]) -> QualityRow:
    """One K/V type pair's distributions and answers against f16's."""
    agree, kls, overlap, n = 0, [], [], 0
    for dp, dq in zip(ref["dists"], got["dists"], strict=True):
        for p, q in zip(dp, dq, strict=False):
            if not p or not q:
                continue
            n += 1
            agree += max(p, key=p.__getitem__) == max(q, key=q.__getitem__)
            kls.append(kl_topk(p, q))
            overlap.append(len(set(p) & set(q)) / len(p))
    nan = float("nan")
    return QualityRow(k, v, agree / n if n else nan, sum(kls) / len(kls) if kls else nan, max(kls) if kls else nan,
                      sum(overlap) / len(overlap) if overlap else nan, n,
                      tuple(NeedleResult(d, str(NEEDLE) in a, a == ra, a)
                            for d, a, ra in zip(depths, got["answers"], ref["answers"], strict=True)))


def render_report(rep: QualityReport, lang: str = "en") -> None:
    """The report on the terminal, in ``lang`` (llamarig.i18n)."""
    from rich.console import Console  # lazy: rich (40 ms), only to print (not --json)
    from rich.table import Table  # lazy: as above

    _ = translator(lang)

    con = Console(highlight=False)
    t = Table(title=_("KV cache quality vs f16 ({prompts} prompts x {positions} positions, top-{top_k})").format(
        prompts=rep.prompts, positions=rep.positions_per_prompt, top_k=rep.top_k), title_justify="left")
    t.add_column("K / V", justify="left")
    for c in (_("top-1 agreement"), _("KL mean (nats)"), _("KL max"), _("top-k overlap"), _("needle found"),
              _("needle = f16")):
        t.add_column(c, justify="right")
    for r in rep.rows:
        nd = r.needle
        t.add_row(f"{r.type_k} / {r.type_v}", f"{r.top1_agreement:.1%}", f"{r.kl_mean:.5f}", f"{r.kl_max:.5f}",
                  f"{r.topk_overlap:.1%}", f"{sum(x.found for x in nd)}/{len(nd)}",
                  f"{sum(x.same_as_f16 for x in nd)}/{len(nd)}")
    con.print(t)
    con.print(_("method: {method}").format(method=rep.method), soft_wrap=True)
