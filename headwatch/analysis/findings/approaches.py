"""Every head's close approaches of its leading levels over training, one row each: what the Heads table lists and
where the Timeline's first level crossings come from.

The maths is `analysis.stats.crossings` (an approach is two neighbouring singular values of one head within a relative
gap; its verdict, crossing or repulsion, comes from the overlaps of the singular vectors across the approach); this
module runs it over every head of a store and lays the approaches out as a table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from headwatch.analysis.stats.crossings import level_crossings
from headwatch.analysis.store import Store

APPROACH_COLUMNS = ("layer", "head", "step", "levels", "gap of s, %", "verdict", "swap score")


def model_approaches(
    store: Store,
    gap_threshold: float,
    overlaps_of: Callable[[int, int], tuple[np.ndarray, np.ndarray] | None] | None = None,
    *,
    matrix: str = "qk",
) -> pd.DataFrame | None:
    """Every head's close approaches of lambda_0..lambda_3 of ``matrix`` at ``gap_threshold``, one row each.

    Args:
        store: the opened store.
        gap_threshold: the relative gap of singular values below which two levels approach (0.1: 10 %).
        overlaps_of: ``(layer, head) -> (overlaps, steps)`` or None; the store's own (`Store.overlaps`) by default
            (the dashboard passes a cached reader).
        matrix: ``qk`` or ``ov``.

    Returns:
        `APPROACH_COLUMNS`: layer, head, step, levels, gap of s %, verdict, swap score; None when the store has no
        overlaps.
    """
    overlaps_of = overlaps_of or (lambda layer, head: store.overlaps(layer, head, matrix=matrix))
    sv = store.array("sv", matrix=matrix).astype(np.float64)
    lam = sv * sv
    rows = []
    for layer in range(store.n_layers):
        for head in range(store.n_heads):
            ov = overlaps_of(layer, head)
            if ov is None:
                return None
            for a in level_crossings(lam[:, layer, head], ov, gap_threshold=gap_threshold).approaches:
                rows.append(
                    (
                        layer,
                        head,
                        int(store.steps[a.t]),
                        f"λ_{a.level}, λ_{a.level + 1}",
                        round(100 * a.gap, 2),
                        a.kind,
                        round(a.swap_score, 3),
                    )
                )
    return pd.DataFrame(rows, columns=list(APPROACH_COLUMNS)).astype({"layer": "int64", "head": "int64", "step": "int64"})
