"""How far a whole weight matrix's spectrum departs from the Marchenko-Pastur law of a random matrix.

For an m x n matrix W (m <= n after transposing if needed) whose entries are i.i.d.
with variance s^2, the eigenvalues lambda_k = s_k^2 of W W^T, rescaled to
x_k = lambda_k / (n s^2), follow the Marchenko-Pastur law with ratio c = m / n as
m, n grow: density

    rho(x) = sqrt((x_+ - x)(x - x_-)) / (2 pi c x)  on  [x_-, x_+],  x_+- = (1 +- sqrt(c))^2,

mean 1 and second moment 1 + c (docs/design-notes.md section 7). By universality the law holds
for any entry distribution with that variance (a Gaussian and a logistic give the
same), so no sampling is needed. The departures the store records, per matrix, with
s^2 the matrix's own entry variance (about its mean):

- `mp_kl`: D_KL(P(x) || MP_c) on the law's quantile bins (B = `MP_KL_BINS`, each of
  null mass 1/B, the outer ones open), so it is finite and in [0, ln B], like the
  heads' ``kl_null``;
- `mp_spikes`: how many x_k lie above the upper edge x_+ (outliers, "spikes");
- `mp_below`: the fraction of the m values below the lower edge x_- (0 when c = 1,
  where x_- = 0);
- `powerlaw_fit`: the tail exponent alpha of the eigenvalues lambda_k as weightwatcher
  defines it, the ``powerlaw`` package's fit (Clauset, Shalizi and Newman 2009): for
  each candidate x_min, the continuous maximum-likelihood exponent
  alpha = 1 + n_tail / sum(ln(lambda / x_min)) over the tail lambda >= x_min, and the
  Kolmogorov-Smirnov distance between the tail's empirical CDF and the fitted one;
  the x_min with the smallest distance wins.

numpy only (no torch): the dashboard draws the law from here.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

# Quantile bins of `mp_kl`, as for the heads' kl_null (analysis/rmt/nullmodel.py).
MP_KL_BINS = 8


def _check_ratio(c: float) -> None:
    if not 0 < c <= 1:
        raise ValueError(f"Marchenko-Pastur ratio c = m / n must be in (0, 1], got {c!r}")


def mp_edges(c: float) -> tuple[float, float]:
    """The support ``(x_-, x_+) = ((1 - sqrt c)^2, (1 + sqrt c)^2)`` of MP_c (mean 1)."""
    _check_ratio(c)
    r = float(np.sqrt(c))
    return (1 - r) ** 2, (1 + r) ** 2


def mp_density(x: np.ndarray, c: float) -> np.ndarray:
    """Density of MP_c at ``x`` (0 outside the support; ``x`` in units of the mean)."""
    lo, hi = mp_edges(c)
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    inside = (x > lo) & (x < hi)
    out[inside] = np.sqrt((hi - x[inside]) * (x[inside] - lo)) / (2 * np.pi * c * x[inside])
    return out


@lru_cache(maxsize=64)
def _grid(c: float, n: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Points x(theta) = x_- + (x_+ - x_-)(1 - cos theta)/2 and the CDF there.

    In theta the integrand rho(x) dx = ((x_+ - x_-)/2)^2 sin^2(theta) / (2 pi c x) dtheta
    is smooth (even for c = 1, where rho ~ x^(-1/2) at 0), so a midpoint rule is accurate.
    """
    lo, hi = mp_edges(c)
    half = (hi - lo) / 2
    theta = (np.arange(n) + 0.5) * np.pi / n
    x_mid = lo + half * (1 - np.cos(theta))
    mass = half * half * np.sin(theta) ** 2 / (2 * np.pi * c * x_mid) * (np.pi / n)
    cdf = np.concatenate([[0.0], np.cumsum(mass)])
    cdf /= cdf[-1]
    edges = lo + half * (1 - np.cos(np.arange(n + 1) * np.pi / n))
    return edges, cdf


def mp_cdf(x: np.ndarray, c: float) -> np.ndarray:
    """Cumulative distribution of MP_c."""
    grid, cdf = _grid(float(c))
    return np.interp(np.asarray(x, dtype=np.float64), grid, cdf, left=0.0, right=1.0)


def mp_quantile(q: np.ndarray, c: float) -> np.ndarray:
    """Inverse of `mp_cdf`."""
    grid, cdf = _grid(float(c))
    return np.interp(np.asarray(q, dtype=np.float64), cdf, grid)


def mp_scaled(lam: np.ndarray, *, n: int, variance: np.ndarray) -> np.ndarray:
    """x_k = lambda_k / (n s^2): eigenvalues in the law's units (NaN where s^2 = 0).

    Args:
        lam: ``(..., m)`` eigenvalues of W W^T (m the smaller side).
        n: the larger side of W.
        variance: ``(...)`` entry variance s^2 of each matrix.
    """
    v = np.asarray(variance, dtype=np.float64)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(v > 0, np.asarray(lam, dtype=np.float64) / (n * np.where(v > 0, v, 1.0)), np.nan)


def mp_kl(x: np.ndarray, c: float, n_bins: int = MP_KL_BINS) -> np.ndarray:
    """D_KL(P(x) || MP_c) on the law's ``n_bins`` quantile bins, in nats, for ``(..., m)`` values x.

    Bins are cut at the law's quantiles 1/B, ..., (B-1)/B (outer bins open), so each has
    null mass 1/B and D_KL = sum_b P_b ln(P_b B) with 0 ln 0 = 0: finite, in [0, ln B].
    NaN where x is NaN (a constant matrix).
    """
    x = np.asarray(x, dtype=np.float64)
    inner = mp_quantile(np.arange(1, n_bins) / n_bins, c)
    idx = np.searchsorted(inner, x, side="right")
    p = np.stack([(idx == b).sum(axis=-1) for b in range(n_bins)], axis=-1) / x.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(p > 0, p * np.log(p * n_bins), 0.0).sum(axis=-1)
    return np.where(np.isnan(x).any(axis=-1), np.nan, out)


def mp_spikes(x: np.ndarray, c: float) -> np.ndarray:
    """How many of the ``(..., m)`` values lie above the upper edge (1 + sqrt c)^2 (int64)."""
    return (np.asarray(x) > mp_edges(c)[1]).sum(axis=-1)


def mp_below(x: np.ndarray, c: float) -> np.ndarray:
    """Fraction of the ``(..., m)`` values below the lower edge (1 - sqrt c)^2."""
    x = np.asarray(x, dtype=np.float64)
    return (x < mp_edges(c)[0]).sum(axis=-1) / x.shape[-1]


def powerlaw_fit(evals: np.ndarray) -> tuple[float, float, float]:
    """The power-law tail of an empirical spectral density, as weightwatcher fits it.

    The method of the ``powerlaw`` package (``powerlaw.Fit(evals)``, continuous, no x_max),
    which weightwatcher calls: zeros are dropped; the candidate x_min are the distinct
    values, less the two largest; for each, over the tail lambda >= x_min (n_tail values,
    ascending lambda_(0) = x_min, ..., lambda_(n_tail - 1)),

        alpha = 1 + n_tail / sum(ln(lambda / x_min)),
        D = max_j |(1 - (lambda_(j) / x_min)^(1 - alpha)) - j / n_tail|,

    (the tail's empirical CDF is ``powerlaw``'s j / n_tail), and the x_min with the
    smallest D among those with alpha > 1 is chosen (all of them when none has).
    Vectorised over the candidates in O(n^2) memory-light numpy (n up to a few thousand).

    Args:
        evals: eigenvalues lambda_k of W^T W (any order, any positive scale: alpha and D
            do not depend on it).

    Returns:
        ``(alpha, x_min, D)``; NaNs when fewer than two candidates remain.
    """
    x = np.sort(np.asarray(evals, dtype=np.float64).reshape(-1))
    x = x[np.isfinite(x) & (x > 0)]
    xmins, first = np.unique(x, return_index=True)
    xmins, first = xmins[:-2], first[:-2]  # powerlaw drops the largest value, then the last candidate
    if len(xmins) < 2:
        return float("nan"), float("nan"), float("nan")
    log_x = np.log(x)
    tail_log_sum = np.cumsum(log_x[::-1])[::-1]  # sum_{j >= i} ln x_j
    n_tail = len(x) - first
    alphas = 1 + n_tail / (tail_log_sum[first] - n_tail * np.log(xmins))
    distances = np.empty(len(xmins))
    for i, (start, xmin, alpha, nt) in enumerate(zip(first, xmins, alphas, n_tail, strict=True)):
        tail = x[start:]
        fitted = 1 - (tail / xmin) ** (1 - alpha)
        distances[i] = np.abs(fitted - np.arange(nt) / nt).max()
    good = alphas > 1
    pick = np.argmin(np.where(good, distances, np.inf)) if good.any() else np.argmin(distances)
    return float(alphas[pick]), float(xmins[pick]), float(distances[pick])
