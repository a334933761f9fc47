"""Element-wise statistics of dense matrices, batched: moments, standardized histogram, D_KL.

For each matrix in a batch, over its N entries w:

- ``mean`` mu, population ``std`` sigma, ``skew`` E[(w-mu)^3]/sigma^3, excess
  ``kurtosis`` E[(w-mu)^4]/sigma^4 - 3, ``min``, ``max``;
- ``hist_z``: probabilities of z = (w - mu)/sigma over the fixed edges of
  `analysis.store.format.HIST_Z_EDGES`, plus an underflow bin (first) and an
  overflow bin (last), so nothing is dropped. Bins are half-open [e_i, e_i+1);
- ``kl_gauss`` = sum_b P_b ln(P_b / Q_b) over all bins including the two tails,
  where Q_b is the standard-normal probability mass of bin b (differences of the
  normal CDF, not the density at the bin centre). Empty bins contribute 0 and
  every Q_b > 0, so the result is always finite. Because P is standardized
  with the matrix's own mu and sigma, this is D_KL(P(w) || N(mu, sigma)).

A constant matrix (sigma = 0) gets z = 0 for every entry, skew and kurtosis NaN.

Two implementations of the same definitions: on CPU, compiled kernels that read each row
once or twice (`analysis.stats.fused`, numba; rows spread over cores by `analysis.threads`);
elsewhere (CUDA), or without numba, batched torch passes. The tests run both against the
same NumPy / SciPy references.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import torch

from headwatch.analysis.stats.definitions import ELEMENTWISE_STATS as ELEMENTWISE_STATS  # the names its results carry
from headwatch.analysis.stats.definitions import HIST_Z_EDGES
from headwatch.analysis.stats.density import gaussian_bin_mass  # numpy only: the dashboard (analysis.rmt.references) uses it too


def kl_from_hist(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_b p_b ln(p_b / q_b) along the last axis, with 0 ln 0 = 0. ``q`` must be positive."""
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(-1)


def fused_available(device: torch.device) -> bool:
    """Whether `elementwise_statistics` runs the compiled kernels for tensors on ``device`` by
    default: on CPU, when numba is installed. Callers allocate the torch path's scratch only
    where it does not."""
    return device.type == "cpu" and importlib.util.find_spec("numba") is not None


def elementwise_statistics(
    w: torch.Tensor,
    *,
    edges: np.ndarray = HIST_Z_EDGES,
    scratch: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    moments: tuple[torch.Tensor, torch.Tensor] | None = None,
    fused: bool | None = None,
) -> dict[str, torch.Tensor]:
    """Moments, standardized histogram and D_KL from a Gaussian for each row of ``w``.

    The higher moments are taken of z = (w - mu)/sigma rather than of w - mu,
    so tiny weights cannot underflow float32 when raised to the fourth power.

    Args:
        w: ``(batch, N)`` entries of each matrix (flatten the matrices first).
            Computed in ``w``'s dtype (float32 or float64) on ``w``'s device;
            never modified.
        edges: uniformly spaced standardized bin edges.
        scratch: optional work buffers reused across calls to avoid allocating
            (and page-faulting) three ``batch x N`` temporaries each time: two
            of ``w``'s dtype and one int32, each with at least ``batch * N``
            elements. Their contents are overwritten.
        moments: optional ``(mean, E[w^2])`` per row, float64, known exactly from elsewhere
            (a low-rank product's factors: `analysis.weights.heads`). They replace two passes over
            ``w`` and are more accurate than a float32 pass; sigma^2 = E[w^2] - mean^2. Rows
            where that difference is not well conditioned (sigma^2 < 1e-8 E[w^2]: a nearly
            constant matrix) are computed from ``w`` instead.
        fused: use the compiled CPU kernels of `analysis.stats.fused` (None: on CPU when numba is
            installed); False: the torch passes. ``scratch`` serves only the torch passes.

    Returns:
        A dict of ``(batch,)`` tensors keyed by `ELEMENTWISE_STATS`, plus
        ``hist_z``: ``(batch, len(edges) + 1)`` probabilities (float64).

    Raises:
        ValueError: ``w`` is not 2-D, ``edges`` is not uniform, or ``moments`` do not
            have one value per row.
    """
    if w.ndim != 2:
        raise ValueError(f"expected (batch, N) entries, got shape {tuple(w.shape)}")
    widths = np.diff(edges)
    if not np.allclose(widths, widths[0], rtol=1e-9, atol=0):
        raise ValueError("histogram edges must be uniformly spaced")
    batch, n = w.shape
    if fused is None:
        fused = fused_available(w.device)
    if fused:
        return _fused_statistics(w, edges, moments)
    if scratch is None:
        scratch = (torch.empty_like(w), torch.empty_like(w), torch.empty(w.shape, dtype=torch.int32, device=w.device))
    z, tmp, idx = (buf.view(-1)[: batch * n].view(batch, n) for buf in scratch)

    # A reduction over the whole of one row is several times faster than over dim 1.
    w_min, w_max = (torch.stack(t) for t in zip(*(torch.aminmax(row) for row in w), strict=True))
    mean, std = _mean_std(w, w_min, w_max, z, moments)
    constant = std == 0
    safe_std = torch.where(constant, torch.ones_like(std), std)
    if bool((mean.abs() <= safe_std).all()):  # z = (w - mu) / sigma in one pass
        torch.addcmul((-mean / safe_std)[:, None], w, (1.0 / safe_std)[:, None], out=z)
    else:  # |mu| > sigma: subtract first, which is exact for w near mu, then scale
        torch.sub(w, mean[:, None], out=z).mul_((1.0 / safe_std)[:, None])
    torch.mul(z, z, out=tmp)  # z^2
    m4 = torch.linalg.vector_norm(tmp, 2, dim=1) ** 2 / n  # E[z^4]
    tmp.mul_(z)  # z^3
    m3 = tmp.mean(dim=1)
    nan = torch.full_like(std, float("nan"))
    skew = torch.where(constant, nan, m3)
    kurt = torch.where(constant, nan, m4 - 3.0)

    # Bin index 0 = underflow, i = [e_(i-1), e_i), len(edges) = overflow: with
    # t = (z - e_0)/width + 1 clamped to [0, len(edges) + 0.5], int(t) = floor(t).
    lo, width = float(edges[0]), float(widths[0])
    offset = torch.tensor(1.0 - lo / width, dtype=z.dtype, device=z.device)
    torch.add(offset, z, alpha=1.0 / width, out=tmp).clamp_(0.0, len(edges) + 0.5)  # one pass for t
    idx.copy_(tmp)  # float -> int32 truncates toward zero, = floor for t >= 0
    n_bins = len(edges) + 1
    counts = torch.stack([torch.bincount(idx[b], minlength=n_bins) for b in range(batch)])
    hist = counts.to(torch.float64) / n
    q = torch.as_tensor(gaussian_bin_mass(edges), dtype=torch.float64, device=w.device)
    return {
        "mean": mean,
        "std": std,
        "skew": skew,
        "kurtosis": kurt,
        "min": w_min,
        "max": w_max,
        "kl_gauss": kl_from_hist(hist, q),
        "hist_z": hist,
    }


def _given_moments(
    w: torch.Tensor, moments: tuple[torch.Tensor, torch.Tensor] | None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Each row's mean and standard deviation in ``w``'s dtype from ``moments`` (mean, E[w^2]),
    or None where there are none or any row's variance is not well conditioned."""
    if moments is None:
        return None
    batch = w.shape[0]
    mean64, sq64 = (torch.as_tensor(t, dtype=torch.float64, device=w.device).reshape(-1) for t in moments)
    if mean64.shape != (batch,) or sq64.shape != (batch,):
        raise ValueError(f"moments need one mean and one E[w^2] per row ({batch}), got {tuple(mean64.shape)}")
    var64 = sq64 - mean64**2
    if bool((var64 >= 1e-8 * sq64).all()) and bool((sq64 > 0).all()):
        return mean64.to(w.dtype), var64.sqrt().to(w.dtype)
    return None


def _mean_std(
    w: torch.Tensor,
    w_min: torch.Tensor,
    w_max: torch.Tensor,
    work: torch.Tensor,
    moments: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's mean and population standard deviation, in ``w``'s dtype: from ``moments``
    where they are well conditioned, else from ``w`` (two passes, ``work`` overwritten)."""
    given = _given_moments(w, moments)
    if given is not None:
        return given
    n = w.shape[1]
    # A float mean of n equal values can miss them by an ulp (0.1 -> 0.10000001),
    # which would turn a constant matrix into one with tiny sigma and skew +-1:
    # take a constant row's mean as its value, so w - mu is exactly 0 there.
    mean = torch.where(w_min == w_max, w_min, w.mean(dim=1))
    torch.sub(w, mean[:, None], out=work)  # w - mu
    return mean, torch.linalg.vector_norm(work, 2, dim=1) / math.sqrt(n)


def _fused_statistics(
    w: torch.Tensor, edges: np.ndarray, moments: tuple[torch.Tensor, torch.Tensor] | None
) -> dict[str, torch.Tensor]:
    """`elementwise_statistics` through the compiled kernels of `analysis.stats.fused`, one row per
    task (`analysis.threads.map_per_core`). The same definitions, operations and dtypes as
    the torch path; the power sums (and, without ``moments``, the mean and variance) are
    accumulated in float64, so they are at least as accurate."""
    from headwatch.analysis.stats import fused  # numba: imported when first used
    from headwatch.analysis.threads import map_per_core

    batch, n = w.shape
    rows = w.detach().cpu().contiguous().numpy()  # (batch, N): a view, w is not copied
    given = _given_moments(w, moments)

    def one(b: int) -> tuple[float, ...]:
        *scalars, counts = fused.row_statistics(
            rows[b], edges, None if given is None else (given[0][b].item(), given[1][b].item())
        )
        return (*scalars, *counts.tolist())

    out = torch.tensor(map_per_core(one, range(batch)), dtype=torch.float64)  # (batch, 6 + n_bins)
    mean, std, w_min, w_max, m3, m4 = out[:, :6].T
    hist = out[:, 6:] / n
    constant = std == 0
    q = torch.as_tensor(gaussian_bin_mass(edges), dtype=torch.float64)
    return {
        "mean": mean.to(w.device, w.dtype),
        "std": std.to(w.device, w.dtype),
        "skew": torch.where(constant, torch.nan, m3).to(w.device, w.dtype),
        "kurtosis": torch.where(constant, torch.nan, m4 - 3.0).to(w.device, w.dtype),
        "min": w_min.to(w.device, w.dtype),
        "max": w_max.to(w.device, w.dtype),
        "kl_gauss": kl_from_hist(hist, q).to(w.device),
        "hist_z": hist.to(w.device),
    }
