"""Derived slices: step axes, densities, ranges; checked against direct computations."""

import json
import math

import numpy as np
import pytest

from analysis.store.format import HIST_Z_EDGES
from analysis.store import open_store
from dashboard.data import (
    cell_edges,
    default_steps,
    density_curves,
    density_extent,
    density_grid,
    fixed_range,
    stat_values,
    step_axis,
)


def gaussian_hist() -> np.ndarray:
    """Standard-normal mass of the 202 hist_z bins, by math.erf (independent of the code under test)."""
    cdf = np.array([0.5 * (1 + math.erf(e / math.sqrt(2))) for e in HIST_Z_EDGES])
    return np.concatenate([[cdf[0]], np.diff(cdf), [1 - cdf[-1]]])


def test_density_grid_recovers_the_raw_unit_gaussian():
    hist = np.stack([gaussian_hist(), gaussian_hist()])
    mu, sigma = np.array([0.0, 0.5]), np.array([1.0, 0.01])
    centres = np.arange(-3.95, 4.0, 0.1)  # z at bin centres, -4 .. 4
    for i in range(2):
        w = mu[i] + sigma[i] * centres
        p = density_grid(hist[i : i + 1], mu[i : i + 1], sigma[i : i + 1], w)[0]
        mass = np.array([0.5 * (math.erf((z + 0.05) / math.sqrt(2)) - math.erf((z - 0.05) / math.sqrt(2))) for z in centres])
        assert np.allclose(p, mass / (0.1 * sigma[i]), rtol=1e-9)  # p(w) = p_z((w - mu) / sigma) / sigma
        pdf = np.exp(-0.5 * centres**2) / (sigma[i] * math.sqrt(2 * math.pi))
        assert np.allclose(p, pdf, rtol=1e-2)  # a bin average is within 1% of the pdf at its centre (|z| <= 4)
        fine = np.linspace(mu[i] - 4 * sigma[i], mu[i] + 4 * sigma[i], 8001)
        within = math.erf(4 / math.sqrt(2))
        p_fine = density_grid(hist[i : i + 1], mu[i : i + 1], sigma[i : i + 1], fine)[0]
        assert np.trapezoid(p_fine, fine) == pytest.approx(within, abs=2e-3)


def test_density_curves_are_bin_mass_over_width_and_sigma():
    hist = gaussian_hist()[None, :]
    w, p = density_curves(hist, np.array([2.0]), np.array([0.5]))
    assert w.shape == p.shape == (1, 200)
    assert w[0, 100] == pytest.approx(2.0 + 0.5 * 0.05)
    assert p[0, 100] == pytest.approx(hist[0, 101] / 0.1 / 0.5)


def test_density_extent_covers_occupied_bins_of_every_step():
    hist = np.zeros((2, 202))
    hist[0, 1 + 95: 1 + 105] = 0.1  # z in [-0.5, 0.5)
    hist[1, 1 + 149] = 1.0  # z in [4.9, 5.0)
    lo, hi = density_extent(hist, np.array([0.0, 10.0]), np.array([1.0, 2.0]))
    assert lo == pytest.approx(-0.5)
    assert hi == pytest.approx(10.0 + 2.0 * 5.0)


def test_step_axis_log_places_step_zero_at_one_and_tokens(store_path):
    store = open_store(store_path)
    lin = step_axis(store)
    assert np.array_equal(lin.x, store.steps) and not lin.log
    log = step_axis(store, scale="log")
    assert log.x[0] == 1.0 and log.log and "+ 1" in log.title
    assert log.range[0] < 0 < log.range[1]  # log10 units around 1 = step 0
    tok = step_axis(store, unit="tokens")
    assert np.array_equal(tok.x, store.steps * 2_097_152.0)
    assert len(lin.dup_x) == 1 and "repeats step 0" in lin.dup_text[0]
    assert store.meta.duplicates == [(3, 0)]


def test_step_axis_without_token_counts_refuses_tokens(tmp_path):
    from benchmarks.synthetic_store import write_synthetic_store

    path = write_synthetic_store(tmp_path / "bare", n_layers=1, n_heads=2, d_head=4, d_model=8, n_checkpoints=5,
                                 training=False)
    meta = json.loads((path / "meta.json").read_text())
    meta["checkpoints"] = [dict(c, tokens=None) for c in meta["checkpoints"]]
    (path / "meta.json").write_text(json.dumps(meta))
    bare = open_store(path)
    assert bare.meta.tokens_at(bare.steps) is None
    with pytest.raises(ValueError, match="token"):
        step_axis(bare, unit="tokens")


def test_cell_edges_are_midpoints_in_the_axis_space():
    assert np.allclose(cell_edges(np.array([0.0, 2.0, 10.0]), log=False), [-1, 1, 6, 14])
    e = cell_edges(np.array([1.0, 100.0]), log=True)
    assert np.allclose(e, [0.1, 10.0, 1000.0])


def test_default_steps_spread_in_log_and_keep_ends():
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, *range(1000, 143001, 1000)])
    picked = default_steps(steps, 5)
    assert picked[0] == 0 and picked[-1] == 143000 and len(picked) == 5
    assert all(p in steps for p in picked) and picked == sorted(picked)


def test_fixed_range_ignores_non_finite_and_non_positive_on_log():
    v = np.array([0.0, 1.0, 100.0, np.inf, np.nan])
    lo, hi = fixed_range(v, log=True, pad=0)
    assert (lo, hi) == (0.0, 2.0)
    assert fixed_range(v, pad=0) == (0.0, 100.0)


def test_lambda_is_squared_singular_value(store_path):
    store = open_store(store_path)
    sv = store.array("sv")
    assert np.allclose(stat_values(store, "lambda", k=3), sv[..., 3].astype(np.float64) ** 2)
    assert stat_values(store, "std", k=3) is store.array("std")
