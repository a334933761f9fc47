"""What the Forward lenses compute before they draw (`views.lenses.data`): their CSVs' rows, against the arrays
read cell by cell."""

from __future__ import annotations

import numpy as np

from headwatch.dashboard.views.lenses import data as lenses


def test_the_losses_rows_hold_both_curves_step_by_step() -> None:
    rows = lenses.loss_rows("r", np.array([0, 10]), np.array([5.0, 4.0]), np.array([np.nan, 3.5]))
    assert list(rows.columns) == ["run", "statistic", "step", "value"]
    assert rows["statistic"].tolist() == ["eval_loss", "eval_loss", "probe_copy_loss", "probe_copy_loss"]
    assert rows["step"].tolist() == [0, 10, 0, 10]
    np.testing.assert_array_equal(rows["value"], [5.0, 4.0, np.nan, 3.5])


def test_every_layer_pair_at_every_step_is_one_row() -> None:
    jsd = np.random.default_rng(0).uniform(size=(3, 2, 2))
    rows = lenses.pair_rows("r", jsd, [0, 5, 9])
    assert len(rows) == 12 and set(rows["statistic"]) == {"jsd_bits"} and set(rows["run"]) == {"r"}
    for t, step in enumerate([0, 5, 9]):
        for a in range(2):
            for b in range(2):
                (value,) = rows.loc[(rows["step"] == step) & (rows["layer"] == a) & (rows["other_layer"] == b), "value"]
                assert value == jsd[t, a, b]
