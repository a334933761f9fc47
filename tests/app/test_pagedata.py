"""What the pages compute before they draw (dashboard/pagedata/), against direct computations and known values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.analysis.llc_diagnostics import FLAGS
from headwatch.dashboard.pagedata import similarity, weights
from headwatch.dashboard.pagedata.llc import Estimates, flag_counts


def test_per_layer_places_each_row_and_leaves_the_rest_nan() -> None:
    rows = pd.DataFrame({"step": [0, 0, 10], "layer": [0, 2, 2], "alpha": [1.0, 2.0, 3.0]})
    got = weights.per_layer(rows, [0, 10, 20], [0, 2], "alpha")
    expected = np.array([[1.0, 2.0], [np.nan, 3.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(got, expected)


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


def test_flag_counts_count_heads_and_the_whole_model_per_checkpoint() -> None:
    flags = np.array([[[FLAGS[0], FLAGS[1]]], [[FLAGS[1], FLAGS[1]]]])  # (E=2, 1 layer, 2 heads)
    values = np.array([[[0.5, -0.1]], [[0.2, 0.3]]])
    est = Estimates(
        idx=np.array([0, 3]),
        steps=np.array([0, 100]),
        values=values,
        stds=np.zeros_like(values),
        model=np.array([1.0, -1.0]),
        model_std=np.zeros(2),
        model_init_loss=np.zeros(2),
        flags=flags,
        model_flags=np.array([FLAGS[0], FLAGS[3]]),
    )
    table = flag_counts(est)
    assert list(table["step"]) == [0, 100]
    assert list(table[FLAGS[0]]) == [2, 0] and list(table[FLAGS[1]]) == [1, 2] and list(table[FLAGS[3]]) == [0, 1]
    assert list(table["negative"]) == [1, 1]
