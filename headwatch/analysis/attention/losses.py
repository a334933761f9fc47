"""Losses by position, the in-context-learning scores, ablation effects and the top tokens in context, from
per-token losses (the losses and ablation lenses; their declarations define every column).

Inputs are per-token next-token cross-entropies in nats, ``(S, P)`` for S sequences of P tokens: entry ``[s, p]``
is the loss of token p of sequence s predicted from its tokens 0..p-1, and column 0 (no prediction) is NaN.
Ablated losses have a leading lane axis, ``(K, S, P)`` for K heads ablated one at a time.

Statistics over sequences: a mean over the S sequences and its standard error, the sample standard deviation
(ddof 1) of the per-sequence values divided by sqrt(S) (NaN for one sequence). A score that is a difference of two
means over the same sequences (late minus early, ablated minus intact) takes its standard error from the
per-sequence differences, which keeps the pairing.

- `position_stats`: mean and standard error at every position.
- `icl_text`: Olsson et al.'s score, the loss at a late position minus at an early one
  (`analysis.store.lenses.losses.icl_positions` scales their 500th and 50th token of 512 to the context).
- `icl_probe`: the probe's second copy's mean loss minus the first copy's (`losses.probe_positions`).
- `mean_increase`: the mean increase over chosen positions, ablated minus intact.
- `top_contexts`: the pooled tokens whose loss rises most, per lane.

Every function takes numpy arrays and returns new ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headwatch.analysis.store.lenses.losses import probe_positions


@dataclass(frozen=True)
class Score:
    """A score over sequences: its mean(s) and standard error (arrays of the lanes' shape, or floats).

    Attributes:
        early: the mean of the first term (early position, first copy, intact loss).
        late: the mean of the second term (late position, second copy, ablated loss).
        score: late - early.
        sem: the standard error of the per-sequence ``late - early``.
    """

    early: np.ndarray
    late: np.ndarray
    score: np.ndarray
    sem: np.ndarray


def sem(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Standard error of the mean along ``axis``: sample std (ddof 1) / sqrt(n); NaN where n < 2."""
    n = values.shape[axis]
    if n < 2:
        return np.full(np.delete(np.array(values.shape), axis % values.ndim), np.nan)
    return np.std(values, axis=axis, ddof=1) / np.sqrt(n)


def position_stats(losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over sequences at every position of ``losses`` ``(S, P)``; ``(P,)`` each
    (position 0: NaN)."""
    return losses.mean(axis=0), sem(losses, axis=0)


def _paired(first: np.ndarray, second: np.ndarray) -> Score:
    """`Score` of per-sequence values ``first``, ``second`` ``(..., S)``: second - first."""
    diff = second - first
    return Score(first.mean(axis=-1), second.mean(axis=-1), diff.mean(axis=-1), sem(diff, axis=-1))


def icl_text(losses: np.ndarray, early: int, late: int) -> Score:
    """Olsson et al.'s in-context-learning score: loss at position ``late`` minus at ``early`` over sequences.

    Args:
        losses: ``(..., S, T)`` per-token losses.
        early, late: 0-based positions, 1 <= early < late < T.
    """
    assert 1 <= early < late < losses.shape[-1], (early, late, losses.shape)
    return _paired(losses[..., early], losses[..., late])


def icl_probe(losses: np.ndarray, repeat: int) -> Score:
    """The probe's in-context-learning score: the per-sequence mean loss over the second copy (positions
    R+1..2R-1) minus over the first (1..R-1), over sequences.

    Args:
        losses: ``(..., S, 2R)`` per-token losses on R random tokens repeated twice.
        repeat: R.
    """
    assert losses.shape[-1] == 2 * repeat and repeat >= 2, (losses.shape, repeat)
    first, second = probe_positions(repeat)
    return _paired(losses[..., first.start : first.stop].mean(-1), losses[..., second.start : second.stop].mean(-1))


def mean_increase(base: np.ndarray, ablated: np.ndarray, positions: range) -> Score:
    """The loss increase over ``positions`` when a head is ablated: per sequence the mean over the positions of
    ablated minus intact, then its mean and standard error over sequences.

    Args:
        base: ``(S, P)`` intact per-token losses.
        ablated: ``(K, S, P)`` per-token losses with each of K heads ablated.
        positions: the 0-based positions averaged (a contiguous range).
    """
    sl = slice(positions.start, positions.stop)
    return _paired(np.broadcast_to(base[:, sl].mean(-1), ablated.shape[:-1]), ablated[..., sl].mean(-1))


def top_contexts(increase: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest entries of each lane of ``increase`` ``(K, M)`` (M pooled tokens; NaN entries rank
    last), largest first, ties broken by the lower index.

    Returns:
        ``(K, min(k, M))`` indices into the M tokens and their values. With fewer than ``k`` finite entries the
        rest are NaN entries (value NaN).
    """
    lanes = increase  # (K, M)
    keyed = np.where(np.isnan(lanes), -np.inf, lanes)
    order = np.argsort(-keyed, axis=1, kind="stable")[:, :k]  # (K, k)
    return order, np.take_along_axis(lanes, order, axis=1)
