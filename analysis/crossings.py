"""Level crossings vs level repulsion of a head's leading singular values over training.

Two leading values lambda_i, lambda_(i+1) of a head may approach each other and
separate again. Sorted by size, the values alone cannot say whether the levels
crossed (the singular directions swap places in the sorted order) or repelled
(each sorted level keeps its direction, which may rotate smoothly). The singular
vectors can. Between consecutive checkpoints t, t+1 we use the overlaps

    O_ab(t) = |<u_a(t), u_b(t+1)>| * |<v_a(t), v_b(t+1)>|,   a, b < K,

with u, v the left and right singular vectors of W_QK (sign-free: flipping
u_a and v_a together leaves W_QK and O unchanged). O is close to the identity
when every sorted level keeps its direction.

Rule (documented in the README):

1. A close approach of levels (i, i+1) is a checkpoint t* where the relative gap
   of the singular values, g(t) = (s_i - s_(i+1)) / (s_i + s_(i+1)) with
   s = sqrt(lambda), has a local minimum (over its neighbours) with
   g(t*) < ``gap_threshold`` (default 0.1: the two within about 20% of each other).
2. It is a **crossing** if, at either step into or out of t* (t*-1 -> t* or
   t* -> t*+1), the pair's directions swap: O_(i,i+1) * O_(i+1,i) >
   O_(i,i) * O_(i+1,i+1). Otherwise it is a **repulsion**: each sorted level kept
   its direction through the approach.

A narrow avoided crossing swept faster than the checkpoint spacing looks like a
crossing at that resolution (its vectors do swap between two checkpoints); the
rule reports what the checkpoints can resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

GAP_THRESHOLD = 0.1


def overlap_matrix(u0: np.ndarray, v0: np.ndarray, u1: np.ndarray, v1: np.ndarray) -> np.ndarray:
    """Sign-free overlaps O_ab = |<u0_a, u1_b>| |<v0_a, v1_b>| between two checkpoints.

    Args:
        u0, v0: ``(..., d_model, K)`` left/right singular vectors at t (columns).
        u1, v1: the same at t+1.

    Returns:
        ``(..., K, K)`` overlaps in [0, 1].
    """
    return np.abs(np.swapaxes(u0, -1, -2) @ u1) * np.abs(np.swapaxes(v0, -1, -2) @ v1)


@dataclass(frozen=True)
class Approach:
    """One close approach of sorted levels ``level`` and ``level + 1`` at checkpoint index ``t``."""

    level: int
    t: int
    gap: float
    kind: Literal["crossing", "repulsion"]
    swap_score: float  # max over the two steps of O_(i,i+1) O_(i+1,i) - O_(i,i) O_(i+1,i+1)


def classify_approaches(
    lam: np.ndarray,
    overlaps: np.ndarray,
    *,
    levels: int = 3,
    gap_threshold: float = GAP_THRESHOLD,
) -> list[Approach]:
    """Find and classify close approaches of adjacent leading levels of one head.

    Args:
        lam: ``(T, >= levels + 1)`` lambda_k per checkpoint, descending.
        overlaps: ``(T - 1, K, K)`` with ``overlaps[t]`` between checkpoints t and t+1.
        levels: pairs (0,1) .. (levels-1, levels) are examined.
        gap_threshold: relative-gap threshold of a close approach.

    Returns:
        Approaches in time order, then level order.
    """
    lam = np.asarray(lam, dtype=np.float64)
    overlaps = np.asarray(overlaps, dtype=np.float64)
    n_t = lam.shape[0]
    if overlaps.shape[0] != n_t - 1:
        raise ValueError(f"need T-1 = {n_t - 1} overlap matrices, got {overlaps.shape[0]}")
    if overlaps.shape[-1] < levels + 1:
        raise ValueError(f"overlaps cover K = {overlaps.shape[-1]} vectors, need at least {levels + 1}")
    found = []
    s = np.sqrt(np.clip(lam, 0, None))
    for i in range(levels):
        total = s[:, i] + s[:, i + 1]
        gap = np.where(total > 0, (s[:, i] - s[:, i + 1]) / np.where(total > 0, total, 1), 1.0)
        for t in range(n_t):
            left = gap[t - 1] if t > 0 else np.inf
            right = gap[t + 1] if t < n_t - 1 else np.inf
            if not (gap[t] < gap_threshold and gap[t] <= left and gap[t] < right):
                continue
            scores = []
            for step in (t - 1, t):
                if 0 <= step < n_t - 1:
                    o = overlaps[step]
                    scores.append(o[i, i + 1] * o[i + 1, i] - o[i, i] * o[i + 1, i + 1])
            score = max(scores) if scores else float("nan")
            kind: Literal["crossing", "repulsion"] = "crossing" if score > 0 else "repulsion"
            found.append(Approach(level=i, t=t, gap=float(gap[t]), kind=kind, swap_score=float(score)))
    return sorted(found, key=lambda a: (a.t, a.level))
