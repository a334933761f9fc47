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

1. A close approach of levels (i, i+1) is a maximal run of consecutive
   checkpoints a..b where the relative gap of the singular values,
   g(t) = (s_i - s_(i+1)) / (s_i + s_(i+1)) with s = sqrt(lambda), stays below
   ``gap_threshold`` (default 0.1: the two within about 20% of each other), with
   a checkpoint on each side (a > 0, b < T-1) where it does not: the levels
   approach and part again. Its checkpoint t* is the run's smallest gap. Levels
   that start close (at initialisation) or are still close at the last checkpoint
   make no approach. A run must also go *deep*: its smallest gap must fall below
   ``(1 - min_depth) * gap_threshold`` (default ``min_depth`` 0.2: below 8% at a 10%
   threshold); a gap that only grazes the threshold (wobbles just under it for a
   checkpoint or two) is noise around the threshold, not an approach.
2. At each step through the approach, a-1 -> a, ..., b -> b+1, compare
   keep = O_(i,i) * O_(i+1,i+1) with swap = O_(i,i+1) * O_(i+1,i). A step is
   *informative* when max(keep, swap) >= ``min_evidence`` (default 0.25: the
   directions of the pair, as a whole, overlap their own or each other's by at
   least 0.5 on average); otherwise the pair's plane turned too far between
   those checkpoints for either reading.
3. It is a **crossing** if at an informative step swap > keep (the directions
   swapped places in the sorted order), a **repulsion** if at every informative
   step keep >= swap (each sorted level kept its direction; a smooth rotation
   through an avoided crossing is this), and **unresolved** when no step is
   informative (or the store has no overlaps for them).

A narrow avoided crossing swept faster than the checkpoint spacing looks like a
crossing at that resolution (its vectors do swap between two checkpoints); the
rule reports what the checkpoints can resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

GAP_THRESHOLD = 0.1
MIN_EVIDENCE = 0.25
MIN_DEPTH = 0.2  # an approach's smallest gap must be below (1 - MIN_DEPTH) * gap_threshold


OVERLAP_K = 8  # leading singular vectors whose overlaps the store keeps


def vector_overlaps(u0: np.ndarray, v0: np.ndarray, u1: np.ndarray, v1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two stored factors of `overlap_matrix`: ``|<u0_a, u1_b>|`` and ``|<v0_a, v1_b>|``.

    Args:
        u0, v0, u1, v1: as for `overlap_matrix`.

    Returns:
        ``(o_u, o_v)``, each ``(..., K, K)`` in [0, 1] (row a: vector a at t; column b: at t+1).
    """
    return np.abs(np.swapaxes(u0, -1, -2) @ u1), np.abs(np.swapaxes(v0, -1, -2) @ v1)


def overlap_matrix(u0: np.ndarray, v0: np.ndarray, u1: np.ndarray, v1: np.ndarray) -> np.ndarray:
    """Sign-free overlaps O_ab = |<u0_a, u1_b>| |<v0_a, v1_b>| between two checkpoints.

    Args:
        u0, v0: ``(..., d_model, K)`` left/right singular vectors at t (columns).
        u1, v1: the same at t+1.

    Returns:
        ``(..., K, K)`` overlaps in [0, 1].
    """
    o_u, o_v = vector_overlaps(u0, v0, u1, v1)
    return o_u * o_v


@dataclass(frozen=True)
class Approach:
    """One close approach of sorted levels ``level`` and ``level + 1`` at checkpoint index ``t``."""

    level: int
    t: int
    gap: float
    kind: Literal["crossing", "repulsion", "unresolved"]
    swap_score: float  # max over the informative steps of swap - keep (rule 2); NaN if unresolved


def classify_approaches(
    lam: np.ndarray,
    overlaps: np.ndarray,
    *,
    levels: int = 3,
    gap_threshold: float = GAP_THRESHOLD,
    min_evidence: float = MIN_EVIDENCE,
    min_depth: float = MIN_DEPTH,
) -> list[Approach]:
    """Find and classify close approaches of adjacent leading levels of one head.

    Args:
        lam: ``(T, >= levels + 1)`` lambda_k per checkpoint, descending.
        overlaps: ``(T - 1, K, K)`` with ``overlaps[t]`` between checkpoints t and t+1
            (`overlap_matrix`); NaN where that pair's overlaps are unknown.
        levels: pairs (0,1) .. (levels-1, levels) are examined.
        gap_threshold: relative-gap threshold of a close approach.
        min_evidence: a step informs the verdict when max(keep, swap) reaches this.
        min_depth: a close run counts only when its smallest gap is below ``(1 - min_depth) * gap_threshold``.

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
        gap = relative_gap(s[:, i], s[:, i + 1])
        for a, b, t in close_approaches(gap, gap_threshold, min_depth=min_depth):
            scores = []
            for step in range(a - 1, b + 1):  # overlaps[step]: checkpoint step -> step + 1
                o = overlaps[step]
                keep, swap = o[i, i] * o[i + 1, i + 1], o[i, i + 1] * o[i + 1, i]
                if np.isfinite(keep) and np.isfinite(swap) and max(keep, swap) >= min_evidence:
                    scores.append(swap - keep)
            score = max(scores) if scores else float("nan")
            kind: Literal["crossing", "repulsion", "unresolved"]
            kind = "unresolved" if not scores else "crossing" if score > 0 else "repulsion"
            found.append(Approach(level=i, t=t, gap=float(gap[t]), kind=kind, swap_score=float(score)))
    return sorted(found, key=lambda a: (a.t, a.level))


def relative_gap(s_i: np.ndarray, s_next: np.ndarray) -> np.ndarray:
    """g = (s_i - s_(i+1)) / (s_i + s_(i+1)); 1 where both are 0."""
    total = s_i + s_next
    return np.where(total > 0, (s_i - s_next) / np.where(total > 0, total, 1), 1.0)


def close_approaches(
    gap: np.ndarray,
    gap_threshold: float = GAP_THRESHOLD,
    *,
    min_depth: float = MIN_DEPTH,
) -> list[tuple[int, int, int]]:
    """Rule 1: the close approaches in one level pair's gap series ``(T,)``.

    Returns:
        ``(a, b, t_star)`` per approach: the run a..b (inclusive) of checkpoints with
        ``gap < gap_threshold``, not touching the first or last checkpoint, whose smallest
        gap (at t_star) is below ``(1 - min_depth) * gap_threshold``.
    """
    gap = np.asarray(gap)
    edges = np.diff(np.concatenate([[0], (gap < gap_threshold).astype(np.int8), [0]]))
    runs = zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) - 1).tolist(), strict=True)
    deep = (1.0 - min_depth) * gap_threshold
    out = []
    for a, b in runs:
        t = a + int(np.argmin(gap[a : b + 1]))
        if a > 0 and b < len(gap) - 1 and gap[t] < deep:
            out.append((a, b, t))
    return out


# --------------------------------------------------------------------------- one head's leading levels

CROSSING_LEVELS = 4  # lambda_0 .. lambda_3


@dataclass(frozen=True)
class Crossings:
    """One head's leading levels over training with what their singular vectors did.

    Attributes:
        kept: ``(S - 1, m)`` O_ii between consecutive checkpoints, how much level i kept its
            direction from one to the next (1: the same u and v; NaN: no overlaps for that pair).
        swapped: ``(S - 1, m - 1)`` O_(i,i+1) O_(i+1,i), the evidence that levels i and i+1 swapped.
        approaches: close approaches of adjacent levels, classified by `classify_approaches`.
    """

    kept: np.ndarray
    swapped: np.ndarray
    approaches: list[Approach]


def level_crossings(lam: np.ndarray, overlaps: tuple[np.ndarray, np.ndarray], *, gap_threshold: float) -> Crossings:
    """Classify one head's close approaches of lambda_0 .. lambda_3 (m = min(4, d_head, K) levels).

    The stored factors multiply to O = o_u * o_v (`vector_overlaps`, `overlap_matrix`).

    Args:
        lam: ``(S, d_head)`` lambda_k per step, descending.
        overlaps: ``(o_u, o_v)`` as the store gives them (`analysis.store.Store.overlaps`), each ``(S - 1, K, K)``.
        gap_threshold: relative singular-value gap below which two levels count as close.

    Returns:
        The levels' kept and swapped overlaps and their classified approaches.
    """
    o_u, o_v = overlaps
    o = o_u * o_v  # (S - 1, K, K)
    m = min(CROSSING_LEVELS, lam.shape[1], o.shape[-1])
    kept = np.diagonal(o, axis1=1, axis2=2)[:, :m]  # (S - 1, m)
    swapped = np.stack([o[:, i, i + 1] * o[:, i + 1, i] for i in range(m - 1)], axis=1) if m > 1 else np.zeros((len(o), 0))
    approaches = classify_approaches(lam, o, levels=m - 1, gap_threshold=gap_threshold) if m > 1 else []
    return Crossings(kept=kept, swapped=swapped, approaches=approaches)
