"""Permutation p-values read with their Monte Carlo error and corrected for the number of statistics tested.

A permutation p-value from ``n`` shuffles, ``p = (1 + b) / (1 + n)`` with ``b`` the shuffles at least as extreme
as the data, estimates the p-value ``π`` that every possible shuffle would give; another seed draws other
shuffles and another ``b``. Its Monte Carlo standard error is ``sqrt(p (1 - p) / n)`` (``b`` is binomial(n, π)),
and the Clopper-Pearson interval of ``b`` out of ``n`` (scipy's beta quantiles) holds ``π`` with probability at
least `MONTE_CARLO_LEVEL` whatever ``π`` is.

Several statistics tested at once are corrected by Holm's step-down method: with the ``m`` p-values in
ascending order, the i-th (1-based) is adjusted to ``max_{j <= i} min(1, (m - j + 1) p_(j))``. Rejecting where the
adjusted p is below `SIGNIFICANCE` keeps the chance of any false association below it (the family-wise error
rate), with no assumption on how the tests depend on each other. The adjusted p is a non-decreasing function of
each p, so Holm applied to the intervals' lower and upper ends bounds the adjusted ``π``.

The decision (`decide`): *associated* where the adjusted interval lies below `SIGNIFICANCE`, *not shown* where it
lies at or above it, and *undecided* where it holds the threshold: p lies within its Monte Carlo error of it, and
another seed could put it on either side. More shuffles narrow the interval; an undecided verdict is what these
shuffles can say, not a finding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

SIGNIFICANCE = 0.05
MONTE_CARLO_LEVEL = 0.99  # the Clopper-Pearson interval's coverage of the p-value all shuffles would give
Decision = Literal["associated", "not shown", "undecided"]
DECISION_WORDS: dict[str, str] = {  # how every table, sentence and the docs say a decision
    "associated": "associated",
    "not shown": "no association shown",
    "undecided": f"undecided (p within its Monte Carlo error of {SIGNIFICANCE:g})",
}


def exceedances(p: float, permutations: int) -> int:
    """``b``, the shuffles at least as extreme as the data, from ``p = (1 + b) / (1 + permutations)``."""
    return round(p * (permutations + 1)) - 1


def monte_carlo_se(p: float, permutations: int) -> float:
    """The Monte Carlo standard error of a permutation p from ``permutations`` shuffles: ``sqrt(p (1 - p) / n)``."""
    if not np.isfinite(p) or permutations < 1:
        return float("nan")
    return float(np.sqrt(p * (1 - p) / permutations))


def monte_carlo_interval(p: float, permutations: int, *, level: float = MONTE_CARLO_LEVEL) -> tuple[float, float]:
    """The Clopper-Pearson interval (``level``) of the p-value all shuffles would give, from ``p``'s shuffles.

    Returns:
        ``(low, high)``; NaN for a NaN ``p``.
    """
    from scipy.stats import beta

    if not np.isfinite(p) or permutations < 1:
        return float("nan"), float("nan")
    b, n, tail = exceedances(p, permutations), permutations, (1 - level) / 2
    low = 0.0 if b <= 0 else float(beta.ppf(tail, b, n - b + 1))
    high = 1.0 if b >= n else float(beta.ppf(1 - tail, b + 1, n - b))
    return low, high


def holm(p: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's adjusted p-values of ``p`` (NaN entries, the untested, left NaN and not counted in ``m``)."""
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    m = len(tested)
    if not m:
        return out
    order = tested[np.argsort(p[tested], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


@dataclass(frozen=True)
class Judged:
    """One permutation p read with its Monte Carlo error and Holm's correction.

    Attributes:
        p: the p-value as the shuffles gave it.
        se: its Monte Carlo standard error.
        adjusted: Holm's adjusted p (over the `family` p-values tested together).
        low, high: the Monte Carlo interval (`MONTE_CARLO_LEVEL`) of the adjusted p.
        family: how many p-values the correction is over.
        decision: `decide`'s.
    """

    p: float
    se: float
    adjusted: float
    low: float
    high: float
    family: int
    decision: Decision | None

    @property
    def words(self) -> str:
        """The decision in words (`DECISION_WORDS`); ``not tested`` where there is none."""
        return DECISION_WORDS[self.decision] if self.decision else "not tested"


def decide(low: float, high: float) -> Decision | None:
    """``associated`` where ``high`` < `SIGNIFICANCE`, ``not shown`` where ``low`` >= it, else ``undecided``; None for
    NaN (not tested)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return None
    if high < SIGNIFICANCE:
        return "associated"
    if low >= SIGNIFICANCE:
        return "not shown"
    return "undecided"


def judge(p: Sequence[float], permutations: Sequence[int] | int) -> list[Judged]:
    """Each p of one family (the statistics tested together) with its Monte Carlo error, Holm's adjusted p and
    interval, and the decision.

    Args:
        p: the family's p-values (NaN: not tested, left out of the correction).
        permutations: the shuffles behind each p (one number for all).
    """
    ps = np.asarray(p, dtype=np.float64)
    n = np.broadcast_to(np.asarray(permutations, dtype=np.int64), ps.shape)
    bounds = np.array([monte_carlo_interval(float(v), int(k)) for v, k in zip(ps, n, strict=True)]).reshape(-1, 2)
    adjusted, low, high = holm(ps), holm(bounds[:, 0]), holm(bounds[:, 1])
    family = int(np.isfinite(ps).sum())
    return [
        Judged(
            p=float(ps[i]),
            se=monte_carlo_se(float(ps[i]), int(n[i])),
            adjusted=float(adjusted[i]),
            low=float(low[i]),
            high=float(high[i]),
            family=family,
            decision=decide(float(low[i]), float(high[i])),
        )
        for i in range(len(ps))
    ]
