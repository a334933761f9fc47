"""Fused CPU kernels of the element-wise statistics: one read of a row for its moments and histogram.

`analysis.stats.elementwise` defines the statistics; on CPU it runs them through these kernels
when numba is installed (it is pinned in both requirements files). The torch path there
reads a 2048 x 2048 product about ten times (z, z^2, z^3, the bin coordinate, its clamp,
its integer copy, the bincount); here one compiled pass forms z's power sums and bin
indices and counts each block's indices while they are in L1, numpy's min and max read it
once more, and two more passes run only where the mean and standard deviation are not given.
Power sums accumulate in float64; z and the bin coordinate are
formed in the row's own dtype with the same operations as the torch path (no fused
multiply-add), so both paths bin alike.

Each kernel takes one 1-D row, releases the GIL and runs on the calling thread:
`analysis.weights.heads` spreads layers over threads, `analysis.stats.elementwise` spreads rows.
`row_statistics` puts them together for one row; numpy only, so the dashboard's
random-head references (`analysis.rmt.references`) run the same code as the precompute job.
"""

from __future__ import annotations

import math

import numba
import numpy as np

# Reassociation lets the power sums vectorize (several partial sums, added at the end).
# No "contract": a fused multiply-add would round z and the bin coordinate differently
# from the torch path. No "nnan": the kernels see only finite rows, but keep IEEE compares.
_FAST = {"reassoc", "nsz"}


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def row_sums(w: np.ndarray, center: float) -> tuple[float, float]:
    """``(sum(w), sum((w - center)^2))`` of a 1-D row, accumulated in float64."""
    s1 = 0.0
    s2 = 0.0
    for i in range(w.size):
        x = np.float64(w[i])
        s1 += x
        d = x - center
        s2 += d * d
    return s1, s2


# Entries per block of bin indices: 16 KiB of int32, which stays in L1 between the two loops.
BLOCK = 4096


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def z_pass(w: np.ndarray, subtract, scale, shift, offset, inv_width, top, counts: np.ndarray) -> tuple[float, float]:
    """With z = (w - subtract) * scale + shift in ``w``'s dtype: ``(sum z^3, sum z^4)`` in
    float64, and every entry counted in its bin int(clamp(offset + z * inv_width, 0, top)).

    The scalars must have ``w``'s dtype. ``counts`` is ``(4, n_bins)`` int64 and is added to:
    four interleaved tallies (summed by the caller), so that runs of entries in one bin do
    not wait on one counter. Per block of `BLOCK` entries, a vectorized loop forms z, its
    powers and the bin indices, and a second loop counts them.
    """
    s3 = 0.0
    s4 = 0.0
    zero = offset - offset
    idx = np.empty(BLOCK, np.int32)
    for start in range(0, w.size, BLOCK):
        m = min(BLOCK, w.size - start)
        block = w[start : start + m]
        for i in range(m):
            z = (block[i] - subtract) * scale + shift
            z64 = np.float64(z)
            z2 = z64 * z64
            s3 += z2 * z64
            s4 += z2 * z2
            t = offset + z * inv_width
            t = min(max(t, zero), top)
            idx[i] = np.int32(t)
        for j in range(m):
            counts[j & 3, idx[j]] += 1
    return s3, s4


def row_statistics(
    row: np.ndarray, edges: np.ndarray, given: tuple[float, float] | None = None
) -> tuple[float, float, float, float, float, float, np.ndarray]:
    """``(mean, std, min, max, E[z^3], E[z^4], counts)`` of one row's entries, as
    `analysis.stats.elementwise` defines them (``counts``: int64 per bin, underflow first, overflow last).

    Args:
        row: 1-D float32 or float64 entries, contiguous; z and the bin coordinate are formed
            in its dtype.
        edges: uniformly spaced standardized bin edges.
        given: the row's mean and standard deviation when known from elsewhere; else two
            float64 passes (a constant row's mean is its value, exactly).
    """
    dt = row.dtype.type
    n = row.size
    w_min, w_max = float(row.min()), float(row.max())
    if given is not None:
        mean, std = dt(given[0]), dt(given[1])
    elif w_min == w_max:
        mean, std = dt(w_min), dt(0.0)
    else:
        mean = dt(row_sums(row, 0.0)[0] / n)
        std = dt(math.sqrt(row_sums(row, float(mean))[1] / n))
    safe = std if std != 0 else dt(1.0)
    # z = (w - mu) / sigma as the torch path forms it: w * (1/sigma) - mu/sigma when |mu| <= sigma,
    # else (w - mu) * (1/sigma), which is exact for w near mu
    subtract, shift = (dt(0.0), dt(-mean / safe)) if abs(mean) <= safe else (mean, dt(0.0))
    lo, width = float(edges[0]), float(edges[1] - edges[0])
    counts = np.zeros((4, len(edges) + 1), np.int64)
    s3, s4 = z_pass(row, subtract, dt(1.0) / safe, shift, dt(1.0 - lo / width), dt(1.0 / width), dt(len(edges) + 0.5), counts)
    return float(mean), float(std), w_min, w_max, s3 / n, s4 / n, counts.sum(axis=0)
