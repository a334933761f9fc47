"""Timescales against model size: when a curve has settled, and a power law in the parameter count.

**Consolidation time.** For a curve ``v(t_0), ..., v(t_S-1)`` over a run's checkpoints, the total change is
``D = v(t_S-1) - v(t_0)``. The consolidation time is the first checkpoint from which the curve stays within
``(1 - share) |D|`` of its final value at every later checkpoint (``share`` = 0.9: the curve has made 90% of its
total change and does not leave that band again). A curve with no change (``D`` = 0) or no finite value has
none. The study found early layers consolidating first; applied to a layer's mean statistic, this gives one
time per layer, read as a step, as tokens and as a fraction of the run.

**Scaling fit.** For a time ``T`` (an emergence step, a consolidation step) measured in runs of parameter
counts ``N``, the fit is ``log10 T = a + b log10 N`` by least squares over every run (scipy.stats.linregress;
seeds are replicates at their size): ``b`` is the exponent in ``T ~ N^b``. Its uncertainty comes from the
seeds: the pooled variance of ``log10 T`` among the runs of one size (pure error, ``sum_i (n_i - 1)`` degrees
of freedom) gives ``se(b) = s / sqrt(sum (log10 N - mean)^2)`` and a 95% interval with Student's t. With
fewer than `MIN_SIZES` distinct sizes (three points leave one degree of freedom for a line: any three
numbers fit some exponent) no fit is made and the reason is given in words; without a size that has two seeds
the exponent is given without an uncertainty and says so.

Arrays in, records out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

CONSOLIDATION_SHARE = 0.9  # the share of its total change a curve has made, and keeps, at its consolidation time
MIN_SIZES = 4  # distinct parameter counts a power-law fit needs
CONFIDENCE = 0.95


def consolidation_index(values: np.ndarray, *, share: float = CONSOLIDATION_SHARE) -> int | None:
    """The checkpoint at which a curve has made ``share`` of its total change for good (module docstring).

    Args:
        values: ``(S,)`` the curve at the run's checkpoints (non-finite values are skipped).
        share: in (0, 1].

    Returns:
        An index into ``values``, or None when the curve has fewer than two finite values or no total change.

    Raises:
        ValueError: ``share`` outside (0, 1].
    """
    if not 0 < share <= 1:
        raise ValueError(f"share = {share}: must lie in (0, 1]")
    v = np.asarray(values, dtype=np.float64)
    ok = np.flatnonzero(np.isfinite(v))
    if len(ok) < 2:
        return None
    first, last = v[ok[0]], v[ok[-1]]
    total = abs(last - first)
    if not total > 0:
        return None
    outside = np.abs(v[ok] - last) > (1 - share) * total * (1 + 1e-12)  # (S_ok,) away from the final band
    if not outside.any():
        return int(ok[0])
    return int(ok[int(np.flatnonzero(outside)[-1]) + 1])


@dataclass(frozen=True)
class PowerLaw:
    """``T ~ N^exponent`` fitted over runs (module docstring), or why not.

    Attributes:
        exponent: ``b`` (NaN when not fitted).
        intercept: ``a`` in ``log10 T = a + b log10 N``.
        se: the exponent's standard error from the seeds (NaN without a size with two seeds).
        low, high: its 95% interval (NaN without ``se``).
        sizes: distinct parameter counts with a finite, positive time.
        runs: runs with one.
        reason: why no fit was made ('' when it was).
    """

    exponent: float
    intercept: float
    se: float
    low: float
    high: float
    sizes: int
    runs: int
    reason: str = ""

    @property
    def fitted(self) -> bool:
        return not self.reason

    def text(self, what: str) -> str:
        """One sentence: the fit with its uncertainty, or the reason there is none."""
        if not self.fitted:
            return f"{what}: no fit. {self.reason}"
        out = f"{what} ~ N^{self.exponent:.2f} over {self.sizes} sizes ({self.runs} runs)"
        if np.isfinite(self.se):
            interval = f"95% interval {self.low:.2f} to {self.high:.2f}"
            return out + f", exponent {self.exponent:.2f} ± {self.se:.2f} ({interval}; from the seeds)"
        return out + "; no size has two seeds, so the exponent has no uncertainty from seeds"

    def as_dict(self) -> dict:
        return asdict(self)


def fit_power_law(params: np.ndarray, times: np.ndarray, *, min_sizes: int = MIN_SIZES) -> PowerLaw:
    """Fit ``log10 T = a + b log10 N`` over runs (module docstring).

    Args:
        params: ``(R,)`` each run's parameter count ``N``.
        times: ``(R,)`` its time ``T`` (NaN or <= 0 where the run has none: left out).
        min_sizes: distinct sizes needed.

    Returns:
        A `PowerLaw`; ``reason`` says why there is no fit.
    """
    n = np.asarray(params, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    ok = np.isfinite(n) & np.isfinite(t) & (n > 0) & (t > 0)
    x, y = np.log10(n[ok]), np.log10(t[ok])
    sizes = np.unique(n[ok])
    nan = float("nan")
    if len(sizes) < min_sizes:
        missing = int((~ok).sum())
        left = f" ({missing} of {len(n)} runs have no such time)" if missing else ""
        return PowerLaw(
            nan,
            nan,
            nan,
            nan,
            nan,
            len(sizes),
            int(ok.sum()),
            f"{len(sizes)} model size{'s' if len(sizes) != 1 else ''} with this time{left}: too few to say how it "
            f"changes with the parameter count (a power law needs {min_sizes} sizes).",
        )
    fit = stats.linregress(x, y)
    # pure error: the scatter of log10 T among the seeds of one size
    ss, dof = 0.0, 0
    for size in sizes:
        group = y[n[ok] == size]
        ss += float(((group - group.mean()) ** 2).sum())
        dof += len(group) - 1
    se, low, high = nan, nan, nan
    if dof > 0:
        sxx = float(((x - x.mean()) ** 2).sum())
        se = float(np.sqrt(ss / dof / sxx))
        half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, dof)) * se
        low, high = float(fit.slope) - half, float(fit.slope) + half
    return PowerLaw(float(fit.slope), float(fit.intercept), se, low, high, len(sizes), int(ok.sum()))
