"""What the Trajectory map computes before it draws several runs' heads on one map: which runs can join it, the map
itself (the runs' trajectories on a common time axis, embedded together), the heads' colour groups, the heads per
joint cluster and the map's CSV."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.comparison import joint_trajectories
from headwatch.analysis.findings.sizes import SIZE_STATS
from headwatch.analysis.findings.values import stat_values
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.attention import ATTENTION
from headwatch.analysis.trajectories import maps
from headwatch.analysis.trajectories.maps import EmbeddingSettings, Normalisation, normalise
from headwatch.dashboard import style
from headwatch.dashboard.labels import STATS, trajectory_stats_for
from headwatch.dashboard.views.trajectories.data.maps import MIXED_COLOUR, TYPE_COLOURS

Refusal = Literal["unopened", "no trajectory", "no forward lens", "no statistic", "no matrix", "no tokens"]


def joint_refusal(store: Store, other: Store | StoreError, *, stat: str, matrix: str, align: str) -> Refusal | None:
    """Why ``other`` cannot join ``store``'s joint map of ``stat`` of ``matrix`` on the time axis ``align``, or None
    when it can: it cannot be opened, has fewer than two checkpoints, lacks the forward-lens tables (a forward
    statistic), the statistic or the matrix's rows, or (on the tokens axis) either run records no tokens per step."""
    forward = STATS[stat].forward
    if isinstance(other, StoreError):
        return "unopened"
    if len(other.steps) < 2:
        return "no trajectory"
    if forward and not other.has(ATTENTION):
        return "no forward lens"
    if stat not in trajectory_stats_for(other):  # read from a table this store lacks
        return "no statistic"
    if not forward and matrix not in other.meta.matrices:
        return "no matrix"
    if align == "tokens" and (other.meta.tokens_at(other.steps) is None or store.meta.tokens_at(store.steps) is None):
        return "no tokens"
    return None


def joint_embedding(
    stores: list[Store],
    statistic: str,
    *,
    matrix: str,
    normalisation: Normalisation,
    settings: EmbeddingSettings,
    align: str = "fraction",
) -> pd.DataFrame:
    """One trajectory map of every head of several runs (`analysis.findings.comparison.joint_trajectories` on the common
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


def joint_family(stores: list[Store], stat: str, *, matrix: str) -> dict[str, str]:
    """The statistics whose joint clusters are tested with ``stat``'s and corrected together (Holm), each with its
    matrix: the study's four (`analysis.findings.sizes.SIZE_STATS`, of W_OV when ``matrix`` is ``ov``, else of W_QK)
    that every run holds, as Compare runs and ``headwatch compare`` ask them, then ``stat`` of ``matrix`` when it is
    not one of them."""
    study = matrix if matrix in ("qk", "ov") else "qk"
    family = {
        s: study for s in SIZE_STATS if all(s in trajectory_stats_for(store) and study in store.meta.matrices for store in stores)
    }
    if stat not in family or family[stat] != matrix:
        family[stat] = matrix
    return family


def joint_grouping(colour_by: str, heads: pd.DataFrame, runs: list[str]) -> dict[str, Any]:
    """The joint map's fill: nothing extra for relative depth (``layer``), else each head's group by ``run``,
    ``type`` (at the end of training) or ``cluster`` (the joint trajectory clusters), with names and colours (the
    runs' own for ``run``; for the clusters, colours no run or head type has, `dashboard.style.JOINT_CLUSTER_COLOURS`).

    Args:
        heads: the joint heads in the map's row order, with ``run``, ``type`` and ``cluster``
            (`analysis.findings.sizes.JointClusters.heads`).
        runs: the runs' names in the map's order.
    """
    if colour_by == "run":
        groups = np.array([runs.index(r) for r in heads["run"]])
        colours = [style.run_colour(i) for i in range(len(runs))]
        return dict(groups=groups, group_names=list(runs), group_colours=colours, group_title="run")
    if colour_by == "type":
        names = sorted(set(heads["type"]), key=lambda t: (t == "none", "+" in t, t))
        groups = np.array([names.index(t) for t in heads["type"]])
        colours = [TYPE_COLOURS.get(t, MIXED_COLOUR) for t in names]
        return dict(groups=groups, group_names=names, group_colours=colours, group_title="type at the end of training")
    if colour_by == "cluster":
        labels = heads["cluster"].to_numpy(dtype=np.int64)
        names = [f"joint cluster {c + 1}" for c in range(int(labels.max()) + 1)] if len(labels) else []
        colours = [style.JOINT_CLUSTER_COLOURS[c % len(style.JOINT_CLUSTER_COLOURS)] for c in range(len(names))]
        return dict(groups=labels, group_names=names, group_colours=colours, group_title="joint trajectory cluster")
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


def joint_csv(rows: pd.DataFrame, heads: pd.DataFrame, runs: list[str], *, matrix: str, stat: str) -> pd.DataFrame:
    """The joint map's rows as its CSV: each head's run by name, its type and joint cluster (``heads``, in the map's
    row order), without the edges."""
    return rows.drop(columns=["neighbors", "same_steps"]).assign(
        run=[runs[i] for i in rows["run_index"]],
        matrix=matrix,
        statistic=stat,
        type=heads["type"].to_numpy(),
        joint_cluster=heads["cluster"].to_numpy(),
    )
