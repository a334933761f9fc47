"""The Gaussian-factor reference (analysis/rmt/references.py) against a direct simulation made here with the precompute
job's own code (torch: analysis.stats.elementwise, analysis.stats.spectrum) on other random draws, and against theory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headwatch.analysis.rmt.references import BAND, elementwise, gaussian_references, init_sigma
from headwatch.analysis.stats.elementwise import elementwise_statistics
from headwatch.analysis.stats.spectrum import singular_values, spectral_statistics

D_MODEL, D_HEAD, SIGMA0 = 128, 16, 0.03


def simulate(n: int, seed: int) -> dict[str, np.ndarray]:
    """n heads with N(0, SIGMA0^2) factors, through the precompute job's code path."""
    gen = torch.Generator().manual_seed(seed)
    w_q = torch.randn(n, D_HEAD, D_MODEL, generator=gen, dtype=torch.float64) * SIGMA0
    w_k = torch.randn(n, D_HEAD, D_MODEL, generator=gen, dtype=torch.float64) * SIGMA0
    w = (w_q.transpose(-1, -2) @ w_k).reshape(n, -1)
    out = {k: v.numpy() for k, v in elementwise_statistics(w).items() if k != "hist_z"}
    out.update({k: v.numpy() for k, v in spectral_statistics(singular_values(w_q, w_k), d_model=D_MODEL).items()})
    return out


@pytest.fixture(scope="module")
def direct() -> dict[str, np.ndarray]:
    return simulate(400, seed=123)


@pytest.mark.parametrize(
    "name",
    [
        "std",
        "kurtosis",
        "kl_gauss",
        "skew",
        "max",
        "stable_rank",
        "spectral_entropy",
        "participation_ratio",
        "frob_norm",
        "spectral_norm",
    ],
)
def test_reference_band_matches_a_direct_simulation(direct, name):
    refs, _ = gaussian_references(D_MODEL, D_HEAD, SIGMA0)
    ref, v = refs[name], direct[name]
    spread = np.quantile(v, BAND[1]) - np.quantile(v, BAND[0])
    # the 32-draw reference's mean and band ends lie where 400 independent draws put them, to a fraction of the band
    assert ref.mean == pytest.approx(v.mean(), abs=0.2 * spread)
    assert ref.lo == pytest.approx(np.quantile(v, BAND[0]), abs=0.35 * spread)
    assert ref.hi == pytest.approx(np.quantile(v, BAND[1]), abs=0.35 * spread)
    assert ref.lo <= ref.mean <= ref.hi


def test_reference_agrees_with_theory():
    refs, by_k = gaussian_references(D_MODEL, D_HEAD, SIGMA0)
    # an entry is a sum of d_head products of two N(0, sigma0^2): sigma = sigma0^2 sqrt(d_head), excess kurtosis 6/d_head
    assert refs["std"].mean == pytest.approx(SIGMA0**2 * np.sqrt(D_HEAD), rel=0.02)
    assert refs["kurtosis"].mean == pytest.approx(6 / D_HEAD, abs=0.05)
    assert refs["kl_gauss"].lo > 0  # not a Gaussian: D_KL from one is positive
    assert refs["stable_rank_over_null"].mean == pytest.approx(1.0, abs=0.05)
    assert len(by_k) == D_HEAD and by_k[0].mean > by_k[-1].mean  # lambda_k, descending
    # units: lambda scales as sigma0^4, entries as sigma0^2, shapes not at all
    refs2, by_k2 = gaussian_references(D_MODEL, D_HEAD, 2 * SIGMA0)
    assert refs2["std"].mean == pytest.approx(4 * refs["std"].mean)
    assert by_k2[0].mean == pytest.approx(16 * by_k[0].mean)
    assert refs2["kurtosis"] == refs["kurtosis"]
    assert "std" not in gaussian_references(D_MODEL, D_HEAD, None)[0]  # no init scale: only the scale-free ones


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numpy_elementwise_matches_the_precompute_jobs_torch_path(dtype):
    """The dashboard's numpy + numba statistics against the job's other implementation, the torch passes."""
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((64, 64)) @ rng.standard_normal((64, 64)) ** 3).astype(dtype)
    mine = elementwise(w)
    theirs = elementwise_statistics(torch.from_numpy(w.reshape(1, -1)), fused=False)
    theirs = {k: float(v[0]) for k, v in theirs.items() if k != "hist_z"}
    for name, value in theirs.items():
        if dtype == np.float64:
            assert mine[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
        else:  # float32 sums: the torch path's in float32, the kernels' in float64
            assert mine[name] == pytest.approx(value, rel=2e-4, abs=1e-4 * abs(theirs["std"])), name


def test_init_sigma_inverts_the_entry_width():
    std0 = np.full((3, 4), SIGMA0**2 * np.sqrt(D_HEAD))
    assert init_sigma(std0, D_HEAD) == pytest.approx(SIGMA0)
    assert init_sigma(np.zeros(3), D_HEAD) is None
