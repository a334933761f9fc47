"""What the Head similarity view computes before it draws (`views.similarity.data`), against direct computations and
known values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.dashboard.views.similarity import data as similarity


def test_every_head_is_the_whole_square_and_one_layer_a_reordering_of_its_block() -> None:
    rng = np.random.default_rng(0)
    n_layers, n_heads = 2, 4
    n = n_layers * n_heads
    sym = rng.uniform(0.1, 0.9, (n, n))
    sym = (sym + sym.T) / 2
    upper = np.where(np.triu(np.ones((n, n), dtype=bool), 1), sym, np.nan)
    values = np.stack([upper, upper]).reshape(2, n_layers, n_heads, n_layers, n_heads)
    steps = np.array([0, 5])
    every = similarity.shown(values, steps, step=5, layer=similarity.ALL, stat="qk_frob")
    expected = sym.copy()
    np.fill_diagonal(expected, 1.0)
    # every head in the dendrogram's order (tests/app/test_similarity_page.py checks the order against scipy's): the
    # whole square, rows and columns in that order, with lines between layers only when the order is layer-major
    order = [layer * n_heads + head for layer, head in every.heads]
    assert sorted(order) == list(range(n))
    np.testing.assert_allclose(every.values, expected[np.ix_(order, order)])
    assert every.separators == ([4] if order == list(range(n)) else [])
    one = similarity.shown(values, steps, step=0, layer=1, stat="qk_col")
    order = [h for _, h in one.heads]
    assert sorted(order) == [0, 1, 2, 3] and all(lay == 1 for lay, _ in one.heads)
    np.testing.assert_allclose(one.values, expected[4:, 4:][np.ix_(order, order)])
    assert one.rng == (0.0, 1.0)


def test_pair_square_mirrors_the_upper_triangle_and_keeps_unknown_pairs_unknown() -> None:
    upper = np.array([[np.nan, 0.2, np.nan], [np.nan, np.nan, -0.5], [np.nan, np.nan, np.nan]])
    got = similarity.pair_square(upper, diagonal=1.0)
    expected = np.array([[1.0, 0.2, np.nan], [0.2, 1.0, -0.5], [np.nan, -0.5, 1.0]])
    np.testing.assert_array_equal(got, expected)


def test_two_tight_pairs_are_neighbours_in_the_dendrograms_order() -> None:
    # heads 0 and 2 alike, 1 and 3 alike, the pairs far apart: each pair is adjacent among the leaves
    d = np.full((4, 4), 10.0)
    d[0, 2] = d[2, 0] = d[1, 3] = d[3, 1] = 1.0
    np.fill_diagonal(d, 0.0)
    order = list(similarity.dendrogram_order(d))
    assert sorted(order) == [0, 1, 2, 3]
    assert abs(order.index(0) - order.index(2)) == 1 and abs(order.index(1) - order.index(3)) == 1
    d[0, 1] = d[1, 0] = np.nan  # no dendrogram without every distance: the heads in their own order
    assert list(similarity.dendrogram_order(d)) == [0, 1, 2, 3]


def test_ultrametricity_places_each_layers_share_and_baseline_over_the_steps() -> None:
    table = pd.DataFrame(
        {
            "step": [0, 0, 10, 10, 0],
            "layer": [2, 0, 0, 2, 1],
            "distance": ["qk_frob", "qk_frob", "qk_frob", "qk_frob", "ov_col"],
            "share": [0.5, 0.25, 0.75, 1.0, 0.9],
            "baseline": [0.1, 0.2, 0.3, 0.4, 0.8],
        }
    )
    got = similarity.ultrametricity(table, "qk_frob", np.array([0, 10, 20]))
    assert got.layers == [0, 2]
    assert len(got.rows) == 4 and set(got.rows["distance"]) == {"qk_frob"}
    np.testing.assert_array_equal(got.share, [[0.25, 0.5], [0.75, 1.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(got.baseline, [[0.2, 0.1], [0.3, 0.4], [np.nan, np.nan]])


def test_the_random_heads_mean_is_read_by_the_statistics_kind() -> None:
    info = {"baseline": {"mean": {"frob": 0.0, "col": 0.25}}}
    assert similarity.baseline_mean(info, "ov_col") == 0.25
    assert similarity.baseline_mean(info, "qk_frob") == 0.0
    assert similarity.baseline_mean(info, "qk_row") is None
    assert similarity.baseline_mean({}, "qk_row") is None
