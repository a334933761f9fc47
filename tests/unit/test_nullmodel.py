"""The free-product Marchenko-Pastur null model against analytic values and simulation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import integrate, stats

from headwatch.analysis.rmt.nullmodel import (
    KL_NULL_BINS,
    free_mp_cdf,
    free_mp_density,
    free_mp_support,
    kl_null,
    kl_null_edges,
    mp_density,
    null_expectations,
    sample_null_spectra,
)


def moment(density, k: int, lo: float, hi: float) -> float:
    return integrate.quad(lambda x: x**k * density(np.array([x]))[0], lo, hi, limit=400)[0]


@pytest.mark.parametrize("c", [1 / 16, 1 / 8, 0.25, 0.5, 1.0])
def test_density_is_normalised_with_moments_1_and_1_plus_2c(c: float) -> None:
    lo, hi = free_mp_support(c)
    dens = lambda x: free_mp_density(x, c)  # noqa: E731
    assert moment(dens, 0, lo, hi) == pytest.approx(1, abs=1e-8)
    assert moment(dens, 1, lo, hi) == pytest.approx(1, abs=1e-8)
    assert moment(dens, 2, lo, hi) == pytest.approx(1 + 2 * c, abs=1e-7)
    assert free_mp_density(np.array([lo - 1e-3, hi + 1e-3]), c).tolist() == [0.0, 0.0]


def test_support_for_c_one_eighth_matches_the_known_edges() -> None:
    lo, hi = free_mp_support(1 / 8)
    assert lo == pytest.approx(0.287, abs=5e-4)
    assert hi == pytest.approx(2.334, abs=5e-4)


def test_simulated_products_follow_the_law() -> None:
    d_model, d_head = 512, 64
    lam = sample_null_spectra(d_model, d_head, 30, seed=1)
    x = (lam / lam.mean(axis=1, keepdims=True)).ravel()
    ks = stats.kstest(x, lambda v: free_mp_cdf(v, d_head / d_model)).statistic
    assert ks < 0.02
    # and the simulation is a real test: a plain MP law (one factor) is far off
    grid = np.linspace(0, 3, 30001)
    cdf = np.cumsum(mp_density(grid, d_head / d_model)) * (grid[1] - grid[0])
    assert stats.kstest(x, lambda v: np.interp(v, grid, cdf)).statistic > 0.1


def test_simulated_third_moment_matches_numerical_law() -> None:
    c = 0.25
    lam = sample_null_spectra(256, 64, 40, seed=2)
    x = lam / lam.mean(axis=1, keepdims=True)
    lo, hi = free_mp_support(c)
    m3_law = moment(lambda v: free_mp_density(v, c), 3, lo, hi)
    assert np.mean(x**3) == pytest.approx(m3_law, rel=0.02)


def test_plain_marchenko_pastur_density() -> None:
    c = 0.2
    lo, hi = (1 - np.sqrt(c)) ** 2, (1 + np.sqrt(c)) ** 2
    dens = lambda x: mp_density(x, c)  # noqa: E731
    assert moment(dens, 0, lo, hi) == pytest.approx(1, abs=1e-8)
    assert moment(dens, 1, lo, hi) == pytest.approx(1, abs=1e-8)
    assert moment(dens, 2, lo, hi) - 1 == pytest.approx(c, abs=1e-7)


def test_kl_null_bins_hold_equal_null_mass() -> None:
    c = 1 / 8
    lo, hi = free_mp_support(c)
    edges = np.concatenate([[lo], kl_null_edges(c), [hi]])
    masses = [
        integrate.quad(lambda x: free_mp_density(np.array([x]), c)[0], a, b, limit=200)[0] for a, b in itertools.pairwise(edges)
    ]
    np.testing.assert_allclose(masses, 1 / KL_NULL_BINS, atol=2e-4)


def test_kl_null_is_small_for_null_spectra_and_large_for_structured_ones() -> None:
    c = 32 / 256
    lam = sample_null_spectra(256, 32, 50, seed=4)
    null_kl = kl_null(lam, c)
    assert null_kl.mean() < 0.05
    # matched scale: multiplying a spectrum by a constant changes nothing
    np.testing.assert_allclose(kl_null(lam * 1e-6, c), null_kl)
    # one dominant direction: all but one value in the lowest bin -> close to ln B
    spiky = np.full(32, 1e-3)
    spiky[0] = 100.0
    expected = (31 / 32) * np.log(KL_NULL_BINS * 31 / 32) + (1 / 32) * np.log(KL_NULL_BINS / 32)
    assert kl_null(spiky, c) == pytest.approx(expected, abs=1e-12)
    assert kl_null(spiky, c) > 1.5
    assert np.isnan(kl_null(np.zeros(32), c))


def test_null_expectations_match_large_size_limits() -> None:
    d_model, d_head = 256, 32
    e = null_expectations(d_model, d_head, n_samples=32)
    c = d_head / d_model
    # participation ratio -> d_head / (1 + 2c) as sizes grow (second moment of the law)
    assert e["participation_ratio"] == pytest.approx(d_head / (1 + 2 * c), rel=0.05)
    assert 1 < e["stable_rank"] < d_head
    assert np.log(d_head) - 0.5 < e["spectral_entropy"] < np.log(d_head)


def test_ratio_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="d_head / d_model"):
        free_mp_support(2.0)


def test_null_ordered_spectrum_matches_simulated_order_statistics() -> None:
    from headwatch.analysis.rmt.nullmodel import null_ordered_spectrum

    lam = sample_null_spectra(512, 64, 40, seed=5)  # descending per draw
    scaled = lam / lam.mean(axis=1, keepdims=True)
    typical = null_ordered_spectrum(np.array(1.0), 64, 512)
    assert typical.shape == (64,) and np.all(np.diff(typical) < 0)
    np.testing.assert_allclose(np.median(scaled, axis=0)[2:-2], typical[2:-2], rtol=0.05)
    np.testing.assert_allclose(null_ordered_spectrum(np.array([2.0, 3.0]), 64, 512), np.outer([2.0, 3.0], typical))
