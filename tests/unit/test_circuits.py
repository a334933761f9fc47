"""analysis.stats.circuits against dense numpy and analytic cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headwatch.analysis.stats.circuits import circuit_statistics, relative_change


def _dense(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    return np.swapaxes(left, -1, -2) @ right  # (..., d_model, d_model): W = left^T right


def _dense_reference(w: np.ndarray) -> tuple[float, float]:
    """Symmetric fraction and eigenvalue positivity of one dense matrix, by definition."""
    sym = np.sum(((w + w.T) / 2) ** 2) / np.sum(w**2)
    mu = np.linalg.eigvals(w)
    mu = mu[np.abs(mu) > 1e-9 * np.abs(mu).max()]  # the non-zero eigenvalues
    return float(sym), float(mu.real.sum() / np.abs(mu).sum())


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 1e-5)])
def test_against_dense_numpy_on_random_heads(dtype, tol) -> None:
    rng = np.random.default_rng(0)
    left = rng.normal(size=(3, 4, 5, 24))  # (layers, heads, d_head, d_model)
    right = rng.normal(size=(3, 4, 5, 24)) + 0.7 * left  # correlated: positivity away from 0
    out = circuit_statistics(torch.as_tensor(left, dtype=dtype), torch.as_tensor(right, dtype=dtype))
    assert out["sym_frac"].shape == out["eig_positivity"].shape == (3, 4)
    assert out["sym_frac"].dtype == torch.float64
    l32 = torch.as_tensor(left, dtype=dtype).double().numpy()
    r32 = torch.as_tensor(right, dtype=dtype).double().numpy()
    for i in range(3):
        for j in range(4):
            sym, pos = _dense_reference(_dense(l32[i, j], r32[i, j]))
            assert out["sym_frac"][i, j].item() == pytest.approx(sym, abs=tol)
            assert out["eig_positivity"][i, j].item() == pytest.approx(pos, abs=tol)
    assert out["eig_positivity"].mean() > 0.3  # the planted correlation shows


def test_analytic_cases() -> None:
    rng = np.random.default_rng(1)
    d_head, d_model = 4, 16
    a = rng.normal(size=(d_head, d_model))
    s = rng.normal(size=(d_head, d_head))
    # symmetric head: W = A^T S A with S symmetric -> fraction 1
    sym_left = a
    sym_right = (s + s.T) @ a
    # antisymmetric head: W = A^T K A with K antisymmetric -> fraction 0
    anti_right = (s - s.T) @ a
    # W = -P for the orthogonal projection P onto span(q): positivity -1 (and symmetric)
    q, _ = np.linalg.qr(rng.normal(size=(d_model, d_head)))
    proj_left, proj_right = q.T, -q.T
    # W = +P: positivity +1
    left = torch.tensor(np.stack([sym_left, a, proj_left, proj_left]))
    right = torch.tensor(np.stack([sym_right, anti_right, proj_right, -proj_right]))
    out = circuit_statistics(left, right)
    assert np.allclose(out["sym_frac"].numpy(), [1.0, 0.0, 1.0, 1.0], atol=1e-12)
    assert out["eig_positivity"][2].item() == pytest.approx(-1.0, abs=1e-12)
    assert out["eig_positivity"][3].item() == pytest.approx(1.0, abs=1e-12)
    assert abs(out["eig_positivity"][1].item()) < 1e-9  # antisymmetric: purely imaginary eigenvalues
    # a zero head has neither
    zero = circuit_statistics(torch.zeros(1, d_head, d_model), torch.zeros(1, d_head, d_model))
    assert torch.isnan(zero["sym_frac"]).all() and torch.isnan(zero["eig_positivity"]).all()


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 1e-6)])
def test_relative_change_against_dense_numpy(dtype, tol) -> None:
    rng = np.random.default_rng(2)
    l0, r0 = rng.normal(size=(2, 3, 6, 20)), rng.normal(size=(2, 3, 6, 20))
    l1 = l0 + 0.05 * rng.normal(size=l0.shape)
    r1 = r0 + 0.05 * rng.normal(size=r0.shape)
    t = [torch.as_tensor(x, dtype=dtype) for x in (l0, r0, l1, r1)]
    got = relative_change((t[0], t[1]), (t[2], t[3])).numpy()
    l0, r0, l1, r1 = (x.double().numpy() for x in t)
    w0, w1 = _dense(l0, r0), _dense(l1, r1)
    want = np.linalg.norm(w1 - w0, axis=(-2, -1)) / np.linalg.norm(w0, axis=(-2, -1))
    assert got.shape == (2, 3)
    assert np.allclose(got, want, rtol=tol, atol=0)
    assert want.min() > 0.01 and want.max() < 0.5


def test_relative_change_analytic_cases() -> None:
    rng = np.random.default_rng(3)
    left, right = torch.tensor(rng.normal(size=(5, 4, 32))), torch.tensor(rng.normal(size=(5, 4, 32)))
    same = relative_change((left, right), (left.clone(), right.clone()))
    assert (same < 1e-7).all()  # the absolute accuracy the module docstring states
    doubled = relative_change((left, right), (2 * left, right))  # W' = 2W -> 1
    assert np.allclose(doubled.numpy(), 1.0, atol=1e-12)
    negated = relative_change((left, right), (-left, right))  # W' = -W -> 2
    assert np.allclose(negated.numpy(), 2.0, atol=1e-12)
    # a different factorization of the same W (A -> A G, B -> B G^-T) does not count as change
    g = torch.tensor(rng.normal(size=(4, 4))) + 4 * torch.eye(4, dtype=torch.float64)
    refactored = relative_change((left, right), (g.T @ left, torch.linalg.inv(g) @ right))
    assert (refactored < 1e-7).all()
    with pytest.raises(ValueError, match="one shape"):
        relative_change((left, right), (left[:, :3], right[:, :3]))
