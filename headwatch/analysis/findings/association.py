"""The study's open question: do the trajectory clusters correspond to the head types, in this run and in every run
that can be asked? One statistic of one store asked (`store_association`, what the Timeline, the Trajectory map and
``headwatch report`` read), and the Timeline's paragraph over every statistic (`open_question_text`).

Pure: takes each statistic's `analysis.type_association.Association` for this run and for the other runs that have
the statistic and head types, returns the sentence. A run's figures are its own: a statistic this run lacks (the
refined LLC of a run without llc.parquet) is left out of its paragraph, whatever the other runs say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headwatch.analysis.findings.values import stat_values
from headwatch.analysis.store import Store
from headwatch.analysis.type_association import SIGNIFICANCE, Association, associate, end_types, replicates


def store_association(
    store: Store, statistic: str, *, matrix: str = "qk"
) -> tuple[Association, np.ndarray, np.ndarray, int] | None:
    """The trajectory clusters of one statistic of ``store`` against its heads' types at the last checkpoint with
    head types (`analysis.type_association.associate`).

    Returns:
        ``(Association, cluster labels, type labels, step of the types)``, labels ``(n_layers * n_heads,)``
        layer-major; None when the store has no ``head_types.parquet``.
    """
    types = end_types(store)
    if types is None:
        return None
    result, clusters = associate(stat_values(store, statistic, matrix=matrix), types[0])
    return result, clusters, types[0], types[1]


@dataclass(frozen=True)
class Asked:
    """One statistic asked of this run and of the other runs that have it.

    Attributes:
        name: how the paragraph names the statistic (``r_s of W_QK``).
        own: this run's association.
        others: the other runs' (those with the statistic and head types).
    """

    name: str
    own: Association
    others: Sequence[Association]


def open_question_text(asked: Sequence[Asked], *, n_runs: int) -> str:
    """The paragraph: how many statistics were compared in this run, which reach p < 0.05 here (with their AMI and
    p), how many would by chance, and which reach it in every run that has them.

    Args:
        asked: the statistics this run has and can be tested on (`Association.testable`).
        n_runs: how many runs have head types, this one included.
    """
    tested = [a for a in asked if a.own.testable]
    found = [f"{a.name} (AMI {a.own.ami:.3f}, p = {a.own.p_value:.3g})" for a in tested if a.own.significant]
    chance = SIGNIFICANCE * len(tested)
    text = (
        f"Of {len(tested)} statistics whose trajectory clusters were compared with the heads' types at the last "
        f"checkpoint, {len(found)} {'reaches' if len(found) == 1 else 'reach'} p < {SIGNIFICANCE:g} in this run"
        + (f": {', '.join(found)}" if found else "")
        + f"; about {chance:.1f} would by chance alone."
    )
    if n_runs < 2:
        return text
    across = [a for a in tested if a.others]
    held = [f"{a.name} (in all {len(a.others) + 1} runs that have it)" for a in across if replicates([a.own, *a.others])]
    if held:
        return text + " Reaching it in every run with head types that has the statistic: " + ", ".join(held) + "."
    return (
        text + f" Across the {n_runs} runs with head types, none of these statistics reaches it in every run that has "
        "it: no association replicates."
    )
