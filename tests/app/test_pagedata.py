"""What the pages compute before they draw (dashboard/pagedata/), against direct computations and known values."""

from __future__ import annotations

import numpy as np

from headwatch.dashboard.pagedata import head


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
