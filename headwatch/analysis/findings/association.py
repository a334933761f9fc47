"""The study's open question: do the trajectory clusters correspond to the head types, in this run, and does that
replicate? One statistic of one store asked (`store_association`, what the Timeline, the Trajectory map and
``headwatch report`` read), and the Timeline's paragraph over every statistic (`open_question_text`).

Replication is asked of the run's replicates only, runs of the same recipe with another seed
(`analysis.findings.replicates`), named in the sentence; the other runs with head types (other sizes, another
corpus) are another experiment and are named apart, never folded into the verdict. Without a replicate the
paragraph says how to make one.

Pure: takes each statistic's `analysis.type_association.Association` for this run and for its replicates that have
the statistic and head types, returns the sentence. A run's figures are its own: a statistic this run lacks (the
refined LLC of a run without llc.parquet) is left out of its paragraph, whatever the other runs say.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from headwatch.analysis.findings.values import stat_values
from headwatch.analysis.store import Store
from headwatch.analysis.type_association import SIGNIFICANCE, Association, associate, end_types
from headwatch.analysis.type_association import replicates as replicates_verdict


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
    """One statistic asked of this run and of its replicates that have it.

    Attributes:
        name: how the paragraph names the statistic (``r_s of W_QK``).
        own: this run's association.
        replicates: the replicates' (those with the statistic and head types), by run name.
    """

    name: str
    own: Association
    replicates: Mapping[str, Association] = field(default_factory=dict)


def _names(runs: Sequence[str]) -> str:
    return ", ".join(f"`{r}`" for r in runs)


def open_question_text(
    asked: Sequence[Asked], *, replicates: Sequence[str] = (), other_runs: Sequence[str] = (), hint: str = ""
) -> str:
    """The paragraph: how many statistics were compared in this run, which reach p < 0.05 here (with their AMI and
    p), how many would by chance; which also reach it in every replicate, the replicates named; and the other runs
    with head types named apart.

    Args:
        asked: the statistics this run has and can be tested on (`Association.testable`).
        replicates: this run's replicates with head types (`analysis.findings.replicates.replicates_of`).
        other_runs: the other runs with head types, not replicates of this one (named, not asked).
        hint: what to do without a replicate (`analysis.findings.replicates.replicate_hint`).
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
    if replicates:
        which = f"its replicate{'s' if len(replicates) > 1 else ''} {_names(replicates)} (the same recipe, another seed)"
        held = [a.name for a in tested if a.replicates and replicates_verdict([a.own, *a.replicates.values()])]
        if held:
            text += (
                f" Asked of {which}, {', '.join(held)} {'reaches' if len(held) == 1 else 'reach'} it in this run and in "
                "every replicate that has the statistic: "
                + ("this association replicates." if len(held) == 1 else "these associations replicate.")
            )
        else:
            text += f" Asked of {which}, no statistic reaches it in this run and in every replicate: no association replicates."
        lacking = [a.name for a in tested if not a.replicates]
        if lacking:
            text += f" Not asked of a replicate (none has it): {', '.join(lacking)}."
    else:
        text += " Whether these associations replicate is not asked. " + hint
    if other_runs:
        text += (
            f" The other runs with head types ({_names(other_runs)}) are not replicates of this run (another recipe: "
            "another size, data or schedule; or none recorded), so they are not asked whether it replicates; the "
            "Trajectory map's table gives their figures and recipes."
        )
    return text
