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
from typing import Any

from llamarig.errors import InputError, LlamarigError, ServerError
from llamarig.flags.argv import Command
from llamarig.gguf.ggml_types import KV_CACHE_TYPES
from llamarig.i18n import _, translator
from llamarig.tune.measure import prompt_text, start_owned

NEEDLE = 73914


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
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    prompts = [prompt_text(i, prompt_words) for i in range(n_prompts)]
    needles = [needle_prompt(needle_words, d) for d in depths]
    say = progress or (lambda _m: None)
    say("KV f16/f16 (reference)")
    ref = _run_type(binary, base_args, "f16", "f16", prompts, positions, top_k, needles)
    rows = [{"type_k": "f16", "type_v": "f16", "top1_agreement": 1.0, "kl_mean": 0.0, "kl_max": 0.0,
             "topk_overlap": 1.0, "positions": sum(len(d) for d in ref["dists"]),
             "needle": [{"depth": d, "found": str(NEEDLE) in a, "same_as_f16": True, "answer": a}
                        for d, a in zip(depths, ref["answers"], strict=True)]}]
    for k, v in types:
        say(f"KV {k}/{v}")
        got = _run_type(binary, base_args, k, v, prompts, positions, top_k, needles)
        agree, kls, overlap, n = 0, [], [], 0
        for dp, dq in zip(ref["dists"], got["dists"], strict=True):
            for p, q in zip(dp, dq, strict=False):
                if not p or not q:
                    continue
                n += 1
                agree += max(p, key=p.__getitem__) == max(q, key=q.__getitem__)
                kls.append(kl_topk(p, q))
                overlap.append(len(set(p) & set(q)) / len(p))
        rows.append({"type_k": k, "type_v": v, "top1_agreement": agree / n if n else float("nan"),
                     "kl_mean": sum(kls) / len(kls) if kls else float("nan"), "kl_max": max(kls) if kls else float("nan"),
                     "topk_overlap": sum(overlap) / len(overlap) if overlap else float("nan"), "positions": n,
                     "needle": [{"depth": d, "found": str(NEEDLE) in a, "same_as_f16": a == ra, "answer": a}
                                for d, a, ra in zip(depths, got["answers"], ref["answers"], strict=True)]})
    return {"rows": rows, "prompts": n_prompts, "prompt_words": prompt_words, "positions_per_prompt": positions,
            "top_k": top_k, "needle_words": needle_words, "depths": list(depths),
            "method": " ".join(__doc__.split("Method (printed with every report):", 1)[1].split())}


def render_report(rep: dict[str, Any], lang: str = "en") -> None:
    """The report on the terminal, in ``lang`` (llamarig.i18n)."""
    from rich.console import Console  # lazy: rich (40 ms), only to print (not --json)
    from rich.table import Table  # lazy: as above

    _ = translator(lang)

    con = Console(highlight=False)
    t = Table(title=_("KV cache quality vs f16 ({prompts} prompts x {positions} positions, top-{top_k})").format(
        prompts=rep["prompts"], positions=rep["positions_per_prompt"], top_k=rep["top_k"]), title_justify="left")
    t.add_column("K / V", justify="left")
    for c in (_("top-1 agreement"), _("KL mean (nats)"), _("KL max"), _("top-k overlap"), _("needle found"),
              _("needle = f16")):
        t.add_column(c, justify="right")
    for r in rep["rows"]:
        nd = r["needle"]
        t.add_row(f"{r['type_k']} / {r['type_v']}", f"{r['top1_agreement']:.1%}", f"{r['kl_mean']:.5f}",
                  f"{r['kl_max']:.5f}", f"{r['topk_overlap']:.1%}",
                  f"{sum(x['found'] for x in nd)}/{len(nd)}", f"{sum(x['same_as_f16'] for x in nd)}/{len(nd)}")
    con.print(t)
    con.print(_("method: {method}").format(method=rep["method"]), soft_wrap=True)
