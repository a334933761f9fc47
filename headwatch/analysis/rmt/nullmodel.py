"""Random-matrix null model for a head's spectrum: the free product of two Marchenko-Pastur laws.

If W_Q and W_K (each d_head x d_model) have i.i.d. N(0, sigma0^2) entries, the
non-zero eigenvalues lambda_k = s_k^2 of W_QK W_QK^T are those of
(A^T A)(B^T B) with A = W_Q^T, B = W_K^T. Each factor divided by d_model sigma0^2
is a Wishart matrix whose spectrum tends to the Marchenko-Pastur law MP_c with
ratio c = d_head / d_model (mean 1, variance c). The two are independent and
rotation-invariant, hence asymptotically free, so x = lambda / (d_model sigma0^2)^2
follows the free multiplicative convolution MP_c (x) MP_c.

Its S-transform is the product of the factors' S-transforms, S(z) = 1/(1 + c z)^2.
With psi(u) = sum_k m_k u^k (moment generating function) and chi its inverse,
S(z) = chi(z) (1 + z)/z, so chi(z) = z / ((1 + z)(1 + c z)^2). Writing the
Stieltjes transform G(x) = int rho(t)/(x - t) dt, psi(1/x) = x G(x) - 1 =: z, and
1/x = chi(z) becomes the cubic

    c^2 z^3 + (c^2 + 2c) z^2 + (1 + 2c - x) z + 1 = 0.

Inside the support it has a complex-conjugate pair of roots, and the density is
rho(x) = -Im G(x + i0)/pi = |Im z| / (pi x). The support edges are the critical
values of x(z) = (1 + z)(1 + c z)^2 / z, at the roots of 2c z^2 + c z - 1 = 0;
for c = 1/8 that is [0.2870, 2.3341]. The law has mean 1 and second moment
1 + 2c, so "matched scale" means dividing a head's lambda_k by their mean.

Everything here is numpy only (no torch): the dashboard uses it directly.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

# Quantile bins of the null law used by `kl_null`: a head's d_head values are
# binned at the null's 1/B, 2/B, ... quantiles, the outer bins open-ended, so
# every bin has null mass exactly 1/B and the divergence is always finite.
KL_NULL_BINS = 8


def free_mp_support(c: float) -> tuple[float, float]:
    """Edges (x_-, x_+) of MP_c (x) MP_c for ratio ``c = d_head / d_model`` in (0, 1]."""
    _check_ratio(c)
    root = np.sqrt(c * c + 8 * c)
    edges = []
    for z in ((-c - root) / (4 * c), (-c + root) / (4 * c)):
        edges.append((1 + z) * (1 + c * z) ** 2 / z)
    return float(min(edges)), float(max(edges))


def free_mp_density(x: np.ndarray, c: float) -> np.ndarray:
    """Density of MP_c (x) MP_c at ``x`` (0 outside the support), from the cubic above."""
    _check_ratio(c)
    x = np.asarray(x, dtype=np.float64)
    lo, hi = free_mp_support(c)
    flat = x.reshape(-1)
    out = np.zeros_like(flat)
    inside = (flat > lo) & (flat < hi)
    xs = flat[inside]
    # companion-matrix roots of  z^3 + a z^2 + b z + d = 0, batched over x
    a = np.full_like(xs, (c * c + 2 * c) / (c * c))
    b = (1 + 2 * c - xs) / (c * c)
    d = np.full_like(xs, 1 / (c * c))
    companion = np.zeros((len(xs), 3, 3))
    companion[:, 0, :] = np.stack([-a, -b, -d], axis=1)
    companion[:, 1, 0] = 1
    companion[:, 2, 1] = 1
    roots = np.linalg.eigvals(companion)
    out[inside] = np.abs(roots.imag).max(axis=1) / (np.pi * xs)
    return out.reshape(x.shape)


@lru_cache(maxsize=64)
def _grid(c: float, n: int = 4001) -> tuple[np.ndarray, np.ndarray]:
    """Points clustered at both edges (where the density has square-root ends) and the CDF there."""
    lo, hi = free_mp_support(c)
    theta = np.linspace(0.0, np.pi, n)
    x = lo + (hi - lo) * (1 - np.cos(theta)) / 2
    rho = free_mp_density(x, c)
    cdf = np.concatenate([[0.0], np.cumsum(np.diff(x) * (rho[1:] + rho[:-1]) / 2)])
    return x, cdf / cdf[-1]


def free_mp_cdf(x: np.ndarray, c: float) -> np.ndarray:
    """Cumulative distribution of MP_c (x) MP_c (numerical integral of the density)."""
    grid, cdf = _grid(float(c))
    return np.interp(np.asarray(x, dtype=np.float64), grid, cdf, left=0.0, right=1.0)


def free_mp_quantile(q: np.ndarray, c: float) -> np.ndarray:
    """Inverse of `free_mp_cdf`."""
    grid, cdf = _grid(float(c))
    return np.interp(np.asarray(q, dtype=np.float64), cdf, grid)


def mp_density(x: np.ndarray, c: float) -> np.ndarray:
    """Plain Marchenko-Pastur density (eigenvalues of one normalized Wishart factor), ratio c <= 1."""
    _check_ratio(c)
    x = np.asarray(x, dtype=np.float64)
    lo, hi = (1 - np.sqrt(c)) ** 2, (1 + np.sqrt(c)) ** 2
    inside = (x > lo) & (x < hi)
    out = np.zeros_like(x)
    out[inside] = np.sqrt((hi - x[inside]) * (x[inside] - lo)) / (2 * np.pi * c * x[inside])
    return out


def kl_null_edges(c: float, n_bins: int = KL_NULL_BINS) -> np.ndarray:
    """Inner edges of the `kl_null` bins: the null's quantiles 1/B .. (B-1)/B in x = lambda/mean(lambda)."""
    return free_mp_quantile(np.arange(1, n_bins) / n_bins, c)


def kl_null(lam: np.ndarray, c: float, n_bins: int = KL_NULL_BINS) -> np.ndarray:
    """D_KL(P(lambda) || null) at matched scale, for a batch of spectra.

    Each spectrum is rescaled to x = lambda / mean(lambda) (the null has mean 1),
    its d_head values are counted in the `kl_null_edges` bins (outer bins open,
    each with null mass 1/B), and D_KL = sum_b P_b ln(P_b B), with 0 ln 0 = 0.
    It lies in [0, ln B]. A true null spectrum at finite d_head scores a little
    above 0 (measured: 0.019 on average at d_model 256, d_head 32); eigenvalues
    repel, so they fill the bins more evenly than independent draws would, and
    this is well below the (B - 1) / (2 d_head) bias of independent samples.
    `null_expectations` gives the finite-size value to compare against.

    Args:
        lam: ``(..., d_head)`` eigenvalues lambda_k = s_k^2 (any order).
        c: d_head / d_model.
        n_bins: B.

    Returns:
        ``(...)`` divergences in nats; NaN for an all-zero spectrum.
    """
    lam = np.asarray(lam, dtype=np.float64)
    mean = lam.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        x = lam / mean
    idx = np.searchsorted(kl_null_edges(c, n_bins), x, side="right")  # (..., d_head) in 0..B-1
    counts = np.stack([(idx == b).sum(axis=-1) for b in range(n_bins)], axis=-1)
    p = counts / lam.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p * n_bins), 0.0)
    out = terms.sum(axis=-1)
    return np.where(mean[..., 0] > 0, out, np.nan)


def sample_null_spectra(d_model: int, d_head: int, n_samples: int, *, seed: int = 0) -> np.ndarray:
    """Monte Carlo lambda_k of W_Q^T W_K with i.i.d. N(0, 1) factors, ``(n_samples, d_head)``, descending.

    Uses the QR core (exact, no dense d_model x d_model matrix); see `analysis.stats.spectrum`.
    """
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n_samples, d_model, d_head))
    b = rng.standard_normal((n_samples, d_model, d_head))
    r_a = np.linalg.qr(a, mode="r")
    r_b = np.linalg.qr(b, mode="r")
    s = np.linalg.svd(r_a @ np.swapaxes(r_b, -1, -2), compute_uv=False)
    return s**2


@lru_cache(maxsize=32)
def null_expectations(d_model: int, d_head: int, n_samples: int = 64, seed: int = 0) -> dict[str, float]:
    """Expected spectral statistics of a Gaussian head at finite (d_model, d_head), by Monte Carlo.

    Returns mean and standard deviation over ``n_samples`` draws of stable rank,
    spectral entropy, participation ratio and `kl_null`; cached per arguments.
    These are scale-free, so they hold for any sigma0.
    """
    lam = sample_null_spectra(d_model, d_head, n_samples, seed=seed)
    total = lam.sum(axis=1)
    p = lam / total[:, None]
    values = {
        "stable_rank": total / lam[:, 0],
        "spectral_entropy": -(p * np.log(p)).sum(axis=1),
        "participation_ratio": total**2 / (lam**2).sum(axis=1),
        "kl_null": kl_null(lam, d_head / d_model),
    }
    out = {}
    for name, v in values.items():
        out[name] = float(v.mean())
        out[name + "_std"] = float(v.std())
    return out


def _check_ratio(c: float) -> None:
    if not 0 < c <= 1:
        raise ValueError(f"ratio c = d_head / d_model must be in (0, 1], got {c!r}")


NULL_RATIO_STATS = ("stable_rank", "spectral_entropy", "participation_ratio")


def null_columns(sv: np.ndarray, spectral: dict[str, np.ndarray], *, d_model: int) -> dict[str, np.ndarray]:
    """The store's null-model columns for a batch of heads (`analysis.store.format.NULL_COLUMNS`).

    Args:
        sv: ``(..., d_head)`` singular values.
        spectral: ``stable_rank``, ``spectral_entropy``, ``participation_ratio``
            arrays of shape ``(...)`` (as in the store).
        d_model: the side of W_QK.

    Returns:
        ``kl_null`` and ``<stat>_over_null`` for each of `NULL_RATIO_STATS`, each ``(...)``.
    """
    sv = np.asarray(sv, dtype=np.float64)
    d_head = sv.shape[-1]
    expected = null_expectations(int(d_model), int(d_head))
    out = {"kl_null": kl_null(sv * sv, d_head / d_model)}
    for name in NULL_RATIO_STATS:
        out[f"{name}_over_null"] = np.asarray(spectral[name], dtype=np.float64) / expected[name]
    return out


def null_ordered_spectrum(mean_lambda: np.ndarray, d_head: int, d_model: int) -> np.ndarray:
    """Typical ordered lambda_k of a random head at matched scale: ``(..., d_head)``, descending.

    The k-th largest of d_head values drawn from the null law sits near its
    quantile 1 - (k + 1/2)/d_head; multiplied by a spectrum's own mean lambda
    (the null has mean 1) this is the spectrum a Gaussian head of the same
    Frobenius norm would have.
    """
    q = 1 - (np.arange(d_head) + 0.5) / d_head
    x = free_mp_quantile(q, d_head / d_model)
    return np.asarray(mean_lambda, dtype=np.float64)[..., None] * x
