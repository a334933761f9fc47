"""What the Trajectory map computes before it draws one run's map: the precomputed map that fits the view's choices
or a map computed here, each head's nearest trajectories, the heads' trajectories in miniature (the hover's sparklines)
and their colour groups."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.findings.values import llc_shown, stat_values
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.embeddings import EMBEDDINGS
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, llc_data_words
from headwatch.analysis.trajectories import maps
from headwatch.analysis.trajectories.maps import EmbeddingSettings, Normalisation, kmeans, normalise, trajectories
from headwatch.analysis.trajectories.type_association import cluster_trajectories

TYPE_COLOURS = {
    "previous_token": "#1f77b4",
    "induction": "#d62728",
    "sink": "#2ca02c",
    "current_token": "#ff7f0e",
    "multigram": "#8c564b",
    "other": "#17becf",
    "none": "#b0b0b0",
}

MIXED_COLOUR = "#9467bd"

LLC_K = 4  # the Refined LLC page's default number of clusters (k-means on per-head-normalised curves)


def stored_settings(store: Store) -> EmbeddingSettings:
    """The settings the store's precomputed maps were made with (``meta.json``), the page's defaults."""
    given = store.meta.embedding_settings
    return EmbeddingSettings(**{k: v for k, v in given.items() if k in EmbeddingSettings.__dataclass_fields__})


def stored_maps(store: Store) -> pd.DataFrame | None:
    """The store's precomputed maps (``embeddings.parquet``), or None when it has none."""
    return store.frame(EMBEDDINGS)


def embedding(
    store: Store, statistic: str, *, matrix: str, normalisation: Normalisation, settings: EmbeddingSettings
) -> pd.DataFrame:
    """A trajectory map of one statistic of ``store`` (`analysis.trajectories.embed`: UMAP; the first in a process
    compiles numba), with the columns of ``embeddings.parquet``."""
    xy, neighbors = maps.embed(stat_values(store, statistic, matrix=matrix), normalisation=normalisation, settings=settings)
    n_layers, n_heads = store.n_layers, store.n_heads
    return pd.DataFrame(
        {
            "matrix": matrix,
            "statistic": statistic,
            "normalisation": normalisation,
            "layer": np.repeat(np.arange(n_layers, dtype=np.int32), n_heads),
            "head": np.tile(np.arange(n_heads, dtype=np.int32), n_layers),
            "x": xy[:, 0],
            "y": xy[:, 1],
            "neighbors": list(neighbors),
        }
    )


def stored_map(
    store: Store, stored: pd.DataFrame | None, *, stat: str, matrix: str, norm: str, settings: EmbeddingSettings
) -> tuple[pd.DataFrame | None, str, bool]:
    """The precomputed map of ``stat`` that the page can show as it is, its method's name, and whether the store's
    maps were made from the run's current checkpoints.

    Returns:
        ``(rows, method, fresh)``: rows None when no stored map fits (stale, other settings, or not stored).
    """
    fresh = store.meta.embedding_steps == [int(s) for s in store.steps]
    if stored is None or not fresh or settings != stored_settings(store):
        return None, "UMAP", fresh
    sel = stored[(stored["matrix"] == matrix) & (stored["statistic"] == stat) & (stored["normalisation"] == norm)]
    if not len(sel):
        return None, "UMAP", fresh
    return sel, "UMAP" if store.meta.embedding_method == "umap" else store.meta.embedding_method, fresh


def neighbours(rows: pd.DataFrame) -> np.ndarray:
    """``(heads, knn_k)`` each head's nearest trajectories, as indices into the map's rows."""
    return np.stack(rows["neighbors"].to_numpy()) if len(rows) else np.zeros((0, 0), dtype=np.int64)


def nearest(rows: pd.DataFrame, *, layer: int, head: int, n_heads: int) -> str | None:
    """The nearest trajectories of head ``(layer, head)`` on the map ``rows`` (layer-major), named ``L1 H2, ...``;
    None when the map has no edges."""
    neighbors = neighbours(rows)
    if not len(neighbors):
        return None
    return ", ".join(f"L{i // n_heads} H{i % n_heads}" for i in neighbors[layer * n_heads + head])


SPARK_CHARS = "▁▂▃▄▅▆▇█"


def sparkline(values: np.ndarray, *, width: int = 32) -> str:
    """A head's trajectory in one line of block characters (its own min to max), first and last value beside it.

    Args:
        values: ``(S,)`` the statistic at every checkpoint; resampled to at most ``width`` characters.
    """
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    if not ok.any():
        return "(no finite values)"
    if len(v) > width:
        v = v[np.linspace(0, len(v) - 1, width).round().astype(int)]
    lo, hi = np.nanmin(v[np.isfinite(v)]), np.nanmax(v[np.isfinite(v)])
    span = hi - lo if hi > lo else 1.0
    chars = "".join(" " if not np.isfinite(x) else SPARK_CHARS[round((x - lo) / span * (len(SPARK_CHARS) - 1))] for x in v)
    first, last = values[ok][0], values[ok][-1]
    return f"{first:.3g} {chars} {last:.3g}"


def sparklines(traj: np.ndarray, layers: np.ndarray, heads: np.ndarray, *, label: str) -> list[str]:
    """Each map row's hover line: ``label`` and its head's trajectory in miniature (`sparkline`).

    Args:
        traj: ``(S, n_layers, n_heads)`` the statistic mapped.
        layers, heads: ``(N,)`` each row's head.
    """
    return [f"{label}: {sparkline(traj[:, int(lay), int(hd)])}" for lay, hd in zip(layers, heads, strict=True)]


def grouping(store: Store, colour_by: str, traj: np.ndarray, types: tuple[np.ndarray, int] | None) -> dict[str, Any]:
    """The map's colouring: nothing extra for layers, else the heads' groups, their names and colours.

    Args:
        colour_by: ``layer``, ``type`` (at the end of training), ``cluster`` (of ``traj``) or ``llc_cluster``.
        traj: ``(S, n_layers, n_heads)`` the statistic mapped.
        types: the heads' types at the end of training and its step (`analysis.trajectories.type_association.end_types`).
    """
    if colour_by == "type" and types is not None:
        names = sorted(set(types[0]), key=lambda t: (t == "none", "+" in t, t))
        groups = np.array([names.index(t) for t in types[0]])
        colours = [TYPE_COLOURS.get(t, MIXED_COLOUR) for t in names]
        return dict(groups=groups, group_names=names, group_colours=colours, group_title=f"type at step {types[1]:,}")
    if colour_by == "cluster":
        labels, k, _ = cluster_trajectories(traj)
        return dict(groups=labels, group_names=[f"cluster {c + 1}" for c in range(k)], group_title="trajectory cluster")
    if colour_by == "llc_cluster" and store.has(LLC):
        shown = llc_shown(store)  # train where held, else text (every shipped store: text)
        labels = kmeans(normalise(trajectories(store.require(LLC, "llc", at={LLC_DATA_COLUMN: shown})), "zscore"), LLC_K)
        names = [f"rLLC cluster {c + 1}" for c in range(int(labels.max()) + 1)]
        return dict(groups=labels, group_names=names, group_title=f"refined-LLC cluster ({llc_data_words(shown)})")
    return {}
