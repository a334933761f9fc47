"""A statistic's values per (step, layer, head), by the name the views and ``headwatch report`` give it.

A name is a column of the store (``std``, ``stable_rank``, ...), ``lambda`` (lambda_k = s_k^2 of the singular
value ``k``), a forward-lens statistic (attention.parquet, per head whatever the matrix) or ``llc`` (the refined
LLC, llc.parquet, per head, under the distribution readers show by default: `llc_shown`). The dashboard labels
these names (its statistics table); the definitions are ``analysis/store/format.py``'s.
"""

from __future__ import annotations

import numpy as np

from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.attention import ATTENTION, ATTENTION_STATISTICS
from headwatch.analysis.store.lenses.llc import LLC, LLC_DATA_COLUMN, default_llc_data

LAMBDA = "lambda"  # lambda_k = s_k^2, for the singular-value index k
LLC_STAT = "llc"  # the refined LLC of each head (llc.parquet)
FORWARD_STATS = ATTENTION_STATISTICS  # the forward lens's per-head statistics (attention.parquet)


def llc_shown(store: Store) -> str:
    """The distribution whose refined LLC a reader shows when none is chosen (`default_llc_data`: the training
    distribution where the store holds it, else held-out text, which every store written before the ``data``
    column holds); ``text`` for a store without llc.parquet."""
    return default_llc_data(store.read(LLC, columns=[]) if store.has(LLC) else [])


def stat_values(store: Store, stat: str, *, k: int = 0, matrix: str = "qk") -> np.ndarray:
    """``[step, layer, head]`` values of a statistic of one per-head matrix; ``lambda`` is s_k^2 (float64).

    Args:
        store: the opened store.
        stat: the statistic's name (see the module docstring).
        k: the singular-value index of ``lambda``.
        matrix: ``qk`` or ``ov`` (ignored by forward-lens statistics and the refined LLC).

    Returns:
        ``(S, n_layers, n_heads)`` over ``store.steps``; NaN where a sparse statistic has no row.

    Raises:
        KeyError: a forward-lens statistic or the refined LLC asked of a store without its table.
    """
    if stat == LAMBDA:
        sv = store.array("sv", matrix=matrix)[..., k].astype(np.float64)
        return sv * sv
    if stat in FORWARD_STATS:  # attention.parquet (per head, whatever the matrix); NaN at steps without forward rows
        values = store.dense(ATTENTION, stat)
        if values is None:
            raise KeyError(f"{stat!r} needs the forward lens: rerun precompute with --lenses attention")
        return values
    if stat == LLC_STAT:  # llc.parquet (per head); NaN at the checkpoints the stage did not estimate
        values = store.dense(LLC, "llc", at={LLC_DATA_COLUMN: llc_shown(store)})
        if values is None:
            raise KeyError(f"{stat!r} needs the refined LLC: rerun precompute with --lenses llc")
        return values
    return store.array(stat, matrix=matrix)
