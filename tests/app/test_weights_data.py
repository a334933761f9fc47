"""What the Weight matrices page computes before it draws (`dashboard.views.weights.data`), against values written
out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.dashboard.views.weights import data


def test_per_layer_places_each_row_and_leaves_the_rest_nan() -> None:
    rows = pd.DataFrame({"step": [0, 0, 10], "layer": [0, 2, 2], "alpha": [1.0, 2.0, 3.0]})
    got = data.per_layer(rows, [0, 10, 20], [0, 2], "alpha")
    expected = np.array([[1.0, 2.0], [np.nan, 3.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(got, expected)


def test_known_steps_keep_the_layer_steps_that_are_checkpoints_in_order() -> None:
    assert data.known_steps([0, 10, 20, 30], np.array([30, 0, 5, 20], dtype=np.int64)) == [0, 20, 30]
    assert data.known_steps([0, 10], np.array([5])) == []


def test_per_layer_csv_is_one_row_per_step_and_layer() -> None:
    values = np.array([[1.0, 2.0], [3.0, np.nan]])  # (steps, layers)
    got = data.per_layer_csv("r", "mlp_in", "alpha", [0, 10], [1, 3], values)
    assert list(zip(got["step"], got["layer"], strict=True)) == [(0, 1), (0, 3), (10, 1), (10, 3)]
    np.testing.assert_array_equal(got["value"].to_numpy(), [1.0, 2.0, 3.0, np.nan])
    assert set(got["run"]) == {"r"} and set(got["role"]) == {"mlp_in"} and set(got["statistic"]) == {"alpha"}
