"""What the Head explorer computes before it draws (`views.head.data`), against direct computations and known
values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from headwatch.analysis.stats.crossings import Approach, Crossings
from headwatch.analysis.stats.definitions import HIST_Z_EDGES
from headwatch.dashboard.views.head import data as head


def gaussian_hist(n_steps: int) -> np.ndarray:
    """``(n_steps, 202)`` hist_z of a standard normal: its masses in the 200 interior bins, the tails outside."""
    cdf = np.array([0.5 * (1 + math.erf(e / math.sqrt(2))) for e in HIST_Z_EDGES])
    masses = np.concatenate([[cdf[0]], np.diff(cdf), [1 - cdf[-1]]])  # (202,)
    return np.tile(masses, (n_steps, 1))


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


def test_the_density_map_of_a_gaussian_head_integrates_to_one_over_its_w_range() -> None:
    mu, sigma = np.array([0.5, -1.0]), np.array([2.0, 0.5])
    hist = gaussian_hist(2)
    lo, hi = head.w_range(hist, mu, sigma)
    w, grid = head.density_map(hist, mu, sigma, (lo, hi))
    assert w.shape == (head.DENSITY_GRID_POINTS,) and grid.shape == (2, head.DENSITY_GRID_POINTS)
    assert (w[0], w[-1]) == (lo, hi)
    mass = np.nansum(grid, axis=1) * (w[1] - w[0])  # both steps' p(w) on the one grid
    np.testing.assert_allclose(mass, 1.0, atol=0.02)


def test_curves_in_z_units_lie_at_the_bin_centres_with_the_standard_normal_density() -> None:
    mu, sigma = np.array([3.0]), np.array([0.25])
    z, p_z = head.curves(gaussian_hist(1), mu, sigma, z_units=True)
    centres = 0.5 * (HIST_Z_EDGES[1:] + HIST_Z_EDGES[:-1])
    np.testing.assert_allclose(z[0], centres, atol=1e-12)
    expected = gaussian_hist(1)[0, 1:-1] / 0.1  # each bin's mass over its width: NaN where the bin is empty
    np.testing.assert_allclose(p_z[0], np.where(expected > 0, expected, np.nan), rtol=1e-12)
    w, _ = head.curves(gaussian_hist(1), mu, sigma)
    np.testing.assert_allclose(w[0], 3.0 + 0.25 * centres, atol=1e-12)


def test_the_gaussians_at_the_chosen_steps() -> None:
    mu, sigma = np.array([0.0, 1.5, -2.0]), np.array([1.0, 0.5, 3.0])
    assert head.gaussians(mu, sigma, [2, 1]) == [(-2.0, 3.0), (1.5, 0.5)]
    assert head.gaussians(mu, sigma, [2, 1], z_units=True) == [(0.0, 1.0), (0.0, 1.0)]


def test_approach_counts_count_each_verdict() -> None:
    found = [
        Approach(level=0, t=1, gap=0.01, kind="crossing", swap_score=0.5),
        Approach(level=1, t=2, gap=0.02, kind="repulsion", swap_score=-0.4),
        Approach(level=0, t=4, gap=0.03, kind="crossing", swap_score=0.7),
    ]
    crossings = Crossings(kept=np.ones((5, 4)), swapped=np.zeros((5, 3)), approaches=found)
    assert head.approach_counts(crossings) == {"crossing": 2, "repulsion": 1, "unresolved": 0}


WHO: dict[str, Any] = dict(run="r", layer=1, head=2, matrix="ov")


def test_lam_table_holds_lambda_k_at_the_given_checkpoints() -> None:
    lam = np.array([[4.0, 1.0], [5.0, 2.0], [6.0, 3.0]])  # (S=3, 2)
    table = head.lam_table(lam, [0, 2], steps=np.array([0, 10, 20]), **WHO)
    assert list(table.columns) == ["run", "layer", "head", "matrix", "statistic", "k", "step", "value"]
    assert table["k"].tolist() == [0, 1, 0, 1] and table["step"].tolist() == [0, 0, 20, 20]
    assert table["value"].tolist() == [4.0, 1.0, 6.0, 3.0]
    assert set(table["statistic"]) == {"lambda"} and set(table["matrix"]) == {"ov"}


def test_grid_table_is_the_grid_row_by_row() -> None:
    grid = np.arange(6.0).reshape(2, 3)  # (S=2, 3)
    table = head.grid_table(grid, np.array([-1.0, 0.0, 1.0]), x_name="w", statistic="p(w)", steps=np.array([5, 7]), **WHO)
    assert table["step"].tolist() == [5, 5, 5, 7, 7, 7]
    assert table["w"].tolist() == [-1.0, 0.0, 1.0] * 2 and table["value"].tolist() == list(range(6))


def test_slices_table_holds_the_chosen_curves_then_sigma_and_kl_at_every_step() -> None:
    x = np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])  # (S=3, B=2): each step's own x
    p = x / 10
    sigma, kl = np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.2, 0.3])
    table = head.slices_table(x, p, [2, 1], sigma, kl, z_units=True, steps=np.array([0, 10, 20]), **WHO)
    curve = table[table["statistic"] == "p(z)"]
    assert curve["step"].tolist() == [20, 20, 10, 10] and curve["x"].tolist() == [4.0, 5.0, 2.0, 3.0]
    np.testing.assert_allclose(curve["value"], [0.4, 0.5, 0.2, 0.3])
    assert table[table["statistic"] == "std"]["value"].tolist() == [1.0, 2.0, 3.0]
    assert table[table["statistic"] == "kl_gauss"]["step"].tolist() == [0, 10, 20]
    assert len(table) == 4 + 3 + 3 and table.index.tolist() == list(range(10))


def test_in_layer_table_holds_the_layer_then_the_overlaid_heads() -> None:
    values = np.arange(12.0).reshape(2, 2, 3)  # (S=2, n_layers=2, n_heads=3)
    labels: dict[str, Any] = dict(steps=np.array([0, 9]), run="r", statistic="std", k=None, matrix="qk", layer=0)
    alone = head.in_layer_table(values, **labels)
    assert len(alone) == 2 * 3 and set(alone["layer"]) == {0}
    table = head.in_layer_table(values, **labels, pairs=[(1, 2)])
    assert len(table) == 2 * 3 + 2 and table.index.tolist() == list(range(8))
    extra = table.iloc[6:]
    assert extra["layer"].tolist() == [1, 1] and extra["head"].tolist() == [2, 2]
    assert extra["value"].tolist() == [values[0, 1, 2], values[1, 1, 2]]
