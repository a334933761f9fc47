"""Tables of the whole model: every head's value of a statistic (the Heads page), the approaches counted per head.

Pure (no streamlit): `dashboard.loader` caches what is worth caching. The math is in `analysis/`
(`analysis.findings.approaches`: every close approach; `analysis.rmt.references`: the Gaussian-factor reference).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwatch.analysis.rmt.references import REFERENCE_DRAWS, SCALED, Reference, gaussian_references, init_sigma
from headwatch.analysis.store import Store
from headwatch.dashboard.labels import FORWARD_STATS, LAMBDA, LLC_STAT

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


def references(store: Store, *, matrix: str = "qk") -> tuple[dict[str, Reference], tuple[Reference, ...]]:
    """Gaussian-factor references of ``matrix`` for the run's shape and init scale
    (`analysis.rmt.references.gaussian_references`)."""
    return gaussian_references(int(store.d_model), int(store.d_head), init_scale(store, matrix=matrix))


def reference_note(
    stat: str,
    reference: Reference | None,
    *,
    matrix: str | None,
    d_model: int,
    d_head: int,
    has_step0: bool,
    uniform: float | None = None,
) -> str:
    """What the Heads table's "÷" column divides by, or why it has none, in one or two sentences.

    Args:
        stat: the statistic (a store column name, or ``lambda``).
        reference: its Gaussian-factor reference for ``matrix`` (`reference_of`), or None.
        matrix: ``qk`` or ``ov``; None for a per-head statistic (forward lenses, refined LLC).
        d_model, d_head: the run's shape.
        has_step0: whether the run has step 0 (the init scale of statistics with units is read there).
        uniform: for a forward statistic, what uniform causal attention scores (`dashboard.data.uniform_attention`).
    """
    if stat in FORWARD_STATS:
        if uniform is None:
            return "Forward statistics have no random-head reference (they measure the heads on text)."
        return (
            f"Forward statistics have no random-head reference (they measure the heads on text); "
            f'"÷ uniform" divides by what uniform causal attention on the same sequences scores: {uniform:.4g}.'
        )
    if stat == LLC_STAT:
        return "The refined LLC has no random-head reference (it measures the loss landscape, not the weights alone)."
    factors = REFERENCE_FACTORS.get(matrix or "qk", "the two factors")
    if reference is not None:
        return (
            f"Random heads (Gaussian {factors} of this run's d_model {d_model}, d_head {d_head} and the init "
            f"scale of its step-0 heads; {REFERENCE_DRAWS} seeded draws): mean {reference.mean:.4g}, 5-95% band "
            f"[{reference.lo:.4g}, {reference.hi:.4g}]."
        )
    if (stat in SCALED or stat == LAMBDA) and not has_step0:
        return (
            f"No random-head reference: this statistic has units, and the run has no step 0 to read the init "
            f"scale of {factors} from."
        )
    return "This statistic has no random-head reference (none is computed for it)."


def reference_of(refs: tuple[dict[str, Reference], tuple[Reference, ...]], stat: str, k: int | None) -> Reference | None:
    """The reference of ``stat`` (lambda_k with ``k``), or None when there is none (no init scale)."""
    by_stat, by_k = refs
    if stat == LAMBDA:
        return by_k[k or 0] if by_k and (k or 0) < len(by_k) else None
    return by_stat.get(stat)


# --------------------------------------------------------------------------- close approaches, model-wide


def approach_counts(approaches: pd.DataFrame | None, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    """``(n_layers, n_heads)`` counts of approaches, crossings and repulsions per head (rows of
    `analysis.findings.approaches.model_approaches`)."""
    out = {name: np.zeros((n_layers, n_heads), dtype=np.int64) for name in ("approaches", "crossings", "repulsions")}
    if approaches is None:
        return out
    for layer, head, kind in approaches[["layer", "head", "verdict"]].itertuples(index=False):
        out["approaches"][layer, head] += 1
        if kind == "crossing":
            out["crossings"][layer, head] += 1
        elif kind == "repulsion":
            out["repulsions"][layer, head] += 1
    return out


# --------------------------------------------------------------------------- the Heads table


def heads_table(
    values: np.ndarray,
    *,
    at: int,
    since: int,
    reference: Reference | None,
    counts: dict[str, np.ndarray] | None,
    matrix: str | None = "qk",
    baseline: float | None = None,
) -> pd.DataFrame:
    """One row per head: its value at checkpoint index ``at``, the change since index ``since``, rank, vs reference.

    Args:
        values: ``(S, n_layers, n_heads)`` the statistic.
        at, since: checkpoint indices into ``values``.
        reference: the Gaussian-factor reference of the statistic, or None.
        counts: `approach_counts`, or None (no overlaps, or a statistic that is not of a matrix: the columns
            are left out).
        matrix: the matrix kind of the rows; None for a per-head statistic (no ``matrix`` column).
        baseline: without a reference, a value to divide by instead (uniform attention's, for a forward
            statistic); no band column then.

    Columns: layer, head, matrix, value, change, rank (1 = largest value; ties share the lowest rank),
    over reference (value / the reference mean, or / ``baseline``), in 5-95% band, and the approach counts.
    """
    _, n_layers, n_heads = values.shape
    v = np.asarray(values[at], dtype=np.float64).ravel()
    table = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(n_layers), n_heads),
            "head": np.tile(np.arange(n_heads), n_layers),
            **({"matrix": matrix} if matrix is not None else {}),
            "value": v,
            "change": v - np.asarray(values[since], dtype=np.float64).ravel(),
            "rank": pd.Series(-v).rank(method="min", na_option="bottom").astype("int64").to_numpy(),
        }
    )
    if reference is not None and np.isfinite(reference.mean):
        table["over reference"] = v / reference.mean if reference.mean != 0 else np.nan
        table["in 5-95% band"] = (v >= reference.lo) & (v <= reference.hi)
    elif baseline is not None and np.isfinite(baseline) and baseline != 0:
        table["over reference"] = v / baseline
    if counts is not None:
        for name, c in counts.items():
            table[name] = c.ravel()
    return table


def screen_table(table: pd.DataFrame, config: dict, *, run: str, stat: str, k, matrix, step: int, since: int) -> pd.DataFrame:
    """The table as the CSV holds it: every column named as the screen names it (``r_s``, ``÷ random head``), the link
    column left out, then what the rows are of (run, statistic, its k only for λ_k, matrix, step, since)."""
    out = table.drop(columns=["open"]).rename(
        columns={c: cfg["label"] for c, cfg in config.items() if c in table.columns and cfg.get("label")}
    )
    what = {"run": run, "statistic": stat, **({"k": k} if k is not None else {}), "matrix": matrix or "", "step": step}
    return out.assign(**what, since=since)
