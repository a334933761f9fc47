"""Convergence diagnostics of an SGLD estimate of the LLC, and the rule that flags it.

An estimate is ``n beta (mean_t L_t - L(w*))`` averaged over chains, ``L_t`` the sampled loss of
draw t after the burn-in (`precompute.lenses.llc`). It means something only if each chain's
loss trace has risen from ``L(w*)`` and flattened: a trace still climbing gives an estimate
that grows with the number of draws, and one that runs away has left the neighbourhood of w*
(devinterp's calibration guidance). Per chain, from its trace after the burn-in:

- the trace is first cut into **passes**: blocks of ``batches`` consecutive draws, one pass over
  the sampler's sequences (``sequences / batch_size``), each block replaced by its mean; draws
  after the last whole pass are left out. Every chain sees the same sequences in the same order,
  and the loss differs far more between sequences than between nearby draws (on the reference
  run at step 16, the mean of 25 draws, in n beta units, swings over a range of 0.5 with the
  sequences those draws hold, against a rise of about 0.06 over the first 80 draws), so only
  whole passes compare like with like. With ``batches = 1`` a pass is a
  draw;
- ``first_half``, ``second_half``: the mean sampled loss over the first and the second half of
  the passes (nats per token; with an odd number of passes the middle one is left out);
- ``slope``: the least-squares slope of the pass means over the second half (nats per draw);
- ``half_se``: the standard error of ``second_half - first_half`` from the spread of the pass
  means within each half, ``sqrt(var_1 / n_1 + var_2 / n_2)`` (passes treated as independent:
  SGLD draws are positively correlated, so this understates the error and the rule below flags a
  trace as still rising more readily, never less).

`flag` turns them into one of `FLAGS`, in this order of precedence:

1. ``diverged``: a chain's estimate is not finite, or exceeds ``params / 2``. The learning
   coefficient of a model with d parameters is at most d/2 (the regular case), and the refined
   LLC of a head at most half the parameters it moves; an estimate above that bound measures a
   sampler that left w*, not the geometry.
2. ``negative``: the estimate (the mean of the chains') is below zero. A learning coefficient is
   never negative: the sampled loss fell below the loss at w*, so either the sampler left the basin
   of w* (a step size too large for the localization to hold it) or w* is not a local minimum of the
   loss on the sampler's sequences (early in training, or a checkpoint between minima) and SGLD
   descends from it. Either way the number measures that descent, not a learning coefficient,
   however flat its traces: it is never ``converged`` (`NEGATIVE_NOTE` says what to change).
3. ``too few draws``: fewer than 2 passes per half after the burn-in (fewer than ``4 x batches``
   draws), so a trend cannot be judged. The shipped reference run's 8 draws over 8 sequences are one
   pass: its short chains cannot say whether they have flattened, and the long chains of
   ``benchmarks.llc_agreement`` show that they had not (docs/precompute.md).
4. ``still rising`` (``still falling``): the loss rose (fell) from the first half to the second by
   more than `RISING_Z` standard errors, pooled over chains: ``z = mean_c(d_c) / (sqrt(sum_c
   se_c^2) / C)`` with ``d_c = second_half_c - first_half_c``. The estimate would grow (shrink)
   with more draws: the chains have not reached their stationary level.
5. ``converged`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from headwatch.analysis.store.lenses.llc import LLC, LLC_CHAINS, LLC_DATA_COLUMN, LLC_WHOLE_MODEL, default_llc_data
from headwatch.analysis.store.reader import Store

T = TypeVar("T")
FLAGS = ("converged", "still rising", "still falling", "negative", "diverged", "too few draws")
RISING_Z = 2.0  # standard errors of the rise between the halves that flag a trace as still rising
NEGATIVE_NOTE = (
    "negative: the sampled loss fell below the loss at the checkpoint, so the sampler left the basin of the "
    "checkpoint's weights w* (a step size too large for the localization to hold it) or w* is not a local minimum of "
    "the loss on the sampler's sequences (early in training, or between minima) and SGLD descends from it; the number "
    "measures that descent, not a learning coefficient, and is never counted as converged. To tell the two apart and "
    "fix the first, sweep the sampler on that checkpoint (`headwatch llc-calibrate SOURCE --step S --head L.H --out "
    "DIR`, its chains' loss traces against the loss at w*), then rerun `--lenses llc` with a smaller step size "
    "(`--llc-lr`), a stronger pull towards w* (`--llc-localization`, gamma) or a longer burn-in (`--llc-burnin`); an "
    "estimate that stays negative under every setting is a checkpoint that is not a local minimum"
)
FLAG_NOTES = {
    "converged": "the estimate is not negative and the chains' loss traces flattened: their second half is within "
    f"{RISING_Z:g} standard errors of its first",
    "still falling": f"the chains' loss fell from the first half of the draws to the second by more than {RISING_Z:g} "
    "standard errors: more draws would give a smaller estimate",
    "still rising": f"the chains' loss rose from the first half of the draws to the second by more than {RISING_Z:g} "
    "standard errors: more draws would give a larger estimate",
    "too few draws": "fewer than 4 passes over the sampler's sequences after the burn-in: whether the loss still rises "
    "cannot be judged",
    "negative": "the estimate is below zero: the sampler left the basin of w* or w* is not a local minimum of the "
    "sampled loss, so the number is no learning coefficient, however flat its traces (sweep the sampler with "
    "`headwatch llc-calibrate` and rerun with a smaller `--llc-lr`, a larger `--llc-localization` or a longer "
    "`--llc-burnin`)",
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


def chain_diagnostics(trace: np.ndarray, burnin: int = 0, *, batches: int = 1) -> ChainDiagnostics:
    """The diagnostics of each chain's loss trace.

    Args:
        trace: ``(chains, burnin + draws)`` sampled loss per SGLD step.
        burnin: steps at the start of each trace left out of the estimate.
        batches: SGLD steps in one pass over the sampler's sequences (`SamplerSettings.batches`); the halves are
            compared over whole passes.

    Returns:
        `ChainDiagnostics`; NaN where a half has no pass (fewer than 2 passes), and for the slope and the
        standard error of halves of fewer than 2 passes.
    """
    if batches < 1:
        raise ValueError(f"batches must be at least 1, got {batches}")
    draws = np.asarray(trace, dtype=np.float64)[:, burnin:]
    chains, n = draws.shape
    passes = n // batches
    blocks = draws[:, : passes * batches].reshape(chains, passes, batches).mean(axis=2)  # (chains, passes)
    half = passes // 2
    first, second = blocks[:, :half], blocks[:, passes - half :]
    nan = np.full(chains, np.nan)
    if half == 0:
        return ChainDiagnostics(nan, nan, nan, nan)
    first_half, second_half = first.mean(axis=1), second.mean(axis=1)
    if half > 1:
        t = (np.arange(half, dtype=np.float64) - (half - 1) / 2) * batches  # pass centres, in draws
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
    if per_chain.mean() < 0:  # the estimate, the mean over chains (llc.parquet's llc)
        return "negative"
    z = rise_z(first_half, second_half, half_se)
    if np.isnan(z):
        return "too few draws"
    if z > RISING_Z:
        return "still rising"
    return "still falling" if z < -RISING_Z else "converged"


def store_flags(store: Store, data: str | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The flag of every refined-LLC estimate of a store under one distribution (``data``; None: the store's default,
    `analysis.store.lenses.llc.default_llc_data`), from the loss traces in its ``llc_chains.parquet``.

    The diagnostics are recomputed from each chain's stored trace by `chain_diagnostics` with the store's
    sampler (its burn-in and its passes over the sequences, ``meta.json`` ``llc.sampler``), so that every
    store is judged by the rule of this module as it stands, whatever rule wrote its summary columns.

    Returns:
        ``(heads, model)``: ``[step, layer, head]`` and ``[step]`` object arrays over ``store.steps``
        holding a `FLAGS` value, ``""`` where there is no estimate or no chains to judge a positive one by (a negative
        one is ``negative`` with or without its chains); None when the store has no chain diagnostics (estimated
        before they existed: rerun ``--lenses llc`` to add them).
    """
    if not store.has(LLC_CHAINS) or not store.has(LLC) or not len(store.steps_with(LLC_CHAINS)):
        return None
    table = store.read(LLC, columns=[])
    data = data if data is not None else default_llc_data(table)
    at = {LLC_DATA_COLUMN: data}
    sampler = (store.meta.llc or {}).get("sampler") or {}
    burnin = int(sampler.get("burnin") or 0)
    batches = max(1, int(sampler.get("sequences") or 1) // max(1, int(sampler.get("batch_size") or 1)))
    params = _present(store.dense(LLC, "params", at=at))
    model_params = _present(store.dense(LLC, "params", at={**LLC_WHOLE_MODEL, **at}))
    heads = np.full(params.shape, "", dtype=object)
    model = np.full(model_params.shape, "", dtype=object)
    position = {int(step): t for t, step in enumerate(store.steps)}
    chains = _present(store.frame(LLC_CHAINS))
    chains = chains[chains[LLC_DATA_COLUMN] == data]
    # an estimate at a step without chain rows (made before they were stored) has no flag, not "diverged"
    for (step, layer, head), rows in chains.groupby(["step", "layer", "head"], sort=False):
        t = position.get(int(step))
        if t is None:  # a step outside this view of the store
            continue
        rows = rows.sort_values("chain")
        trace = np.stack([np.asarray(v, dtype=np.float64) for v in rows["trace"]])  # (chains, burnin + draws)
        d = chain_diagnostics(trace, burnin, batches=batches)
        if layer == LLC_WHOLE_MODEL["layer"]:
            if np.isfinite(model_params[t]):
                model[t] = flag(rows["llc"].to_numpy(), d.first_half, d.second_half, d.half_se, params=int(model_params[t]))
        elif np.isfinite(params[t, layer, head]):
            heads[t, layer, head] = flag(
                rows["llc"].to_numpy(), d.first_half, d.second_half, d.half_se, params=int(params[t, layer, head])
            )
    # the sign needs no chains: a negative estimate at a step without chain rows is flagged too
    heads[(heads == "") & (_present(store.dense(LLC, "llc", at=at)) < 0)] = "negative"
    model[(model == "") & (_present(store.dense(LLC, "llc", at={**LLC_WHOLE_MODEL, **at})) < 0)] = "negative"
    return heads, model


def _present(values: T | None) -> T:
    assert values is not None, "checked by store.has"
    return values
