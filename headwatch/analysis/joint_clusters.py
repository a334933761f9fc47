"""Across runs: are the kinds of trajectory universal, or specific to a run's size? Two numbers, two p-values.

The training-dynamics study clusters one model's head trajectories and asks whether those kinds of
trajectory are universal across model scales. With several runs (a size ladder, seeds) this module
clusters every head of every run together and measures what the clusters follow:

1. **Trajectories.** Each head's statistic on one time axis shared by the runs (the resampling rule of
   `analysis.findings.runs.common_grid`), normalised per head as the per-run analysis does
   (`analysis.trajectories.normalise`, ``zscore``: the shape of the curve, not its level or scale).
2. **Clusters.** Euclidean k-means over all the heads at once, k in ``2 .. 6`` by the largest silhouette
   (`analysis.type_association.cluster_points`), chosen without looking at the runs or the types.
3. **Universal types.** The adjusted mutual information (scikit-learn, arithmetic normalisation) between
   the joint clusters and the heads' types at the end of training. Its permutation p-value shuffles the
   types only among the heads of one run (the run held fixed): a run whose heads differ in size of
   model and in shape of trajectory cannot make the types look associated on its own.
4. **Size-specific trajectories.** The AMI between the joint clusters and the run each head belongs to;
   its p-value shuffles the run labels only among heads of one type (the type held fixed), so clusters
   that follow the types, whose numbers differ between runs, do not count as following the runs.

Both p-values are ``(1 + #{MI_perm >= MI}) / (1 + n)``; with class sizes kept by every shuffle the AMI is an
increasing function of the mutual information, so counting by the mutual information
(`analysis.type_association.mutual_information`) is the test on the AMI. High type AMI with low run AMI reads
as universal kinds of trajectory; the reverse as trajectories that change with the run.

Arrays in, numbers out; rows are heads (runs in order, each run's heads layer-major).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from sklearn.metrics import adjusted_mutual_info_score

from headwatch.analysis.trajectories import normalise
from headwatch.analysis.type_association import PERMUTATIONS, SIGNIFICANCE, cluster_points, permutation_p


@dataclass(frozen=True)
class JointAssociation:
    """What the joint trajectory clusters of several runs follow.

    Attributes:
        clusters: k, the number of joint clusters.
        silhouette: that clustering's silhouette (-1 .. 1).
        heads: heads clustered (all runs together).
        runs: runs clustered.
        types: distinct type labels among the heads.
        ami_type: AMI between the clusters and the heads' types (NaN when not testable).
        p_type: permutation p-value of ``ami_type``, types shuffled within each run.
        ami_run: AMI between the clusters and the heads' runs.
        p_run: permutation p-value of ``ami_run``, runs shuffled within each type.
        permutations: shuffles per p-value.
        reason: why the associations could not be measured ('' when they were).
    """

    clusters: int
    silhouette: float
    heads: int
    runs: int
    types: int
    ami_type: float
    p_type: float
    ami_run: float
    p_run: float
    permutations: int
    reason: str = ""

    @property
    def testable(self) -> bool:
        return not self.reason

    def verdict(self) -> str:
        """The two associations in words (p < `SIGNIFICANCE` reads as associated)."""
        if not self.testable:
            return f"not testable: {self.reason}"
        by_type, by_run = self.p_type < SIGNIFICANCE, self.p_run < SIGNIFICANCE
        if by_type and not by_run:
            return "the joint clusters follow the head types, not the runs: universal kinds of trajectory"
        if by_run and not by_type:
            return "the joint clusters follow the runs, not the head types: run-specific (size-specific) trajectories"
        if by_type and by_run:
            return "the joint clusters follow both the head types and the runs"
        return "the joint clusters follow neither the head types nor the runs"

    def as_dict(self) -> dict:
        return asdict(self)


def joint_associate(
    traj: np.ndarray,
    run: np.ndarray,
    types: np.ndarray,
    *,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> tuple[JointAssociation, np.ndarray]:
    """Cluster every head of several runs together and measure the clusters against the types and the runs.

    Args:
        traj: ``(N, G)`` trajectories on the runs' common grid (raw values; normalised here per head).
        run: ``(N,)`` each head's run (any labels).
        types: ``(N,)`` each head's type label at the end of training (`analysis.type_association.type_labels`).
        permutations: shuffles per p-value.
        seed: k-means' and the shuffles' seed.

    Returns:
        The `JointAssociation` and the cluster labels ``(N,)``.

    Raises:
        ValueError: ``run`` or ``types`` not one label per row of ``traj``.
    """
    traj = np.asarray(traj, dtype=np.float64)
    n = traj.shape[0]
    run, types = np.asarray(run).astype(str), np.asarray(types).astype(str)
    if run.shape != (n,) or types.shape != (n,):
        raise ValueError(f"{len(run)} run labels and {len(types)} type labels for {n} trajectories: need one each")
    n_runs, n_types = len(np.unique(run)), len(np.unique(types))
    x = normalise(traj, "zscore")  # (N, G)

    def untestable(reason: str, k: int = 0, sil: float = float("nan")) -> JointAssociation:
        nan = float("nan")
        return JointAssociation(k, sil, n, n_runs, n_types, nan, nan, nan, nan, 0, reason)

    try:
        clusters, k, sil = cluster_points(x, seed=seed)
    except ValueError as exc:
        return untestable(str(exc)), np.zeros(n, dtype=np.int64)
    if n_runs < 2:
        return untestable("one run: nothing to compare across runs", k, sil), clusters
    if n_types < 2:
        return untestable(f"every head has the same type at the end of training ({types[0]})", k, sil), clusters
    if k < 2:
        return untestable("every trajectory has the same shape: one cluster", k, sil), clusters
    result = JointAssociation(
        clusters=k,
        silhouette=sil,
        heads=n,
        runs=n_runs,
        types=n_types,
        ami_type=float(adjusted_mutual_info_score(types, clusters)),
        p_type=permutation_p(clusters, types, permutations=permutations, strata=run, seed=seed),
        ami_run=float(adjusted_mutual_info_score(run, clusters)),
        p_run=permutation_p(clusters, run, permutations=permutations, strata=types, seed=seed + 1),
        permutations=permutations,
    )
    return result, clusters
