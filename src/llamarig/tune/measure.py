"""One tune measurement: start llama-server with a candidate's flags, send ``budget`` identical-
shape requests (after one warm-up), read llama-server's own ``timings`` of each response
(prompt_per_second, predicted_per_second, prompt_ms: tools/server/server-task.cpp), stop it.

Each request has a different first word, so the prompt cache cannot serve it (``cache_prompt``
is also false); ``ignore_eos`` makes every request decode exactly ``n_predict`` tokens. The text
is llamarig bench's seeded filler (measure_text) and the sampling llama-server's default with a
fixed seed, as in a bench run: greedy decoding of a synthetic model repeats one token, which on a
mixture-of-experts model keeps hitting the same experts.

``depth``: the prompt is exactly ``depth`` tokens (the text tokenized by the server's own
``/tokenize``, cut or repeated to length, sent as token ids), so the decode speed is the speed
at that depth; the warm-up request has the same depth.

Throughput objective: each budgeted "request" is a batch of ``-np`` concurrent requests (the
candidate's slots; llama-server's auto is 4); the figure is the batch's generated tokens
(``timings.predicted_n`` summed) over its wall time."""

from __future__ import annotations

import tempfile
import time
import urllib.error
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from llamarig.bench.prompts import filler_text
from llamarig.errors import LlamarigError
from llamarig.flags.argv import Command
from llamarig.launch.server import start_server
from llamarig.tune.search import Candidate, Measurement, median, score_of, score_spread

_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
          "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango")


def measure_text(i: int, n_words: int) -> str:
    """The text of measurement request ``i``: a different first word and number, then
    ``n_words`` words of llamarig bench's seeded filler (llamarig.bench.prompts.filler_text), so
    that a tune measurement and a bench run send the same kind of text. A repetitive prompt is not
    neutral: on a mixture-of-experts model it keeps routing to the same experts, whose weights then
    stay in the CPU's caches (one server with a synthetic qwen3moe decoded 478-559 tok/s greedily
    after the 20-word cycle of prompt_text, 382-448 after prose with the default sampling:
    benchmarks/RESULTS.md "CPU speed model")."""
    return f"{_WORDS[i % len(_WORDS)]} {i}: {filler_text(n_words, 1000 + i)}"


def prompt_tokens(srv: Any, i: int, n: int) -> list[int]:
    """Exactly ``n`` token ids of request ``i``'s text (measure_text), tokenized by the server's
    own /tokenize and repeated to length."""
    toks = list(srv.post("/tokenize", {"content": measure_text(i, n), "add_special": False}).get("tokens") or [])
    if not toks:
        raise ValueError("/tokenize returned no tokens")
    while len(toks) < n:
        toks += toks
    return toks[:n]


def prompt_text(i: int, n_words: int) -> str:
    head = f"{_WORDS[i % len(_WORDS)]} {i}"
    body = " ".join(_WORDS[(i * 7 + k) % len(_WORDS)] for k in range(n_words))
    return f"{head}: {body}"


def start_owned(binary: str, args: Sequence[str], *, timeout_s: float = 300, log_dir: str | None = None) -> Any:
    """Start llama-server on a free loopback port and wait for /health; the process is stopped
    on every way out, Ctrl-C during start-up included (no orphan servers after an interrupted
    tune). Returns a llamarig.launch.server.RunningServer."""
    return start_server(binary, None, list(args), timeout=timeout_s, threads=None,
                        log_dir=log_dir or tempfile.mkdtemp(prefix="llamarig-tune-"))


@dataclass
class ServerMeasure:
    binary: str
    base_args: Sequence[str]  # the user's command without host/port
    objective: str = "decode"
    weight: float = 0.5
    prompt_words: int = 64
    n_predict: int = 32
    min_decode: float | None = None
    timeout_s: float = 300
    log_dir: str | None = None
    depth: int | None = None
    launches: int = 0  # server starts by this object
    requests: int = 0  # completion requests sent by this object, warm-ups included

    def _prompt(self, srv: Any, i: int) -> Any:
        if not self.depth:
            return measure_text(i, self.prompt_words)
        return prompt_tokens(srv, i, self.depth)

    def _one(self, srv: Any, i: int) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": self._prompt(srv, i), "n_predict": self.n_predict,
                                "ignore_eos": True, "cache_prompt": False, "seed": 1}
        r = srv.post("/completion", body, timeout=self.timeout_s)
        return r.get("timings") or {}

    def _batch(self, srv: Any, i: int, n: int) -> dict[str, Any]:
        """``n`` concurrent requests; timings of the first, plus the batch's throughput."""
        t = time.monotonic()
        with ThreadPoolExecutor(max_workers=n) as ex:
            rs = list(ex.map(lambda k: self._one(srv, i * 64 + k), range(n)))
        self.requests += n
        wall = time.monotonic() - t
        out = dict(rs[0])
        out["throughput"] = sum(float(x.get("predicted_n", 0)) for x in rs) / wall if wall > 0 else 0.0
        return out

    @staticmethod
    def _slots(args: Sequence[str]) -> int:
        v = Command.parse(args, program=False).get("--parallel")
        try:
            n = int(v) if v is not None else -1
        except ValueError:
            n = -1
        return n if n > 0 else 4  # -np -1 / not given: llama-server's auto is 4 slots

    def __call__(self, cand: Candidate, budget: int) -> Measurement:
        t0 = time.monotonic()
        self.launches += 1
        args = cand.apply(self.base_args)
        try:
            srv = start_owned(self.binary, args, timeout_s=self.timeout_s, log_dir=self.log_dir)
        except LlamarigError as e:
            return Measurement(cand.key, 0, budget, float("-inf"), {}, str(e).splitlines()[0],
                               time.monotonic() - t0)
        try:
            samples = []
            conc = self._slots(args) if self.objective == "throughput" else 1
            for i in range(budget + 1):
                k = i + 1000 * self.launches
                if self.objective == "throughput":
                    r = self._batch(srv, k, conc)
                else:
                    self.requests += 1
                    r = self._one(srv, k)
                if i:  # the first request is a warm-up
                    samples.append(r)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:200]
            return Measurement(cand.key, 0, budget, float("-inf"), {}, f"HTTP {e.code}: {detail}",
                               time.monotonic() - t0)
        except (OSError, ValueError) as e:
            return Measurement(cand.key, 0, budget, float("-inf"), {}, f"request failed: {e}", time.monotonic() - t0)
        finally:
            srv.stop()
        metrics = {
            "decode_tok_s": median([float(s.get("predicted_per_second", 0)) for s in samples]),
            "prefill_tok_s": median([float(s.get("prompt_per_second", 0)) for s in samples]),
            "ttft_ms": median([float(s.get("prompt_ms", 0)) for s in samples]),
            "prompt_tokens": median([float(s.get("prompt_n", 0)) for s in samples]),
            "requests": float(len(samples)),
            # the fastest request: other processes only ever slow a request down, so the best of
            # several is the least disturbed figure (what tune's calibration fits)
            "decode_tok_s_best": max((float(s.get("predicted_per_second", 0)) for s in samples), default=0.0),
            "prefill_tok_s_best": max((float(s.get("prompt_per_second", 0)) for s in samples), default=0.0),
        }
        if self.objective == "throughput":
            metrics["throughput_tok_s"] = median([float(x.get("throughput", 0)) for x in samples])
        # the candidate's own noise: the spread of its per-request scores (search.score_spread)
        per_request = [score_of(self.objective, {
            "decode_tok_s": float(x.get("predicted_per_second", 0)), "prefill_tok_s": float(x.get("prompt_per_second", 0)),
            "ttft_ms": float(x.get("prompt_ms", 0)), "throughput_tok_s": float(x.get("throughput", 0))}, self.weight)
            for x in samples]
        metrics["score_spread"] = score_spread(per_request)
        err = None
        if self.min_decode is not None and metrics["decode_tok_s"] < self.min_decode:
            err = f"decode {metrics['decode_tok_s']:.1f} tok/s < --min-decode {self.min_decode:g}"
        return Measurement(cand.key, 0, budget, score_of(self.objective, metrics, self.weight) if not err else float("-inf"),
                           metrics, err, time.monotonic() - t0)


@dataclass
class DepthLadder:
    """Decode measured at several depths in one server start (tune's CPU calibration,
    llamarig.tune.calibrate.calibration_ladder): the prompts are prefixes of one token sequence,
    ascending, sent with ``cache_prompt``, so each rung prefills only the tokens it adds to the
    previous one and a repeat at the same rung only its last token (llama-server keeps the
    common prefix of a slot's cache: tools/server/server-context.cpp:3442-3444, at least one token
    evaluated: :3634). One warm-up at the first
    rung, then ``runs`` requests per rung; once ``budget_s`` has passed (a model whose cache
    cannot be cut back, e.g. a recurrent one, prefills every request in full), one per rung.
    Returns one Measurement per rung measured (rung 0; metrics ``depth_asked``,
    ``decode_tok_s`` (median), ``decode_tok_s_best``, ``requests``; from the second rung on,
    the prefill of the tokens the rung adds: ``prefill_tok_s`` of ``prefill_n`` tokens after
    ``prefill_start`` cached ones) and the error that stopped it, if any."""

    binary: str
    args: Sequence[str]  # the full llama-server arguments, without host/port
    depths: Sequence[int]
    runs: int = 3
    n_predict: int = 32
    budget_s: float = 80.0
    timeout_s: float = 300
    log_dir: str | None = None
    key: str = ""
    launches: int = 0
    requests: int = 0

    def _one(self, srv: Any, prompt: list[int]) -> dict[str, Any]:
        self.requests += 1
        body = {"prompt": prompt, "n_predict": self.n_predict, "ignore_eos": True, "cache_prompt": True, "seed": 1}
        return srv.post("/completion", body, timeout=self.timeout_s).get("timings") or {}

    def __call__(self) -> tuple[list[Measurement], str | None]:
        depths = sorted(set(int(d) for d in self.depths if d > 0))
        if not depths:
            return [], None
        t0 = time.monotonic()
        self.launches += 1
        try:
            srv = start_owned(self.binary, self.args, timeout_s=self.timeout_s, log_dir=self.log_dir)
        except LlamarigError as e:
            return [], str(e).splitlines()[0]
        out: list[Measurement] = []
        err: str | None = None
        try:
            toks = prompt_tokens(srv, 7, depths[-1])
            self._one(srv, toks[:depths[0]])  # warm-up
            for d in depths:
                t_rung = time.monotonic()
                runs = self.runs if t_rung - t0 < self.budget_s else 1
                samples = [self._one(srv, toks[:d]) for _ in range(runs)]
                dec = [float(s.get("predicted_per_second", 0)) for s in samples]
                metrics = {"depth_asked": float(d), "decode_tok_s": median(dec), "decode_tok_s_best": max(dec),
                           "requests": float(len(samples)),
                           "prompt_n": median([float(s.get("prompt_n", 0)) for s in samples])}
                first = samples[0]
                if d != depths[0] and float(first.get("prompt_n", 0)) > 1:
                    # the rung's first request prefilled the tokens it adds to the previous rung's
                    # prompt, after the cached ones: the host's prefill deeper in the context
                    metrics.update(prefill_n=float(first["prompt_n"]), prefill_start=float(first.get("cache_n", 0)),
                                   prefill_tok_s=float(first.get("prompt_per_second", 0)))
                out.append(Measurement(self.key, 0, len(samples), max(dec), metrics, None, time.monotonic() - t_rung))
        except urllib.error.HTTPError as e:
            err = f"HTTP {e.code}: {e.read().decode(errors='replace')[:200]}"
        except (OSError, ValueError) as e:
            err = f"request failed: {e}"
        finally:
            srv.stop()
        return out, err


def ladder_prefills(rungs: Sequence[Measurement]) -> list[tuple[int, int, float]]:
    """The prefills a DepthLadder measured on the way: (cached tokens, new tokens, tok/s) of each
    rung's first request (fit_calibration's ``deep_prefill``)."""
    return [(int(x.metrics["prefill_start"]), int(x.metrics["prefill_n"]), float(x.metrics["prefill_tok_s"]))
            for x in rungs if x.metrics.get("prefill_tok_s") and x.metrics.get("prefill_n")]
