"""The Random-matrix lab's data: the shapes and scales it offers (a run's own among them), and its tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from headwatch.analysis.store import Store
from headwatch.dashboard.labels import STATS
from headwatch.dashboard.tables import init_scale

D_MODELS = [128, 256, 512, 768, 1024]
N_HEADS = [1, 2, 4, 8, 16, 32]
SIGMAS = [0.005, 0.01, 0.014, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]  # 0.014 ~ Pythia-1.4B's small init
LAB_STATS = ("std", "kurtosis", "skew", "kl_gauss", "stable_rank", "spectral_entropy", "participation_ratio")


@dataclass(frozen=True)
class Offer:
    """The lab's choices of d_model, heads and sigma, and the ones it opens at (a run's own, else 512, 8, 0.02);
    ``run_sigma0``: the open run's init sigma_0 from its step-0 heads (None: no run open, or none at step 0)."""

    d_models: list[int]
    n_heads: list[int]
    sigmas: list[float]
    d_model0: int
    heads0: int
    sigma0: float
    run_sigma0: float | None = None


def offer(store: Store | None) -> Offer:
    """What the lab offers for ``store`` (None: no run open): its d_model, heads and init sigma_0 (from its step-0
    heads, `dashboard.tables.init_scale`, to 3 significant digits) added to the fixed choices, and chosen first,
    when d_head divides d_model and d_model is at most 2,048."""
    d_model0, heads0, sigma0 = 512, 8, 0.02
    scale = init_scale(store) if store is not None else None
    if store is not None and store.d_model % store.d_head == 0 and store.d_model <= 2048:
        d_model0, heads0 = int(store.d_model), int(store.d_model // store.d_head)
        sigma0 = float(f"{scale:.3g}") if scale else sigma0
    return Offer(
        d_models=sorted(set(D_MODELS) | {d_model0}),
        n_heads=sorted(set(N_HEADS) | {heads0}),
        sigmas=sorted(set(SIGMAS) | {sigma0}),
        d_model0=d_model0,
        heads0=heads0,
        sigma0=sigma0,
        run_sigma0=scale,
    )


def stats_table(sample: Any, d_model: int, n_heads: int, sigma: float, with_reference: bool) -> pd.DataFrame:
    """This draw's statistics, with the Gaussian-factor reference when asked (it applies to low rank, equal widths)."""
    from headwatch.analysis.rmt.references import gaussian_references

    refs = gaussian_references(d_model, d_model // n_heads, sigma)[0] if with_reference else {}
    rows = []
    for name in LAB_STATS:
        ref = refs.get(name)
        rows.append(
            {
                "statistic": STATS[name].label,
                "this draw": sample.stats.get(name, float("nan")),
                "random heads, mean": ref.mean if ref else None,
                "5%": ref.lo if ref else None,
                "95%": ref.hi if ref else None,
            }
        )
    return pd.DataFrame(rows)


def trace_csv(fig: Any, tag: str) -> pd.DataFrame:
    """Every trace of a lab figure as tidy rows: setting, series, x, value."""
    parts = [
        pd.DataFrame({"setting": tag, "series": t.name, "x": list(t.x), "value": list(t.y)})
        for t in fig.data
        if t.x is not None and t.y is not None
    ]
    return pd.concat(parts, ignore_index=True)
