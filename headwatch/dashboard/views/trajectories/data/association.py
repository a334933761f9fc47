"""What the Trajectory map computes before it asks whether the trajectory clusters correspond to head types: the
statistics and runs asked, the table of their clusters against the heads' types, and its answer for the statistic
mapped, in words."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.errors import StoreError
from headwatch.analysis.significance import Judged
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import LLC
from headwatch.analysis.type_association import (
    ASSOCIATION_PAIRS,
    ASSOCIATION_STATS,
    PERMUTATIONS,
    Association,
    end_types,
    has_statistic,
    judge_associations,
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

    Each run's p-values are corrected by Holm over every statistic tested in it (`association_family`: these rows
    and the study's statistics of the other matrix, as ``headwatch report`` corrects them).

    Args:
        runs: the runs asked (`association_runs`), every one with head types.
        stats: the statistics (`association_stats`).
        associate: ``store_association`` (the view passes its cached copy, `dashboard.derived.association`).
    """
    found: dict[tuple[str, str], tuple[Association, np.ndarray, int]] = {}  # (statistic, run) -> result, types, step
    judged: dict[tuple[str, str], tuple[Judged, Judged]] = {}
    for run_name, run_store in runs:
        tested = {}
        for s_name, m in association_family(run_store, stats, matrix=matrix):
            got = associate(run_store, s_name, matrix=m)
            if got is None:  # every run here has head types (association_runs)
                continue
            tested[(s_name, m)] = got[0]
            if m == matrix:
                found[(s_name, run_name)] = (got[0], got[2], got[3])
        judged |= {(s_name, run_name): j for (s_name, m), j in judge_associations(tested).items() if m == matrix}
    rows: list[dict] = []
    by_stat: dict[str, list[Association]] = {}
    for s_name in stats:
        for run_name, _ in runs:
            if (s_name, run_name) not in found:
                continue
            result, labels, step = found[(s_name, run_name)]
            by_stat.setdefault(s_name, []).append(result)
            rows.append(association_row(STATS[s_name].short(), run_name, result, labels, step, judged[(s_name, run_name)]))
    return pd.DataFrame(rows), by_stat


def association_family(store: Store, stats: list[str], *, matrix: str) -> list[tuple[str, str]]:
    """The (statistic, matrix) pairs tested in one run and corrected together: ``stats`` of ``matrix`` that the run
    has, then the study's pairs (`analysis.type_association.ASSOCIATION_PAIRS`) of the other matrix that it has.
    The refined LLC, of no matrix, counts once."""
    pairs = [(s, matrix) for s in stats if s in trajectory_stats_for(store) and has_statistic(store, s, matrix)]
    pairs += [(s, m) for s, m in ASSOCIATION_PAIRS if m != matrix and s != LLC_STAT and s in stats and has_statistic(store, s, m)]
    return pairs


def association_row(
    short: str, run: str, result: Association, labels: np.ndarray, step: int, judged: tuple[Judged, Judged]
) -> dict[str, Any]:
    """One row of the clusters-against-types table: a statistic (``short``) of one run, its clusters, the heads'
    types (``labels``, at ``step``), the association between them (`analysis.type_association.Association`) and its
    p-values ``judged`` (over heads, within layers: Monte Carlo error, Holm's correction over the run's statistics)."""
    counts = ", ".join(f"{t} {n}" for t, n in zip(*np.unique(labels, return_counts=True), strict=True))
    over, within = judged
    return {
        "statistic": short,
        "run": run,
        "clusters (k)": result.clusters,
        "silhouette": result.silhouette,
        "types at step": step,
        "heads per type": counts,
        "AMI": result.ami,
        "p (shuffled over heads)": result.p_value,
        "s.e. (over heads)": over.se,
        "p over heads, Holm": over.adjusted,
        "p (shuffled within layers)": result.p_within_layers,
        "s.e. (within layers)": within.se,
        "p within layers, Holm": within.adjusted,
        "Holm over": f"{over.family} statistics" if result.testable else "–",
        "answer": result.reason or f"{over.words}; within layers: {within.words}",
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
        f"AMI = {row['AMI']:.3f}, permutation p = {row['p (shuffled over heads)']:.3g} ± "
        f"{row['s.e. (over heads)']:.2g} ({PERMUTATIONS:,} shuffles of the types over the heads; p = "
        f"{row['p (shuffled within layers)']:.3g} shuffling only within layers); after Holm's correction over the "
        f"{row['Holm over']} tested in this run, p = {row['p over heads, Holm']:.3g} and "
        f"{row['p within layers, Holm']:.3g} within layers: {row['answer']}. "
        + ("" if len(runs) < 2 else f"Across the {len(runs)} runs below: " + across[replicates(runs)])
    )
