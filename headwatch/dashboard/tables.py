"""Random heads as the views read them: a run's init scale, the reference of a statistic, the two factors named; and
the help text of the approaches' swap score (the Heads table and the head explorer both show it).

Pure (no streamlit); `dashboard.derived.references` caches the references. The math is in `analysis/`
(`analysis.rmt.references`: the Gaussian-factor reference; `analysis.findings.approaches`: every close approach).
"""

from __future__ import annotations

from headwatch.analysis.rmt.references import Reference, init_sigma
from headwatch.analysis.store import Store
from headwatch.dashboard.labels import LAMBDA

SWAP_SCORE_HELP = (
    "swap score = max over the informative steps through the approach of swap − keep, with "
    "keep = O_ii·O_i+1,i+1 and swap = O_i,i+1·O_i+1,i (O: overlaps of the singular vectors between "
    "neighbouring checkpoints). > 0: the two levels' directions swapped places (a crossing); ≤ 0: each "
    "level kept its own (a repulsion); empty: no step was informative (unresolved)."
)


# The two Gaussian factors whose product is a random head of each matrix kind (`analysis.rmt.references`).
REFERENCE_FACTORS = {"qk": "W_Q, W_K", "ov": "W_O,h, W_V,h"}


def init_scale(store: Store, *, matrix: str = "qk") -> float | None:
    """The factors' init sigma0 from the run's step-0 heads of ``matrix`` (`analysis.rmt.references.init_sigma`:
    sigma_QK(0) = sigma0^2 sqrt(d_head); for W_OV, sigma0 = sqrt(sigma_O sigma_V)); None without step 0."""
    if len(store.steps) == 0 or int(store.steps[0]) != 0:
        return None
    return init_sigma(store.array("std", matrix=matrix)[0].ravel(), store.d_head)


def reference_of(refs: tuple[dict[str, Reference], tuple[Reference, ...]], stat: str, k: int | None) -> Reference | None:
    """The reference of ``stat`` (lambda_k with ``k``), or None when there is none (no init scale)."""
    by_stat, by_k = refs
    if stat == LAMBDA:
        return by_k[k or 0] if by_k and (k or 0) < len(by_k) else None
    return by_stat.get(stat)
