"""Default trajectory maps of a store, written into it as its ``embeddings`` table.

The dashboard's trajectory map must open without waiting for numba to compile
UMAP, so the precompute job embeds the default statistics once and stores the
result beside ``heads.parquet`` (one atomic commit, settings recorded in
``meta["embeddings"]``). Run it on an existing store with

    python -m headwatch.precompute.lenses.embeddings STORE [--statistics kl_gauss std ...]

The table's columns are registered in `analysis.store.format.EMBEDDINGS` (one row
per statistic, normalisation and head). The maths is in `analysis.trajectories.maps`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import Store, open_store
from headwatch.analysis.store.format import NULL_COLUMNS, SCALAR_COLUMNS
from headwatch.analysis.store.lenses.embeddings import EMBEDDINGS, EMBEDDINGS_LENS
from headwatch.analysis.trajectories.maps import NORMALISATIONS, EmbeddingSettings, Normalisation, embed
from headwatch.precompute.job.context import BaseComputation, RunContext
from headwatch.precompute.store.writer import commit_store

log = logging.getLogger("precompute")

EMBEDDABLE = SCALAR_COLUMNS + NULL_COLUMNS  # one number per head and step
# The reference study maps D_KL and spectral entropy; sigma and stable rank are the other two headline statistics.
DEFAULT_STATISTICS = ("kl_gauss", "spectral_entropy", "std", "stable_rank")
DEFAULT_NORMALISATION: Normalisation = "zscore"


def embedding_rows(
    xy: np.ndarray,
    neighbors: np.ndarray,
    *,
    statistic: str,
    normalisation: str,
    n_layers: int,
    n_heads: int,
    matrix: str = "qk",
) -> pa.Table:
    """Rows of one map: ``xy`` ``(N, 2)`` and ``neighbors`` ``(N, k)`` in layer-major head order."""
    n = n_layers * n_heads
    assert xy.shape == (n, 2) and neighbors.shape[0] == n, (xy.shape, neighbors.shape, n)
    k = neighbors.shape[1]
    offsets = np.arange(0, (n + 1) * k, k, dtype=np.int32)
    return pa.table(
        {
            "matrix": pa.array([matrix] * n, type=pa.string()),
            "statistic": pa.array([statistic] * n, type=pa.string()),
            "normalisation": pa.array([normalisation] * n, type=pa.string()),
            "layer": pa.array(np.repeat(np.arange(n_layers, dtype=np.int32), n_heads)),
            "head": pa.array(np.tile(np.arange(n_heads, dtype=np.int32), n_layers)),
            "x": pa.array(xy[:, 0].astype(np.float64)),
            "y": pa.array(xy[:, 1].astype(np.float64)),
            "neighbors": pa.ListArray.from_arrays(pa.array(offsets), pa.array(neighbors.reshape(-1).astype(np.int32))),
        },
        schema=EMBEDDINGS.schema,
    )


def embed_statistic(
    store: Store,
    statistic: str,
    *,
    normalisation: Normalisation = DEFAULT_NORMALISATION,
    settings: EmbeddingSettings = EmbeddingSettings(),
    matrix: str = "qk",
) -> pa.Table:
    """The trajectory map of one scalar statistic of one per-head matrix of the store, as embedding rows.

    Raises:
        KeyError: ``statistic`` is not a scalar (or null-model) column.
        ValueError: unknown normalisation, or fewer than 2 checkpoints to make trajectories from.
    """
    if statistic not in EMBEDDABLE:
        raise KeyError(f"unknown statistic {statistic!r}; choose from {EMBEDDABLE}")
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"unknown normalisation {normalisation!r}; choose from {sorted(NORMALISATIONS)}")
    if len(store.steps) < 2:
        raise ValueError(f"store {str(store.path)!r} has {len(store.steps)} checkpoints; a trajectory needs at least 2")
    xy, neighbors = embed(store.array(statistic, matrix=matrix), normalisation=normalisation, settings=settings)
    return embedding_rows(
        xy,
        neighbors,
        statistic=statistic,
        normalisation=normalisation,
        n_layers=store.n_layers,
        n_heads=store.n_heads,
        matrix=matrix,
    )


def embeddings_table(
    store: Store,
    *,
    statistics: tuple[str, ...] = DEFAULT_STATISTICS,
    normalisation: Normalisation = DEFAULT_NORMALISATION,
    settings: EmbeddingSettings = EmbeddingSettings(),
) -> pa.Table:
    """Default embeddings of a store: one map per per-head matrix of the store (``meta.json`` ``matrices``)
    and statistic (empty when it has fewer than 2 checkpoints)."""
    if len(store.steps) < 2:
        return EMBEDDINGS.empty()
    parts = [
        embed_statistic(store, s, normalisation=normalisation, settings=settings, matrix=m)
        for m in store.meta.matrices
        for s in statistics
    ]
    return pa.concat_tables(parts)


def embeddings_meta(
    store: Store, *, statistics: tuple[str, ...], normalisation: str, settings: EmbeddingSettings
) -> dict[str, Any]:
    """What ``meta["embeddings"]`` records: method, settings, software and the checkpoints used."""
    try:
        umap_version = version("umap-learn")
    except PackageNotFoundError:  # pragma: no cover - umap-learn is a requirement
        umap_version = None
    return {
        "file": EMBEDDINGS.file,
        "method": "umap",
        "statistics": list(statistics),
        "matrices": list(store.meta.matrices),
        "normalisation": normalisation,
        "normalisation_doc": NORMALISATIONS[normalisation],
        "knn_space": "normalised trajectories (Euclidean), before embedding",
        "settings": settings.as_dict(),
        "steps": [int(s) for s in store.steps],
        "software": {"umap-learn": umap_version},
    }


def add_embeddings(
    store_path: str | Path,
    *,
    statistics: tuple[str, ...] = DEFAULT_STATISTICS,
    normalisation: Normalisation = DEFAULT_NORMALISATION,
    settings: EmbeddingSettings = EmbeddingSettings(),
) -> Path:
    """Compute the default embeddings of an existing store and commit them into it atomically.

    Args:
        store_path: the store directory.
        statistics: scalar columns to embed.
        normalisation: trajectory normalisation (`analysis.trajectories.maps.NORMALISATIONS`).
        settings: UMAP and kNN settings.

    Returns:
        The store path.

    Raises:
        StoreError: the store cannot be opened.
        KeyError: an unknown statistic.
    """
    store = open_store(store_path)
    table = embeddings_table(store, statistics=statistics, normalisation=normalisation, settings=settings)
    meta = store.meta.with_record(
        "embeddings", embeddings_meta(store, statistics=statistics, normalisation=normalisation, settings=settings)
    )
    commit_store(store_path, meta, {EMBEDDINGS.name: table})
    return Path(store_path)


class EmbeddingsComputation(BaseComputation):
    """The trajectory-map embeddings: after a run that computed rows, or when the store's maps were made
    from other checkpoints, refreshed from the store (`add_embeddings`). A failure is logged and leaves
    the store as it is: it is complete without them."""

    lens = EMBEDDINGS_LENS

    def fill(self, run: RunContext) -> None:
        meta = run.state.meta
        stale = bool(meta.state_steps) and meta.embedding_steps != meta.state_steps
        if not (run.report.computed or stale):
            run.report.embeddings = "not needed"
            return
        out = run.state.out
        try:
            add_embeddings(out)
        except Exception as exc:  # the store is complete without them; never lose it over a map
            log.warning(
                "trajectory-map embeddings failed (%s: %s); the store is complete without them. "
                "Retry with `python -m headwatch.precompute.lenses.embeddings %s`",
                type(exc).__name__,
                exc,
                out,
            )
            run.report.embeddings = f"failed ({type(exc).__name__}: {exc})"
        else:
            run.report.embeddings = "written"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headwatch.precompute.lenses.embeddings", description=__doc__.splitlines()[0])
    parser.add_argument("store", help="store directory (meta.json + heads.parquet)")
    parser.add_argument(
        "--statistics",
        nargs="+",
        default=list(DEFAULT_STATISTICS),
        choices=EMBEDDABLE,
        metavar="COLUMN",
        help=f"scalar columns to embed (default: {' '.join(DEFAULT_STATISTICS)})",
    )
    parser.add_argument("--normalisation", default=DEFAULT_NORMALISATION, choices=sorted(NORMALISATIONS))
    parser.add_argument("--n-neighbors", type=int, default=EmbeddingSettings.n_neighbors)
    parser.add_argument("--min-dist", type=float, default=EmbeddingSettings.min_dist)
    parser.add_argument("--knn-k", type=int, default=EmbeddingSettings.knn_k)
    parser.add_argument("--seed", type=int, default=EmbeddingSettings.seed)
    args = parser.parse_args(argv)
    settings = EmbeddingSettings(n_neighbors=args.n_neighbors, min_dist=args.min_dist, knn_k=args.knn_k, seed=args.seed)
    try:
        add_embeddings(args.store, statistics=tuple(args.statistics), normalisation=args.normalisation, settings=settings)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {Path(args.store) / EMBEDDINGS.file}: {len(args.statistics)} statistic(s), normalisation {args.normalisation}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
