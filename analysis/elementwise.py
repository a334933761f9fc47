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
"""

from __future__ import annotations

import math

import numpy as np
import torch

from analysis.density import gaussian_bin_mass  # numpy only: the dashboard (analysis.references) uses it too
from analysis.store.format import ELEMENTWISE_COLUMNS, HIST_Z_EDGES

ELEMENTWISE_STATS = ELEMENTWISE_COLUMNS  # the store's column names (analysis/store/format.py)


def kl_from_hist(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum_b p_b ln(p_b / q_b) along the last axis, with 0 ln 0 = 0. ``q`` must be positive."""
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(-1)


def elementwise_statistics(
    w: torch.Tensor,
    *,
    edges: np.ndarray = HIST_Z_EDGES,
    scratch: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
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

    Returns:
        A dict of ``(batch,)`` tensors keyed by `ELEMENTWISE_STATS`, plus
        ``hist_z``: ``(batch, len(edges) + 1)`` probabilities (float64).

    Raises:
        ValueError: ``w`` is not 2-D or ``edges`` is not uniform.
    """
    if w.ndim != 2:
        raise ValueError(f"expected (batch, N) entries, got shape {tuple(w.shape)}")
    widths = np.diff(edges)
    if not np.allclose(widths, widths[0], rtol=1e-9, atol=0):
        raise ValueError("histogram edges must be uniformly spaced")
    batch, n = w.shape
    if scratch is None:
        scratch = (torch.empty_like(w), torch.empty_like(w), torch.empty(w.shape, dtype=torch.int32, device=w.device))
    z, tmp, idx = (buf.view(-1)[: batch * n].view(batch, n) for buf in scratch)

    w_min, w_max = torch.aminmax(w, dim=1)  # one pass for both
    # A float mean of n equal values can miss them by an ulp (0.1 -> 0.10000001),
    # which would turn a constant matrix into one with tiny sigma and skew +-1:
    # take a constant row's mean as its value, so w - mu is exactly 0 there.
    mean = torch.where(w_min == w_max, w_min, w.mean(dim=1))
    torch.sub(w, mean[:, None], out=z)  # w - mu
    std = torch.linalg.vector_norm(z, 2, dim=1) / math.sqrt(n)
    constant = std == 0
    safe_std = torch.where(constant, torch.ones_like(std), std)
    z.mul_((1.0 / safe_std)[:, None])  # z = (w - mu) / sigma
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
    torch.mul(z, 1.0 / width, out=tmp)
    tmp.add_(1.0 - lo / width).clamp_(0.0, len(edges) + 0.5)
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
