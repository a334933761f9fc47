"""What the Trajectory map computes before it asks whether the trajectory clusters correspond to head types: the
statistics and runs asked, the table of their clusters against the heads' types (each run's recipe against this
run's), and its answer for the statistic mapped, in words: replication asked of this run's replicates only (runs of
the same recipe with another seed, `analysis.findings.replicates`), named."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from headwatch.analysis.errors import StoreError
from headwatch.analysis.findings.association import Asked, Found, JudgedAssociation, judged_run, pair_of, replication_text
from headwatch.analysis.findings.replicates import relation_text
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.llc import LLC
from headwatch.analysis.trajectories.type_association import (
    ASSOCIATION_PAIRS,
    ASSOCIATION_STATS,
    PERMUTATIONS,
    end_types,
    has_statistic,
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


def association_table(
    runs: list[tuple[str, Store]], stats: list[str], *, matrix: str, associate: Callable[..., Found]
) -> tuple[pd.DataFrame, dict[str, dict[str, JudgedAssociation]]]:
    """The clusters-against-types table: one row per statistic and run that has it (`association_row`), with the
    run's recipe against this run's (``recipe``: ``this run``, ``the same recipe, seed 2``, ``another recipe
    (...)``, `analysis.findings.replicates.relation_text`), and each statistic's judged associations by run.

    Each run's p-values are judged as the Timeline and ``headwatch report`` judge them
    (`analysis.findings.association.judged_run`): Holm over the study's statistics that the run has, both matrices
    and the refined LLC; a statistic mapped besides them is corrected over those and itself.

    Args:
        runs: the runs asked (`association_runs`), every one with head types, this run first.
        stats: the statistics (`association_stats`).
        associate: ``store_association`` (the view passes its cached copy, `dashboard.derived.association`).
    """
    judged = {name: judged_run(s, associate=associate, extra=extra_pairs(s, stats, matrix=matrix)) for name, s in runs}
    rows: list[dict] = []
    by_stat: dict[str, dict[str, JudgedAssociation]] = {}
    this = runs[0][1] if runs else None
    for s_name in stats:
        for position, (run_name, run_store) in enumerate(runs):
            tested = judged[run_name].get(pair_of(s_name, matrix))
            if tested is None:  # a statistic this run lacks
                continue
            by_stat.setdefault(s_name, {})[run_name] = tested
            row = association_row(STATS[s_name].short(), run_name, tested)
            recipe = "this run" if position == 0 or this is None else relation_text(this, run_store)
            rows.append({"statistic": row.pop("statistic"), "run": row.pop("run"), "recipe": recipe, **row})
    return pd.DataFrame(rows), by_stat


def extra_pairs(store: Store, stats: list[str], *, matrix: str) -> list[tuple[str, str]]:
    """The statistics of ``stats`` asked besides the study's (`analysis.trajectories.type_association.ASSOCIATION_PAIRS`: the
    mapped one, when it is not one of them) that the run has."""
    return [
        pair_of(s, matrix)
        for s in stats
        if pair_of(s, matrix) not in ASSOCIATION_PAIRS and s in trajectory_stats_for(store) and has_statistic(store, s, matrix)
    ]


def association_row(short: str, run: str, tested: JudgedAssociation) -> dict[str, Any]:
    """One row of the clusters-against-types table: a statistic (``short``) of one run, its clusters, the heads'
    types, the association between them (`analysis.trajectories.type_association.Association`) and its p-values judged (over
    heads, within layers: Monte Carlo error, Holm's correction over the run's statistics)."""
    result, labels, step, over, within = tested.association, tested.types, tested.step, tested.over, tested.within
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
        "s.e. (over heads)": over.se,
        "p over heads, Holm": over.adjusted,
        "p (shuffled within layers)": result.p_within_layers,
        "s.e. (within layers)": within.se,
        "p within layers, Holm": within.adjusted,
        "Holm over": f"{over.family} statistics" if result.testable else "–",
        "answer": result.reason or f"{over.words}; within layers: {within.words}",
    }


def association_reading(
    table: pd.DataFrame,
    by_stat: dict[str, dict[str, JudgedAssociation]],
    *,
    run: str,
    stat: str,
    matrix: str,
    replicates: Sequence[str] = (),
    hint: str = "",
) -> str | None:
    """The table's answer for the statistic mapped in this run, in words: its AMI, p-values and decision after Holm,
    whether the association replicates in this run's ``replicates`` (named; read from each run's decision as the
    Timeline and ``headwatch report`` read it, `analysis.findings.association.replication_text`), or, without one,
    ``hint`` (how to make one); the table's other runs named as another recipe, not asked. None when the table has
    no row for it."""
    mine = table[(table["run"] == run) & (table["statistic"] == STATS[stat].short())]
    if not len(mine):
        return None
    if not np.isfinite(mine["AMI"].iloc[0]):
        return f"**{STATS[stat].short()}, run {run}:** {mine['answer'].iloc[0]}."
    row = mine.iloc[0]
    runs = by_stat.get(stat, {})
    name = STATS[stat].short() + ("" if stat == LLC_STAT else f" of W_{matrix.upper()}")
    text = (
        f"**{STATS[stat].short()} of {'W_QK' if matrix == 'qk' else 'W_OV'}, run {run}:** the "
        f"{row['clusters (k)']} trajectory clusters and the head types at step {row['types at step']:,} share "
        f"AMI = {row['AMI']:.3f}, permutation p = {row['p (shuffled over heads)']:.3g} ± "
        f"{row['s.e. (over heads)']:.2g} ({PERMUTATIONS:,} shuffles of the types over the heads; p = "
        f"{row['p (shuffled within layers)']:.3g} shuffling only within layers); after Holm's correction over the "
        f"{row['Holm over']} tested in this run, p = {row['p over heads, Holm']:.3g} and "
        f"{row['p within layers, Holm']:.3g} within layers: {row['answer']}. "
    )
    asked = Asked(name, runs[run], {r: runs[r] for r in replicates if r in runs})
    text += replication_text([asked], replicates=replicates, hint=hint)
    others = [r for r in dict.fromkeys(table["run"]) if r != run and r not in replicates]
    if others:
        text += (
            f" The table's other runs ({', '.join(others)}) are not replicates of this run (its `recipe` column says "
            "what each is): their rows are shown, not asked whether it replicates."
        )
    return text
