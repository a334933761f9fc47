"""A head's weight density p(w) in raw units, rebuilt from its standardized histogram.

The store keeps, per head and step, the mass of the entries of W_QK in fixed bins
of z = (w - mu) / sigma (`analysis.store.format`: 200 bins of width 0.1 on [-10, 10],
plus an underflow and an overflow bin), with mu and sigma the entries' mean and
standard deviation. The standardized density is piecewise constant,
p_z(z) = hist_z[bin of z] / BIN_WIDTH, and a change of variables gives the raw-unit
density

    p(w) = p_z((w - mu) / sigma) / sigma,

so every step's histogram, whatever its width, maps onto one w axis. Outside
|z| < 10 only the tail mass is known, not its shape: no density is claimed there.

Pure numpy, batched over steps (one row per step); inputs are never modified.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from headwatch.analysis.stats.definitions import HIST_Z_BINS, HIST_Z_EDGES, HIST_Z_HI, HIST_Z_LO

BIN_WIDTH = (HIST_Z_HI - HIST_Z_LO) / HIST_Z_BINS  # 0.1 in z


def density_extent(hist: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> tuple[float, float]:
    """Raw-unit interval [w_lo, w_hi] covering every occupied interior bin at every step.

    Args:
        hist: ``(S, 202)`` hist_z probabilities of one head (underflow first, overflow last).
        mu, sigma: ``(S,)`` mean and standard deviation of its entries.

    Returns:
        ``(w_lo, w_hi)``; ``(-1, 1)`` when no step has an occupied bin with a finite, positive sigma.
    """
    interior = hist[:, 1:-1] > 0  # (S, 200)
    any_bin = interior.any(axis=1)
    if not any_bin.any():
        return (-1.0, 1.0)
    first = np.argmax(interior, axis=1)
    last = HIST_Z_BINS - 1 - np.argmax(interior[:, ::-1], axis=1)
    lo = mu + sigma * HIST_Z_EDGES[first]
    hi = mu + sigma * HIST_Z_EDGES[last + 1]
    ok = any_bin & np.isfinite(lo) & np.isfinite(hi) & (sigma > 0)
    if not ok.any():
        return (-1.0, 1.0)
    return float(lo[ok].min()), float(hi[ok].max())


def density_grid(hist: np.ndarray, mu: np.ndarray, sigma: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Raw-unit density p(w) = p_z((w - mu) / sigma) / sigma on a common grid, for every step.

    p_z is the piecewise-constant standardized density hist_z / bin width; grid points
    outside [-10, 10] sigma (the tail bins, whose shape is unknown) get NaN, and so
    do empty bins (shown as gaps on a log colour scale).

    Args:
        hist: ``(S, 202)`` hist_z of one head.
        mu, sigma: ``(S,)``.
        w: ``(W,)`` grid in raw units.

    Returns:
        ``(S, W)`` densities in 1 / raw unit.
    """
    safe_sigma = np.where(sigma > 0, sigma, np.nan)
    z = (w[None, :] - mu[:, None]) / safe_sigma[:, None]  # (S, W)
    idx = np.floor((z - HIST_Z_LO) / BIN_WIDTH)
    inside = np.isfinite(idx) & (idx >= 0) & (idx < HIST_Z_BINS)
    idx = np.where(inside, idx, 0).astype(np.int64) + 1  # +1: skip the underflow bin
    p = np.take_along_axis(hist, idx, axis=1) / BIN_WIDTH / safe_sigma[:, None]
    p = np.where(inside & (p > 0), p, np.nan)
    return p


def density_curves(hist: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each step's density at its own bin centres: w ``(S, 200)`` and p(w) ``(S, 200)`` (0 -> NaN).

    Args:
        hist: ``(S, 202)`` hist_z of one head.
        mu, sigma: ``(S,)``.

    Returns:
        ``(w, p)``: w = mu + sigma z at the interior bin centres, p = hist_z / BIN_WIDTH / sigma there.
    """
    centres = 0.5 * (HIST_Z_EDGES[1:] + HIST_Z_EDGES[:-1])
    w = mu[:, None] + sigma[:, None] * centres[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        p = hist[:, 1:-1] / BIN_WIDTH / sigma[:, None]
    return w, np.where(p > 0, p, np.nan)


def gaussian_bin_mass(edges: np.ndarray = HIST_Z_EDGES) -> np.ndarray:
    """Standard-normal mass of each bin of ``[-inf, e_0, ..., e_n, inf]`` (float64, n+2 values).

    A bin ``[a, b)`` with ``a >= 0`` gets ``sf(a) - sf(b)`` (upper-tail masses),
    any other ``cdf(b) - cdf(a)``: each difference is of two small numbers, so every
    bin keeps full relative precision. (Differences of the CDF alone cancel to 0
    right of z ~ 8.3, where Phi(z) rounds to 1 in float64, and would make D_KL
    infinite for any head with an entry there.)
    """
    outer = np.concatenate([[-np.inf], np.asarray(edges, dtype=np.float64), [np.inf]])

    def cdf(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2.0))

    def sf(x: float) -> float:
        return 0.5 * math.erfc(x / math.sqrt(2.0))

    return np.array([sf(a) - sf(b) if a >= 0 else cdf(b) - cdf(a) for a, b in itertools.pairwise(outer)])
