"""What the pages compute before they draw (dashboard/pagedata/), against direct computations and known values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.analysis.llc_diagnostics import FLAGS
from headwatch.dashboard.pagedata import head, weights
from headwatch.dashboard.pagedata.llc import Estimates, flag_counts


def test_standardized_density_of_a_gaussian_is_the_standard_normal() -> None:
    mu, sigma = np.array([0.5, -2.0]), np.array([0.1, 3.0])
    z = np.linspace(-4, 4, 81)
    w = mu[:, None] + sigma[:, None] * z  # (2, 81)
    p = np.exp(-0.5 * ((w - mu[:, None]) / sigma[:, None]) ** 2) / (sigma[:, None] * np.sqrt(2 * np.pi))
    got_z, got_p = head.standardized(w, p, mu, sigma)
    np.testing.assert_allclose(got_z, np.broadcast_to(z, (2, 81)), atol=1e-12)
    np.testing.assert_allclose(got_p, np.broadcast_to(np.exp(-0.5 * z**2) / np.sqrt(2 * np.pi), (2, 81)), rtol=1e-12)


def test_a_step_without_spread_has_no_standardized_axis() -> None:
    z, _ = head.standardized(np.ones((1, 3)), np.ones((1, 3)), np.array([1.0]), np.array([0.0]))
    assert np.isnan(z).all()


def test_per_layer_places_each_row_and_leaves_the_rest_nan() -> None:
    rows = pd.DataFrame({"step": [0, 0, 10], "layer": [0, 2, 2], "alpha": [1.0, 2.0, 3.0]})
    got = weights.per_layer(rows, [0, 10, 20], [0, 2], "alpha")
    expected = np.array([[1.0, 2.0], [np.nan, 3.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(got, expected)


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
