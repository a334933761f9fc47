"""Across runs: do the kinds of trajectory follow the head types in every run, carry from run to run, or follow the runs?

The training-dynamics study clusters one model's head trajectories and asks whether those kinds of trajectory are
universal across model scales. With several runs (a size ladder, seeds) this module clusters every head of every
run together and tests what the clusters follow:

1. **Trajectories.** Each head's statistic on one time axis shared by the runs (the resampling rule of
   `analysis.findings.comparison.common_grid`), normalised per head as the per-run analysis does
   (`analysis.trajectories.maps.normalise`, ``zscore``: the shape of the curve, not its level or scale).
2. **Clusters.** Euclidean k-means over all the heads at once, k in ``2 .. 6`` by the largest silhouette
   (`analysis.trajectories.type_association.cluster_points`), chosen without looking at the runs or the types. The k-means
   starts from deterministic points (`analysis.trajectories.maps.kmeans`), and every computation below runs over the
   heads in `analysis.trajectories.maps.canonical_order` (by their values, then run, layer and type), so the same runs
   give the same clusters, the same shuffles and the same figures in any order.
3. **Four tests**, each a permutation p-value ``(1 + #{T_perm >= T}) / (1 + n)``:

   - ``types``: the adjusted mutual information (AMI, scikit-learn, arithmetic normalisation) of the clusters with
     the heads' types at the end of training, the types shuffled among the heads of one run (the run held fixed);
   - ``types_layers``: the same AMI, the types shuffled only among the heads of one layer of one run: head types and
     trajectory shapes both depend on depth, and this asks whether the clusters follow the types beyond it;
   - ``runs``: the AMI with the run each head belongs to, the run labels shuffled among heads of one type (the type
     held fixed), so clusters that follow the types, whose numbers differ between runs, do not count as following
     the runs;
   - ``transfer`` (leave one run out): for each run, k-means with the same k over the other runs' heads, its heads
     put in the nearest of those clusters, and each of its heads scored by the log-probability of its type among
     the other runs' heads of that cluster (counts plus `TRANSFER_PRIOR` for every type, so an unseen type is not
     impossible); the statistic is the mean over every head of every run, the types shuffled within each run. It
     asks the question universality poses: do clusters fitted without a run predict that run's types better than
     shuffled types do?

   With class sizes kept by every shuffle the AMI is an increasing function of the mutual information, so the AMI
   tests count by the mutual information (`analysis.trajectories.type_association.mutual_information`).
4. **Verdicts** (`judge_joint`): each test's p-values over the statistics asked together, read with their Monte
   Carlo error and Holm's correction for the number of statistics (`analysis.trajectories.significance.judge`). "Universal kinds
   of trajectory" is said only where the clusters follow the types within each run and within each layer and
   predict a left-out run's types, each associated after the correction; a test that fails to reject is said as
   such ("no association shown"), never as evidence of none.

Arrays in, numbers out; rows are heads (runs in order, each run's heads layer-major).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

import numpy as np
from sklearn.metrics import adjusted_mutual_info_score

from headwatch.analysis.trajectories.maps import canonical_order, kmeans, normalise
from headwatch.analysis.trajectories.significance import DECISION_WORDS, SIGNIFICANCE, Decision, Judged, judge
from headwatch.analysis.trajectories.type_association import PERMUTATIONS, cluster_points, permutation_p, shuffles

TRANSFER_PRIOR = 0.5  # the count every type gets in every cluster before the other runs' heads are counted (Jeffreys)
TESTS: dict[str, str] = {  # the four tests (module docstring), as the tables name them
    "types": "AMI with the types (shuffled within runs)",
    "types_layers": "AMI with the types (shuffled within run and layer)",
    "runs": "AMI with the runs (shuffled within types)",
    "transfer": "left-out run's types predicted (gain, nats per head; shuffled within runs)",
}
P_FIELDS = {"types": "p_type", "types_layers": "p_type_layers", "runs": "p_run", "transfer": "p_transfer"}
UNIVERSAL = "universal kinds of trajectory"


@dataclass(frozen=True)
class JointAssociation:
    """What the joint trajectory clusters of several runs follow (the module docstring's four tests).

    Attributes:
        clusters: k, the number of joint clusters.
        silhouette: that clustering's silhouette (-1 .. 1).
        heads: heads clustered (all runs together).
        runs: runs clustered.
        types: distinct type labels among the heads.
        ami_type: AMI between the clusters and the heads' types (NaN when not testable).
        p_type: its p-value, types shuffled within each run.
        p_type_layers: its p-value, types shuffled within each layer of each run.
        ami_layer: AMI between the clusters and the heads' layers (what ``p_type_layers`` holds fixed).
        ami_run: AMI between the clusters and the heads' runs.
        p_run: its p-value, runs shuffled within each type.
        transfer: the left-out runs' mean log-probability of their heads' types (nats per head).
        transfer_null: its mean over the shuffles.
        p_transfer: its p-value, types shuffled within each run (NaN where a run leaves too few heads to fit).
        permutations: shuffles per p-value.
        reason: why the associations could not be measured ('' when they were).
    """

    clusters: int
    silhouette: float
    heads: int
    runs: int
    types: int
    ami_type: float = math.nan
    p_type: float = math.nan
    p_type_layers: float = math.nan
    ami_layer: float = math.nan
    ami_run: float = math.nan
    p_run: float = math.nan
    transfer: float = math.nan
    transfer_null: float = math.nan
    p_transfer: float = math.nan
    permutations: int = 0
    reason: str = ""

    @property
    def testable(self) -> bool:
        return not self.reason

    @property
    def transfer_gain(self) -> float:
        """How much better than shuffled types clusters fitted without a run predict its types (nats per head)."""
        return self.transfer - self.transfer_null

    def untestable(self, reason: str) -> JointAssociation:
        """This clustering with every association NaN (the fields' defaults) and ``reason`` given."""
        return JointAssociation(self.clusters, self.silhouette, self.heads, self.runs, self.types, reason=reason)

    def as_dict(self) -> dict:
        return asdict(self)


def held_out_clusters(x: np.ndarray, run: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per run (in sorted order of the labels): a mask of its heads and ``(N,)`` labels, the other runs' heads by
    their k-means clusters (k clusters, fitted without this run) and this run's heads by the nearest of those
    clusters' means. None when some run leaves fewer than k heads."""
    folds = []
    for r in np.unique(run):
        held = run == r
        train = x[~held]
        if len(train) < k:
            return None
        fitted = kmeans(train, k)
        centres = np.stack([train[fitted == c].mean(axis=0) for c in range(int(fitted.max()) + 1)])  # (k, G)
        labels = np.empty(len(x), dtype=np.int64)
        labels[~held] = fitted
        labels[held] = ((x[held][:, None, :] - centres[None]) ** 2).sum(axis=-1).argmin(axis=1)
        folds.append((held, labels))
    return folds


def transfer_scores(folds: list[tuple[np.ndarray, np.ndarray]], types: np.ndarray) -> np.ndarray:
    """The leave-one-run-out score of each row of ``types`` ``(P, N)`` (int codes): per fold, every held-out head's
    log-probability of its type among the other runs' heads of its cluster (`TRANSFER_PRIOR` added to every count),
    summed over the folds and divided by N. ``(P,)``."""
    types = np.atleast_2d(types)
    p, n = types.shape
    n_types = int(types.max()) + 1
    total = np.zeros(p)
    rows = np.arange(p)[:, None]
    for held, labels in folds:
        k = int(labels.max()) + 1
        cell = labels[None, :] * n_types + types  # (P, N) cluster-and-type cell of each head

        def counts(mask: np.ndarray, cell: np.ndarray = cell, k: int = k) -> np.ndarray:  # (P, k, T)
            flat = (rows * (k * n_types) + cell[:, mask]).ravel()
            return np.bincount(flat, minlength=p * k * n_types).reshape(p, k, n_types).astype(np.float64)

        train = counts(~held) + TRANSFER_PRIOR
        log_prob = np.log(train / train.sum(axis=2, keepdims=True))
        total += (counts(held) * log_prob).sum(axis=(1, 2))
    return total / n


def transfer_test(
    x: np.ndarray, run: np.ndarray, types: np.ndarray, k: int, *, permutations: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """The leave-one-run-out test (module docstring): ``(score, mean shuffled score, p)``; NaN where a run leaves
    too few heads to fit k clusters."""
    folds = held_out_clusters(x, run, k)
    if folds is None:
        nan = float("nan")
        return nan, nan, nan
    codes = np.unique(types, return_inverse=True)[1].astype(np.int64)
    observed = float(transfer_scores(folds, codes[None])[0])
    null = transfer_scores(folds, shuffles(codes, run, permutations, rng))
    p = float((1 + np.sum(null >= observed - 1e-12)) / (1 + permutations))
    return observed, float(null.mean()), p


def joint_associate(
    traj: np.ndarray,
    run: np.ndarray,
    types: np.ndarray,
    *,
    layers: np.ndarray | None = None,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> tuple[JointAssociation, np.ndarray]:
    """Cluster every head of several runs together and test the clusters against the types and the runs.

    Args:
        traj: ``(N, G)`` trajectories on the runs' common grid (raw values; normalised here per head).
        run: ``(N,)`` each head's run (any labels).
        types: ``(N,)`` each head's type label at the end of training (`analysis.trajectories.type_association.type_labels`).
        layers: ``(N,)`` each head's layer (any labels; a run's heads of one label are one stratum of the
            ``types_layers`` test); None: one layer.
        permutations: shuffles per p-value.
        seed: the shuffles' seed (the clusters have none).

    Returns:
        The `JointAssociation` and the cluster labels ``(N,)``, numbered by size (largest first).

    Raises:
        ValueError: ``run``, ``types`` or ``layers`` not one label per row of ``traj``.
    """
    traj = np.asarray(traj, dtype=np.float64)
    n = traj.shape[0]
    run, types = np.asarray(run).astype(str), np.asarray(types).astype(str)
    layers = np.zeros(n, dtype=str) if layers is None else np.asarray(layers).astype(str)
    if run.shape != (n,) or types.shape != (n,) or layers.shape != (n,):
        raise ValueError(
            f"{len(run)} run labels, {len(types)} type labels and {len(layers)} layers for {n} trajectories: need one each"
        )
    n_runs, n_types = len(np.unique(run)), len(np.unique(types))
    order = canonical_order(traj, run, layers, types)  # every computation over the heads in one order
    x, run, types, layers = normalise(traj[order], "zscore"), run[order], types[order], layers[order]
    back = np.argsort(order)
    blank = JointAssociation(clusters=0, silhouette=math.nan, heads=n, runs=n_runs, types=n_types, permutations=permutations)

    try:
        clusters, k, sil = cluster_points(x)
    except ValueError as exc:
        return blank.untestable(str(exc)), np.zeros(n, dtype=np.int64)
    clusters = _by_size(clusters)
    found = replace(blank, clusters=k, silhouette=sil)
    if n_runs < 2:
        return found.untestable("one run: nothing to compare across runs"), clusters[back]
    if n_types < 2:
        return found.untestable(f"every head has the same type at the end of training ({types[0]})"), clusters[back]
    if k < 2:
        return found.untestable("every trajectory has the same shape: one cluster"), clusters[back]
    within = np.char.add(np.char.add(run, "\x00"), layers)  # (run, layer) strata
    transfer, transfer_null, p_transfer = transfer_test(
        x, run, types, k, permutations=permutations, rng=np.random.default_rng(seed + 3)
    )
    result = replace(
        found,
        ami_type=float(adjusted_mutual_info_score(types, clusters)),
        p_type=permutation_p(clusters, types, permutations=permutations, strata=run, seed=seed),
        p_type_layers=permutation_p(clusters, types, permutations=permutations, strata=within, seed=seed + 1),
        ami_layer=float(adjusted_mutual_info_score(layers, clusters)),
        ami_run=float(adjusted_mutual_info_score(run, clusters)),
        p_run=permutation_p(clusters, run, permutations=permutations, strata=types, seed=seed + 2),
        transfer=transfer,
        transfer_null=transfer_null,
        p_transfer=p_transfer,
    )
    return result, clusters[back]


def _by_size(labels: np.ndarray) -> np.ndarray:
    """``labels`` renumbered by cluster size, largest first (equal sizes by first appearance)."""
    used, first, size = np.unique(labels, return_index=True, return_counts=True)
    rank = np.empty(int(used.max()) + 1, dtype=np.int64)
    rank[used[np.lexsort((first, -size))]] = np.arange(len(used))
    return rank[labels]


@dataclass(frozen=True)
class JointVerdict:
    """One statistic's joint clusters read with the others asked together.

    Attributes:
        tests: each test (`TESTS`) with its Monte Carlo error, Holm's correction and decision.
        reading: what the decisions say, in words (`reading`).
    """

    tests: dict[str, Judged]
    reading: str


def judge_joint(associations: Mapping[str, JointAssociation]) -> dict[str, JointVerdict]:
    """Every statistic's four tests, each corrected by Holm over the statistics asked together (the testable
    ones), and the reading of each (`reading`)."""
    names = list(associations)
    judged: dict[str, list[Judged]] = {}
    for test, field in P_FIELDS.items():
        p = [getattr(associations[s], field) if associations[s].testable else float("nan") for s in names]
        judged[test] = judge(p, [max(associations[s].permutations, 1) for s in names])
    out = {}
    for i, s in enumerate(names):
        tests = {test: judged[test][i] for test in TESTS}
        out[s] = JointVerdict(tests, reading(associations[s], {t: j.decision for t, j in tests.items()}))
    return out


def reading(a: JointAssociation, decisions: Mapping[str, Decision | None]) -> str:
    """What the decisions of one statistic's tests say, in words: a headline about the head types (universal only
    where the clusters follow them within each run and within each layer, predict a left-out run's types and are not
    shown to follow the runs), its evidence, then what the runs' test says."""
    if not a.testable:
        return f"not testable: {a.reason}"
    t, within, carry, runs = (decisions.get(x) for x in ("types", "types_layers", "transfer", "runs"))
    undecided = DECISION_WORDS["undecided"]
    follow = "the clusters follow the head types within each run"
    predict = "clusters fitted without a run predict its types"
    if t == "not shown":
        types = "Not shown to follow the head types"
    elif t != "associated":
        types = f"Whether the clusters follow the head types is {undecided}"
    elif carry != "associated":
        how = {
            "not shown": "do not predict its types better than shuffled types do",
            "undecided": f"predict its types is {undecided}",
        }.get(carry or "", "could not be tested (a run leaves too few heads)")
        types = f"Not shown to be {UNIVERSAL}: {follow}, but clusters fitted without a run {how}"
    elif within != "associated":
        beyond = "not beyond the layers" if within == "not shown" else f"whether beyond the layers is {undecided}"
        types = (
            f"Not shown to be {UNIVERSAL}: {follow} and {predict}, but {beyond}: depth may explain them (AMI with "
            f"the layers {a.ami_layer:.3f}, with the types {a.ami_type:.3f})"
        )
    elif runs == "associated":
        types = f"Kinds of trajectory these runs share, beside run-specific ones: {follow} and within each layer, and {predict}"
    else:
        types = f"{UNIVERSAL[0].upper()}{UNIVERSAL[1:]} across these runs: {follow} and within each layer, and {predict}"
    run_words = {
        "associated": "the clusters follow the runs too: run-specific trajectories (a size or a seed)",
        "not shown": f"no run effect shown (p >= {SIGNIFICANCE:g} fails to reject; it is no evidence that the runs "
        "do not matter)",
        "undecided": f"whether the clusters follow the runs is {undecided}",
    }.get(runs or "", "the runs not tested")
    return f"{types}; {run_words}."
