"""A boundary's support and uncertainty (analysis/stages/curve.py `boundary_evidence`): the likelihood ratio against
least-squares fits by numpy's polyfit, and the profile-likelihood interval's coverage of a planted kink."""

from __future__ import annotations

import numpy as np
import pytest

from headwatch.analysis.stages.curve import INTERVAL_CHI2, StageRule, boundary_evidence, llc_stages, log_axis, segment

U = np.linspace(0.0, 3.0, 40)
KINK = 20


def _rss(u: np.ndarray, y: np.ndarray) -> float:
    """Residual sum of squares of the least-squares line, by numpy's polyfit (the reference)."""
    fit = np.polyval(np.polyfit(u, y, 1), u)
    return float(np.sum((y - fit) ** 2))


def _curve(sigma: float, seed: int) -> np.ndarray:
    """A line whose slope quadruples at checkpoint `KINK`, with Gaussian noise of ``sigma``."""
    truth = np.where(np.arange(len(U)) <= KINK, U, U[KINK] + 4.0 * (U - U[KINK]))
    return truth + np.random.default_rng(seed).normal(0.0, sigma, len(U))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_support_is_the_likelihood_ratio_of_the_cut(dtype) -> None:
    y = _curve(0.1, 0).astype(dtype).astype(np.float64)
    support, low, high = boundary_evidence(U, y, 0.1, 0, KINK, len(U) - 1)
    one = _rss(U, y)
    two = _rss(U[: KINK + 1], y[: KINK + 1]) + _rss(U[KINK:], y[KINK:])
    assert support == pytest.approx((one - two) / 0.1**2, rel=1e-8)
    # the interval, brute force: every cut between the ends within INTERVAL_CHI2 of the best
    chi = {m: (_rss(U[: m + 1], y[: m + 1]) + _rss(U[m:], y[m:])) / 0.1**2 for m in range(1, len(U) - 1)}
    near = [m for m, v in chi.items() if v - min(chi.values()) <= INTERVAL_CHI2]
    assert (low, high) == (min(*near, KINK), max(*near, KINK))


def test_the_interval_covers_the_planted_kink_and_widens_with_the_noise() -> None:
    """Over 200 noisy draws per noise level, the cut the rule makes and its interval: the interval holds the planted
    kink in at least 68% of draws (the level's nominal coverage; a change point's profile likelihood is not regular,
    so it is checked, not assumed), and its mean width grows with the noise: a clean kink is placed to one checkpoint."""
    widths = []
    for sigma in (0.02, 0.1, 0.2):
        covered, width, cut = 0, [], 0
        for seed in range(200):
            y = _curve(sigma, seed)
            pieces = segment(U, y, sigma, penalty=StageRule().k ** 2)
            if len(pieces) != 2:
                continue
            cut += 1
            _, low, high = boundary_evidence(U, y, sigma, 0, pieces[0][1], len(U) - 1)
            covered += low <= KINK <= high
            width.append(high - low)
        assert cut >= 180, sigma  # the kink is found
        assert covered / cut >= 0.68, (sigma, covered / cut)
        widths.append(float(np.mean(width)))
    assert widths[0] == 0.0 and widths[0] < widths[1] < widths[2]


def test_each_boundary_of_a_curve_carries_its_support_and_interval() -> None:
    steps = np.arange(100, 4100, 100)
    u = log_axis(steps)
    y = np.where(np.arange(40) <= KINK, u, u[KINK] + 4.0 * (u - u[KINK])) + np.random.default_rng(3).normal(0, 0.01, 40)
    stages = llc_stages(steps, y, 0.01)
    assert len(stages) == 2 and np.isnan(stages[0].evidence) and stages[0].low_step == -1
    b = stages[1]
    assert b.evidence > StageRule().k ** 2 and b.low_step <= b.start_step <= b.high_step
