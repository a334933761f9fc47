"""What the Architecture heatmaps compute before they draw (`views.architecture.data`): the layer means' range and
CSV rows, against means taken head by head."""

from __future__ import annotations

import numpy as np

from headwatch.dashboard.views.architecture import data as architecture


def test_the_layer_means_rows_are_each_layers_mean_over_its_heads() -> None:
    values = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)  # (S, n_layers, n_heads)
    rows = architecture.layer_mean_rows(values, np.array([0, 7]), run="r", stat="std", k=None, matrix="ov")
    assert len(rows) == 6 and set(rows["head"]) == {"layer mean"} and set(rows["statistic"]) == {"std (layer mean)"}
    for t, step in enumerate([0, 7]):
        for layer in range(3):
            (value,) = rows.loc[(rows["step"] == step) & (rows["layer"] == layer), "value"]
            assert value == sum(values[t, layer, h] for h in range(4)) / 4
    assert set(rows["matrix"]) == {"ov"}


def test_the_means_range_holds_every_layer_mean() -> None:
    values = np.array([[[1.0, 3.0], [10.0, 30.0]]])  # layer means 2 and 20
    lo, hi = architecture.means_range(values, log=False)
    assert lo < 2 < 20 < hi and hi - lo < 18 * 1.2
    lo, hi = architecture.means_range(values, log=True)
    assert lo < np.log10(2) < np.log10(20) < hi
