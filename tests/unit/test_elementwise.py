"""analysis.stats.elementwise against NumPy/SciPy references and analytic values of D_KL."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from headwatch.analysis.stats.elementwise import ELEMENTWISE_STATS, elementwise_statistics, gaussian_bin_mass, kl_from_hist
from headwatch.analysis.store.format import HIST_Z_BINS, HIST_Z_EDGES

N_BINS = HIST_Z_BINS + 2  # with the underflow and overflow bins
MOMENTS = ("mean", "std", "skew", "kurtosis", "min", "max")


def _mixed_rows(seed: int, n: int) -> np.ndarray:
    """(4, n) float64 rows with different shapes: Gaussian, skewed, heavy-tailed, uniform."""
    rng = np.random.default_rng(seed)
    return np.stack(
        [
            rng.normal(0.3, 2.0, n),
            rng.gamma(2.0, 0.5, n) - 1.0,  # skew sqrt(2), excess kurtosis 3
            rng.standard_t(5, n) * 0.01,
            rng.uniform(-1e-3, 3e-3, n),
        ]
    )


@pytest.fixture(params=[True, False], ids=["fused", "torch"])
def fused(request) -> bool:
    """Both implementations of the statistics: the compiled CPU kernels and the torch passes."""
    return request.param


def _stats(w: np.ndarray, **kwargs) -> dict[str, np.ndarray]:
    return {k: v.cpu().numpy() for k, v in elementwise_statistics(torch.from_numpy(w), **kwargs).items()}


def test_gaussian_bin_mass_matches_scipy_in_every_bin_including_far_tails(reference) -> None:
    mass = gaussian_bin_mass(HIST_Z_EDGES)
    ref = reference.gaussian_masses(HIST_Z_EDGES)

    assert mass.shape == (N_BINS,)
    assert np.all(mass > 0)  # every Q_b > 0, so D_KL is finite for any sample
    np.testing.assert_allclose(mass, ref, rtol=1e-9)  # relative, bin by bin: the 1e-23 tails too
    np.testing.assert_allclose(mass, mass[::-1], rtol=1e-9)  # N(0, 1) is symmetric
    assert mass.sum() == pytest.approx(1.0, abs=1e-14)


def test_kl_from_hist_is_the_discrete_kl_with_zero_bins() -> None:
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    q = torch.tensor([[0.25, 0.25, 0.5], [0.2, 0.3, 0.5]], dtype=torch.float64)
    np.testing.assert_allclose(kl_from_hist(p, q).numpy(), [math.log(2.0), 0.0], atol=1e-15)


def test_moments_match_numpy_and_scipy_float64(fused) -> None:
    w = _mixed_rows(0, 20_000)
    got = _stats(w, fused=fused)

    assert set(got) == set(ELEMENTWISE_STATS) | {"hist_z"}
    np.testing.assert_allclose(got["mean"], w.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(got["std"], w.std(axis=1), rtol=1e-12)  # population std
    np.testing.assert_allclose(got["skew"], scipy.stats.skew(w, axis=1, bias=True), rtol=1e-9)
    np.testing.assert_allclose(got["kurtosis"], scipy.stats.kurtosis(w, axis=1, fisher=True, bias=True), rtol=1e-9)
    np.testing.assert_array_equal(got["min"], w.min(axis=1))
    np.testing.assert_array_equal(got["max"], w.max(axis=1))
    assert got["skew"][1] > 1.0 and got["kurtosis"][2] > 1.0  # the rows really differ in shape


def test_moments_float32_within_stated_tolerances(fused) -> None:
    """Low-precision case, against float64 references of the same float32 values."""
    w32 = _mixed_rows(1, 100_000).astype(np.float32)
    w = w32.astype(np.float64)
    got = _stats(w32, fused=fused)
    sigma = w.std(axis=1)

    assert got["mean"].dtype == np.float32
    np.testing.assert_array_less(np.abs(got["mean"] - w.mean(axis=1)) / sigma, 1e-5)
    np.testing.assert_allclose(got["std"], sigma, rtol=1e-5)
    np.testing.assert_allclose(got["skew"], scipy.stats.skew(w, axis=1), rtol=0, atol=1e-4)
    np.testing.assert_allclose(got["kurtosis"], scipy.stats.kurtosis(w, axis=1), rtol=0, atol=1e-3)
    np.testing.assert_array_equal(got["min"], w32.min(axis=1))
    np.testing.assert_array_equal(got["max"], w32.max(axis=1))


def test_histogram_and_kl_match_numpy_references_float64(reference, fused) -> None:
    w = _mixed_rows(2, 20_000)
    got = _stats(w, fused=fused)

    assert got["hist_z"].shape == (4, N_BINS)
    assert got["hist_z"].dtype == np.float64
    np.testing.assert_allclose(got["hist_z"].sum(axis=1), 1.0, atol=1e-12)
    for b in range(4):
        ref = reference.elementwise(w[b], HIST_Z_EDGES)
        np.testing.assert_array_equal(got["hist_z"][b], ref["hist_z"])  # counts / n, bin for bin
        assert got["kl_gauss"][b] == pytest.approx(ref["kl_gauss"], rel=1e-10)


def test_histogram_and_kl_float32_within_stated_tolerances(reference, fused) -> None:
    """float32 z can round across a bin edge: allow 3 entries per bin, 1e-4 nats."""
    n = 20_000
    w32 = _mixed_rows(3, n).astype(np.float32)
    got = _stats(w32, fused=fused)
    for b in range(4):
        ref = reference.elementwise(w32[b], HIST_Z_EDGES)
        np.testing.assert_allclose(got["hist_z"][b], ref["hist_z"], rtol=0, atol=3.0 / n)
        assert got["kl_gauss"][b] == pytest.approx(ref["kl_gauss"], abs=1e-4)
    np.testing.assert_allclose(got["hist_z"].sum(axis=1), 1.0, atol=1e-12)


def test_large_gaussian_sample_has_near_zero_kl(fused) -> None:
    rng = np.random.default_rng(4)
    w = rng.normal(0.01, 0.02, size=(1, 1_000_000)).astype(np.float32)
    got = _stats(w, fused=fused)
    assert 0.0 <= got["kl_gauss"][0] < 1e-3


def test_laplace_sample_kl_is_entropy_gap_to_gaussian(fused) -> None:
    # D_KL(P || N(mu, sigma)) = H(N) - H(P) when N matches P's variance. Laplace(b) has
    # variance 2 b^2 and entropy 1 + ln(2 b); N(0, 2 b^2) has entropy 0.5 ln(2 pi e 2 b^2).
    b = 0.05
    analytic = 0.5 * math.log(2 * math.pi * math.e * 2 * b**2) - (1 + math.log(2 * b))
    assert round(analytic, 4) == 0.0724
    assert analytic == pytest.approx(0.5 * math.log(math.pi * math.e) - 1.0, rel=1e-12)

    rng = np.random.default_rng(5)
    w = rng.laplace(0.0, b, size=(1, 1_000_000)).astype(np.float32)
    got = _stats(w, fused=fused)
    assert got["kl_gauss"][0] == pytest.approx(analytic, abs=3e-3)
    assert got["kurtosis"][0] == pytest.approx(3.0, abs=0.1)  # Laplace excess kurtosis


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_outliers_anywhere_in_the_range_give_finite_kl(reference, sign: float, fused) -> None:
    """Heavy-tailed heads put entries at 8..10 sigma (interior bins) and beyond 10 sigma (tail bins)."""
    n = 200_000
    rng = np.random.default_rng(6)
    w = rng.standard_normal(n)
    w[:4] = sign * np.array([8.6, 9.2, 9.9, 40.0])  # z stays close to these: mu ~ 0, sigma ~ 1
    got = _stats(w[None], fused=fused)
    ref = reference.elementwise(w, HIST_Z_EDGES)

    far = np.abs(HIST_Z_EDGES[:-1] + 0.05) > 8.5  # interior bins beyond 8.5 sigma
    counts = np.rint(got["hist_z"][0] * n)
    assert counts[1:-1][far].sum() == 3
    assert counts[-1 if sign > 0 else 0] == 1  # beyond 10 sigma: the tail bin, not dropped
    np.testing.assert_array_equal(got["hist_z"][0], ref["hist_z"])
    assert np.isfinite(got["kl_gauss"][0])
    assert got["kl_gauss"][0] == pytest.approx(ref["kl_gauss"], rel=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("value", [0.0, 0.1, 0.3, -7.0])
def test_constant_matrix(value: float, dtype, fused) -> None:
    w = np.stack([np.full(4096, value), np.linspace(-1.0, 1.0, 4096)]).astype(dtype)
    got = _stats(w, fused=fused)

    assert got["mean"][0] == dtype(value)
    assert got["std"][0] == 0.0
    assert np.isnan(got["skew"][0]) and np.isnan(got["kurtosis"][0])
    assert got["min"][0] == got["max"][0] == dtype(value)
    assert np.isfinite(got["kl_gauss"][0])
    assert got["hist_z"][0].sum() == pytest.approx(1.0)
    # every constant matrix is described the same way, whatever its value
    np.testing.assert_array_equal(got["hist_z"][0], _stats(np.zeros((1, 4096), dtype), fused=fused)["hist_z"][0])
    assert np.all(np.isfinite(got["skew"][1:]))  # the non-constant row beside it is unaffected


def test_input_is_not_modified_and_scratch_gives_identical_results(fused) -> None:
    w = torch.from_numpy(_mixed_rows(7, 10_000).astype(np.float32))
    before = w.clone()
    plain = elementwise_statistics(w, fused=fused)
    assert torch.equal(w, before)

    # Buffers larger than needed (as when the last chunk of a layer is smaller), with junk in them.
    scratch = (
        torch.full((6, 10_000), 123.0),
        torch.full((6, 10_000), -5.0),
        torch.full((6, 10_000), 77, dtype=torch.int32),
    )
    for _ in range(2):  # reuse of the same buffers
        with_scratch = elementwise_statistics(w, scratch=scratch, fused=fused)
        assert torch.equal(w, before)
        assert set(with_scratch) == set(plain)
        for name in plain:
            assert torch.equal(with_scratch[name], plain[name]) or (
                torch.isnan(plain[name]).all() and torch.isnan(with_scratch[name]).all()
            ), name


def test_rejects_bad_input(fused) -> None:
    with pytest.raises(ValueError, match="batch, N"):
        elementwise_statistics(torch.zeros(4, 4, 4), fused=fused)
    with pytest.raises(ValueError, match="uniform"):
        elementwise_statistics(torch.zeros(1, 16), edges=np.array([-1.0, 0.0, 0.5, 2.0]))


def test_given_moments_give_the_reference_statistics(reference, fused) -> None:
    """The mean and E[w^2] known from elsewhere (a product's factors) replace the passes over w."""
    w = _mixed_rows(8, 20_000)
    n = w.shape[1]
    moments = (torch.from_numpy(w.mean(axis=1)), torch.from_numpy((w * w).mean(axis=1)))
    got = _stats(w, moments=moments, fused=fused)

    np.testing.assert_allclose(got["std"], w.std(axis=1), rtol=1e-10)
    np.testing.assert_allclose(got["skew"], scipy.stats.skew(w, axis=1), rtol=1e-8)
    np.testing.assert_allclose(got["kurtosis"], scipy.stats.kurtosis(w, axis=1), rtol=1e-8)
    for b in range(4):
        ref = reference.elementwise(w[b], HIST_Z_EDGES)
        np.testing.assert_allclose(got["hist_z"][b], ref["hist_z"], rtol=0, atol=1.0 / n)
    with pytest.raises(ValueError, match="one mean"):
        _stats(w, moments=(moments[0][:2], moments[1][:2]), fused=fused)


def test_rows_spread_over_threads_give_the_single_thread_result() -> None:
    """The fused path runs one row per core (`analysis.threads`); each row's sums do not depend on it."""
    w = torch.from_numpy(_mixed_rows(9, 50_000).astype(np.float32))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = elementwise_statistics(w, fused=True)
        torch.set_num_threads(3)
        several = elementwise_statistics(w, fused=True)
        assert torch.get_num_threads() == 3  # the caller's count is back
    finally:
        torch.set_num_threads(threads)
    for name in one:
        assert torch.equal(one[name], several[name]), name
