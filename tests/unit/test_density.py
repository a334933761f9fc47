"""p(w) rebuilt from the standardized histogram, against the Gaussian computed independently with math.erf."""

import math

import numpy as np
import pytest

from headwatch.analysis.stats.density import density_curves, density_extent, density_grid
from headwatch.analysis.store.format import HIST_Z_EDGES


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
    hist[0, 1 + 95 : 1 + 105] = 0.1  # z in [-0.5, 0.5)
    hist[1, 1 + 149] = 1.0  # z in [4.9, 5.0)
    lo, hi = density_extent(hist, np.array([0.0, 10.0]), np.array([1.0, 2.0]))
    assert lo == pytest.approx(-0.5)
    assert hi == pytest.approx(10.0 + 2.0 * 5.0)
