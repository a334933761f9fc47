"""Developmental stages of one curve over training: the whole-model LLC, the loss, and the behavioural curves
`analysis.stages.run` reads beside them (docs/stages.md).

The rule, in short (Hoogland et al. 2024; the refined-LLC paper's appendix C.1): a stage boundary is
a critical point of the LLC curve, where it turns from rising to falling or back, or where it
starts or stops changing, or where it keeps its direction but changes its rate (a rise that speeds
up or slows down is a transition too: the induction head forms where the LLC's rise speeds up).
A curve sampled at a few checkpoints, each estimate with an error, is
read as follows, on the axis ``u = log10(1 + step)`` (checkpoints are log-spaced early):

1. Segmentation. The points are cut into stretches, each fitted by a straight line in ``u``
   (neighbouring stretches share their boundary point), by dynamic programming that minimises
   ``chi2 + penalty * (stretches - 1)``, ``chi2 = sum((y - fit)^2) / sigma^2``, with
   ``penalty = k^2``: a cut is made only where it lowers chi2 by more than k^2, the square of
   k standard errors (a likelihood-ratio test at about k sigma).
2. Trend of a stretch. The fitted change across it, ``slope * (u_end - u_start)``, is rising
   (falling) when it exceeds k times its standard error ``sigma * du / sqrt(sum (u - mean u)^2)``
   and flat otherwise. No smoothing besides the line fits.
3. Stages. A boundary is where the trend changes (an LLC peak, a trough, the start or end of a
   flat stretch), or where two neighbouring stretches of one trend, rising or falling, differ in
   slope by more than k standard errors of the difference, ``|b1 - b2| > k sqrt(se1^2 + se2^2)``
   with ``se = sigma / sqrt(sum (u - mean u)^2)`` (``LLC accelerates``, ``LLC slows``, ``loss drop
   speeds up``, ...); other neighbours are one stage, and flat stretches never split. A curve whose
   changes all stay within k standard errors is one stage: noise makes no boundary (at most a few
   percent of noise-only curves get one, measured in tests/unit/test_run_stages.py).

4. A boundary's support and uncertainty. The cut at c between the stretches [a, c] and [c, b] carries its
   likelihood ratio, ``(RSS(a..b) - RSS(a..c) - RSS(c..b)) / sigma^2``, and the checkpoints where it could sit: with
   a and b held, every c' between them whose two lines fit with chi2 at most `INTERVAL_CHI2` (1) above the best
   (a profile-likelihood interval of about one standard error; `boundary_evidence`).

``sigma`` for the LLC is the pooled standard error of an estimate: the root mean square over the
estimated checkpoints of ``sd_c / sqrt(C)``, ``sd_c`` the sample standard deviation of the C chains'
estimates (from llc_chains.parquet, or llc.parquet's population ``llc_std`` times
``sqrt(C / (C - 1))``). Estimates flagged ``diverged`` (`analysis.llc_diagnostics`) are left out.

The loss has no chains; its ``sigma`` is the noise of the curve around its trend, estimated from
second differences of consecutive values, ``1.4826 MAD(y[i-1] - 2 y[i] + y[i+1]) / sqrt(6)`` (the
MAD is robust to the curvature, the sqrt(6) is the variance of a second difference of white noise).
Its stretches are cut the same way and labelled ``drop``, ``rise`` or ``plateau``: a stretch whose
change is within k standard errors, or a drop between two drops and slower (per decade of steps)
than ``plateau_ratio`` times each of them (a loss that still falls, far more slowly than before
and after, is on a plateau), is a plateau.
"""

# The docstring above, less its first paragraph, is written into every store's meta.json ``stages.rule`` (with the
# same part of `analysis.stages.run`'s; `analysis.stages.run.store_stages`): its text is the stores' text, module
# paths included.

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

Basis = Literal["llc", "loss"]
LLC_TRENDS = ("rising", "falling", "flat")
LOSS_TRENDS = ("drop", "plateau", "rise")

# What a boundary is, from the trend before it to the trend after it; ``faster``/``slower``: the same trend at a
# rate that differs by more than k standard errors (``{c}``: the curve's name).
LEVEL_BOUNDARIES = {
    ("rising", "falling"): "{c} peak",
    ("falling", "rising"): "{c} trough",
    ("rising", "flat"): "{c} stops rising",
    ("falling", "flat"): "{c} stops falling",
    ("flat", "rising"): "{c} starts rising",
    ("flat", "falling"): "{c} starts falling",
    ("rising", "faster"): "{c} accelerates",
    ("rising", "slower"): "{c} slows",
    ("falling", "faster"): "{c} falls faster",
    ("falling", "slower"): "{c} falls more slowly",
}
LOSS_LIKE_BOUNDARIES = {
    ("drop", "plateau"): "{c} plateau begins",
    ("plateau", "drop"): "{c} drop begins",
    ("drop", "rise"): "{c} turns up",
    ("rise", "drop"): "{c} turns down",
    ("plateau", "rise"): "{c} starts rising",
    ("rise", "plateau"): "{c} stops rising",
    ("drop", "faster"): "{c} drop speeds up",
    ("drop", "slower"): "{c} drop slows",
    ("rise", "faster"): "{c} rise speeds up",
    ("rise", "slower"): "{c} rise slows",
}
_LLC_BOUNDARIES = {key: name.format(c="LLC") for key, name in LEVEL_BOUNDARIES.items()}
_LOSS_BOUNDARIES = {key: name.format(c="loss") for key, name in LOSS_LIKE_BOUNDARIES.items()}
START = "start of training"
# A boundary's uncertainty: the checkpoints where its cut raises chi2 by at most this much over the best place (a
# profile-likelihood interval of about one standard error; `boundary_evidence`).
INTERVAL_CHI2 = 1.0


@dataclass(frozen=True)
class StageRule:
    """The rule's parameters (recorded in ``meta.json`` ``stages``).

    Attributes:
        k: standard errors a change must exceed to count (and the square root of the cut penalty).
        plateau_ratio: a loss drop between two drops and slower than this fraction of each one's rate is a plateau.
        min_points: fewest checkpoints a curve needs before stages are read from it.
        merge: boundaries of different curves at most this many checkpoints apart are one boundary of the run
            (`analysis.stages.run`).
        count_noise: the noise floor of a count of heads holding a type, in heads (`analysis.stages.run`).
    """

    k: float = 3.0
    plateau_ratio: float = 0.5
    min_points: int = 3
    merge: int = 1
    count_noise: float = 0.5

    def __post_init__(self) -> None:
        if not (np.isfinite(self.k) and self.k > 0):
            raise ValueError(f"k={self.k!r}: expected a positive number of standard errors")
        if not 0 < self.plateau_ratio < 1:
            raise ValueError(f"plateau_ratio={self.plateau_ratio!r}: expected a fraction between 0 and 1")
        if self.min_points < 3:
            raise ValueError(f"min_points={self.min_points!r}: a turn needs at least 3 points")
        if self.merge < 0:
            raise ValueError(f"merge={self.merge!r}: expected a number of checkpoints, 0 or more")
        if not (np.isfinite(self.count_noise) and self.count_noise > 0):
            raise ValueError(f"count_noise={self.count_noise!r}: expected a positive number of heads")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Stage:
    """One stage of one curve.

    Attributes:
        index: 0-based position among the curve's stages.
        start_step, end_step: the checkpoints that bound it (a boundary belongs to both neighbours).
        trend: `LLC_TRENDS` or `LOSS_TRENDS`.
        start_value, end_value: the curve at those checkpoints (as measured, not fitted).
        change: the fitted change across the stage (the sum of its stretches' fitted changes).
        change_se: its standard error.
        boundary: what begins the stage (`START` for the first).
        evidence: the boundary's likelihood ratio, ``chi2(one line from the stretch before to the stretch after) -
            chi2(the two lines cut at the boundary)`` (NaN for the first stage): how much better the cut explains the
            curve than no cut there (`boundary_evidence`).
        low_step, high_step: the boundary's uncertainty, the first and last checkpoint where the cut could sit with
            chi2 at most `INTERVAL_CHI2` above its best (`boundary_evidence`; -1 for the first stage).
    """

    index: int
    start_step: int
    end_step: int
    trend: str
    start_value: float
    end_value: float
    change: float
    change_se: float
    boundary: str
    evidence: float = float("nan")
    low_step: int = -1
    high_step: int = -1


def log_axis(steps: np.ndarray) -> np.ndarray:
    """The axis stages are read on: ``log10(1 + step)``."""
    return np.log10(1.0 + np.asarray(steps, dtype=np.float64))


def _fit(u: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least-squares line through (u, y): (residual sum of squares, slope, sum (u - mean u)^2)."""
    du = u - u.mean()
    sxx = float(du @ du)
    slope = float(du @ (y - y.mean()) / sxx) if sxx > 0 else 0.0
    resid = y - y.mean() - slope * du
    return float(resid @ resid), slope, sxx


def segment(u: np.ndarray, y: np.ndarray, sigma: float, *, penalty: float) -> list[tuple[int, int]]:
    """Cut (u, y) into stretches [i, j] (inclusive, neighbours share their end point), each a line in u,
    minimising ``sum(RSS) / sigma^2 + penalty * (stretches - 1)`` exactly (dynamic programming over
    every cut; O(n^2) line fits).

    Args:
        u: increasing positions, shape (n,), n >= 2.
        y: values, shape (n,).
        sigma: the noise standard deviation of each value (> 0).
        penalty: the cost of one more cut, in chi2 units.

    Returns:
        The stretches in order, covering 0..n-1.
    """
    n = len(u)
    assert n >= 2 and len(y) == n and sigma > 0
    cost = np.full((n, n), np.inf)
    for i in range(n - 1):
        for j in range(i + 1, n):
            cost[i, j] = _fit(u[i : j + 1], y[i : j + 1])[0] / sigma**2
    best = np.full(n, np.inf)
    best[0] = -penalty
    back = np.zeros(n, dtype=np.int64)
    for j in range(1, n):
        totals = best[:j] + cost[:j, j] + penalty
        back[j] = int(np.argmin(totals))
        best[j] = totals[back[j]]
    cuts, j = [], n - 1
    while j > 0:
        cuts.append((int(back[j]), j))
        j = int(back[j])
    return cuts[::-1]


@dataclass(frozen=True)
class _Stretch:
    """One straight stretch [i, j] of a curve: its fitted change, that change's standard error, its slope (per unit
    of u, a decade of steps) and the slope's standard error ``sigma / sqrt(sum (u - mean u)^2)``."""

    i: int
    j: int
    change: float
    change_se: float
    slope: float
    slope_se: float


def _stretches(u: np.ndarray, y: np.ndarray, sigma: float, rule: StageRule) -> list[_Stretch]:
    """The curve cut into straight stretches (`segment`, penalty k^2) with each one's fitted change and slope."""
    out = []
    for i, j in segment(u, y, sigma, penalty=rule.k**2):
        _, slope, sxx = _fit(u[i : j + 1], y[i : j + 1])
        width = float(u[j] - u[i])
        out.append(_Stretch(i, j, slope * width, sigma * width / np.sqrt(sxx), slope, sigma / np.sqrt(sxx)))
    return out


def rate_change(a: _Stretch, b: _Stretch) -> float:
    """How far the slope changes from stretch a to the next stretch b, in standard errors of the difference:
    ``(slope_b - slope_a) / sqrt(se_a^2 + se_b^2)`` (the two fits share one point, which the rule neglects: it makes
    the difference's true error a little smaller, so the test is a little conservative)."""
    return (b.slope - a.slope) / float(np.hypot(a.slope_se, b.slope_se))


def boundary_evidence(u: np.ndarray, y: np.ndarray, sigma: float, a: int, c: int, b: int) -> tuple[float, int, int]:
    """How well a cut at point c between the stretches [a, c] and [c, b] is supported, and where else it could sit.

    The support is the likelihood ratio of the cut, ``(RSS(a..b) - RSS(a..c) - RSS(c..b)) / sigma^2``: how much
    one line from a to b fits worse than the two lines that meet at c (in chi2 units; a cut is made only where it
    gains more than the penalty ``k^2``, so a kept cut's support is at least about k^2). The uncertainty is the
    profile likelihood of the cut's place with a and b held: ``d(c') = (RSS(a..c') + RSS(c'..b)) / sigma^2`` minus
    its least value over every c' strictly between a and b; the interval runs from the first to the last c' with
    ``d(c') <= INTERVAL_CHI2`` (Wilks's 1-sigma level for one parameter; a change point's likelihood is not regular,
    so the level is approximate). The place is read on the checkpoints alone: the change itself lies somewhere
    between the interval's first checkpoint's predecessor and its last's successor.

    Args:
        u, y: the curve on its axis, shape (n,).
        sigma: the noise of one value (> 0).
        a, c, b: indices, a < c < b.

    Returns:
        (support, first index of the interval, last index of the interval).
    """
    assert a < c < b and sigma > 0
    chi = {}
    for m in range(a + 1, b):
        chi[m] = (_fit(u[a : m + 1], y[a : m + 1])[0] + _fit(u[m : b + 1], y[m : b + 1])[0]) / sigma**2
    best = min(chi.values())
    near = [m for m, v in chi.items() if v - best <= INTERVAL_CHI2]
    support = _fit(u[a : b + 1], y[a : b + 1])[0] / sigma**2 - chi[c]
    return float(support), min(min(near), c), max(max(near), c)


def _merge(
    steps: np.ndarray,
    y: np.ndarray,
    stretches: list[_Stretch],
    trends: list[str],
    names: dict,
    rule: StageRule,
    *,
    sigma: float,
) -> list[Stage]:
    """Stretches into stages: neighbours with the same trend are one stage unless their rates differ by more than
    ``rule.k`` standard errors (`rate_change`); a flat (plateau) stretch never splits from a flat neighbour."""
    groups: list[list[int]] = []
    kinds: list[str] = [START]
    flat = ("flat", "plateau")
    for s, trend in enumerate(trends):
        if groups and trends[groups[-1][-1]] == trend:
            z = rate_change(stretches[s - 1], stretches[s])
            if trend in flat or abs(z) <= rule.k:
                groups[-1].append(s)
                continue
            faster = (z > 0) == (trend in ("rising", "rise"))
            kinds.append(names[(trend, "faster" if faster else "slower")])
        elif groups:
            kinds.append(names[(trends[groups[-1][-1]], trend)])
        groups.append([s])
    stages = []
    u = log_axis(steps)
    for index, group in enumerate(groups):
        i, j = stretches[group[0]].i, stretches[group[-1]].j
        support, low, high = float("nan"), -1, -1
        if index:
            before = stretches[group[0] - 1]
            support, lo, hi = boundary_evidence(u, y, sigma, before.i, i, stretches[group[0]].j)
            low, high = int(steps[lo]), int(steps[hi])
        stages.append(
            Stage(
                index=index,
                start_step=int(steps[i]),
                end_step=int(steps[j]),
                trend=trends[group[0]],
                start_value=float(y[i]),
                end_value=float(y[j]),
                change=float(sum(stretches[s].change for s in group)),
                change_se=float(np.sqrt(sum(stretches[s].change_se ** 2 for s in group))),
                boundary=kinds[index],
                evidence=support,
                low_step=low,
                high_step=high,
            )
        )
    return stages


def _checked(steps: np.ndarray, values: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    if steps.shape != values.shape or steps.ndim != 1:
        raise ValueError(f"{what}: steps {steps.shape} and values {values.shape} must be two 1-D arrays of one length")
    if np.any(np.diff(steps) <= 0):
        raise ValueError(f"{what}: steps must increase strictly, got {steps.tolist()}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what}: values must be finite (drop the checkpoints without an estimate first)")
    return steps, values


def llc_stages(steps: np.ndarray, llc: np.ndarray, sigma: float, rule: StageRule = StageRule()) -> list[Stage]:
    """Stages of the whole-model LLC curve (module docstring, steps 1-3).

    Args:
        steps: the estimated checkpoints, increasing, shape (n,).
        llc: the estimates, shape (n,), finite.
        sigma: the pooled standard error of one estimate (`pooled_standard_error`), > 0.
        rule: the parameters.

    Returns:
        The stages in order (one flat stage when nothing exceeds the noise); empty with fewer than
        ``rule.min_points`` checkpoints.

    Raises:
        ValueError: mismatched, unsorted or non-finite input, or sigma not positive.
    """
    steps, llc = _checked(steps, llc, "LLC curve")
    if not (np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"LLC standard error {sigma!r}: expected a positive number (estimates need at least 2 chains)")
    if len(steps) < rule.min_points:
        return []
    return level_stages(steps, llc, sigma, rule, names=_LLC_BOUNDARIES)


def level_stages(steps: np.ndarray, y: np.ndarray, sigma: float, rule: StageRule = StageRule(), *, names: dict) -> list[Stage]:
    """Stages of a curve whose trends are rising, falling or flat (the LLC, a count of heads): the module
    docstring's steps 1-3 on validated input with ``sigma > 0``; ``names`` maps (before, after) to a boundary's name."""
    if len(steps) < rule.min_points:
        return []
    stretches = _stretches(log_axis(steps), y, sigma, rule)
    trends = ["flat" if abs(s.change) <= rule.k * s.change_se else ("rising" if s.change > 0 else "falling") for s in stretches]
    return _merge(steps, y, stretches, trends, names, rule, sigma=sigma)


def loss_noise(loss: np.ndarray) -> float:
    """The loss curve's noise around its trend: ``1.4826 MAD(second differences) / sqrt(6)``
    (module docstring); NaN with fewer than 3 values."""
    loss = np.asarray(loss, dtype=np.float64)
    if len(loss) < 3:
        return float("nan")
    d2 = loss[:-2] - 2 * loss[1:-1] + loss[2:]
    return float(1.4826 * np.median(np.abs(d2 - np.median(d2))) / np.sqrt(6.0))


def loss_stages(steps: np.ndarray, loss: np.ndarray, rule: StageRule = StageRule(), *, sigma: float | None = None) -> list[Stage]:
    """Plateaus and drops of the loss curve (module docstring).

    Args:
        steps: checkpoints, increasing, shape (n,).
        loss: the loss at each, shape (n,), finite.
        rule: the parameters.
        sigma: the noise of one value; None estimates it (`loss_noise`). A noise of 0 (a curve with
            no jitter at all) is floored at 1e-6 of the curve's range, so every real change counts.

    Returns:
        The stages in order; empty with fewer than ``rule.min_points`` checkpoints.

    Raises:
        ValueError: mismatched, unsorted or non-finite input.
    """
    steps, loss = _checked(steps, loss, "loss curve")
    if len(steps) < rule.min_points:
        return []
    sigma = loss_noise(loss) if sigma is None else float(sigma)
    sigma = max(sigma, 1e-6 * float(np.ptp(loss)), 1e-12)
    return loss_like_stages(steps, loss, sigma, rule, names=_LOSS_BOUNDARIES)


def loss_like_stages(
    steps: np.ndarray, y: np.ndarray, sigma: float, rule: StageRule = StageRule(), *, names: dict
) -> list[Stage]:
    """Stages of a curve whose trends are drop, plateau or rise (a loss): validated input, ``sigma > 0``."""
    if len(steps) < rule.min_points:
        return []
    stretches = _stretches(log_axis(steps), y, sigma, rule)
    trends = ["plateau" if abs(s.change) <= rule.k * s.change_se else ("rise" if s.change > 0 else "drop") for s in stretches]
    rates = [-s.slope for s in stretches]  # drop per decade, positive when falling
    relabelled = list(trends)
    for s, trend in enumerate(trends):
        if trend != "drop":
            continue
        neighbours = [rates[t] for t in (s - 1, s + 1) if 0 <= t < len(trends) and trends[t] == "drop"]
        if len(neighbours) == 2 and all(rates[s] < rule.plateau_ratio * r for r in neighbours):
            relabelled[s] = "plateau"
    return _merge(steps, y, stretches, relabelled, names, rule, sigma=sigma)


def standard_errors(*, llc_std: np.ndarray, chains: int) -> np.ndarray:
    """Standard error of each estimate from llc.parquet's population ``llc_std`` over ``chains`` chains:
    ``llc_std * sqrt(C / (C - 1)) / sqrt(C) = llc_std / sqrt(C - 1)``."""
    if chains < 2:
        raise ValueError(f"{chains} chain(s): a standard error needs at least 2")
    return np.asarray(llc_std, dtype=np.float64) / np.sqrt(chains - 1)


def chain_standard_errors(per_chain: np.ndarray) -> np.ndarray:
    """Standard error of each estimate from its chains' estimates, shape (n, C): ``sd_c / sqrt(C)``
    with the sample (ddof 1) standard deviation."""
    per_chain = np.asarray(per_chain, dtype=np.float64)
    count = np.sum(np.isfinite(per_chain), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nanstd(per_chain, axis=1, ddof=1) / np.sqrt(count)


def pooled_standard_error(se: np.ndarray) -> float:
    """Root mean square of the estimates' standard errors (NaN where none is finite)."""
    se = np.asarray(se, dtype=np.float64)
    se = se[np.isfinite(se)]
    return float(np.sqrt(np.mean(se**2))) if len(se) else float("nan")
