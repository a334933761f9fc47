"""analysis.stats.spectrum against dense NumPy SVDs of W_QK and against heads with known spectra."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from headwatch.analysis.stats.spectrum import SPECTRAL_STATS, singular_values, spectral_statistics

D_MODEL = 48


def _random_heads(seed: int, batch: tuple[int, ...], d_head: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    w_q = torch.randn(*batch, d_head, D_MODEL, generator=g, dtype=torch.float64)
    w_k = torch.randn(*batch, d_head, D_MODEL, generator=g, dtype=torch.float64)
    return w_q.to(dtype), w_k.to(dtype)


def _dense(w_q: torch.Tensor, w_k: torch.Tensor) -> np.ndarray:
    """W_QK = W_Q^T W_K in float64, per head: (..., d_model, d_model)."""
    q = w_q.to(torch.float64).numpy()
    k = w_k.to(torch.float64).numpy()
    return np.swapaxes(q, -1, -2) @ k


def _orthonormal_rows(seed: int, d_head: int) -> torch.Tensor:
    """(d_head, d_model) with orthonormal rows."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(D_MODEL, d_head, generator=g, dtype=torch.float64))
    return q.T.contiguous()


@pytest.mark.parametrize("d_head", [1, 4, 8, 16])
def test_singular_values_match_dense_numpy_svd_float64(d_head: int) -> None:
    w_q, w_k = _random_heads(d_head, (2, 3), d_head)
    sv = singular_values(w_q, w_k)
    ref = np.linalg.svd(_dense(w_q, w_k), compute_uv=False)[..., :d_head]  # (2, 3, d_head)

    assert sv.shape == (2, 3, d_head)  # exactly d_head values per head
    assert sv.dtype == torch.float64
    got = sv.numpy()
    np.testing.assert_array_less(np.abs(got - ref) / ref, 1e-5)  # every value, relative
    assert np.all(np.diff(got, axis=-1) <= 0)  # descending
    assert np.all(got > 0)  # full-rank random heads: nothing is zero-padded


@pytest.mark.parametrize("spectrum_dtype", [torch.float64, torch.float32])
def test_singular_values_of_float32_weights(spectrum_dtype: torch.dtype) -> None:
    """Low-precision case: float32 weights, QR core in float64 (default) or float32."""
    d_head = 8
    w_q, w_k = _random_heads(7, (4,), d_head, dtype=torch.float32)
    sv = singular_values(w_q, w_k, dtype=spectrum_dtype)
    ref = np.linalg.svd(_dense(w_q, w_k), compute_uv=False)[..., :d_head]  # of the same float32 values

    assert sv.shape == (4, d_head)
    assert sv.dtype == spectrum_dtype
    rel = np.abs(sv.to(torch.float64).numpy() - ref) / ref
    assert rel.max() < (1e-12 if spectrum_dtype == torch.float64 else 1e-5)


def test_singular_values_reject_mismatched_or_transposed_shapes() -> None:
    w_q, w_k = _random_heads(0, (2,), 8)
    with pytest.raises(ValueError):
        singular_values(w_q, w_k[:1])
    with pytest.raises(ValueError, match="d_head"):
        singular_values(w_q.transpose(-1, -2), w_k.transpose(-1, -2))


def test_statistics_of_random_heads_match_numpy() -> None:
    d_head = 8
    w_q, w_k = _random_heads(11, (5,), d_head)
    stats = spectral_statistics(singular_values(w_q, w_k), d_model=D_MODEL)
    dense = _dense(w_q, w_k)

    assert set(stats) == set(SPECTRAL_STATS)
    for h in range(5):
        s = np.linalg.svd(dense[h], compute_uv=False)[:d_head]
        lam = s**2
        p = lam / lam.sum()
        expected = {
            "stable_rank": lam.sum() / lam[0],
            "spectral_entropy": -np.sum(p * np.log(p)),
            "participation_ratio": lam.sum() ** 2 / np.sum(lam**2),
            "condition_number": s[0] / s[-1],
            "frob_norm": np.linalg.norm(dense[h], "fro"),
            "spectral_norm": np.linalg.norm(dense[h], 2),
        }
        for name, value in expected.items():
            assert stats[name][h].item() == pytest.approx(value, rel=1e-9), name


def test_rank_one_head() -> None:
    d_head = 8
    g = torch.Generator().manual_seed(3)
    u = torch.randn(d_head, 1, generator=g, dtype=torch.float64)
    a = torch.randn(1, D_MODEL, generator=g, dtype=torch.float64)
    w_q = u @ a  # every row of W_Q a multiple of a: W_QK = a^T (u^T W_K) has rank 1
    w_k = torch.randn(d_head, D_MODEL, generator=g, dtype=torch.float64)

    sv = singular_values(w_q, w_k)
    stats = spectral_statistics(sv, d_model=D_MODEL)

    assert sv.shape == (d_head,)
    assert sv[0].item() == pytest.approx(np.linalg.norm(_dense(w_q, w_k), 2), rel=1e-12)
    assert stats["stable_rank"].item() == pytest.approx(1.0, abs=1e-12)
    assert stats["spectral_entropy"].item() == pytest.approx(0.0, abs=1e-12)
    assert stats["participation_ratio"].item() == pytest.approx(1.0, abs=1e-12)
    assert stats["condition_number"].item() == math.inf


def test_rank_deficient_head_has_infinite_condition_number_never_nan() -> None:
    d_head = 8
    w_q, w_k = _random_heads(5, (3,), d_head)
    w_q[1, :3] = 0.0  # head 1: three zero query rows -> rank d_head - 3
    sv = singular_values(w_q, w_k)
    stats = spectral_statistics(sv, d_model=D_MODEL)
    ref = np.linalg.svd(_dense(w_q, w_k), compute_uv=False)[..., :d_head]

    assert sv.shape == (3, d_head)
    np.testing.assert_allclose(sv[1, : d_head - 3].numpy(), ref[1, : d_head - 3], rtol=1e-10)
    assert np.all(sv[1, d_head - 3 :].numpy() < 1e-12 * ref[1, 0])  # the zero values are kept, not dropped
    cond = stats["condition_number"].numpy()
    assert cond[1] == math.inf
    assert np.all(np.isfinite(cond[[0, 2]]))  # the full-rank heads beside it are unaffected
    for name, value in stats.items():
        assert not torch.isnan(value).any(), name


def test_ill_conditioned_but_full_rank_head_keeps_a_finite_condition_number() -> None:
    d_head = 8
    scales = torch.logspace(0, -9, d_head, dtype=torch.float64)  # s_k known exactly: 1 .. 1e-9
    w_q = scales[:, None] * _orthonormal_rows(1, d_head)
    w_k = _orthonormal_rows(2, d_head)
    sv = singular_values(w_q, w_k)
    stats = spectral_statistics(sv, d_model=D_MODEL)

    np.testing.assert_allclose(sv.numpy(), scales.numpy(), rtol=1e-5)
    assert stats["condition_number"].item() == pytest.approx(1e9, rel=1e-4)


def test_isotropic_head() -> None:
    d_head, c = 8, 2.5
    w_q = c * _orthonormal_rows(1, d_head)  # W_QK = c Q1^T Q2: all d_head singular values equal c
    w_k = _orthonormal_rows(2, d_head)
    sv = singular_values(w_q, w_k)
    stats = spectral_statistics(sv, d_model=D_MODEL)

    np.testing.assert_allclose(sv.numpy(), np.full(d_head, c), rtol=1e-12)
    assert stats["stable_rank"].item() == pytest.approx(d_head, rel=1e-12)
    assert stats["spectral_entropy"].item() == pytest.approx(math.log(d_head), rel=1e-12)
    assert stats["participation_ratio"].item() == pytest.approx(d_head, rel=1e-12)
    assert stats["condition_number"].item() == pytest.approx(1.0, rel=1e-12)
    assert stats["frob_norm"].item() == pytest.approx(c * math.sqrt(d_head), rel=1e-12)
    assert stats["spectral_norm"].item() == pytest.approx(c, rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_all_zero_head_gives_no_nan(dtype: torch.dtype) -> None:
    d_head = 8
    w_q, w_k = _random_heads(9, (2,), d_head)
    w_q[0] = 0.0
    sv = singular_values(w_q.to(dtype), w_k.to(dtype), dtype=dtype)
    stats = spectral_statistics(sv, d_model=D_MODEL)

    assert sv.shape == (2, d_head)
    assert torch.all(sv[0] == 0)
    for name, value in stats.items():
        assert not torch.isnan(value).any(), name
    assert stats["frob_norm"][0].item() == 0.0
    assert stats["spectral_norm"][0].item() == 0.0
    assert stats["condition_number"][0].item() == math.inf
    assert stats["stable_rank"][1].item() > 1.0  # the other head in the batch is untouched


def _factor_with_singular_values(seed: int, scales: torch.Tensor) -> torch.Tensor:
    """(d_head, D_MODEL) rows whose singular values are exactly ``scales``."""
    g = torch.Generator().manual_seed(seed)
    left, _ = torch.linalg.qr(torch.randn(len(scales), len(scales), generator=g, dtype=torch.float64))
    return left @ (scales[:, None] * _orthonormal_rows(seed + 1, len(scales)))


def test_r_factor_is_the_r_of_a_thin_qr_on_either_path(monkeypatch) -> None:
    """Cholesky-QR where the factor is well conditioned, Householder QR for the others
    (ill-conditioned, rank-deficient, zero): R upper triangular with R^T R = w w^T, and
    |diag R| equal to NumPy's Householder R (R is unique up to row signs)."""
    from headwatch.analysis.stats import spectrum

    d_head = 8
    w = torch.stack(
        [
            _factor_with_singular_values(1, torch.linspace(1.0, 0.5, d_head, dtype=torch.float64)),  # cond 2
            _factor_with_singular_values(3, torch.logspace(0, -3, d_head, dtype=torch.float64)),  # cond 1e3
            _factor_with_singular_values(5, torch.logspace(0, -6, d_head, dtype=torch.float64)),  # cond 1e6
            torch.cat([_random_heads(7, (), d_head)[0][:5], torch.zeros(3, D_MODEL, dtype=torch.float64)]),  # rank 5
            torch.zeros(d_head, D_MODEL, dtype=torch.float64),
        ]
    )  # (5, d_head, D_MODEL)
    householder: list[int] = []
    qr = torch.linalg.qr

    def counting_qr(a: torch.Tensor, mode: str):  # what torch.linalg.qr returns
        householder.append(a.shape[0])
        return qr(a, mode=mode)

    monkeypatch.setattr(torch.linalg, "qr", counting_qr)
    r = spectrum.r_factor(w)

    assert householder == [3]  # only the last three went through Householder QR
    assert torch.equal(r, torch.triu(r))
    gram = w @ w.transpose(-1, -2)
    scale = gram.abs().amax((-1, -2), keepdim=True).clamp_min(1e-300)
    np.testing.assert_array_less(((r.transpose(-1, -2) @ r - gram).abs() / scale).numpy(), 1e-14)
    ref = np.abs(np.diagonal(np.linalg.qr(np.swapaxes(w.numpy(), -1, -2), mode="r"), axis1=-2, axis2=-1))
    diag = np.abs(np.diagonal(r.numpy(), axis1=-2, axis2=-1))
    np.testing.assert_allclose(diag[:2], ref[:2], rtol=1e-9)  # the two Cholesky-QR factors
    np.testing.assert_allclose(diag[2:], ref[2:], rtol=0, atol=1e-14)  # Householder: to eps * ||w||


@pytest.mark.parametrize("cond", [1.0, 1e2, 1e3, 1e6])
def test_cholesky_qr_spectrum_within_its_stated_error(cond: float) -> None:
    """Factors inside `CHOLESKY_MAX_COND` take Cholesky-QR, the others Householder QR: every
    singular value of W, the smallest included, within 1e-8 relative of a dense float64 SVD
    (eps * cond^2 bounds Cholesky-QR's error; at cond 1e6 it would be about 1e-4)."""
    from headwatch.analysis.stats.spectrum import CHOLESKY_MAX_COND, r_factor

    d_head = 16
    w_q = _factor_with_singular_values(11, torch.logspace(0, -math.log10(cond), d_head, dtype=torch.float64))
    w_k = _factor_with_singular_values(13, torch.linspace(2.0, 1.0, d_head, dtype=torch.float64))
    low = r_factor(w_q).transpose(-1, -2)
    bound = float(torch.linalg.matrix_norm(low) * torch.linalg.matrix_norm(torch.linalg.inv(low)))
    assert (bound <= CHOLESKY_MAX_COND) == (cond <= 1e3)
    sv = singular_values(w_q, w_k).numpy()
    ref = np.linalg.svd(_dense(w_q, w_k), compute_uv=False)[:d_head]
    np.testing.assert_array_less(np.abs(sv - ref) / ref, 1e-8)
