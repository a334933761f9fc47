"""Shared test fixtures: plain NumPy/SciPy reference implementations of the statistics.

The references are deliberately naive (dense matrices, dense SVD, scipy.stats,
np.histogram) and share no code with `analysis/`, so a test comparing the two
can fail. Definitions: docs/design-notes.md section 3.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.stats


def gaussian_masses(edges: np.ndarray) -> np.ndarray:
    """Standard-normal mass of the bins [-inf, e_0), [e_0, e_1), ..., [e_n, inf).

    Right of 0 the mass is a difference of survival functions, so bins far in the
    upper tail keep their (tiny) mass instead of cancelling to 0 near CDF = 1.
    """
    outer = np.concatenate([[-np.inf], edges, [np.inf]])
    a, b = outer[:-1], outer[1:]
    norm = scipy.stats.norm
    return np.where(a >= 0, norm.sf(a) - norm.sf(b), norm.cdf(b) - norm.cdf(a))


def elementwise(w: np.ndarray, edges: np.ndarray) -> dict[str, object]:
    """Statistics of one matrix's entries, in float64, by the textbook formulas."""
    w = np.asarray(w, dtype=np.float64).ravel()
    mu, sigma = w.mean(), w.std()  # population std (ddof=0)
    z = (w - mu) / sigma
    counts, _ = np.histogram(z, bins=np.concatenate([[-np.inf], edges, [np.inf]]))
    p = counts / w.size
    q = gaussian_masses(edges)
    nz = p > 0
    return {
        "mean": mu,
        "std": sigma,
        "skew": scipy.stats.skew(w, bias=True),
        "kurtosis": scipy.stats.kurtosis(w, fisher=True, bias=True),
        "min": w.min(),
        "max": w.max(),
        "hist_z": p,
        "kl_gauss": float(np.sum(p[nz] * np.log(p[nz] / q[nz]))),
    }


def spectral(dense: np.ndarray, d_head: int) -> dict[str, object]:
    """Top-d_head singular values of a dense matrix (numpy SVD) and their statistics."""
    s = np.linalg.svd(np.asarray(dense, dtype=np.float64), compute_uv=False)[:d_head]
    lam = s**2
    p = lam / lam.sum()
    return {
        "sv": s,
        "stable_rank": lam.sum() / lam.max(),
        "spectral_entropy": -np.sum(p[p > 0] * np.log(p[p > 0])),
        "participation_ratio": lam.sum() ** 2 / np.sum(lam**2),
        "condition_number": s[0] / s[-1],
        "frob_norm": np.linalg.norm(dense, "fro"),
        "spectral_norm": np.linalg.norm(dense, 2),
    }


@pytest.fixture(scope="session")
def reference() -> SimpleNamespace:
    """NumPy/SciPy reference implementations: ``gaussian_masses``, ``elementwise``, ``spectral``."""
    return SimpleNamespace(gaussian_masses=gaussian_masses, elementwise=elementwise, spectral=spectral)


SHIPPED_DATA = Path(__file__).resolve().parents[1] / "data"


def require_table(present: bool, store: object, message: str) -> None:
    """A table a reference test reads must be there: a shipped store (under ``data/``, in git)
    without it is a defect and fails the test; a store named by ``HEADWATCH_REFERENCE_STORE``
    (a user's own, perhaps made before the table existed) skips it with ``message``."""
    if present:
        return

    if Path(str(store)).resolve().is_relative_to(SHIPPED_DATA):
        pytest.fail(f"the shipped store {store} lacks it: {message}")
    pytest.skip(message)
