"""The study's open question: do the trajectory clusters correspond to the head types, in this run, and does that
replicate? Computed once for the Timeline, the Trajectory map and ``headwatch report``, which say it in the same
words: one statistic of one store asked (`store_association`), a run's statistics judged together (`judged_run`),
and the sentences (`run_text`, `replication_text`, and the Timeline's paragraph `open_question_text`).

Each run's p-values are read with their Monte Carlo error and corrected by Holm over the statistics tested in it,
the study's pairs (`analysis.trajectories.type_association.ASSOCIATION_PAIRS`) that the run has, whoever asks: the decisions
``associated``, ``not shown`` and ``undecided`` (`analysis.trajectories.significance`) are the same on every page and in the
report. Replication is read from those decisions (`analysis.trajectories.type_association.replication`): an association
replicates where it is associated in this run and in every replicate; an undecided run leaves it undecided unless
another run shows no association.

Replication is asked of the run's replicates only, runs of the same recipe with another seed
(`analysis.findings.replicates`), named in the sentence; the other runs with head types (other sizes, another
corpus) are another experiment and are named apart, never folded into the verdict. Without a replicate the
sentence says how to make one.

Pure: takes stores (or their associations), returns records and sentences. A run's figures are its own: a
statistic this run lacks (the refined LLC of a run without llc.parquet) is left out of its paragraph, whatever the
other runs say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from headwatch.analysis.findings.values import stat_values
from headwatch.analysis.store import Store
from headwatch.analysis.trajectories.significance import Judged
from headwatch.analysis.trajectories.type_association import (
    ASSOCIATION_PAIRS,
    LLC_STATISTIC,
    REPLICATION_WORDS,
    Association,
    Replication,
    associate,
    end_types,
    has_statistic,
    judge_associations,
    replication,
)

Found = tuple[Association, np.ndarray, np.ndarray, int] | None  # `store_association`'s
Pair = tuple[str, str]  # (statistic, matrix); the refined LLC's matrix is "qk" (`ASSOCIATION_PAIRS`)


def store_association(store: Store, statistic: str, *, matrix: str = "qk") -> Found:
    """The trajectory clusters of one statistic of ``store`` against its heads' types at the last checkpoint with
    head types (`analysis.trajectories.type_association.associate`).

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
class JudgedAssociation:
    """One statistic of one run, its association judged with the run's other statistics.

    Attributes:
        association: the clusters against the types (`analysis.trajectories.type_association.Association`).
        over, within: its p-values over heads and within layers, each with its Monte Carlo error and Holm's
            correction over the run's statistics (`analysis.trajectories.type_association.judge_associations`).
        clusters, types: ``(n_layers * n_heads,)`` the heads' cluster and type labels, layer-major.
        step: the step of the types.
    """

    association: Association
    over: Judged
    within: Judged
    clusters: np.ndarray
    types: np.ndarray
    step: int


def pair_of(statistic: str, matrix: str) -> Pair:
    """The study's key of a statistic asked of ``matrix``: the refined LLC, of no matrix, is ``("llc", "qk")``."""
    return (statistic, "qk") if statistic == LLC_STATISTIC else (statistic, matrix)


def study_pairs(store: Store) -> list[Pair]:
    """The study's (statistic, matrix) pairs (`analysis.trajectories.type_association.ASSOCIATION_PAIRS`) that ``store`` has: the
    statistics tested in it, and corrected together."""
    return [(s, m) for s, m in ASSOCIATION_PAIRS if has_statistic(store, s, m)]


def judged_run(
    store: Store, *, associate: Callable[..., Found] = store_association, extra: Sequence[Pair] = ()
) -> dict[Pair, JudgedAssociation]:
    """Every study statistic ``store`` has (`study_pairs`), its association judged with Holm's correction over those
    statistics: the figures the Timeline, the Trajectory map and ``headwatch report`` all read.

    Args:
        associate: ``store_association`` (the dashboard passes its cached copy, `dashboard.derived.association`).
        extra: statistics asked besides the study's (the Trajectory map's mapped statistic when it is not one of
            them): each judged with Holm over the study's statistics and itself, so that the study's own decisions
            stay what every other place says.

    Returns:
        Per pair, its `JudgedAssociation`; empty for a store without head types.
    """
    study = study_pairs(store)
    asked = [*study, *(p for p in extra if p not in study)]
    found: dict[Pair, tuple[Association, np.ndarray, np.ndarray, int]] = {}
    for s, m in asked:
        got = associate(store, s, matrix=m)
        if got is not None:  # None: no head types
            found[(s, m)] = got
    study = [p for p in study if p in found]
    judged = judge_associations({p: found[p][0] for p in study})
    for p in found:
        if p not in judged:  # asked besides the study's statistics
            judged[p] = judge_associations({q: found[q][0] for q in [*study, p]})[p]
    return {p: JudgedAssociation(a, *judged[p], clusters, types, step) for p, (a, clusters, types, step) in found.items()}


@dataclass(frozen=True)
class Asked:
    """One statistic asked of this run and of its replicates that have it.

    Attributes:
        name: how the sentence names the statistic (``σ of W_QK``).
        own: this run's association, judged.
        replicates: the replicates' (those with the statistic and head types), by run name.
    """

    name: str
    own: JudgedAssociation
    replicates: Mapping[str, JudgedAssociation] = field(default_factory=dict)

    @property
    def verdict(self) -> Replication | None:
        """Whether the association replicates (`analysis.trajectories.type_association.replication` over this run's decision and
        the replicates', over heads); None when no replicate has the statistic."""
        if not self.replicates:
            return None
        return replication([self.own.over.decision, *(t.over.decision for t in self.replicates.values())])


def asked_of(
    runs: Mapping[str, Mapping[Pair, JudgedAssociation]], run: str, replicates: Sequence[str], names: Mapping[Pair, str]
) -> list[Asked]:
    """Each statistic of ``run`` (in its order in ``runs[run]``), with the ``replicates`` that have it.

    Args:
        runs: every run's `judged_run`, by name.
        run: this run's name.
        replicates: its replicates' names (`analysis.findings.replicates.replicates_of`), each in ``runs``.
        names: how the sentences name each pair.
    """
    return [Asked(names[p], tested, {r: runs[r][p] for r in replicates if p in runs[r]}) for p, tested in runs[run].items()]


def _names(runs: Sequence[str]) -> str:
    return ", ".join(f"`{r}`" for r in runs)


def _listed(items: Sequence[str]) -> str:
    return ", ".join(items)


def run_text(asked: Sequence[Asked], *, run: str = "this run") -> str:
    """This run's answer in one sentence: how many statistics were compared, and which are associated with the head
    types after Holm's correction over them (AMI, p, adjusted p) and which undecided.

    Args:
        asked: the statistics tested in the run (`asked_of`), the untestable included: they are counted out.
        run: how the sentence names the run.
    """
    tested = [a for a in asked if a.own.over.decision is not None]
    by = {d: [a for a in tested if a.own.over.decision == d] for d in ("associated", "undecided")}

    def shown(a: Asked) -> str:
        o = a.own
        return f"{a.name} (AMI {o.association.ami:.3f}, p = {o.over.p:.3g}, Holm {o.over.adjusted:.3g})"

    n = len(by["associated"])
    text = (
        f"Of {len(tested)} statistics whose trajectory clusters were compared with the heads' types at the last "
        f"checkpoint, each p corrected by Holm over the {len(tested)} tested in {run}, {n} "
        f"{'is' if n == 1 else 'are'} associated" + (f": {_listed([shown(a) for a in by['associated']])}" if n else "")
    )
    if by["undecided"]:
        text += f"; {len(by['undecided'])} undecided (p within its Monte Carlo error of the threshold): " + _listed(
            [shown(a) for a in by["undecided"]]
        )
    return text + "; no association is shown for the others." if len(tested) > n + len(by["undecided"]) else text + "."


def replication_text(
    asked: Sequence[Asked], *, replicates: Sequence[str], hint: str = "", run: str = "this run", about: str = ""
) -> str:
    """Whether each association replicates, in the words every place uses: asked of the ``replicates`` (named), read
    from each run's Holm-corrected decision (`Asked.verdict`), the statistics grouped by verdict with the runs that
    decide it; without a replicate, ``hint`` (how to make one).

    Args:
        asked: the statistics asked (`asked_of`); those this run could not test are left out.
        replicates: the replicates asked, by name (none: replication is not asked).
        hint: what to do without a replicate (`analysis.findings.replicates.replicate_hint`).
        run: how the sentence names this run (``this run``, ```induction-d128```).
        about: what the replicates are, after their names (default: ``the same recipe, another seed``).
    """
    tested = [a for a in asked if a.own.over.decision is not None]
    one = len(tested) == 1
    if not replicates:
        return ("Whether it replicates" if one else "Whether these associations replicate") + " is not asked. " + hint
    text = (
        f"Replication, asked of {run}'s replicate{'s' if len(replicates) > 1 else ''} {_names(replicates)} "
        f"({about or 'the same recipe, another seed'}), read from each run's decision over heads after Holm's "
        "correction."
    )

    def where(a: Asked, decision: str | None) -> str:  # the runs whose decision is ``decision``
        runs = [run] if a.own.over.decision == decision else []
        return ", ".join(runs + [f"`{r}`" for r, t in a.replicates.items() if t.over.decision == decision])

    why = {"not shown": "no association shown in {}", "undecided": "undecided in {}", "not testable": "not testable in {}"}
    groups: dict[str, dict[str, list[str]]] = {v: {} for v in REPLICATION_WORDS}  # verdict -> why -> statistics
    for a in tested:
        v = a.verdict
        if v is None:  # no replicate has it
            continue
        because = why[v].format(where(a, None if v == "not testable" else v)) if v in why else ""
        if len(a.replicates) < len(replicates):
            because += ("; " if because else "") + f"asked of {_names(list(a.replicates))} alone"
        groups[v].setdefault(because, []).append(a.name)
    for verdict, by in groups.items():
        if by:
            said = "; ".join(_listed(names) + (f" ({because})" if because else "") for because, names in by.items())
            text += f" {REPLICATION_WORDS[verdict].capitalize()}: {said}."
    if not groups["replicates"] and not groups["undecided"] and (groups["not shown"] or groups["not testable"]):
        text += " No association is shown to replicate."
    lacking = [a.name for a in tested if not a.replicates]
    if lacking:
        text += f" Not asked of a replicate (none has it): {_listed(lacking)}."
    return text


def open_question_text(
    asked: Sequence[Asked], *, replicates: Sequence[str] = (), other_runs: Sequence[str] = (), hint: str = ""
) -> str:
    """The Timeline's paragraph: this run's answer (`run_text`), whether it replicates (`replication_text`), and the
    other runs with head types named apart.

    Args:
        asked: the statistics this run has (`asked_of`).
        replicates: this run's replicates with head types (`analysis.findings.replicates.replicates_of`).
        other_runs: the other runs with head types, not replicates of this one (named, not asked).
        hint: what to do without a replicate (`analysis.findings.replicates.replicate_hint`).
    """
    text = run_text(asked) + " " + replication_text(asked, replicates=replicates, hint=hint)
    if other_runs:
        text += (
            f" The other runs with head types ({_names(other_runs)}) are not replicates of this run (another recipe: "
            "another size, data or schedule; or none recorded), so they are not asked whether it replicates; the "
            "Trajectory map's table gives their figures and recipes."
        )
    return text
