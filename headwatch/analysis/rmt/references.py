"""Reference values for a head's statistics: what Gaussian factors of the run's shape and init scale give.

At initialisation W_Q and W_K have i.i.d. N(0, sigma0^2) entries (d_head x d_model each),
and W_QK = W_Q^T W_K is *not* a Gaussian matrix: each entry is a sum of d_head products
of two Gaussians, with excess kurtosis 6/d_head, so D_KL(P || N(mu, sigma)) is not 0 at
step 0 either. To judge a trained head's value of any statistic, this module draws
``n_draws`` such heads (seeded Monte Carlo, exactly the computation the precompute job
does: the dense product in float32, element-wise moments and the standardized histogram
over the store's ``hist_z`` bins through its compiled kernels (`analysis.stats.fused`), D_KL
against standard-normal bin masses, the spectrum from the d_head x d_head QR core) and reports,
per statistic, the mean and the 5% and 95% quantiles over the draws.

The draws are made once per (d_model, d_head, n_draws, seed) with sigma0 = 1 and cached
(like `analysis.rmt.nullmodel.null_expectations`); a statistic with units is then scaled to
the run's sigma0: entries (``mean``, ``std``, ``min``, ``max``), ``frob_norm`` and
``spectral_norm`` scale as sigma0^2, lambda_k as sigma0^4; the rest are scale-free.
The run's sigma0 is taken from its step-0 heads (`init_sigma`): sigma_QK = sigma0^2
sqrt(d_head), so sigma0 = (median over heads of sigma_QK(0) / sqrt(d_head))^(1/2).

W_OV = W_O,h W_V,h has the same form (a d_model x d_head factor times a d_head x d_model one),
so the same draws are its reference when W_O,h and W_V,h start i.i.d. Gaussian: with scales
sigma_O and sigma_V the product is distributed as with sigma0 = sqrt(sigma_O sigma_V), which
`init_sigma` reads from the OV heads' step-0 sigma_OV = sigma_O sigma_V sqrt(d_head).

numpy and numba only (no torch): the dashboard uses it directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from headwatch.analysis.rmt.nullmodel import kl_null
from headwatch.analysis.stats.definitions import HIST_Z_EDGES
from headwatch.analysis.stats.density import gaussian_bin_mass

REFERENCE_DRAWS = 32  # heads drawn per shape
REFERENCE_SEED = 0
BAND = (0.05, 0.95)  # the reference band's quantiles
_SCALE_POWER = {"mean": 2, "std": 2, "min": 2, "max": 2, "frob_norm": 2, "spectral_norm": 2, "lambda": 4}
SCALED = frozenset(_SCALE_POWER)  # the statistics with units: their reference needs the init scale sigma0


@dataclass(frozen=True)
class Reference:
    """One statistic's value for Gaussian factors: mean and the 5-95% band over the draws."""

    mean: float
    lo: float
    hi: float

    def scaled(self, factor: float) -> Reference:
        return Reference(self.mean * factor, self.lo * factor, self.hi * factor)


def elementwise(w: np.ndarray) -> dict[str, float]:
    """mean, std, skew, excess kurtosis, min, max and D_KL(P || N(mu, sigma)) of one matrix's entries.

    Binned as the store's ``hist_z``: 0.1-wide bins on z in [-10, 10) plus an underflow and an overflow bin.
    The precompute job's compiled kernels (`analysis.stats.fused`, numba), in ``w``'s dtype (float32 or float64).
    """
    from headwatch.analysis.stats.fused import row_statistics  # numba: compiled on first use, not at import

    x = np.ascontiguousarray(w).ravel()
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    mu, sigma, lo, hi, m3, m4, counts = row_statistics(x, HIST_Z_EDGES)
    p = counts / counts.sum()
    q = gaussian_bin_mass(HIST_Z_EDGES)
    nz = p > 0
    return {
        "mean": mu,
        "std": sigma,
        "skew": m3,
        "kurtosis": m4 - 3.0,
        "min": lo,
        "max": hi,
        "kl_gauss": float((p[nz] * np.log(p[nz] / q[nz])).sum()),
    }


def spectral(sv: np.ndarray, d_model: int) -> dict[str, float]:
    """The store's spectral statistics of one head from its d_head singular values (descending)."""
    lam = np.asarray(sv, dtype=np.float64) ** 2
    total = lam.sum()
    p = lam / total
    p = p[p > 0]
    d_head = len(lam)
    out = {
        "stable_rank": total / lam[0],
        "spectral_entropy": float(-(p * np.log(p)).sum()),
        "participation_ratio": total**2 / (lam**2).sum(),
        "condition_number": float(sv[0] / sv[-1]) if sv[-1] > sv[0] * d_model * np.finfo(np.float64).eps else math.inf,
        "frob_norm": math.sqrt(total),
        "spectral_norm": float(sv[0]),
        "kl_null": float(kl_null(lam[None], d_head / d_model)[0]),
    }
    return {k: float(v) for k, v in out.items()}


def draw_statistics(
    d_model: int, d_head: int, *, n_draws: int = REFERENCE_DRAWS, seed: int = REFERENCE_SEED
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every statistic of ``n_draws`` heads with N(0, 1) factors: ``({stat: (n_draws,)}, lambda (n_draws, d_head))``."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, float]] = []
    lams = []
    for _ in range(n_draws):
        w_q = rng.standard_normal((d_head, d_model))
        w_k = rng.standard_normal((d_head, d_model))
        # R factors by Cholesky-QR, as the job's `analysis.stats.spectrum.r_factor` takes them for well-conditioned
        # factors: a Gaussian d_head x d_model factor has cond near (1 + sqrt c) / (1 - sqrt c) with c = d_head /
        # d_model (2.1 at c = 1/8, 5.8 at c = 1/2), so the error, about eps * cond^2, stays near 1e-14
        r_a = np.linalg.cholesky(w_q @ w_q.T).T  # (d_head, d_head), R^T R = A^T A with A = w_q^T
        r_b = np.linalg.cholesky(w_k @ w_k.T).T
        sv = np.linalg.svd(r_a @ r_b.T, compute_uv=False)
        # the dense product in float32, as the precompute job forms it (`analysis.weights.heads`)
        rows.append({**elementwise(w_q.T.astype(np.float32) @ w_k.astype(np.float32)), **spectral(sv, d_model)})
        lams.append(sv**2)
    values = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    # the store's *_over_null columns divide by the Monte Carlo mean of the statistic over Gaussian heads of this
    # shape (`analysis.rmt.nullmodel.null_expectations`, 64 draws); the draws' own mean is that estimate here
    for name in ("stable_rank", "spectral_entropy", "participation_ratio"):
        values[f"{name}_over_null"] = values[name] / values[name].mean()
    return values, np.stack(lams)


@lru_cache(maxsize=16)
def _unit_references(d_model: int, d_head: int, n_draws: int, seed: int) -> tuple[dict[str, Reference], tuple]:
    values, lam = draw_statistics(d_model, d_head, n_draws=n_draws, seed=seed)

    def ref(v: np.ndarray) -> Reference:
        v = v[np.isfinite(v)]
        if v.size == 0:
            return Reference(math.nan, math.nan, math.nan)
        return Reference(float(v.mean()), float(np.quantile(v, BAND[0])), float(np.quantile(v, BAND[1])))

    return {k: ref(v) for k, v in values.items()}, tuple(ref(lam[:, k]) for k in range(d_head))


def gaussian_references(
    d_model: int, d_head: int, sigma0: float | None, *, n_draws: int = REFERENCE_DRAWS, seed: int = REFERENCE_SEED
) -> tuple[dict[str, Reference], tuple[Reference, ...]]:
    """References of every store statistic and of each lambda_k for factors with N(0, sigma0^2) entries.

    Args:
        d_model, d_head: the run's shape.
        sigma0: the factors' init scale; None leaves out the statistics that have units.

    Returns:
        ``(by_statistic, by_k)``: the store's column name -> `Reference`, and one `Reference` per lambda_k
        (empty when ``sigma0`` is None).
    """
    unit, lam = _unit_references(int(d_model), int(d_head), int(n_draws), int(seed))
    out = {}
    for name, r in unit.items():
        power = _SCALE_POWER.get(name, 0)
        if power and sigma0 is None:
            continue
        out[name] = r.scaled(sigma0**power) if power and sigma0 is not None else r
    by_k = tuple(r.scaled(sigma0 ** _SCALE_POWER["lambda"]) for r in lam) if sigma0 is not None else ()
    return out, by_k


def init_sigma(std_step0: np.ndarray, d_head: int) -> float | None:
    """sigma0 of the factors from the step-0 heads' sigma_QK = sigma0^2 sqrt(d_head) (median over heads)."""
    v = np.asarray(std_step0, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        return None
    return float(math.sqrt(float(np.median(v)) / math.sqrt(d_head)))
