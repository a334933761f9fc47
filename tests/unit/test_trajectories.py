"""analysis.trajectories.maps: normalisation, kNN and edges against plain loops (UMAP itself: tests/integration)."""

import math

import numpy as np
import pytest

from headwatch.analysis.trajectories.maps import edge_pairs, fill_nonfinite, knn, normalise, trajectories


def test_trajectories_are_layer_major_rows():
    values = np.random.default_rng(0).normal(size=(7, 3, 5))  # (S, L, H)
    traj = trajectories(values)
    assert traj.shape == (15, 7)
    for layer in range(3):
        for head in range(5):
            assert np.array_equal(traj[layer * 5 + head], values[:, layer, head])


def test_zscore_normalises_each_row_and_flat_rows_become_zero():
    x = np.array([[1.0, 2.0, 3.0, 4.0], [10.0, 10.0, 10.0, 10.0], [-5.0, 0.0, 5.0, 100.0]])
    z = normalise(x, "zscore")
    for row, out in zip(x, z, strict=True):
        mean = sum(row) / len(row)
        std = math.sqrt(sum((v - mean) ** 2 for v in row) / len(row))
        expected = [0.0] * len(row) if std == 0 else [(v - mean) / std for v in row]
        assert out == pytest.approx(expected)
    assert not np.shares_memory(z, x) and x[0, 0] == 1.0  # input untouched


def test_global_normalisation_keeps_levels():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    g = normalise(x, "global")
    flat = [1.0, 2.0, 3.0, 4.0]
    mean, std = 2.5, math.sqrt(sum((v - 2.5) ** 2 for v in flat) / 4)
    assert g.ravel().tolist() == pytest.approx([(v - mean) / std for v in flat])
    with pytest.raises(ValueError, match="unknown normalisation"):
        normalise(x, "minmax")  # a bad option on purpose: refused at run time


def test_non_finite_values_are_filled_per_row():
    x = np.array([[1.0, np.nan, 3.0, np.inf], [np.nan, np.nan, np.nan, np.nan], [2.0, -np.inf, 4.0, 6.0]])
    f = fill_nonfinite(x)
    assert f[0].tolist() == [1.0, 2.0, 3.0, 3.0]  # NaN -> mean of finite, +inf -> finite max
    assert f[1].tolist() == [0.0] * 4
    assert f[2].tolist() == [2.0, 2.0, 4.0, 6.0]  # -inf -> finite min
    assert np.isfinite(normalise(x)).all()


def test_knn_matches_brute_force_with_ties_by_index():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 6))
    x[7] = x[3]  # an exact tie for everyone
    got = knn(x, 4)
    for i in range(len(x)):
        dists = sorted((float(np.sum((x[i] - x[j]) ** 2)), j) for j in range(len(x)) if j != i)
        assert got[i].tolist() == [j for _, j in dists[:4]]
    assert knn(x[:3], 10).shape == (3, 2)  # clipped to N - 1
    assert knn(x[:1], 5).shape == (1, 0)


def test_edge_pairs_are_unique_and_undirected():
    nb = np.array([[1, 2], [0, 2], [0, 1], [0, 1]])
    assert edge_pairs(nb).tolist() == [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3]]
    assert edge_pairs(np.zeros((3, 0), dtype=int)).shape == (0, 2)


def test_steps_without_any_value_are_left_out():
    from headwatch.analysis.trajectories.maps import trajectories

    values = np.arange(4 * 2 * 3, dtype=np.float64).reshape(4, 2, 3)
    values[1] = np.nan  # a step the statistic was not computed at
    values[3, 0, 0] = np.nan  # one head missing at a step others have
    t = trajectories(values)
    assert t.shape == (6, 3)
    assert np.array_equal(t[1], values[[0, 2, 3], 0, 1])
    assert np.isnan(t[0, 2])


def test_kmeans_finds_separated_clusters_and_is_no_worse_than_scikit_learn():
    from sklearn.cluster import KMeans

    from headwatch.analysis.trajectories.maps import kmeans

    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0, 0, 0], [10, 10, 0, 0], [0, 0, 10, -10]])
    truth = np.repeat([2, 0, 1], 16)
    x = centres[truth] + rng.normal(0, 0.5, size=(48, 4))
    labels = kmeans(x, 3)
    assert labels[0] == 0 and set(labels) == {0, 1, 2}
    first = [labels[np.where(truth == t)[0][0]] for t in (2, 0, 1)]
    assert first == [0, 1, 2]  # numbered in order of first appearance
    assert all(len(set(labels[truth == t])) == 1 for t in range(3))  # each true cluster whole
    # on overlapping data, its within-cluster sum of squares matches scikit-learn's best of 10 random starts
    for trial in range(5):
        y = rng.normal(size=(60, 5))
        ours = kmeans(y, 4)
        cost = sum(((y[ours == c] - y[ours == c].mean(0)) ** 2).sum() for c in range(4))
        ref = KMeans(4, n_init=10, random_state=trial).fit(y).inertia_
        assert cost <= ref * 1.02, (trial, cost, ref)
    assert kmeans(y[:2], 5).tolist() == [0, 1]


def test_kmeans_gives_the_same_clusters_for_the_points_in_any_order():
    """No seed and no random start: the partition is a function of the points, not of their order (issue 62).
    Scikit-learn's seeded k-means++ on the same points, reordered, finds other local minima."""
    from sklearn.metrics import adjusted_rand_score

    from headwatch.analysis.trajectories.maps import kmeans

    rng = np.random.default_rng(11)
    x = rng.normal(size=(56, 50))  # no structure: many local minima, as the joint trajectories have
    for k in (2, 4, 6):
        labels = kmeans(x, k)
        for trial in range(3):
            order = rng.permutation(len(x))
            back = np.empty_like(order)
            back[order] = np.arange(len(x))
            assert adjusted_rand_score(labels, kmeans(x[order], k)[back]) == 1.0, (k, trial)
