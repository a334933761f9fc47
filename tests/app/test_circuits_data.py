"""What the Circuits page computes before it draws (`dashboard.views.circuits.data`), against loops over the pairs."""

from __future__ import annotations

import numpy as np

from headwatch.dashboard.views.circuits import data


def test_pair_matrix_puts_target_heads_on_rows_and_source_heads_on_columns() -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(2, 3, 2, 3, 2))  # (S, layer_a, head_a, layer_b, head_b)
    got = data.pair_matrix(scores)
    assert got.shape == (2, 6, 6)
    for s in range(2):
        for la in range(3):
            for ha in range(2):
                for lb in range(3):
                    for hb in range(2):
                        assert got[s, lb * 2 + hb, la * 2 + ha] == scores[s, la, ha, lb, hb]


def test_pairs_csv_lists_every_stored_pair_with_its_ratio_to_random() -> None:
    scores = np.full((2, 2, 1, 2, 1), np.nan)
    scores[0, 0, 0, 1, 0] = 0.3
    scores[1, 0, 0, 1, 0] = 0.6
    got = data.pairs_csv("r", scores, [10, 20], "k", 0.2)
    assert list(got["step"]) == [10, 20]
    assert list(zip(got["layer_a"], got["head_a"], got["layer_b"], got["head_b"], strict=True)) == [(0, 0, 1, 0)] * 2
    np.testing.assert_allclose(got["times_random"], [1.5, 3.0])
    assert np.isnan(data.pairs_csv("r", scores, [10, 20], "k", 1.0)["times_random"]).all()


def test_partners_csv_names_each_partner_head_at_each_step() -> None:
    values = np.array([[0.1, 0.2], [0.3, 0.4]])  # (S, P)
    got = data.partners_csv("r", np.array([0, 5]), values, [5, 2], 4, "source", "k", 2, 1)
    assert list(zip(got["step"], got["partner_layer"], got["partner_head"], got["value"], strict=True)) == [
        (0, 1, 1, 0.1),
        (0, 0, 2, 0.2),
        (5, 1, 1, 0.3),
        (5, 0, 2, 0.4),
    ]
