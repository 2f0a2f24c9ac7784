"""``llamarig tune``: candidates pruned by the planner, then successive halving over measurements.

Successive halving (Jamieson & Talwalkar 2016; the rung schedule of Hyperband): every surviving
candidate is measured with a budget of ``b_r = min_budget x eta^r`` requests at rung ``r``; the
best ``ceil(n / eta)`` go on to the next rung; the last rung measures the survivors with
``max_budget`` requests and its best is the winner. Many candidates get short runs, the best few
long ones. Every measurement is appended to a state file as soon as it is taken, so an
interrupted tune resumes where it stopped (a measurement already in the file is never re-run).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llamarig.errors import InputError
from llamarig.flags.argv import Command
from llamarig.i18n import _

#: a --try value meaning "the flag is not given" (a switch: "+" means given without a value)
ABSENT = "-"
#: objectives: the figure maximised, from llama-server's own per-request ``timings``
OBJECTIVES = ("decode", "prefill", "ttft", "weighted", "throughput")


@dataclass(frozen=True)
class Candidate:
    """A setting to try: (flag, value) pairs added to the base command (value None: a switch)."""

    flags: tuple[tuple[str, str | None], ...]

    @property
    def key(self) -> str:
        parts = [f if v is None else (f"no {f}" if v == ABSENT else f"{f} {v}") for f, v in self.flags]
        return " ".join(parts) or "(base)"

    def args(self) -> list[str]:
        out: list[str] = []
        for f, v in self.flags:
            if v == ABSENT:
                continue
            out.append(f)
            if v is not None:
                out.append(v)
        return out

    def apply(self, base: Sequence[str]) -> list[str]:
        """``base`` with this candidate's flags: every earlier use of a tried option (any of its
        spellings, negations included, with its values) is removed, then the candidate's flags
        are appended (llama-server: the last one wins anyway)."""
        tried = {f for f, _ in self.flags}
        return Command.parse(base, program=False).without(*tried).server_args() + self.args()


def parse_dim(text: str) -> tuple[str, list[str]]:
    """``-ub=64,128,256`` or ``-ub 64,128,256`` -> ("-ub", ["64", "128", "256"]). For a switch,
    ``+`` means given and ``-`` absent: ``-kvu=+,-``."""
    flag, sep, vals = text.replace(" ", "=", 1).partition("=")
    if not flag.startswith("-") or not sep or not vals:
        raise InputError(_("--try {text}: expected FLAG=V1,V2,... (e.g. -ub=64,128,256)").format(text=text))
    values = [v.strip() for v in vals.split(",") if v.strip()]
    if not values:
        raise InputError(_("--try {text}: no values").format(text=text))
    return flag, values


def _value(v: str) -> str | None:
    return None if v == "+" else v


def space(dims: Sequence[tuple[str, Sequence[str]]]) -> list[Candidate]:
    """The cartesian product of the dimensions, in a stable order."""
    names = [d for d, _ in dims]
    out = []
    for combo in itertools.product(*[list(v) for _d, v in dims]):
        out.append(Candidate(tuple((n, _value(v)) for n, v in zip(names, combo, strict=True))))
    return out


@dataclass(frozen=True)
class Measurement:
    key: str
    rung: int
    budget: int  # measured requests
    score: float  # higher is better (ttft: negative milliseconds)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0


MeasureFn = Callable[[Candidate, int], Measurement]


class TuneState:
    """Measurements taken so far, keyed by (candidate, rung); saved after every measurement."""

    def __init__(self, path: Path | None, fingerprint: str) -> None:
        self.path = path
        self.fingerprint = fingerprint
        self.measurements: dict[tuple[str, int], Measurement] = {}
        self.resumed = 0
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise InputError(_("{path}: unreadable tune state ({error}); delete it or pass --restart").format(path=path, error=e)) from None
            if not isinstance(data, dict) or data.get("fingerprint") != fingerprint:
                raise InputError(_("{path}: tune state of a different search (model, flags, space or objective changed); "
                                   "pass --restart to discard it or --state to use another file").format(path=path))
            for m in data.get("measurements", []):
                mm = Measurement(m["key"], int(m["rung"]), int(m["budget"]), float(m["score"]),
                                 dict(m.get("metrics", {})), m.get("error"), float(m.get("seconds", 0)))
                self.measurements[(mm.key, mm.rung)] = mm
            self.resumed = len(self.measurements)

    def get(self, key: str, rung: int) -> Measurement | None:
        return self.measurements.get((key, rung))

    def add(self, m: Measurement) -> None:
        self.measurements[(m.key, m.rung)] = m
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        data = {"fingerprint": self.fingerprint, "saved_at": time.time(),
                "measurements": [asdict(m) for m in self.measurements.values()]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)


def fingerprint(**parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def rung_budgets(min_budget: int, max_budget: int, eta: int) -> list[int]:
    if min_budget < 1 or max_budget < min_budget or eta < 2:
        raise InputError(_("budgets: need 1 <= --min-runs <= --max-runs and --eta >= 2"))
    out = [min_budget]
    while out[-1] * eta < max_budget:
        out.append(out[-1] * eta)
    if out[-1] != max_budget:
        out.append(max_budget)
    return out


@dataclass
class SearchResult:
    winner: Candidate | None
    rungs: list[list[Measurement]]  # measurements per rung, best first
    budgets: list[int]
    measured: int  # measurements taken in this run (not from the state file)
    reused: int  # measurements read back from the state file
    cost: int  # budgeted requests over all measurements, reused ones included (warm-ups excluded)
    launches: int  # server starts in this run (one per new measurement; reused ones start nothing)
    method: str
    tied: list[str] = field(default_factory=list)  # keys within the measured noise of the best
    decision: str = ""  # why the winner was named (or why it is a tie)

    def final(self) -> list[Measurement]:
        return self.rungs[-1] if self.rungs else []

    def to_json(self) -> dict[str, Any]:
        return {"winner": self.winner.key if self.winner else None, "budgets": self.budgets,
                "rungs": [[asdict(m) for m in r] for r in self.rungs], "measured": self.measured,
                "reused": self.reused, "cost_requests": self.cost, "launches": self.launches,
                "method": self.method, "tied": self.tied, "decision": self.decision}


ProgressFn = Callable[[int, int, str], None]  # (done, total, message)


def _order(cands: Sequence[Candidate], seed: int, rung: int) -> list[Candidate]:
    """A seeded shuffle per rung: slow drift of the machine (thermal, other load) does not
    always favour the same candidates."""
    out = list(cands)
    random.Random(seed * 1000 + rung).shuffle(out)
    return out


def _rank(ms: Sequence[Measurement]) -> list[Measurement]:
    return sorted(ms, key=lambda m: (m.error is None, m.score), reverse=True)


def successive_halving(cands: Sequence[Candidate], measure: MeasureFn, *, min_budget: int, max_budget: int,
                       eta: int = 3, seed: int = 0, state: TuneState | None = None,
                       progress: ProgressFn | None = None) -> SearchResult:
    if not cands:
        raise InputError(_("nothing to tune: every candidate was pruned by the planner"))
    state = state or TuneState(None, "")
    budgets = rung_budgets(min_budget, max_budget, eta)
    # the number of measurements, for the progress bar
    n, total = len(cands), 0
    for r in range(len(budgets)):
        if n == 1 and r > 0:
            break
        total += n
        n = max(1, math.ceil(n / eta))
    alive = list(cands)
    rungs: list[list[Measurement]] = []
    measured = reused = cost = done = 0
    for r, b in enumerate(budgets):
        last = r == len(budgets) - 1 or len(alive) == 1
        if len(alive) == 1 and r > 0:
            break
        ms = []
        for c in _order(alive, seed, r):
            m = state.get(c.key, r)
            if m is None or m.budget != b:
                m = measure(c, b)
                m = Measurement(c.key, r, b, m.score, m.metrics, m.error, m.seconds)
                state.add(m)
                measured += 1
            else:
                reused += 1
            cost += m.budget
            done += 1
            ms.append(m)
            if progress:
                progress(done, total, _("rung {r}/{n} ({b} req) {candidate}: {result}").format(
                    r=r + 1, n=len(budgets), b=b, candidate=c.key,
                    result=_("error: {error}").format(error=m.error) if m.error else f"{m.score:.1f}"))
        ranked = _rank(ms)
        rungs.append(ranked)
        if last:
            break
        keep = {m.key for m in ranked[:max(1, math.ceil(len(alive) / eta))] if m.error is None} or {ranked[0].key}
        alive = [c for c in alive if c.key in keep]
    winner, tied, why = decide(rungs[-1], cands) if rungs else (None, [], _("nothing measured"))
    method = _("successive halving: eta {eta}, budgets {budgets} requests per rung, seed {seed}; "
               "{n} candidate(s) after planner pruning; {why}").format(eta=eta, budgets=budgets, seed=seed,
                                                                      n=len(cands), why=why)
    return SearchResult(winner, rungs, budgets, measured, reused, cost, measured, method, tied, why)


def exhaustive(cands: Sequence[Candidate], measure: MeasureFn, budget: int,
               progress: ProgressFn | None = None) -> SearchResult:
    """Every candidate with the full budget (the reference SH is compared with)."""
    ms = []
    for i, c in enumerate(cands):
        m = measure(c, budget)
        ms.append(Measurement(c.key, 0, budget, m.score, m.metrics, m.error, m.seconds))
        if progress:
            progress(i + 1, len(cands), c.key)
    ranked = _rank(ms)
    winner, tied, why = decide(ranked, cands)
    return SearchResult(winner, [ranked], [budget], len(ms), 0, budget * len(ms), len(ms),
                        _("exhaustive: {n} candidate(s) x {budget} requests; {why}").format(
                            n=len(cands), budget=budget, why=why), tied, why)


def coordinate_descent(dims: Sequence[tuple[str, Sequence[str]]], measure: MeasureFn, *, budget: int,
                       sweeps: int = 2, progress: ProgressFn | None = None) -> SearchResult:
    """One dimension at a time: from the first value of every dimension (the default, or the
    user's first), measure each other value of one dimension with the rest held, move to it only
    when it beats the current best by more than both measurements' noise (:func:`noise_of`: a
    lead inside the noise is no lead), then the next dimension; stop after ``sweeps`` passes or a
    pass that moves nothing. 1 + sum(values - 1) measurements per pass instead of the product:
    it finds the best where the dimensions' effects add up (threads, -ub, K/V type and flash
    attention mostly do on one device) and can miss a best that needs two changes at once."""
    names = [d for d, _ in dims]
    cur = [list(v)[0] for _d, v in dims]
    seen: dict[str, Measurement] = {}

    def cand(choice: Sequence[str]) -> Candidate:
        return Candidate(tuple((n, _value(v)) for n, v in zip(names, choice, strict=True)))

    def take(choice: Sequence[str]) -> Measurement:
        c = cand(choice)
        if c.key not in seen:
            m = measure(c, budget)
            seen[c.key] = Measurement(c.key, 0, budget, m.score, m.metrics, m.error, m.seconds)
            if progress:
                progress(len(seen), len(seen), c.key)
        return seen[c.key]

    best = take(cur)
    for _sweep in range(sweeps):
        moved = False
        for i, (_flag, values) in enumerate(dims):
            for v in values:
                if v == cur[i]:
                    continue
                trial = [*cur[:i], v, *cur[i + 1:]]
                m = take(trial)
                if m.error is None and (best.error is not None or m.score - best.score > noise_of(m) + noise_of(best)):
                    cur, best, moved = trial, m, True
        if not moved:
            break
    ranked = _rank(list(seen.values()))
    winner = cand(cur) if best.error is None else None
    why = _("coordinate descent: {n} measurement(s) x {budget} requests; {key} kept (no other value of any "
            "dimension beat it by more than the measured noise)").format(n=len(seen), budget=budget, key=best.key)
    return SearchResult(winner, [ranked], [budget], len(seen), 0, budget * len(seen), len(seen), why, [], why)


# ------------------------------------------------------------------------------ objective


def score_of(objective: str, metrics: dict[str, float], weight: float = 0.5) -> float:
    """The figure to maximise. weighted: decode^w x prefill^(1-w) (a geometric mean, so that
    the two throughputs' different scales do not matter)."""
    if objective == "decode":
        return metrics["decode_tok_s"]
    if objective == "prefill":
        return metrics["prefill_tok_s"]
    if objective == "ttft":
        return -metrics["ttft_ms"]
    if objective == "throughput":
        return metrics["throughput_tok_s"]
    if objective == "weighted":
        d, p = max(metrics["decode_tok_s"], 1e-9), max(metrics["prefill_tok_s"], 1e-9)
        return math.exp(weight * math.log(d) + (1 - weight) * math.log(p))
    raise InputError(_("--objective {objective}: expected one of {objectives}").format(objective=objective, objectives=', '.join(OBJECTIVES)))


#: the least relative noise assumed for a score, whatever a few requests showed: load on a shared
#: 2-core machine moved the same decode figure by more than this between runs (docs/tune.md)
NOISE_FLOOR = 0.05


def score_spread(scores: Sequence[float]) -> float:
    """Half the spread of a candidate's per-request scores: half the interquartile range with 4 or
    more requests, half the range with 2-3, and NaN with one (its noise is then not known)."""
    s = sorted(x for x in scores if math.isfinite(x))
    if len(s) < 2:
        return float("nan")
    if len(s) < 4:
        return (s[-1] - s[0]) / 2
    q1, q3 = s[len(s) // 4], s[(3 * len(s)) // 4]
    return (q3 - q1) / 2


def noise_of(m: Measurement) -> float:
    """How far ``m.score`` may be off: its measured spread, at least NOISE_FLOOR of the score."""
    sp = m.metrics.get("score_spread", float("nan"))
    floor = NOISE_FLOOR * abs(m.score) if math.isfinite(m.score) else 0.0
    return max(sp if math.isfinite(sp) else 0.0, floor)


def decide(ranked: Sequence[Measurement], cands: Sequence[Candidate]) -> tuple[Candidate | None, list[str], str]:
    """The winner, the keys tied with the best (their difference is inside the measured noise),
    and why. A tie keeps the simplest candidate: the one listed first (the default, or the user's
    first value of each dimension), not the luckiest measurement."""
    ok = [m for m in ranked if m.error is None]
    if not ok:
        return None, [], _("every candidate failed")
    best = ok[0]
    tied = [m for m in ok if best.score - m.score <= noise_of(best) + noise_of(m)]
    order = {c.key: i for i, c in enumerate(cands)}
    keep = min(tied, key=lambda m: order.get(m.key, 1 << 30))
    winner = next((c for c in cands if c.key == keep.key), None)
    if len(tied) == 1:
        return winner, [], (_("{key} leads by more than the measured noise (+-{a:.3g} and +-{b:.3g})").format(
            key=best.key, a=noise_of(best), b=noise_of(ok[1])) if len(ok) > 1 else _("one candidate"))
    return winner, [m.key for m in tied], _(
        "tie: {keys} differ by less than their measured noise; keeping {keep} (listed first: the simpler "
        "setting)").format(keys=", ".join(m.key for m in tied), keep=keep.key)


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
