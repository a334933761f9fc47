"""What the Architecture heatmaps compute before they draw: each layer's mean over its heads, as the layer means'
fixed y range and as the rows of their CSV."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.dashboard import export
from headwatch.dashboard.data import fixed_range


def means_range(values: np.ndarray, *, log: bool) -> tuple[float, float]:
    """The fixed y range of the layer means of ``values`` ``(S, n_layers, n_heads)`` over the whole run (log10 units
    if ``log``; `dashboard.data.fixed_range`)."""
    return fixed_range(layer_means(values), log=log)


def layer_mean_rows(values: np.ndarray, steps: np.ndarray, *, run: str, stat: str, k: int | None, matrix: str) -> pd.DataFrame:
    """Each layer's mean over its heads at every step as tidy rows (`dashboard.export.tidy`), the statistic named
    ``"<stat> (layer mean)"`` and the head ``"layer mean"``.

    Args:
        values: ``(S, n_layers, n_heads)``.
        steps: the S steps.
    """
    means = layer_means(values)  # (S, n_layers)
    rows = export.tidy(means[:, :, None], steps, run=run, statistic=f"{stat} (layer mean)", k=k, matrix=matrix)
    return rows.assign(head="layer mean")


def layer_means(values: np.ndarray) -> np.ndarray:
    """``(S, n_layers)`` the mean over each layer's heads of ``values[step, layer, head]`` (NaN where one of the
    layer's heads is NaN; the CSV and the y range, where `dashboard.data.nan_mean` draws the lines)."""
    return np.asarray(values).mean(axis=2)
