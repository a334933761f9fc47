"""Essential dynamics: the trajectory of a model's outputs on fixed inputs, in its leading principal components
(Hoogland et al. 2024, who check the LLC's stages against it; docs/stages.md).

At every checkpoint t the model's next-token log-probabilities on a fixed sample are one vector o_t of D numbers:
``n`` sequences, at ``positions`` of each, for a fixed subset of ``k`` tokens (`token_subset`), in (sequence,
position, token) order. Stacked over checkpoints they are the (T, D) matrix O. Its principal components over
checkpoints are those of the centred matrix ``X = O - mean_t(O)``: with the thin SVD ``X = U S V^T``, the score of
checkpoint t on component j is ``U[t, j] S[j]`` (its coordinate along the j-th direction V[:, j] of output space) and
the component explains ``S[j]^2 / sum(S^2)`` of the variance. The trajectory is the path of the scores.

A cusp is where the trajectory turns back: checkpoint t (with `window` checkpoints w on each side) is a turning
point when the displacements into it and out of it, ``a = x_t - x_{t-w}`` and ``b = x_{t+w} - x_t`` in the leading
`components` scores, make an angle above `TURN_DEGREES` (cos(a, b) < cos 90 deg = 0: the path reverses more than it
goes on), both are at least `MOVING` (a quarter) of the path's largest displacement over w checkpoints (the path
is moving there: where it stalls, its jitter turns it every way), and that angle is the largest among the
checkpoints within w of t. Displacements over w checkpoints, not one, keep the jitter of neighbouring checkpoints
from turning the path.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.analysis.store.lenses.essential import ESSENTIAL
from headwatch.analysis.store.lenses.essential import (
    SEQUENCES as SEQUENCES,  # sequences of each kind (evaluation text, induction probe) in the sample
)

POSITIONS = 8  # positions per sequence, evenly spaced
TOKENS = 128  # tokens of the vocabulary whose log-probabilities are kept (all of a smaller vocabulary)
COMPONENTS = 3  # principal components stored per checkpoint
WINDOW = 2  # checkpoints on each side over which a cusp's displacements are taken
TURN_DEGREES = 90.0  # the turn beyond which a checkpoint is a cusp
MOVING = 0.25  # a cusp's displacements are at least this fraction of the path's largest (over the same window)


def sample_positions(length: int, *, count: int = POSITIONS) -> np.ndarray:
    """``count`` positions of a sequence of ``length`` tokens, evenly spaced from the first position that has a
    token before it to the last that predicts one (1 .. length - 2), each once.

    Raises:
        ValueError: a sequence shorter than 3 tokens.
    """
    if length < 3:
        raise ValueError(f"sequences of {length} tokens: essential dynamics needs at least 3")
    return np.unique(np.round(np.linspace(1, length - 2, count)).astype(np.int64))


def token_subset(targets: np.ndarray, vocab_size: int, *, size: int = TOKENS) -> np.ndarray:
    """The tokens whose log-probabilities are kept, sorted: every token when the vocabulary has at most ``size``;
    else the ``size`` tokens that occur most often among ``targets`` (the sample's next tokens; ties to the lower
    id, then the lowest ids that never occur). The log-probability of a token the sample never predicts moves
    mostly with the unigram statistics; the frequent tokens are where the model's predictions change, and a fixed
    number keeps a checkpoint's bytes independent of the vocabulary (Pythia's 50,304 tokens would be 50,304
    numbers per position)."""
    if vocab_size <= size:
        return np.arange(vocab_size, dtype=np.int64)
    counts = np.bincount(np.asarray(targets, dtype=np.int64).ravel(), minlength=vocab_size)[:vocab_size]
    order = np.lexsort((np.arange(vocab_size), -counts))  # most frequent first, lower id first among equals
    return np.sort(order[:size]).astype(np.int64)


def principal_components(outputs: np.ndarray, *, components: int = COMPONENTS) -> tuple[np.ndarray, np.ndarray]:
    """The trajectory's scores on its leading principal components over checkpoints (module docstring), by
    scikit-learn's PCA (full SVD), with each component's sign fixed so that its largest-magnitude score is positive.

    Args:
        outputs: ``(T, D)`` the outputs per checkpoint, T >= 2.
        components: how many to keep (fewer when T - 1 or D is smaller).

    Returns:
        ``scores`` ``(T, K)`` float64 and ``explained`` ``(K,)`` the fraction of the variance each explains.

    Raises:
        ValueError: fewer than 2 checkpoints, or non-finite outputs.
    """
    from sklearn.decomposition import PCA

    x = np.asarray(outputs, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"outputs of shape {x.shape}: principal components over checkpoints need (T >= 2, D)")
    if not np.all(np.isfinite(x)):
        raise ValueError("outputs hold non-finite values: a checkpoint's log-probabilities diverged")
    k = min(components, x.shape[0] - 1, x.shape[1])
    pca = PCA(n_components=k, svd_solver="full")
    scores = pca.fit_transform(x)  # (T, K)
    flip = np.sign(scores[np.argmax(np.abs(scores), axis=0), np.arange(k)])
    flip[flip == 0] = 1.0
    return scores * flip, np.asarray(pca.explained_variance_ratio_, dtype=np.float64)


def turning_angles(scores: np.ndarray, *, window: int = WINDOW) -> np.ndarray:
    """Per checkpoint, the angle in degrees between ``x_t - x_{t-w}`` and ``x_{t+w} - x_t`` (NaN within w of either
    end or where a displacement is zero)."""
    x = np.asarray(scores, dtype=np.float64)
    out = np.full(len(x), np.nan)
    for t in range(window, len(x) - window):
        a, b = x[t] - x[t - window], x[t + window] - x[t]
        na, nb = np.linalg.norm(a), np.linalg.norm(b)
        if na > 0 and nb > 0:
            out[t] = np.degrees(np.arccos(np.clip(a @ b / (na * nb), -1.0, 1.0)))
    return out


def cusps(scores: np.ndarray, *, window: int = WINDOW, turn: float = TURN_DEGREES) -> np.ndarray:
    """Whether each checkpoint is a cusp of the trajectory (module docstring): its turning angle exceeds ``turn``,
    both its displacements are at least `MOVING` times the largest displacement over ``window`` checkpoints, and its
    angle is the largest within ``window`` checkpoints. ``(T,)`` bool."""
    x = np.asarray(scores, dtype=np.float64)
    angle = turning_angles(x, window=window)
    out = np.zeros(len(angle), dtype=bool)
    if len(x) <= 2 * window:
        return out
    step = np.linalg.norm(x[window:] - x[:-window], axis=1)  # |x_t - x_(t-w)| for t = w .. T-1
    typical = MOVING * float(np.max(step))
    for t in np.flatnonzero(np.nan_to_num(angle, nan=-1.0) > turn):
        moving = step[t - window] >= typical and step[t] >= typical  # |x_t - x_(t-w)|, |x_(t+w) - x_t|
        near = angle[max(t - window, 0) : t + window + 1]
        out[t] = moving and angle[t] >= np.nanmax(near)
    return out


def store_trajectory(store) -> tuple[pd.DataFrame, np.ndarray] | None:  # store: analysis.store.Store
    """The trajectory a store holds (essential.parquet) as one row per step: ``step``, ``pc1``, ``pc2``, ...,
    ``turn``, ``cusp``; and the fraction of variance each component explains. None without the lens's table."""

    frame = store.frame(ESSENTIAL)
    if frame is None or frame.empty:
        return None
    wide = frame.pivot(index="step", columns="component", values="score").sort_index()
    out = pd.DataFrame({"step": wide.index.to_numpy(np.int64)})
    for j in wide.columns:
        out[f"pc{int(j) + 1}"] = wide[j].to_numpy()
    per_step = frame.drop_duplicates("step").set_index("step").loc[out["step"]]
    out["turn"] = per_step["turn"].to_numpy()
    out["cusp"] = per_step["cusp"].to_numpy(bool)
    explained = frame.drop_duplicates("component").sort_values("component")["explained"].to_numpy()
    return out, explained
