"""Permutation p-values with their Monte Carlo error and Holm's correction (issue 62): the standard error and the
Clopper-Pearson interval against scipy's exact binomial interval, Holm against a plain step-down loop and a case
worked by hand, and the decision that no permutation seed can turn from associated to not (or back)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from headwatch.analysis.trajectories.significance import (
    DECISION_WORDS,
    SIGNIFICANCE,
    decide,
    exceedances,
    holm,
    judge,
    monte_carlo_interval,
    monte_carlo_se,
)


def test_the_standard_error_and_the_interval_are_the_binomials_of_the_exceedances() -> None:
    n = 1999
    for b in (0, 1, 40, 102, 1998):
        p = (1 + b) / (1 + n)
        assert exceedances(p, n) == b
        assert monte_carlo_se(p, n) == pytest.approx(math.sqrt(p * (1 - p) / n))
        exact = binomtest(b, n).proportion_ci(0.99, "exact")
        assert monte_carlo_interval(p, n) == pytest.approx((exact.low, exact.high), abs=1e-12)
    assert all(math.isnan(v) for v in monte_carlo_interval(float("nan"), n))


def _holm_rejects(p: np.ndarray, alpha: float) -> set[int]:
    """Holm's step-down procedure as a loop: the i-th smallest p is compared with alpha / (m - i)."""
    out: set[int] = set()
    for i, j in enumerate(np.argsort(p, kind="stable")):
        if p[j] >= alpha / (len(p) - i):
            break
        out.add(int(j))
    return out


def test_holm_adjusted_p_values_by_hand_and_against_the_step_down_loop() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04 -> running maximum 0.02, 0.03, 0.06, 0.06
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    adjusted = holm([0.01, float("nan"), 0.02])  # the untested are not counted
    assert math.isnan(adjusted[1]) and adjusted[[0, 2]] == pytest.approx([0.02, 0.02])
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.uniform(0, 0.1, rng.integers(1, 9))
        assert set(np.flatnonzero(holm(p) < SIGNIFICANCE)) == _holm_rejects(p, SIGNIFICANCE)


def test_sigmas_two_p_values_of_issue_62_are_one_verdict_undecided() -> None:
    """σ's joint p was 0.0515 with one seed and 0.048 with another (1,999 shuffles): not associated, then
    associated. Read with their Monte Carlo error, both are undecided, and say so."""
    verdicts = [judge([p], 1999)[0] for p in (0.0515, 0.048)]
    assert [v.decision for v in verdicts] == ["undecided", "undecided"]
    assert verdicts[0].words == DECISION_WORDS["undecided"] == "undecided (p within its Monte Carlo error of 0.05)"


def test_a_decided_verdict_is_on_the_wrong_side_of_005_for_at_most_half_a_percent_of_seeds() -> None:
    """Draws of the shuffles (binomial exceedances) for true p-values on both sides of 0.05: a decision lands on the
    wrong side only where the 99% interval misses the true p below or above, at most 0.5% of seeds each; reading p
    against 0.05 alone (the old verdict) is wrong for nearly half the seeds near 0.05."""
    rng = np.random.default_rng(1)
    n, draws = 9999, 4000
    for pi in (0.03, 0.045, 0.049, 0.051, 0.055, 0.07):
        p = (1 + rng.binomial(n, pi, draws)) / (1 + n)
        decisions = np.array([decide(*monte_carlo_interval(float(x), n)) for x in p])
        wrong = "not shown" if pi < SIGNIFICANCE else "associated"
        assert np.mean(decisions == wrong) <= 0.005 + 3 * math.sqrt(0.005 * 0.995 / draws), (pi, np.mean(decisions == wrong))
        if abs(pi - SIGNIFICANCE) <= 0.001:
            assert np.mean((p < SIGNIFICANCE) != (pi < SIGNIFICANCE)) > 0.3  # the old reading: a coin toss
            assert np.mean(decisions == "undecided") > 0.9


def test_holm_is_applied_to_the_interval_and_the_family_is_said() -> None:
    judged = judge([0.0001, 0.02, 0.3, float("nan")], [9999, 9999, 9999, 9999])
    assert [j.family for j in judged] == [3, 3, 3, 3]
    assert judged[0].decision == "associated" and judged[2].decision == "not shown" and judged[3].decision is None
    assert judged[1].adjusted == pytest.approx(0.04) and judged[1].low < judged[1].adjusted < judged[1].high
    assert judged[1].decision == "associated"  # 0.04's interval, doubled, stays below 0.05
    assert judge([0.024], 9999)[0].decision == "associated" and judge([0.024, 0.03], 9999)[0].decision == "undecided"
