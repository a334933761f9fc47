"""Distances between heads from their stored similarities, and how ultrametric a layer's heads are.

Torch-free (numpy only): the similarity lens (`analysis.weights.similarity`) computes with it, and a reader
of ``similarity.parquet`` (a dashboard view, a notebook) turns the stored columns into the same
distances and the same ultrametricity shares.

**Distances.** Each stored similarity of a pair of heads becomes a metric:

- ``frob`` (the normalized Frobenius inner product c of two heads' W_QK, or W_OV): the Euclidean
  distance between the unit-norm matrices, ``||M_a/|M_a| - M_b/|M_b| ||_F = sqrt(2 - 2c)``, in [0, 2];
- ``col`` and ``row`` (the mean squared cosine m of the principal angles between two heads' column,
  or row, spaces): ``sqrt(1 - m)``, in [0, 1]. For two subspaces of one dimension r (every head whose
  matrix has rank d_head) this is the chordal (projection) distance ``||P_a - P_b||_F / sqrt(2 r)``
  between them, a metric on the subspaces of that dimension.

**Ultrametricity.** A distance is ultrametric when ``d(a, c) <= max(d(a, b), d(b, c))`` for every
triple: in every triangle the two largest sides are equal (an isosceles triangle with a short base),
which is what a hierarchy (a dendrogram whose merge heights are the distances) produces. For one
layer's heads, over every triangle {a, b, c} of distinct heads with sides ``d1 <= d2 <= d3``:

- ``share`` is the share of triangles with ``d3 - d2 <= tol (d3 - d1)``: the two largest sides equal
  up to ``tol`` of the triangle's own spread (an equilateral triangle counts). It does not change when
  every distance is scaled or shifted by one constant, so heads whose distances are all about equal
  (random heads in a wide residual stream are nearly equidistant) are not called ultrametric for that:
  for three independent, identically distributed sides the share is about ``tol``.
- ``share_of_max`` is the share with ``d3 - d2 <= tol d3`` (two largest sides within ``tol`` of the
  largest): the usual criterion, kept for comparison. It is near 1 for any nearly equidistant set,
  random heads included, so on its own it says little in high dimension.

Both read against the same measure for random heads of the same shapes (`analysis.weights.similarity`'s
baseline, recorded in meta.json ``similarity``).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

# The similarity statistics of a pair (`analysis.weights.similarity.STATS`) and how each becomes a distance.
STATS = ("frob", "col", "row")
# The default tolerance of the ultrametric test (a share of the triangle's spread; meta.json `similarity`).
TOLERANCE = 0.1


def distance(stat: str, similarity: np.ndarray) -> np.ndarray:
    """The distance of each pair from its similarity ``stat`` (`STATS`; the module docstring defines them).

    Args:
        stat: ``frob``, ``col`` or ``row``.
        similarity: the stored values (NaN stays NaN).

    Raises:
        ValueError: an unknown ``stat``.
    """
    values = np.asarray(similarity, dtype=np.float64)
    if stat == "frob":
        return np.sqrt(np.clip(2.0 - 2.0 * values, 0.0, None))
    if stat in ("col", "row"):
        return np.sqrt(np.clip(1.0 - values, 0.0, None))
    raise ValueError(f"unknown similarity statistic {stat!r}; expected one of {', '.join(STATS)}")


def triangles(n: int) -> np.ndarray:
    """Every triple ``i < j < k`` of ``n`` points, ``(n choose 3, 3)`` int64 (none below 3 points)."""
    if n < 3:
        return np.zeros((0, 3), dtype=np.int64)
    return np.array(list(combinations(range(n), 3)), dtype=np.int64)


def ultrametric_shares(d: np.ndarray, tol: float = TOLERANCE) -> tuple[float, float, int]:
    """How ultrametric a distance matrix is (the module docstring defines both shares).

    Args:
        d: ``(n, n)`` distances; only the entries above the diagonal are read (``d[i, j]``, i < j).
            A triangle with a NaN side is left out.
        tol: the tolerance, at least 0.

    Returns:
        ``(share, share_of_max, triangles)``: the shares among the triangles with finite sides, and
        how many there were; the shares are NaN when there were none.

    Raises:
        ValueError: ``d`` is not square, or ``tol`` is negative or not finite.
    """
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"expected a square distance matrix, got shape {d.shape}")
    if not (np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tolerance {tol!r}: expected a finite number >= 0")
    t = triangles(d.shape[0])
    i, j, k = t[:, 0], t[:, 1], t[:, 2]
    sides = np.sort(np.stack([d[i, j], d[i, k], d[j, k]], axis=1), axis=1)  # NaN sorts last
    sides = sides[np.isfinite(sides).all(axis=1)]
    if not len(sides):
        return float("nan"), float("nan"), 0
    d1, d2, d3 = sides[:, 0], sides[:, 1], sides[:, 2]
    gap = d3 - d2
    return float(np.mean(gap <= tol * (d3 - d1))), float(np.mean(gap <= tol * d3)), len(sides)
