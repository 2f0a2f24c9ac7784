"""tune names a winner only outside the measured noise (a -ub 64 vs -ub 256 search on a loaded
2-core machine once 'measured' 68.1 vs 33.1 tok/s decode for a flag that barely changes decode)."""

from __future__ import annotations

from llamarig.tune.search import Candidate, Measurement, decide, noise_of, score_spread


def _m(key: str, score: float, spread: float) -> Measurement:
    return Measurement(key, 0, 3, score, {"score_spread": spread})


def test_spread_of_per_request_scores() -> None:
    assert score_spread([10.0]) != score_spread([10.0])  # NaN: one request says nothing about noise
    assert score_spread([10.0, 14.0]) == 2.0
    assert score_spread([1, 2, 3, 4, 5, 6, 7, 8]) == (7 - 3) / 2


def test_a_difference_inside_the_noise_is_a_tie_that_keeps_the_first_listed() -> None:
    cands = [Candidate((("-ub", "512"),)), Candidate((("-ub", "256"),))]  # -ub 512: the default, listed first
    ranked = [_m("-ub 256", 36.0, 2.0), _m("-ub 512", 34.5, 1.5)]
    winner, tied, why = decide(ranked, cands)
    assert winner is not None and winner.key == "-ub 512" and set(tied) == {"-ub 256", "-ub 512"}
    assert "tie" in why
    # far outside the noise: the best wins
    winner, tied, why = decide([_m("-ub 256", 60.0, 1.0), _m("-ub 512", 34.5, 1.0)], cands)
    assert winner is not None and winner.key == "-ub 256" and not tied
    # a score with no measured spread still gets the floor (5 %)
    assert noise_of(Measurement("x", 0, 1, 100.0, {})) == 5.0
