"""The head explorer's data that its panels do not draw as stored: P(w) curves in standardized units."""

from __future__ import annotations

import numpy as np


def standardized(w: np.ndarray, p: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(w) curves as p_z of z = (w - mu)/sigma: ``z = (w - mu)/sigma`` and ``p_z = p(w) sigma`` per step.

    Args:
        w, p: ``(S, B)`` each step's curve in raw units.
        mu, sigma: ``(S,)`` each step's mean and sigma; a step with sigma 0 gets NaN z.

    Returns:
        ``(z, p_z)``, both ``(S, B)``.
    """
    z = (w - mu[:, None]) / np.where(sigma > 0, sigma, np.nan)[:, None]
    return z, p * sigma[:, None]
