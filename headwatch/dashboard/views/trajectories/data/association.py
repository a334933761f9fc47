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
from headwatch.analysis.findings.replicates import relation_text
from headwatch.analysis.store import Store
from headwatch.analysis.store.format import LLC
from headwatch.analysis.type_association import (
    ASSOCIATION_STATS,
    PERMUTATIONS,
    Association,
    end_types,
    has_statistic,
)
from headwatch.analysis.type_association import replicates as replicates_verdict
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
) -> tuple[pd.DataFrame, dict[str, dict[str, Association]]]:
    """The clusters-against-types table: one row per statistic and run that has it (`association_row`), with the
    run's recipe against this run's (``recipe``: ``this run``, ``the same recipe, seed 2``, ``another recipe
    (...)``, `analysis.findings.replicates.relation_text`), and each statistic's associations by run.

    Args:
        runs: the runs asked (`association_runs`), every one with head types, this run first.
        stats: the statistics (`association_stats`).
        associate: ``store_association`` (the view passes its cached copy, `dashboard.derived.association`).
    """
    rows: list[dict] = []
    by_stat: dict[str, dict[str, Association]] = {}
    this = runs[0][1] if runs else None
    for s_name in stats:
        for position, (run_name, run_store) in enumerate(runs):
            if s_name not in trajectory_stats_for(run_store) or not has_statistic(run_store, s_name, matrix):
                continue
            found = associate(run_store, s_name, matrix=matrix)
            if found is None:  # every run here has head types (association_runs)
                continue
            result, _, labels, step = found
            by_stat.setdefault(s_name, {})[run_name] = result
            row = association_row(STATS[s_name].short(), run_name, result, labels, step)
            recipe = "this run" if position == 0 or this is None else relation_text(this, run_store)
            rows.append({"statistic": row.pop("statistic"), "run": row.pop("run"), "recipe": recipe, **row})
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
    table: pd.DataFrame,
    by_stat: dict[str, dict[str, Association]],
    *,
    run: str,
    stat: str,
    matrix: str,
    replicates: Sequence[str] = (),
    hint: str = "",
) -> str | None:
    """The table's answer for the statistic mapped in this run, in words: its AMI and p-values, whether the
    association also holds in this run's ``replicates`` (`analysis.type_association.replicates` over this run and
    them; named), or, without one, ``hint`` (how to make one); the table's other runs named as another recipe, not
    asked. None when the table has no row for it."""
    mine = table[(table["run"] == run) & (table["statistic"] == STATS[stat].short())]
    if not len(mine):
        return None
    if not np.isfinite(mine["AMI"].iloc[0]):
        return f"**{STATS[stat].short()}, run {run}:** {mine['answer'].iloc[0]}."
    row = mine.iloc[0]
    runs = by_stat.get(stat, {})
    text = (
        f"**{STATS[stat].short()} of {'W_QK' if matrix == 'qk' else 'W_OV'}, run {run}:** the "
        f"{row['clusters (k)']} trajectory clusters and the head types at step {row['types at step']:,} share "
        f"AMI = {row['AMI']:.3f}, permutation p = {row['p (shuffled over heads)']:.3g} "
        f"({PERMUTATIONS:,} shuffles of the types over the heads; p = {row['p (shuffled within layers)']:.3g} "
        "shuffling only within layers)."
    )
    asked = [r for r in replicates if r in runs]
    names = ", ".join(asked or replicates)
    if asked:
        across = {
            True: "associated (p < 0.05) in this run and in every one of them: the association replicates.",
            False: "not associated (p < 0.05) in this run and every one of them: it does not replicate.",
            None: "not testable in every one of them.",
        }
        text += (
            f" Asked of this run's replicates ({names}: the same recipe, another seed): "
            + across[replicates_verdict([runs[run], *(runs[r] for r in asked)])]
        )
    elif replicates:
        text += f" This run's replicates ({names}) lack this statistic: whether it replicates is not asked."
    else:
        text += " Whether it replicates is not asked. " + hint
    others = [r for r in dict.fromkeys(table["run"]) if r != run and r not in replicates]
    if others:
        text += (
            f" The table's other runs ({', '.join(others)}) are not replicates of this run (its `recipe` column says "
            "what each is): their rows are shown, not asked whether it replicates."
        )
    return text
