"""Trajectory clusters against head types: the AMI, the permutation test and the clustering, each checked
against scikit-learn or a known answer."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_mutual_info_score, mutual_info_score

from headwatch.analysis.trajectories.type_association import (
    associate,
    cluster_trajectories,
    judge_associations,
    mutual_information,
    permutation_p,
    replication,
    shuffles,
    type_labels,
)


def test_mutual_information_matches_scikit_learn_for_every_row() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, 60)
    b = rng.integers(0, 3, (25, 60))
    b[0] = a % 3  # a strongly dependent row besides independent ones
    ours = mutual_information(a, b)
    theirs = np.array([mutual_info_score(a, row) for row in b])
    np.testing.assert_allclose(ours, theirs, atol=1e-12)


def test_string_labels_give_the_same_information_as_their_codes() -> None:
    a = np.array(["x", "y", "y", "z", "x", "z"])
    b = np.array(["none", "sink", "sink", "none", "none", "sink"])
    assert mutual_information(a, b[None])[0] == pytest.approx(mutual_info_score(a, b))


def test_permutation_p_on_mutual_information_equals_the_test_on_the_ami() -> None:
    """Shuffles keep the class sizes, so counting permutations by MI and by AMI gives one p-value."""
    rng = np.random.default_rng(5)
    clusters = rng.integers(0, 3, 40)
    types = np.where(rng.random(40) < 0.6, clusters % 2, rng.integers(0, 2, 40)).astype(str)
    n = 299
    shuffled = shuffles(types, None, n, np.random.default_rng(11))
    observed = adjusted_mutual_info_score(types, clusters)
    by_ami = (1 + sum(adjusted_mutual_info_score(row, clusters) >= observed - 1e-12 for row in shuffled)) / (1 + n)
    assert permutation_p(clusters, types, permutations=n, seed=11) == pytest.approx(by_ami)


def test_independent_labels_reject_about_five_percent_of_the_time() -> None:
    rng = np.random.default_rng(0)
    trials, hits = 300, 0
    for t in range(trials):
        clusters = rng.integers(0, 3, 48)
        types = rng.choice(["none", "previous_token", "sink"], 48, p=[0.6, 0.25, 0.15])
        hits += permutation_p(clusters, types, permutations=199, seed=t) < 0.05
    rate = hits / trials
    assert 0.02 <= rate <= 0.09, rate  # binomial(300, 0.05): 15 +- 3.8 expected


def test_identical_partitions_have_ami_one_and_the_smallest_p() -> None:
    clusters = np.repeat([0, 1, 2], 8)
    types = np.repeat(["sink", "none", "previous_token"], 8)
    assert adjusted_mutual_info_score(types, clusters) == pytest.approx(1.0)
    assert permutation_p(clusters, types, permutations=499) == pytest.approx(1 / 500)


def test_shuffling_within_layers_removes_an_association_that_depth_alone_explains() -> None:
    layers = np.repeat(np.arange(4), 6)
    clusters = layers // 2  # trajectories split by depth
    types = np.where(layers < 2, "previous_token", "none")  # and so do the types
    assert permutation_p(clusters, types, permutations=499) < 0.01
    assert permutation_p(clusters, types, permutations=499, strata=layers) == 1.0  # nothing left beyond depth
    within = shuffles(types, layers, 50, np.random.default_rng(0))
    assert all((np.sort(row[layers == s]) == np.sort(types[layers == s])).all() for row in within for s in range(4))


def test_type_labels_join_several_types_and_name_heads_without_one() -> None:
    holds = {
        "previous_token": np.array([[True, False], [False, False]]),
        "induction": np.array([[False, False], [True, False]]),
        "sink": np.array([[True, True], [False, False]]),
    }
    labels = type_labels(holds, ("previous_token", "induction", "sink"))
    assert labels.tolist() == ["previous_token+sink", "sink", "induction", "none"]


def _curves(shapes: np.ndarray, steps: int = 20, noise: float = 0.02, seed: int = 0) -> np.ndarray:
    """(steps, 3 layers, 4 heads): shape 0 rises early, shape 1 late, shape 2 falls; small noise."""
    t = np.linspace(0, 1, steps)
    base = [1 / (1 + np.exp(-(t - 0.2) * 30)), 1 / (1 + np.exp(-(t - 0.8) * 30)), 1 - t]
    rng = np.random.default_rng(seed)
    out = np.stack([base[s] * (1 + i % 3) + 5 * i for i, s in enumerate(shapes.reshape(-1))], axis=1)
    return (out + noise * rng.standard_normal(out.shape)).reshape(steps, *shapes.shape)


def test_clusters_recover_known_curve_shapes_and_choose_their_number() -> None:
    shapes = np.array([[0, 0, 1, 1], [2, 2, 0, 1], [2, 0, 1, 2]])
    labels, k, silhouette = cluster_trajectories(_curves(shapes))
    assert k == 3 and silhouette > 0.8
    assert adjusted_mutual_info_score(shapes.reshape(-1), labels) == pytest.approx(1.0)


def test_associate_finds_types_that_follow_the_shapes_and_not_shuffled_ones() -> None:
    shapes = np.array([[0, 0, 1, 1], [2, 2, 0, 1], [2, 0, 1, 2]])
    values = _curves(shapes)
    types = np.array(["previous_token", "none", "sink"])[shapes.reshape(-1)]
    result, clusters = associate(values, types, permutations=999)
    assert result.testable and result.ami == pytest.approx(1.0) and result.p_value < 0.01 and result.significant
    assert result.clusters == 3 and result.types == 3 and result.heads == 12
    assert adjusted_mutual_info_score(shapes.reshape(-1), clusters) == pytest.approx(1.0)
    shuffled = np.random.default_rng(1).permutation(types)
    assert associate(values, shuffled, permutations=999)[0].ami < result.ami


def test_associate_says_why_it_cannot_measure() -> None:
    values = _curves(np.array([[0, 0, 1, 1], [2, 2, 0, 1], [2, 0, 1, 2]]))
    same = associate(values, np.full(12, "none"))[0]
    assert not same.testable and "same type" in same.reason and np.isnan(same.ami)
    with pytest.raises(ValueError, match="type labels"):
        associate(values, np.full(5, "none"))
    assert judge_associations({"s": same})["s"][0].decision is None
    assert replication([judge_associations({"s": same})["s"][0].decision]) == "not testable"


def test_replication_needs_every_run_associated_after_holm() -> None:
    """Two runs whose clusters follow the types replicate; with a run whose types were shuffled, no association is
    shown there and it does not (issue 62: read from each run's decision, `judge_associations`, not p < 0.05)."""
    shapes = np.array([[0, 0, 1, 1], [2, 2, 0, 1], [2, 0, 1, 2]])
    types = np.array(["previous_token", "none", "sink"])[shapes.reshape(-1)]
    a = associate(_curves(shapes, seed=1), types, permutations=1999)[0]
    b = associate(_curves(shapes, seed=2), types, permutations=1999)[0]
    c = associate(_curves(shapes, seed=3), np.random.default_rng(0).permutation(types), permutations=1999)[0]
    da, db, dc = (judge_associations({"s": r})["s"][0].decision for r in (a, b, c))
    assert (da, db, dc) == ("associated", "associated", "not shown")
    assert replication([da, db]) == "replicates"
    assert replication([da, dc]) == "not shown"
