"""The Trajectory map page's data: the precomputed map that fits the page's choices, a map computed here (one run's,
or several runs' together), the heads' colour groups, and one row of the table that asks whether the trajectory
clusters correspond to head types."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis import trajectories as maps
from headwatch.analysis.findings.runs import joint_trajectories
from headwatch.analysis.findings.values import stat_values
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import EMBEDDINGS, LLC
from headwatch.analysis.trajectories import EmbeddingSettings, Normalisation, kmeans, normalise, trajectories
from headwatch.analysis.type_association import cluster_trajectories

TYPE_COLOURS = {"previous_token": "#1f77b4", "induction": "#d62728", "sink": "#2ca02c", "none": "#b0b0b0"}
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
    compiles numba, ~30 s), with the columns of ``embeddings.parquet``."""
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


def joint_embedding(
    stores: list[Store],
    statistic: str,
    *,
    matrix: str,
    normalisation: Normalisation,
    settings: EmbeddingSettings,
    align: str = "fraction",
) -> pd.DataFrame:
    """One trajectory map of every head of several runs (`analysis.findings.runs.joint_trajectories` on the common
    time axis ``align``, ``fraction`` or ``tokens``; UMAP).

    Returns:
        Columns ``run_index`` (position in ``stores``), ``layer``, ``head``, ``x``, ``y``, ``neighbors`` (row indices
        of the nearest trajectories in the joint set) and ``same_steps``.
    """
    axis: Any = "tokens" if align == "tokens" else "fraction"
    traj, index, same = joint_trajectories(
        [stat_values(s, statistic, matrix=matrix) for s in stores],
        [s.steps for s in stores],
        align=axis,
        tokens=[t for t in (s.meta.tokens_at(s.steps) for s in stores) if t is not None] if axis == "tokens" else None,
    )
    x = normalise(traj, normalisation)
    xy, neighbors = maps.umap_embed(x, settings), maps.knn(x, settings.knn_k)
    return pd.DataFrame(
        {
            "run_index": index[:, 0],
            "layer": index[:, 1],
            "head": index[:, 2],
            "x": xy[:, 0],
            "y": xy[:, 1],
            "neighbors": list(neighbors),
            "same_steps": same,
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


def grouping(store: Store, colour_by: str, traj: np.ndarray, types: tuple[np.ndarray, int] | None) -> dict[str, Any]:
    """The map's colouring: nothing extra for layers, else the heads' groups, their names and colours.

    Args:
        colour_by: ``layer``, ``type`` (at the end of training), ``cluster`` (of ``traj``) or ``llc_cluster``.
        traj: ``(S, n_layers, n_heads)`` the statistic mapped.
        types: the heads' types at the end of training and its step (`analysis.type_association.end_types`).
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
        labels = kmeans(normalise(trajectories(store.require(LLC, "llc")), "zscore"), LLC_K, seed=0)
        names = [f"rLLC cluster {c + 1}" for c in range(int(labels.max()) + 1)]
        return dict(groups=labels, group_names=names, group_title="refined-LLC cluster")
    return {}


def association_row(short: str, run: str, result: Any, labels: np.ndarray, step: int) -> dict[str, Any]:
    """One row of the clusters-against-types table: a statistic (``short``) of one run, its clusters, the heads'
    types (``labels``, at ``step``) and the association between them (`analysis.type_association.Association`)."""
    counts = ", ".join(f"{t} {n}" for t, n in zip(*np.unique(labels, return_counts=True), strict=True))
    return {
        "statistic": short,
        "run": run,
        "clusters (k)": result.clusters,
        "silhouette": result.silhouette,
        "types at step": step,
        "heads per type": counts,
        "AMI": result.ami,
        "p (shuffled over heads)": result.p_value,
        "p (shuffled within layers)": result.p_within_layers,
        "answer": result.reason
        or ("associated" if result.significant else "no association shown")
        + ("" if not result.significant else f" (within layers: p = {result.p_within_layers:.3g})"),
    }


def joint_grouping(colour_by: str, heads: pd.DataFrame, runs: list[str]) -> dict[str, Any]:
    """The joint map's fill: nothing extra for relative depth (``layer``), else each head's group by ``run``,
    ``type`` (at the end of training) or ``cluster`` (the joint trajectory clusters), with names and colours.

    Args:
        heads: the joint heads in the map's row order, with ``run``, ``type`` and ``cluster``
            (`analysis.findings.sizes.JointClusters.heads`).
        runs: the runs' names in the map's order.
    """
    if colour_by == "run":
        groups = np.array([runs.index(r) for r in heads["run"]])
        return dict(groups=groups, group_names=list(runs), group_title="run")
    if colour_by == "type":
        names = sorted(set(heads["type"]), key=lambda t: (t == "none", "+" in t, t))
        groups = np.array([names.index(t) for t in heads["type"]])
        colours = [TYPE_COLOURS.get(t, MIXED_COLOUR) for t in names]
        return dict(groups=groups, group_names=names, group_colours=colours, group_title="type at the end of training")
    if colour_by == "cluster":
        labels = heads["cluster"].to_numpy(dtype=np.int64)
        names = [f"joint cluster {c + 1}" for c in range(int(labels.max()) + 1)] if len(labels) else []
        return dict(groups=labels, group_names=names, group_title="joint trajectory cluster")
    return {}


def joint_counts(heads: pd.DataFrame, runs: list[str]) -> pd.DataFrame:
    """Heads per joint cluster (one row each, ``joint cluster`` numbered from 1), one column per run and per type."""
    by_run = pd.crosstab(heads["cluster"], heads["run"]).reindex(columns=runs, fill_value=0)
    by_type = pd.crosstab(heads["cluster"], heads["type"])
    by_type.columns = [f"type: {t}" for t in by_type.columns]
    table = pd.concat([by_run, by_type], axis=1).reset_index()
    table.insert(0, "joint cluster", table.pop("cluster") + 1)
    table.insert(1, "heads", by_run.sum(axis=1).to_numpy())
    return table
