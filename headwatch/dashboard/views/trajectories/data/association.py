"""What the Trajectory map computes before it asks whether the trajectory clusters correspond to head types: the
statistics and runs asked, the table of their clusters against the heads' types, and its answer for the statistic
mapped, in words."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.errors import StoreError
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import LLC
from headwatch.analysis.type_association import (
    ASSOCIATION_STATS,
    PERMUTATIONS,
    Association,
    end_types,
    has_statistic,
    replicates,
)
from headwatch.dashboard.labels import LLC_STAT, STATS, trajectory_stats_for


def association_stats(store: Store, stat: str) -> list[str]:
    """The statistics whose trajectory clusters are compared with the head types: the study's four, the one mapped
    (unless a forward statistic: the types are decided from those), and the refined LLC when the run has it."""
    stats = list(ASSOCIATION_STATS) + ([stat] if stat not in ASSOCIATION_STATS and not STATS[stat].forward else [])
    return stats + ([LLC_STAT] if store.has(LLC) and LLC_STAT not in stats else [])


def association_runs(run: str, store: Store, others: Mapping[str, Store | StoreError]) -> list[tuple[str, Store]]:
    """This run and the ``others`` that can be asked too (opened, with head types and a trajectory)."""
    asked = [(run, store)]
    for name, other in others.items():
        if not isinstance(other, StoreError) and end_types(other) is not None and len(other.steps) >= 2:
            asked.append((name, other))
    return asked


Found = tuple[Association, np.ndarray, np.ndarray, int] | None  # `analysis.findings.association.store_association`'s


def association_table(
    runs: list[tuple[str, Store]], stats: list[str], *, matrix: str, associate: Callable[..., Found]
) -> tuple[pd.DataFrame, dict[str, list[Association]]]:
    """The clusters-against-types table: one row per statistic and run that has it (`association_row`), and each
    statistic's associations over the runs.

    Args:
        runs: the runs asked (`association_runs`), every one with head types.
        stats: the statistics (`association_stats`).
        associate: ``store_association`` (the view passes its cached copy, `dashboard.derived.association`).
    """
    rows: list[dict] = []
    by_stat: dict[str, list[Association]] = {}
    for s_name in stats:
        for run_name, run_store in runs:
            if s_name not in trajectory_stats_for(run_store) or not has_statistic(run_store, s_name, matrix):
                continue
            found = associate(run_store, s_name, matrix=matrix)
            if found is None:  # every run here has head types (association_runs)
                continue
            result, _, labels, step = found
            by_stat.setdefault(s_name, []).append(result)
            rows.append(association_row(STATS[s_name].short(), run_name, result, labels, step))
    return pd.DataFrame(rows), by_stat


def association_row(short: str, run: str, result: Association, labels: np.ndarray, step: int) -> dict[str, Any]:
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


def association_reading(
    table: pd.DataFrame, by_stat: dict[str, list[Association]], *, run: str, stat: str, matrix: str
) -> str | None:
    """The table's answer for the statistic mapped in this run, in words: its AMI and p-values, and whether the
    association holds in every run (`analysis.type_association.replicates`); None when the table has no row for it."""
    mine = table[(table["run"] == run) & (table["statistic"] == STATS[stat].short())]
    if not len(mine):
        return None
    if not np.isfinite(mine["AMI"].iloc[0]):
        return f"**{STATS[stat].short()}, run {run}:** {mine['answer'].iloc[0]}."
    row = mine.iloc[0]
    runs = by_stat.get(stat, [])
    across = {
        True: "associated (p < 0.05) in every run.",
        False: "not associated in every run.",
        None: "not testable in every run.",
    }
    return (
        f"**{STATS[stat].short()} of {'W_QK' if matrix == 'qk' else 'W_OV'}, run {run}:** the "
        f"{row['clusters (k)']} trajectory clusters and the head types at step {row['types at step']:,} share "
        f"AMI = {row['AMI']:.3f}, permutation p = {row['p (shuffled over heads)']:.3g} "
        f"({PERMUTATIONS:,} shuffles of the types over the heads; p = {row['p (shuffled within layers)']:.3g} "
        "shuffling only within layers). "
        + ("" if len(runs) < 2 else f"Across the {len(runs)} runs below: " + across[replicates(runs)])
    )
