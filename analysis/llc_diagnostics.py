"""Convergence diagnostics of an SGLD estimate of the LLC, and the rule that flags it.

An estimate is ``n beta (mean_t L_t - L(w*))`` averaged over chains, ``L_t`` the sampled loss of
draw t after the burn-in (`precompute.lenses.llc`). It means something only if each chain's
loss trace has risen from ``L(w*)`` and flattened: a trace still climbing gives an estimate
that grows with the number of draws, and one that runs away has left the neighbourhood of w*
(devinterp's calibration guidance). Per chain, from its trace after the burn-in:

- ``first_half``, ``second_half``: the mean sampled loss over the first and the second half of
  the draws (nats per token; with an odd number of draws the middle one is left out);
- ``slope``: the least-squares slope of the trace over the second half (nats per draw);
- ``half_se``: the standard error of ``second_half - first_half`` from the spread of the draws
  within each half, ``sqrt(var_1 / n_1 + var_2 / n_2)`` (draws treated as independent: SGLD
  draws are positively correlated, so this understates the error and the rule below flags a
  trace as still rising more readily, never less).

`flag` turns them into one of `FLAGS`, in this order of precedence:

1. ``diverged``: a chain's estimate is not finite, or exceeds ``params / 2``. The learning
   coefficient of a model with d parameters is at most d/2 (the regular case), and the refined
   LLC of a head at most half the parameters it moves; an estimate above that bound measures a
   sampler that left w*, not the geometry.
2. ``too few draws``: fewer than 2 draws per half after the burn-in, so a trend cannot be judged.
3. ``still rising`` (``still falling``): the loss rose (fell) from the first half to the second by
   more than `RISING_Z` standard errors, pooled over chains: ``z = mean_c(d_c) / (sqrt(sum_c
   se_c^2) / C)`` with ``d_c = second_half_c - first_half_c``. The estimate would grow (shrink)
   with more draws: the chains have not reached their stationary level.
4. ``converged`` otherwise.

A negative estimate is a separate fact, not a flag (`below_minimum`): the sampled loss fell below
the loss at w*, so w* is not a local minimum of the loss on the sampler's sequences (early in
training, or a checkpoint between minima) and SGLD descends from it; the number then measures
that descent, not a learning coefficient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.store.format import LLC, LLC_CHAINS, LLC_WHOLE_MODEL
from analysis.store.reader import Store

FLAGS = ("converged", "still rising", "still falling", "diverged", "too few draws")
RISING_Z = 2.0  # standard errors of the rise between the halves that flag a trace as still rising
NEGATIVE_NOTE = (
    "negative: the sampled loss fell below the loss at the checkpoint, so the checkpoint is not a local "
    "minimum of the loss on the sampler's sequences and SGLD descends from it; the number measures that "
    "descent, not a learning coefficient"
)
FLAG_NOTES = {
    "converged": f"the chains' loss traces flattened: their second half is within {RISING_Z:g} standard errors of its first",
    "still falling": f"the chains' loss fell from the first half of the draws to the second by more than {RISING_Z:g} "
    "standard errors: more draws would give a smaller estimate",
    "still rising": f"the chains' loss rose from the first half of the draws to the second by more than {RISING_Z:g} "
    "standard errors: more draws would give a larger estimate",
    "too few draws": "fewer than 4 draws after the burn-in: whether the loss still rises cannot be judged",
    "diverged": "a chain's estimate is not finite or exceeds half the parameters it moved (the largest a learning "
    "coefficient can be): the sampler left the checkpoint's neighbourhood",
}


@dataclass(frozen=True)
class ChainDiagnostics:
    """Per-chain diagnostics of one estimate, each ``(chains,)`` float64 (see the module docstring)."""

    first_half: np.ndarray
    second_half: np.ndarray
    slope: np.ndarray
    half_se: np.ndarray


def chain_diagnostics(trace: np.ndarray, burnin: int = 0) -> ChainDiagnostics:
    """The diagnostics of each chain's loss trace.

    Args:
        trace: ``(chains, burnin + draws)`` sampled loss per SGLD step.
        burnin: steps at the start of each trace left out of the estimate.

    Returns:
        `ChainDiagnostics`; NaN where a half has no draw (fewer than 2 draws) and for the slope
        of a half with fewer than 2 draws.
    """
    draws = np.asarray(trace, dtype=np.float64)[:, burnin:]
    chains, n = draws.shape
    half = n // 2
    first, second = draws[:, :half], draws[:, n - half :]
    nan = np.full(chains, np.nan)
    if half == 0:
        return ChainDiagnostics(nan, nan, nan, nan)
    first_half, second_half = first.mean(axis=1), second.mean(axis=1)
    if half > 1:
        t = np.arange(half, dtype=np.float64) - (half - 1) / 2
        slope = (second - second_half[:, None]) @ t / (t @ t)
        se = np.sqrt(first.var(axis=1, ddof=1) / half + second.var(axis=1, ddof=1) / half)
    else:
        slope, se = nan, nan
    return ChainDiagnostics(first_half, second_half, slope, se)


def rise_z(first_half: np.ndarray, second_half: np.ndarray, half_se: np.ndarray) -> float:
    """The rise of the loss between the halves, pooled over chains, in standard errors (NaN when
    the error is unknown; +inf for a rise with zero spread)."""
    d = np.asarray(second_half, dtype=np.float64) - np.asarray(first_half, dtype=np.float64)
    se = np.asarray(half_se, dtype=np.float64)
    if d.size == 0 or not np.all(np.isfinite(se)):
        return float("nan")
    pooled = np.sqrt(np.sum(se**2)) / d.size
    mean = float(d.mean())
    if pooled == 0:
        return 0.0 if mean == 0 else float(np.copysign(np.inf, mean))
    return mean / pooled


def flag(per_chain: np.ndarray, first_half: np.ndarray, second_half: np.ndarray, half_se: np.ndarray, params: int) -> str:
    """The flag of one estimate from its chains (`FLAGS`; the rule is the module docstring's).

    Args:
        per_chain: ``(chains,)`` the per-chain estimates.
        first_half, second_half, half_se: ``(chains,)`` their diagnostics (`chain_diagnostics`).
        params: the number of parameters the sampler moved.
    """
    per_chain = np.asarray(per_chain, dtype=np.float64)
    if not np.all(np.isfinite(per_chain)) or np.any(per_chain > params / 2):
        return "diverged"
    z = rise_z(first_half, second_half, half_se)
    if np.isnan(z):
        return "too few draws"
    if z > RISING_Z:
        return "still rising"
    return "still falling" if z < -RISING_Z else "converged"


def below_minimum(llc: float | np.ndarray) -> bool | np.ndarray:
    """Whether an estimate is negative (`NEGATIVE_NOTE`)."""
    return np.asarray(llc) < 0


def store_flags(store: Store) -> tuple[np.ndarray, np.ndarray] | None:
    """The flag of every refined-LLC estimate of a store, from its ``llc_chains.parquet``.

    Returns:
        ``(heads, model)``: ``[step, layer, head]`` and ``[step]`` object arrays over ``store.steps``
        holding a `FLAGS` value, ``""`` where there is no estimate; None when the store has no
        chain diagnostics (estimated before they existed: rerun ``--lenses llc`` to add them).
    """
    if not store.has(LLC_CHAINS) or not store.has(LLC) or not len(store.steps_with(LLC_CHAINS)):
        return None
    names = ("llc", "first_half", "second_half", "half_se")
    columns = [_present(store.dense(LLC_CHAINS, c)) for c in names]
    whole = [_present(store.dense(LLC_CHAINS, c, at=LLC_WHOLE_MODEL)) for c in names]
    params = _present(store.dense(LLC, "params"))
    model_params = _present(store.dense(LLC, "params", at=LLC_WHOLE_MODEL))
    heads = np.full(params.shape, "", dtype=object)
    model = np.full(model_params.shape, "", dtype=object)
    # an estimate at a step without chain rows (made before they were stored) has no flag, not "diverged"
    recorded = np.isin(store.steps, store.steps_with(LLC_CHAINS))
    for index in zip(*np.nonzero(np.isfinite(params)), strict=True):
        if recorded[index[0]]:
            llc, first, second, se = (c[index] for c in columns)
            heads[index] = flag(llc, first, second, se, params=int(params[index]))
    for t in np.nonzero(np.isfinite(model_params))[0]:
        if recorded[t]:
            llc, first, second, se = (c[t] for c in whole)
            model[t] = flag(llc, first, second, se, params=int(model_params[t]))
    return heads, model


def _present(values: np.ndarray | None) -> np.ndarray:
    assert values is not None, "checked by store.has"
    return values
