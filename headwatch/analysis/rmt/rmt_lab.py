"""One random W_QK, for the random-matrix lab page: entries, singular values, normalized spectrum.

W_Q and W_K have i.i.d. N(0, sigma_Q^2) and N(0, sigma_K^2) entries, each
``d_head x d_model`` for a low-rank product (d_head = d_model / n_heads) or
``d_model x d_model`` for a full-rank one. Then

- each entry of W_QK = W_Q^T W_K is a sum of r products, with standard
  deviation sigma_Q sigma_K sqrt(r) (r = d_head, or d_model when full rank);
- W_QK has r non-zero singular values; the other d_model - r vanish (the cut at d_head);
- x = lambda / (d_model sigma_Q sigma_K)^2 follows MP_c (x) MP_c with c = r / d_model
  (`analysis.rmt.nullmodel`), while each factor alone follows the plain MP_c.

numpy only; one dense d_model x d_model SVD (about half a second at d_model 1024).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ENTRY_HIST_BINS = 121  # histogram of entries over +-6 predicted standard deviations


@dataclass(frozen=True)
class LabSample:
    """One draw, reduced to what the lab's panels plot."""

    d_model: int
    rank: int  # d_head for a low-rank product, d_model for a full-rank one
    predicted_std: float  # sigma_Q sigma_K sqrt(rank)
    entry_std: float  # measured
    entry_edges: np.ndarray  # (ENTRY_HIST_BINS + 1,) raw units
    entry_density: np.ndarray  # (ENTRY_HIST_BINS,) normalized histogram of the d_model^2 entries
    sv: np.ndarray  # (d_model,) all singular values, descending (zeros past `rank`, to rounding)
    x: np.ndarray  # (rank,) lambda / (d_model sigma_Q sigma_K)^2 of the non-zero values
    stats: dict[str, float] = field(default_factory=dict)  # the head pages' statistics of this W_QK (`stats_of`)

    @property
    def c(self) -> float:
        return self.rank / self.d_model


def lab_sample(
    d_model: int,
    n_heads: int,
    sigma_q: float,
    sigma_k: float,
    *,
    low_rank: bool = True,
    seed: int = 0,
) -> LabSample:
    """Draw W_Q, W_K and summarize W_QK = W_Q^T W_K.

    Args:
        d_model: model width.
        n_heads: heads per layer; d_head = d_model // n_heads (low-rank case).
        sigma_q, sigma_k: standard deviations of the entries of W_Q and W_K.
        low_rank: ``True`` for d_head x d_model factors, ``False`` for d_model x d_model.
        seed: random seed.

    Raises:
        ValueError: non-positive sizes or widths, or n_heads not dividing d_model.
    """
    if d_model < 2 or n_heads < 1 or d_model % n_heads:
        raise ValueError(f"need d_model >= 2 divisible by n_heads, got d_model={d_model}, n_heads={n_heads}")
    if sigma_q <= 0 or sigma_k <= 0:
        raise ValueError(f"sigma_Q and sigma_K must be positive, got {sigma_q}, {sigma_k}")
    rank = d_model // n_heads if low_rank else d_model
    rng = np.random.default_rng(seed)
    w_q = rng.standard_normal((rank, d_model)) * sigma_q  # (rank, d_model)
    w_k = rng.standard_normal((rank, d_model)) * sigma_k  # (rank, d_model)
    w = w_q.T @ w_k  # (d_model, d_model)
    predicted = sigma_q * sigma_k * np.sqrt(rank)
    edges = np.linspace(-6 * predicted, 6 * predicted, ENTRY_HIST_BINS + 1)
    density, _ = np.histogram(w.ravel(), bins=edges, density=False)
    density = density / (w.size * np.diff(edges))
    sv = np.linalg.svd(w, compute_uv=False)
    x = sv[:rank] ** 2 / (d_model * sigma_q * sigma_k) ** 2
    return LabSample(
        d_model=d_model,
        rank=rank,
        predicted_std=float(predicted),
        entry_std=float(w.std()),
        entry_edges=edges,
        entry_density=density,
        sv=sv,
        x=x,
        stats=stats_of(w, sv[:rank]),
    )


def stats_of(w: np.ndarray, sv: np.ndarray) -> dict[str, float]:
    """The statistics the head pages show, for one W_QK: element-wise (`analysis.rmt.references.elementwise`:
    sigma, skew, excess kurtosis, D_KL from the Gaussian of the same mean and sigma, ...) and spectral
    (stable rank, spectral entropy, participation ratio, from its non-zero singular values ``sv``)."""
    from headwatch.analysis.rmt.references import elementwise

    lam = np.asarray(sv, dtype=np.float64) ** 2
    total = lam.sum()
    p = lam[lam > 0] / total
    return {
        **elementwise(w),
        "stable_rank": float(total / lam[0]),
        "spectral_entropy": float(-(p * np.log(p)).sum()),
        "participation_ratio": float(total**2 / (lam**2).sum()),
    }
