"""Do the clusters of head trajectories correspond to functional head types? A number and its p-value.

The training-dynamics study embeds every head's trajectory of a weight statistic and finds a few
kinds of trajectory; it leaves open "whether these clusters correspond to functional head types".
This module answers it for one run and one statistic:

1. **Clusters.** Each head's trajectory (its statistic at every checkpoint with a value) is
   normalised per head (`analysis.trajectories.maps.normalise`, ``zscore``: the shape of the curve, not
   its level) and grouped by Euclidean k-means (`analysis.trajectories.maps.kmeans`, the grouping the
   Refined LLC page uses, from deterministic starts: no seed). The number of clusters k is the one
   in ``2 .. 6`` with the largest silhouette (scikit-learn's `silhouette_score`), so the clusters are
   the ones the trajectories themselves separate best, chosen without looking at the types.
2. **Types.** The head's types at the last checkpoint with forward statistics
   (``head_types.parquet`` ``holds``), as one label: ``none``, ``previous_token``,
   ``previous_token+sink``, ...
3. **Association.** The adjusted mutual information between the two labelings (scikit-learn's
   `adjusted_mutual_info_score`, arithmetic normalisation): 0 is what independent labelings give
   on average, 1 is identical partitions.
4. **Significance.** A permutation test: the types are shuffled over the heads (clusters fixed),
   ``p = (1 + #{AMI_perm >= AMI}) / (1 + n)``. Shuffling keeps both labelings' class sizes, so the
   AMI's expected-MI and entropy terms do not change and the AMI is an increasing function of the
   mutual information: the test counts permutations by their mutual information, computed for all
   of them at once from contingency tables (`mutual_information`), which gives the same p-value as
   recomputing the AMI each time (tests check this) at a thousandth of the cost. A second p-value
   shuffles the types only within each layer: head types and trajectory shapes both depend on depth,
   and this one asks whether the association holds beyond what the layer alone explains.
5. **Reading.** A run is asked about several statistics at once: `judge_associations` reads each p with its
   Monte Carlo error and Holm's correction over the statistics tested in the run (`analysis.trajectories.significance`), as the
   Trajectory map and ``headwatch report`` say them. Whether an association replicates is read from those
   decisions in the run and in each of its replicates (`replication`): associated in every one of them.

Arrays in, numbers out; heads in layer-major order (row = layer * n_heads + head).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal, TypeVar

import numpy as np
from sklearn.metrics import adjusted_mutual_info_score, silhouette_score

from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.llc import LLC
from headwatch.analysis.store.lenses.types import HEAD_TYPES, HEAD_TYPES_TABLE
from headwatch.analysis.trajectories.maps import kmeans, normalise, trajectories
from headwatch.analysis.trajectories.significance import SIGNIFICANCE, Decision, Judged, judge

CLUSTER_RANGE = range(2, 7)  # k-means k tried; the largest silhouette wins
Replication = Literal["replicates", "not shown", "undecided", "not testable"]  # `replication`'s verdicts
REPLICATION_WORDS: dict[str, str] = {  # how every sentence and table says a replication verdict
    "replicates": "replicates",
    "not shown": "no replication shown",
    "undecided": "undecided",
    "not testable": "not testable",
}
PERMUTATIONS = 9999  # shuffles per permutation p-value: its 99% Monte Carlo interval at p = 0.05 is about +-0.0056
NO_TYPE = "none"
# The weight statistics whose trajectory clusters are compared with the head types (the stored trajectory maps'
# defaults; the refined LLC is added where a run has it). The forward statistics are left out: the types are
# decided from prev_token, induction and sink themselves.
ASSOCIATION_STATS = ("kl_gauss", "spectral_entropy", "std", "stable_rank")
LLC_STATISTIC = "llc"  # the refined LLC, per head (llc.parquet), of no matrix
K = TypeVar("K", bound=Hashable)  # how a run's tested statistics are keyed (a name, a (statistic, matrix) pair)
# Every (statistic, matrix) a run's clusters are compared with its types on: each weight statistic of W_QK and W_OV,
# then the refined LLC.
ASSOCIATION_PAIRS = (*((s, m) for s in ASSOCIATION_STATS for m in ("qk", "ov")), (LLC_STATISTIC, "qk"))


def has_statistic(store: Store, statistic: str, matrix: str) -> bool:
    """Whether ``store`` has ``statistic`` of ``matrix`` to cluster: the refined LLC needs llc.parquet, a weight
    statistic the matrix's rows."""
    return store.has(LLC) if statistic == LLC_STATISTIC else matrix in store.meta.matrices


@dataclass(frozen=True)
class Association:
    """How the trajectory clusters of one statistic relate to the head types of one run.

    Attributes:
        ami: adjusted mutual information between clusters and types (NaN when not testable).
        p_value: permutation p-value, types shuffled over all heads.
        p_within_layers: permutation p-value, types shuffled within each layer.
        permutations: shuffles per p-value.
        clusters: k, the number of trajectory clusters.
        silhouette: the silhouette of that clustering (-1 .. 1).
        types: number of distinct type labels among the heads.
        heads: number of heads compared.
        reason: why the association could not be measured ('' when it was).
    """

    ami: float
    p_value: float
    p_within_layers: float
    permutations: int
    clusters: int
    silhouette: float
    types: int
    heads: int
    reason: str = ""

    @property
    def testable(self) -> bool:
        return not self.reason

    @property
    def significant(self) -> bool:
        return self.testable and self.p_value < SIGNIFICANCE

    def as_dict(self) -> dict:
        return asdict(self)


def type_labels(holds: dict[str, np.ndarray], order: tuple[str, ...]) -> np.ndarray:
    """One label per head from its types: ``(n_layers, n_heads)`` bool per type -> ``(n_layers * n_heads,)`` str.

    A head holding several types gets them joined with ``+`` in ``order``; one holding none, ``"none"``.
    """
    shape = next(iter(holds.values())).shape
    labels = np.full(int(np.prod(shape)), "", dtype=object)
    for name in order:
        if name not in holds:
            continue
        on = np.asarray(holds[name], dtype=bool).reshape(-1)
        labels[on] = [f"{old}+{name}" if old else name for old in labels[on]]
    labels[labels == ""] = NO_TYPE
    return labels.astype(str)


def cluster_trajectories(values: np.ndarray) -> tuple[np.ndarray, int, float]:
    """k-means clusters of the heads' per-head-normalised trajectories, k chosen by silhouette.

    Args:
        values: ``(S, n_layers, n_heads)`` one statistic over the checkpoints (NaN where absent).

    Returns:
        ``(labels, k, silhouette)``: ``(n_layers * n_heads,)`` int labels, layer-major.

    Raises:
        ValueError: fewer than 3 heads or fewer than 2 checkpoints with values.
    """
    return cluster_points(normalise(trajectories(values), "zscore"))


def cluster_points(x: np.ndarray) -> tuple[np.ndarray, int, float]:
    """k-means clusters of ``(N, D)`` normalised trajectories, k in `CLUSTER_RANGE` by the largest silhouette.

    The k-means (`analysis.trajectories.maps.kmeans`) starts from deterministic points, so the clusters depend on the
    trajectories alone: not on a seed, nor on the order of the rows.

    Returns:
        ``(labels, k, silhouette)``: ``(N,)`` int labels (one cluster, silhouette NaN, when every point has the
        same shape).

    Raises:
        ValueError: fewer than 3 points or fewer than 2 coordinates.
    """
    n = x.shape[0]
    if n < 3 or x.shape[1] < 2:
        raise ValueError(f"{n} heads over {x.shape[1]} checkpoints: clustering needs at least 3 heads and 2 checkpoints")
    best: tuple[np.ndarray, int, float] | None = None
    for k in CLUSTER_RANGE:
        if k >= n:
            break
        labels = kmeans(x, k)
        if len(np.unique(labels)) < 2:
            continue
        score = float(silhouette_score(x, labels))
        if best is None or score > best[2] + 1e-12:
            best = (labels, len(np.unique(labels)), score)
    if best is None:  # every trajectory the same shape: one cluster
        return np.zeros(n, dtype=np.int64), 1, float("nan")
    return best


def _codes(labels: np.ndarray) -> tuple[np.ndarray, int]:
    _, codes = np.unique(np.asarray(labels), return_inverse=True)
    return codes.astype(np.int64), int(codes.max()) + 1 if len(codes) else 0


def mutual_information(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Mutual information (nats) between labeling ``a`` ``(N,)`` and each row of ``b`` ``(P, N)``: ``(P,)``.

    From the contingency table n_ij: MI = sum_ij n_ij / N log(N n_ij / (a_i b_j)).
    """
    a_codes, na = _codes(a)
    b = np.atleast_2d(b)
    if np.issubdtype(b.dtype, np.integer) and b.size and b.min() >= 0:  # codes already: an empty class adds nothing
        b_codes = b.astype(np.int64, copy=False)
    else:
        b_codes = np.unique(b, return_inverse=True)[1].reshape(b.shape)
    nb = int(b_codes.max()) + 1
    p, n = int(b.shape[0]), int(b.shape[1])
    flat = (np.arange(p)[:, None] * (na * nb) + a_codes[None, :] * nb + b_codes).ravel()
    table = np.bincount(flat, minlength=p * na * nb).reshape(p, na, nb).astype(np.float64)
    rows = table.sum(axis=2, keepdims=True)
    cols = table.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(table > 0, table / n * np.log(n * table / (rows * cols)), 0.0)
    return terms.sum(axis=(1, 2))


def shuffles(labels: np.ndarray, strata: np.ndarray | None, n: int, rng: np.random.Generator) -> np.ndarray:
    """``(n, N)``: ``labels`` permuted ``n`` times, within each stratum when ``strata`` is given."""
    out = np.tile(np.asarray(labels), (n, 1))
    groups = [np.arange(len(labels))] if strata is None else [np.flatnonzero(strata == s) for s in np.unique(strata)]
    for idx in groups:
        if len(idx) > 1:
            order = rng.random((n, len(idx))).argsort(axis=1)
            out[:, idx] = np.asarray(labels)[idx][order]
    return out


def permutation_p(
    clusters: np.ndarray, types: np.ndarray, *, permutations: int = PERMUTATIONS, strata: np.ndarray | None = None, seed: int = 0
) -> float:
    """P-value of the association of ``clusters`` and ``types`` against shuffled types (within ``strata`` if given):
    ``(1 + #{MI_perm >= MI}) / (1 + permutations)``, equal to the test on the AMI (module docstring)."""
    rng = np.random.default_rng(seed)
    codes = _codes(types)[0]  # shuffled as integers: sorting strings would cost more than the test
    observed = mutual_information(clusters, codes[None, :])[0]
    null = mutual_information(clusters, shuffles(codes, strata, permutations, rng))
    return float((1 + np.sum(null >= observed - 1e-12)) / (1 + permutations))


def associate(
    values: np.ndarray, types: np.ndarray, *, permutations: int = PERMUTATIONS, seed: int = 0
) -> tuple[Association, np.ndarray]:
    """Trajectory clusters of one statistic against the heads' types at the end of training.

    Args:
        values: ``(S, n_layers, n_heads)`` the statistic over the checkpoints.
        types: ``(n_layers * n_heads,)`` type labels, layer-major (`type_labels`).

    Returns:
        The `Association` and the cluster labels ``(n_layers * n_heads,)``.
    """
    _, n_layers, n_heads = values.shape
    heads = n_layers * n_heads
    types = np.asarray(types).astype(str)
    if types.shape != (heads,):
        raise ValueError(f"{types.shape[0]} type labels for {heads} heads")
    n_types = len(np.unique(types))
    try:
        clusters, k, sil = cluster_trajectories(values)
    except ValueError as exc:
        return Association(np.nan, np.nan, np.nan, 0, 0, np.nan, n_types, heads, str(exc)), np.zeros(heads, np.int64)
    reason = ""
    if n_types < 2:
        reason = f"every head has the same type at the end of training ({types[0]}): nothing to associate"
    elif k < 2:
        reason = "every trajectory has the same shape: one cluster"
    if reason:
        return Association(np.nan, np.nan, np.nan, 0, k, sil, n_types, heads, reason), clusters
    layers = np.repeat(np.arange(n_layers), n_heads)
    ami = float(adjusted_mutual_info_score(types, clusters))
    p_all = permutation_p(clusters, types, permutations=permutations, seed=seed)
    p_layers = permutation_p(clusters, types, permutations=permutations, strata=layers, seed=seed + 1)
    return Association(ami, p_all, p_layers, permutations, k, sil, n_types, heads), clusters


def replication(decisions: Sequence[Decision | None]) -> Replication:
    """Whether an association replicates, from its decision in each run asked (this run's and its replicates':
    `judge_associations`' over heads, each run's p corrected by Holm over the statistics tested in it).

    Three-valued, as the decisions are: ``replicates`` where it is associated in every run; ``not shown`` where no
    association is shown in one of them, whatever an undecided one would turn out to be; ``not testable`` where one
    could not test it (None) and none shows it absent; ``undecided`` where every run is associated or undecided, and
    one is undecided: more shuffles could make it replicate or not.

    Raises:
        ValueError: no decision (nothing was asked).
    """
    if not decisions:
        raise ValueError("replication needs the decision of at least one run; got none")
    if any(d == "not shown" for d in decisions):
        return "not shown"
    if any(d is None for d in decisions):
        return "not testable"
    return "replicates" if all(d == "associated" for d in decisions) else "undecided"


def judge_associations(results: Mapping[K, Association]) -> dict[K, tuple[Judged, Judged]]:
    """One run's associations, the statistics tested in it, each p read with its Monte Carlo error and Holm's
    correction over those statistics (`analysis.trajectories.significance.judge`; the untestable left out of the count).

    Returns:
        Per statistic, the ``(over heads, within layers)`` p-values judged.
    """
    keys = list(results)
    counts = [max(results[k].permutations, 1) for k in keys]

    def family(field: str) -> list[Judged]:
        return judge([getattr(results[k], field) if results[k].testable else np.nan for k in keys], counts)

    over, within = family("p_value"), family("p_within_layers")
    return {k: (over[i], within[i]) for i, k in enumerate(keys)}


def end_types(store: Store) -> tuple[np.ndarray, int] | None:
    """The heads' type labels at the store's last checkpoint with head types, and that step; None without
    ``head_types.parquet`` (or without rows)."""
    frame = store.frame(HEAD_TYPES_TABLE, columns=["holds"])
    if frame is None or frame.empty:
        return None
    last = int(frame["step"].max())
    at = frame[frame["step"] == last]
    holds = {}
    for name in HEAD_TYPES:
        grid = np.zeros((store.n_layers, store.n_heads), dtype=bool)
        rows = at[at["type"] == name]
        grid[rows["layer"].to_numpy(), rows["head"].to_numpy()] = rows["holds"].to_numpy(dtype=bool)
        holds[name] = grid
    return type_labels(holds, HEAD_TYPES), last
