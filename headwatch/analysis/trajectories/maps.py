"""Per-head training trajectories of one statistic: normalisation, nearest neighbours, a 2-D map.

A head's trajectory is its statistic at every real checkpoint (duplicates excluded),
one coordinate per checkpoint, so Pythia's log-spaced early checkpoints weigh as
much as the later ones. Heads are rows in layer-major order (row = layer * n_heads
+ head). Two normalisations:

- ``zscore`` (default): each trajectory minus its own mean, divided by its own
  standard deviation. Compares the *shape* of the curves (when a head moves, how
  it turns), not their level or scale. A flat trajectory becomes all zeros.
- ``global``: the whole statistic minus its mean over all heads and steps,
  divided by its standard deviation. Level and scale count too.

Neighbours are exact k-nearest neighbours in the normalised trajectory space
(Euclidean). The 2-D map is a UMAP embedding of the same vectors; `kmeans` groups the same vectors
into clusters (the refined-LLC view clusters heads by the shape of their curves, as the
refined-LLC paper does with Euclidean k-means). Steps where no head has a value (a
statistic estimated at a subset of the checkpoints) are left out of both. Arrays in,
arrays out; umap-learn is imported only when an embedding is asked for.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

Normalisation = Literal["zscore", "global"]
NORMALISATIONS: dict[str, str] = {
    "zscore": "per head: minus its own mean, divided by its own standard deviation (shape only)",
    "global": "whole statistic: minus the mean over all heads and steps, divided by their standard deviation (level and shape)",
}


@dataclass(frozen=True)
class EmbeddingSettings:
    """How a trajectory map is made (recorded in the store's meta with the embeddings).

    Attributes:
        n_neighbors: UMAP's neighbourhood size (clipped to the number of heads - 1).
        min_dist: UMAP's minimum distance between embedded points.
        knn_k: neighbours per head in the stored kNN graph.
        seed: UMAP's random state (also makes it single-threaded and reproducible).
        metric: distance in trajectory space.
    """

    n_neighbors: int = 15
    min_dist: float = 0.1
    knn_k: int = 5
    seed: int = 0
    metric: str = "euclidean"

    def as_dict(self) -> dict:
        return asdict(self)


def trajectories(values: np.ndarray) -> np.ndarray:
    """``(S, n_layers, n_heads)`` statistic -> ``(n_layers * n_heads, S')`` trajectories, layer-major rows, over
    the S' steps where some head has a finite value."""
    s, n_layers, n_heads = values.shape
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values).reshape(s, -1).any(axis=1)]  # (S', n_layers, n_heads)
    return np.ascontiguousarray(values.reshape(len(values), n_layers * n_heads).T)


def fill_nonfinite(traj: np.ndarray) -> np.ndarray:
    """A copy where NaN becomes the row's finite mean and +-inf the row's finite max / min (0 for an all-bad row)."""
    out = np.array(traj, dtype=np.float64, copy=True)
    finite = np.isfinite(out)
    if finite.all():
        return out
    masked = np.where(finite, out, np.nan)
    any_ok = np.any(finite, axis=1, keepdims=True)  # (n, 1)
    safe = np.where(any_ok, masked, 0.0)  # all-bad rows: 0 (avoids empty-slice warnings)
    row_mean, row_max, row_min = np.nanmean(safe, axis=1), np.nanmax(safe, axis=1), np.nanmin(safe, axis=1)
    rows = np.broadcast_to(np.arange(out.shape[0])[:, None], out.shape)
    out = np.where(np.isnan(traj), row_mean[rows], out)
    out = np.where(np.isposinf(traj), row_max[rows], out)
    out = np.where(np.isneginf(traj), row_min[rows], out)
    return out


def normalise(traj: np.ndarray, how: Normalisation = "zscore") -> np.ndarray:
    """Normalised copy of ``(N, S)`` trajectories (see the module docstring).

    Raises:
        ValueError: unknown normalisation.
    """
    x = fill_nonfinite(traj)
    if how == "zscore":
        mean = x.mean(axis=1, keepdims=True)
        std = x.std(axis=1, keepdims=True)
        return np.where(std > 0, (x - mean) / np.where(std > 0, std, 1.0), 0.0)
    if how == "global":
        std = x.std()
        return (x - x.mean()) / std if std > 0 else np.zeros_like(x)
    raise ValueError(f"unknown normalisation {how!r}; choose from {sorted(NORMALISATIONS)}")


def knn(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of each row's ``k`` nearest other rows (Euclidean), nearest first; ties by lower index.

    Args:
        x: ``(N, D)`` points.
        k: neighbours per point (clipped to N - 1).

    Returns:
        ``(N, min(k, N - 1))`` int32.
    """
    n = x.shape[0]
    k = max(0, min(k, n - 1))
    if k == 0:
        return np.zeros((n, 0), dtype=np.int32)
    sq = np.einsum("ij,ij->i", x, x)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)  # (N, N)
    np.maximum(d2, 0, out=d2)
    np.fill_diagonal(d2, np.inf)
    # a stable sort keeps equal distances in index order
    order = np.argsort(d2, axis=1, kind="stable")[:, :k]
    return order.astype(np.int32)


def edge_pairs(neighbors: np.ndarray) -> np.ndarray:
    """Unique undirected edges ``(E, 2)`` (i < j) of a kNN graph given as ``(N, k)`` neighbour indices."""
    n, k = neighbors.shape
    if n == 0 or k == 0:
        return np.zeros((0, 2), dtype=np.int32)
    src = np.repeat(np.arange(n), k)
    dst = neighbors.reshape(-1)
    pairs = np.stack([np.minimum(src, dst), np.maximum(src, dst)], axis=1)
    return np.unique(pairs, axis=0).astype(np.int32)


def umap_embed(x: np.ndarray, settings: EmbeddingSettings = EmbeddingSettings()) -> np.ndarray:
    """2-D UMAP embedding ``(N, 2)`` of ``(N, D)`` points (deterministic for a given seed).

    The first call in a process compiles numba code (tens of seconds); later calls are fast.
    """
    import warnings

    n = x.shape[0]
    if n < 4:  # UMAP needs a neighbourhood; place tiny sets on a line
        return np.stack([np.arange(n, dtype=np.float64), np.zeros(n)], axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # n_jobs overridden by random_state; numba deprecations
        import umap

        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=max(2, min(settings.n_neighbors, n - 1)),
            min_dist=settings.min_dist,
            metric=settings.metric,
            random_state=settings.seed,
            init="spectral" if n > settings.n_neighbors + 1 else "random",
        )
        return np.asarray(reducer.fit_transform(x), dtype=np.float64)


def embed(
    values: np.ndarray, *, normalisation: Normalisation = "zscore", settings: EmbeddingSettings = EmbeddingSettings()
) -> tuple[np.ndarray, np.ndarray]:
    """Trajectory map of one statistic.

    Args:
        values: ``(S, n_layers, n_heads)`` the statistic at every real checkpoint.
        normalisation: see `NORMALISATIONS`.
        settings: UMAP and kNN settings.

    Returns:
        ``xy`` ``(n_layers * n_heads, 2)`` and ``neighbors`` ``(n_layers * n_heads, k)``
        (layer-major head indices of each head's nearest trajectories).
    """
    x = normalise(trajectories(values), normalisation)
    return umap_embed(x, settings), knn(x, settings.knn_k)


MAXIMIN_STARTS = 64  # k-means' farthest-point starts: from every point up to this many points, else from this many


def _lloyd(x: np.ndarray, centres: np.ndarray, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """Lloyd's iterations from ``(R, k, D)`` starting centres, all R at once: ``(R, N)`` labels and ``(R,)`` within-
    cluster sums of squares. A centre whose cluster empties keeps its place; a point as near two centres takes the
    first."""
    k = centres.shape[1]
    sq = np.einsum("nd,nd->n", x, x)  # (N,)

    def distances(c: np.ndarray) -> np.ndarray:  # (R, N, k) squared distances of the points to the centres
        return np.maximum(sq[None, :, None] - 2 * np.einsum("nd,rkd->rnk", x, c) + np.einsum("rkd,rkd->rk", c, c)[:, None], 0)

    labels = np.full((centres.shape[0], x.shape[0]), -1)
    for _ in range(iterations):
        new = distances(centres).argmin(axis=2)  # (R, N)
        if np.array_equal(new, labels):
            break
        labels = new
        member = (labels[:, :, None] == np.arange(k)).astype(np.float64)  # (R, N, k)
        counts = member.sum(axis=1)  # (R, k)
        sums = np.einsum("rnk,nd->rkd", member, x)
        centres = np.where(counts[:, :, None] > 0, sums / np.maximum(counts, 1)[:, :, None], centres)
    d2 = distances(centres)
    return d2.argmin(axis=2), d2.min(axis=2).sum(axis=1)


def _farthest_first(d2: np.ndarray, first: np.ndarray, k: int) -> np.ndarray:
    """``(R, k)`` point indices: from each of ``first`` ``(R,)``, k - 1 times the point farthest from those chosen
    (``d2``: ``(N, N)`` squared distances)."""
    picks = [first]
    near = d2[first]  # (R, N) each point's squared distance to its nearest chosen point
    for _ in range(k - 1):
        nxt = near.argmax(axis=1)
        picks.append(nxt)
        near = np.minimum(near, d2[nxt])
    return np.stack(picks, axis=1)


def kmeans(x: np.ndarray, k: int, *, iterations: int = 100) -> np.ndarray:
    """Euclidean k-means (Lloyd's algorithm) of ``(N, D)`` points from deterministic starts, the labels of the one
    with the least within-cluster sum of squares, renumbered in order of first appearance.

    No random numbers, so nothing depends on a seed or on the order of the points: the starts are the means of Ward's
    hierarchical partition into k (scipy), which is a function of the distances alone, and the farthest-point
    starts (the next centre always the point farthest from those chosen) from every point, or, past
    `MAXIMIN_STARTS` points, from the first `MAXIMIN_STARTS` of the farthest-point traversal that begins at the point
    farthest from the mean. Reordering the points reorders the starts and nothing else; only exact ties (two starts
    as good, a point as near two centres) are broken by position.

    Returns:
        ``(N,)`` int64 labels in ``0 .. min(k, N) - 1``.

    Raises:
        ValueError: ``k`` < 1.
    """
    from scipy.cluster.hierarchy import fcluster, linkage

    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if k < 1:
        raise ValueError(f"k = {k}: need at least one cluster")
    k = min(k, n)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    sq = np.einsum("nd,nd->n", x, x)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0)  # (N, N)
    if n <= MAXIMIN_STARTS:
        firsts = np.arange(n)
    else:
        far = int(((x - x.mean(axis=0)) ** 2).sum(axis=1).argmax())
        firsts = _farthest_first(d2, np.array([far]), MAXIMIN_STARTS)[0]
    starts = [x[_farthest_first(d2, firsts, k)]]  # (R, k, D)
    ward = fcluster(linkage(x, "ward"), k, "maxclust") - 1
    if ward.max() + 1 == k:  # fewer only where fewer than k points differ
        starts.insert(0, np.stack([x[ward == c].mean(axis=0) for c in range(k)])[None])
    labels, cost = _lloyd(x, np.concatenate(starts), iterations)
    best = labels[int(np.argmin(cost))]
    used, first = np.unique(best, return_index=True)
    rank = np.zeros(k, dtype=np.int64)
    rank[used[np.argsort(first)]] = np.arange(len(used))  # old label -> rank of its first appearance
    return rank[best]


def canonical_order(x: np.ndarray, *keys: np.ndarray) -> np.ndarray:
    """An order of the rows of ``(N, D)`` ``x`` that depends on their values alone: lexicographic in the coordinates,
    then in ``keys`` (each ``(N,)``, for rows equal in every coordinate). Computing over the rows in this order
    makes floating-point sums run in one order whatever order the rows came in."""
    x = np.asarray(x, dtype=np.float64)
    tie = [np.unique(np.asarray(k).astype(str), return_inverse=True)[1] for k in reversed(keys)]
    return np.lexsort((*tie, *x.T[::-1]))
