"""What the Compare runs page computes before it draws (`dashboard.views.compare.data`), against values written out
by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.analysis.findings.comparison import RunSeries
from headwatch.dashboard.views.compare import data


def _series(run: str, steps: list[int], n_layers: int, n_heads: int = 2) -> RunSeries:
    values = np.arange(len(steps) * n_layers * n_heads, dtype=np.float64).reshape(len(steps), n_layers, n_heads)
    return RunSeries(run=run, steps=np.asarray(steps), x=np.asarray(steps, dtype=np.float64) / steps[-1], values=values)


def test_point_text_speaks_the_alignments_unit() -> None:
    assert data.point_text(1000, "step") == "step 1,000"
    assert data.point_text(2_500_000.0, "tokens") == "2,500,000 tokens"
    assert data.point_text(0.123456, "fraction") == "0.1235"


def test_steps_at_names_each_runs_last_checkpoint_at_or_before_the_point() -> None:
    a, b = _series("a", [10, 20, 40], 2), _series("b", [30, 60], 2)  # x: 0.25, 0.5, 1 and 0.5, 1
    assert data.steps_at([a, b], 0.5) == " (a: step 20; b: step 30)"
    assert data.steps_at([a, b], 0.3) == " (a: step 10; b: none yet)"


def test_bins_text_gives_each_bins_first_and_last_layer_or_none() -> None:
    # 3 layers in 4 bins: layer l in bin (4 l) // 3, so bins 0, 1 and 2 hold layers 0, 1 and 2; bin 3 none
    # 6 layers in 2 bins: layers 0-2 and 3-5
    got = data.bins_text([_series("a", [1], 3), _series("b", [1], 6)], 4)
    assert got.startswith("a (3 layers): [0, 0.25) L0, [0.25, 0.5) L1, [0.5, 0.75) L2, [0.75, 1) none; b (6 layers): ")
    assert data.bins_text([_series("b", [1], 6)], 2) == "b (6 layers): [0, 0.5) L0-2, [0.5, 1) L3-5"


def test_index_labels_label_at_most_the_ticks_asked_in_the_alignments_unit() -> None:
    grid = np.array([0.0, 1e3, 2e6, 3e9, 4e12])
    vals, text = data.index_labels(grid, align="tokens", most=9)
    assert vals == [0.0, 1.0, 2.0, 3.0, 4.0] and text == ["0", "1k", "2M", "3B", "4T"]
    vals, text = data.index_labels(np.linspace(0, 1, 20), align="fraction", most=5)
    assert len(vals) <= 6 and vals[0] == 0.0 and text[0] == "0"
    assert data.index_labels(np.array([5.0, 20_000.0]), align="step")[1] == ["5", "20k"]


def test_weights_of_lists_the_roles_some_table_holds_in_role_order() -> None:
    tables = {"a": pd.DataFrame({"role": ["mlp_out", "attn_out"]}), "b": None, "c": pd.DataFrame({"role": ["mlp_in"]})}
    assert data.weights_of(tables) == ["attn_out", "mlp_in", "mlp_out"]
    assert data.weights_of({"a": None}) == ["attn_out"]


def test_bin_and_distribution_csvs_hold_the_points_drawn() -> None:
    a = _series("a", [10, 20], 3)
    rows = data.bin_csv([a], 3, 1, "std", "qk")  # bin 1 of 3: layer 1
    assert set(rows["layer"]) == {1} and len(rows) == 2 * 2
    np.testing.assert_array_equal(rows.sort_values(["step", "head"])["value"], a.values[:, 1, :].ravel())
    np.testing.assert_array_equal(rows.sort_values(["step", "head"])["time"], np.repeat(a.x, 2))
    dist = data.dist_csv([a, _series("b", [5], 2)], [1, None], "std", "qk")
    assert set(dist["run"]) == {"a"} and set(dist["step"]) == {20} and len(dist) == 3 * 2


def test_scaling_csv_is_one_row_per_timescale_and_run() -> None:
    points = [("induction", np.array([1e6, 1e7]), np.array([100.0, 300.0]), ["s", "m"])]
    got = data.scaling_csv(points, unit="step")
    assert got.to_dict("records") == [
        {"timescale": "induction", "run": "s", "parameters": 1e6, "step": 100.0},
        {"timescale": "induction", "run": "m", "parameters": 1e7, "step": 300.0},
    ]
