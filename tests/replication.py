"""Issue 62's replication verdict computed apart from the sentences that say it, for the tests that read them: each
run's decisions over heads from `judge_associations` over the study's statistics it has (the decision itself is tested
against scipy in test_significance), then the rule written out in `rule`; and a reader of the verdicts a sentence
lists (``Undecided: A (why); B.``)."""

from __future__ import annotations

import re
from pathlib import Path

from headwatch.analysis.findings.association import store_association
from headwatch.analysis.store import Store, open_store
from headwatch.analysis.trajectories.type_association import ASSOCIATION_PAIRS, Judged, has_statistic, judge_associations
from headwatch.dashboard.labels import LLC_STAT, STATS

WORDS = {
    "Replicates": "replicates",
    "No replication shown": "not shown",
    "Undecided": "undecided",
    "Not testable": "not testable",
}


def rule(decisions: list[str | None]) -> str:
    """Issue 62's rule: associated in every run replicates; no association shown in one does not, whatever an
    undecided one would become; a run that cannot test it leaves it not testable; otherwise undecided."""
    if "not shown" in decisions:
        return "not shown"
    if None in decisions:
        return "not testable"
    return "replicates" if all(d == "associated" for d in decisions) else "undecided"


def judged_over_heads(store: Store) -> dict[tuple[str, str], Judged]:
    """Each study pair ``store`` has: its association over heads judged with Holm's correction over those pairs."""
    found = {}
    for s, m in ASSOCIATION_PAIRS:
        if has_statistic(store, s, m):
            got = store_association(store, s, matrix=m)
            assert got is not None
            found[(s, m)] = got[0]
    return {pair: over for pair, (over, _) in judge_associations(found).items()}


def decisions(path: Path) -> dict[tuple[str, str], str | None]:
    """Each study pair the run at ``path`` has: its decision over heads after Holm's correction over them."""
    return {pair: over.decision for pair, over in judged_over_heads(open_store(path)).items()}


def expected(runs: list[Path]) -> dict[tuple[str, str], str]:
    """Each study pair every run has: its replication over the runs, from each run's decisions over heads."""
    per_run = [decisions(path) for path in runs]
    pairs = set.intersection(*(set(d) for d in per_run))
    return {pair: rule([d[pair] for d in per_run]) for pair in pairs}


def page_name(pair: tuple[str, str]) -> str:
    """A study pair as the pages name it (``D_KL(P‖N(μ,σ)) of W_QK``, ``rLLC``)."""
    stat, matrix = pair
    return STATS[stat].short() + ("" if stat == LLC_STAT else f" of W_{matrix.upper()}")


def report_name(pair: tuple[str, str]) -> str:
    """A study pair as `headwatch report` names it (``kl_gauss of W_QK``, ``llc``)."""
    stat, matrix = pair
    return stat if stat == LLC_STAT else f"{stat} of W_{matrix.upper()}"


def verdicts(text: str, names: dict[tuple[str, str], str]) -> dict[tuple[str, str], str]:
    """The verdict each statistic is listed under in a replication sentence (``Undecided: A (why); B.``)."""
    said = text.split("Replication, asked of ", 1)[1]
    out = {}
    for words, verdict in WORDS.items():
        group = re.search(rf"\. {words}: (.*?)\.(?: [A-Z]|$)", said)
        if group is None:
            continue
        listed = re.sub(r" \([^()]*\)", "", group.group(1))  # the runs that decide it
        for pair, name in names.items():
            if re.search(rf"(?:^|, |; ){re.escape(name)}(?:,|;|$)", listed):
                assert pair not in out, f"{name} listed twice: {said}"
                out[pair] = verdict
    return out
