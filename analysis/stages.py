"""Developmental stages of a run, from the whole-model LLC and the loss over training (docs/stages.md).

The rule, in short (Hoogland et al. 2024; the refined-LLC paper's appendix C.1): a stage boundary is
a critical point of the LLC curve, where it turns from rising to falling or back, or where it
starts or stops changing. A curve sampled at a few checkpoints, each estimate with an error, is
read as follows, on the axis ``u = log10(1 + step)`` (checkpoints are log-spaced early):

1. Segmentation. The points are cut into stretches, each fitted by a straight line in ``u``
   (neighbouring stretches share their boundary point), by dynamic programming that minimises
   ``chi2 + penalty * (stretches - 1)``, ``chi2 = sum((y - fit)^2) / sigma^2``, with
   ``penalty = k^2``: a cut is made only where it lowers chi2 by more than k^2, the square of
   k standard errors (a likelihood-ratio test at about k sigma).
2. Trend of a stretch. The fitted change across it, ``slope * (u_end - u_start)``, is rising
   (falling) when it exceeds k times its standard error ``sigma * du / sqrt(sum (u - mean u)^2)``
   and flat otherwise. No smoothing besides the line fits.
3. Stages. Neighbouring stretches with the same trend are one stage; a boundary is where the trend
   changes (an LLC peak, a trough, the start or end of a flat stretch). A curve whose changes all
   stay within k standard errors is one flat stage: noise makes no stage.

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

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

Basis = Literal["llc", "loss"]
LLC_TRENDS = ("rising", "falling", "flat")
LOSS_TRENDS = ("drop", "plateau", "rise")

# What a boundary is, from the trend before it to the trend after it.
_LLC_BOUNDARIES = {
    ("rising", "falling"): "LLC peak",
    ("falling", "rising"): "LLC trough",
    ("rising", "flat"): "LLC stops rising",
    ("falling", "flat"): "LLC stops falling",
    ("flat", "rising"): "LLC starts rising",
    ("flat", "falling"): "LLC starts falling",
}
_LOSS_BOUNDARIES = {
    ("drop", "plateau"): "loss plateau begins",
    ("plateau", "drop"): "loss drops again",
    ("drop", "rise"): "loss turns up",
    ("rise", "drop"): "loss turns down",
    ("plateau", "rise"): "loss starts rising",
    ("rise", "plateau"): "loss stops rising",
}
START = "start of training"


@dataclass(frozen=True)
class StageRule:
    """The rule's parameters (recorded in ``meta.json`` ``stages``).

    Attributes:
        k: standard errors a change must exceed to count (and the square root of the cut penalty).
        plateau_ratio: a loss drop between two drops and slower than this fraction of each one's rate is a plateau.
        min_points: fewest checkpoints a curve needs before stages are read from it.
    """

    k: float = 3.0
    plateau_ratio: float = 0.5
    min_points: int = 3

    def __post_init__(self) -> None:
        if not (np.isfinite(self.k) and self.k > 0):
            raise ValueError(f"k={self.k!r}: expected a positive number of standard errors")
        if not 0 < self.plateau_ratio < 1:
            raise ValueError(f"plateau_ratio={self.plateau_ratio!r}: expected a fraction between 0 and 1")
        if self.min_points < 3:
            raise ValueError(f"min_points={self.min_points!r}: a turn needs at least 3 points")

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


def _stretch_change(u: np.ndarray, y: np.ndarray, sigma: float, i: int, j: int) -> tuple[float, float, float]:
    """Fitted change across stretch [i, j], its standard error, and its rate per unit of u."""
    _, slope, sxx = _fit(u[i : j + 1], y[i : j + 1])
    width = float(u[j] - u[i])
    return slope * width, sigma * width / np.sqrt(sxx), slope


def _merge(
    steps: np.ndarray, y: np.ndarray, stretches: list[tuple[int, int]], trends: list[str], changes, ses, names
) -> list[Stage]:
    groups: list[list[int]] = []
    for s, trend in enumerate(trends):
        if groups and trends[groups[-1][-1]] == trend:
            groups[-1].append(s)
        else:
            groups.append([s])
    stages = []
    for index, group in enumerate(groups):
        i, j = stretches[group[0]][0], stretches[group[-1]][1]
        trend = trends[group[0]]
        boundary = START if index == 0 else names[(trends[groups[index - 1][0]], trend)]
        stages.append(
            Stage(
                index=index,
                start_step=int(steps[i]),
                end_step=int(steps[j]),
                trend=trend,
                start_value=float(y[i]),
                end_value=float(y[j]),
                change=float(sum(changes[s] for s in group)),
                change_se=float(np.sqrt(sum(ses[s] ** 2 for s in group))),
                boundary=boundary,
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
    u = log_axis(steps)
    stretches = segment(u, llc, sigma, penalty=rule.k**2)
    fits = [_stretch_change(u, llc, sigma, i, j) for i, j in stretches]
    trends = ["flat" if abs(c) <= rule.k * se else ("rising" if c > 0 else "falling") for c, se, _ in fits]
    return _merge(steps, llc, stretches, trends, [f[0] for f in fits], [f[1] for f in fits], _LLC_BOUNDARIES)


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
    u = log_axis(steps)
    stretches = segment(u, loss, sigma, penalty=rule.k**2)
    fits = [_stretch_change(u, loss, sigma, i, j) for i, j in stretches]
    trends = ["plateau" if abs(c) <= rule.k * se else ("rise" if c > 0 else "drop") for c, se, _ in fits]
    rates = [-rate for _, _, rate in fits]  # drop per decade, positive when falling
    relabelled = list(trends)
    for s, trend in enumerate(trends):
        if trend != "drop":
            continue
        neighbours = [rates[t] for t in (s - 1, s + 1) if 0 <= t < len(trends) and trends[t] == "drop"]
        if len(neighbours) == 2 and all(rates[s] < rule.plateau_ratio * r for r in neighbours):
            relabelled[s] = "plateau"
    return _merge(steps, loss, stretches, relabelled, [f[0] for f in fits], [f[1] for f in fits], _LOSS_BOUNDARIES)


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


@dataclass(frozen=True)
class RunStages:
    """A run's stages on both bases, and how they were read (``meta.json`` ``stages``).

    Attributes:
        llc: stages of the whole-model LLC (empty: no LLC, or too few estimates).
        loss: stages of the loss (empty: no eval loss, or too few checkpoints).
        primary: the basis the dashboard shades: ``llc`` when it has stages, else ``loss``, else None.
        meta: the rule, its parameters, the noise levels and checkpoints used, and notes.
        loss_steps, loss_values: the loss curve (to report each LLC stage's loss change).
    """

    llc: list[Stage]
    loss: list[Stage]
    primary: Basis | None
    meta: dict
    loss_steps: np.ndarray
    loss_values: np.ndarray

    def loss_change(self, stage: Stage) -> float:
        """Eval loss at the stage's end minus at its start (NaN without the loss at both)."""
        where = {int(s): float(v) for s, v in zip(self.loss_steps, self.loss_values, strict=True)}
        a, b = where.get(stage.start_step), where.get(stage.end_step)
        return float("nan") if a is None or b is None else b - a


def store_stages(store, rule: StageRule = StageRule()) -> RunStages:  # store: analysis.store.Store
    """The stages of a store's run, from its llc.parquet (whole-model rows; llc_chains.parquet for the
    spread and flags when present) and eval_loss.parquet.

    Raises:
        StoreError: a table is unreadable.
    """
    from analysis.llc_diagnostics import store_flags
    from analysis.store.format import EVAL_LOSS, LLC, LLC_CHAINS, LLC_WHOLE_MODEL

    notes: list[str] = []
    meta: dict = {"rule": __doc__.split("\n\n", 1)[1].strip(), "parameters": rule.as_dict(), "axis": "log10(1 + step)"}
    llc: list[Stage] = []
    llc_meta: dict = {"present": store.has(LLC)}
    if store.has(LLC):
        values = store.require(LLC, "llc", at=LLC_WHOLE_MODEL)
        keep = np.isfinite(values)
        if store.has(LLC_CHAINS):
            se = chain_standard_errors(store.require(LLC_CHAINS, "llc", at=LLC_WHOLE_MODEL))
            llc_meta["spread_from"] = "llc_chains.parquet: sample standard deviation of the chains' estimates / sqrt(C)"
            flags = store_flags(store)
            if flags is not None:
                diverged = keep & (flags[1] == "diverged")
                if diverged.any():
                    notes.append(f"left out diverged whole-model estimates at steps {store.steps[diverged].tolist()}")
                    llc_meta["left_out_diverged"] = [int(s) for s in store.steps[diverged]]
                keep &= ~diverged
        else:
            chains = int(((store.meta.llc or {}).get("sampler") or {}).get("chains") or 0)
            se = standard_errors(llc_std=store.require(LLC, "llc_std", at=LLC_WHOLE_MODEL), chains=chains)
            llc_meta["spread_from"] = f"llc.parquet llc_std (population, {chains} chains) / sqrt(C - 1)"
        sigma = pooled_standard_error(se[keep])
        steps = store.steps[keep]
        llc_meta |= {"steps": [int(s) for s in steps], "pooled_se": sigma, "k_pooled_se": rule.k * sigma}
        if len(steps) < rule.min_points:
            notes.append(f"the whole-model LLC has {len(steps)} estimate(s); stages need {rule.min_points}")
        elif not (np.isfinite(sigma) and sigma > 0):
            notes.append("the whole-model LLC has no spread over chains; its stages cannot be told from noise")
        else:
            llc = llc_stages(steps, values[keep], sigma, rule)
            negative = steps[values[keep] < 0]
            if len(negative):
                notes.append(
                    f"negative whole-model estimates at steps {negative.tolist()}: those checkpoints are not local minima "
                    "of the sampled loss, so the number there measures SGLD's descent (analysis/llc_diagnostics.py)"
                )
    else:
        notes.append("the store has no llc.parquet: stages are read from the loss alone (run --lenses llc for the LLC's)")
    loss_meta: dict = {"present": store.has(EVAL_LOSS)}
    loss: list[Stage] = []
    loss_steps = np.zeros(0, dtype=np.int64)
    loss_values = np.zeros(0)
    frame = store.frame(EVAL_LOSS)
    if frame is not None:
        frame = frame[np.isfinite(frame["loss"].to_numpy())]
        loss_steps, loss_values = frame["step"].to_numpy(np.int64), frame["loss"].to_numpy(np.float64)
        noise = loss_noise(loss_values)
        loss_meta |= {"steps": len(loss_steps), "noise": noise, "noise_from": "1.4826 MAD(second differences) / sqrt(6)"}
        loss = loss_stages(loss_steps, loss_values, rule, sigma=noise)
    else:
        notes.append("the store has no eval_loss.parquet (run --lenses attention): no loss stages")
    primary: Basis | None = "llc" if llc else ("loss" if loss else None)
    if primary is None:
        notes.append("no stages: neither an LLC nor a loss curve with enough checkpoints")
    meta |= {"llc": llc_meta, "loss": loss_meta, "primary": primary, "notes": notes}
    return RunStages(llc=llc, loss=loss, primary=primary, meta=meta, loss_steps=loss_steps, loss_values=loss_values)
