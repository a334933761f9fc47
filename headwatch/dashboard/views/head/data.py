"""The head explorer's data: one head's arrays, what its panels compute from them before they draw (the P(w) map's
grid, the curves and Gaussians at the chosen steps, P(w) in standardized units, the random-head spectra, the level
crossings, the threshold of the head type a score statistic scores) and its CSV tables. Pure: no streamlit; the
panels in `views.head.weights`, `.leading` and `.statistic` call these and draw what they return.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headwatch.analysis.findings.held_types import TYPE_LABELS
from headwatch.analysis.stats.crossings import Crossings, level_crossings
from headwatch.analysis.stats.density import density_curves, density_extent, density_grid
from headwatch.analysis.store import Store
from headwatch.analysis.store.lenses.types import HEAD_TYPE_SCORES
from headwatch.dashboard import export
from headwatch.dashboard.data import null_spectra

DENSITY_GRID_POINTS = 320  # w resolution of the P(w) map; the histogram has 200 bins per step


# --------------------------------------------------------------------------- the head's arrays


def head_arrays(store: Store, *, matrix: str, layer: int, head: int) -> dict[str, np.ndarray]:
    """One head's arrays of one matrix (views of the cached store): what the head explorer's record holds per matrix.

    Returns:
        ``hist`` ``(S, 202)`` the standardized histogram; ``mu``, ``sigma``, ``kl`` ``(S,)`` the mean, sigma and
        D_KL from the Gaussian; ``lam`` ``(S, d_head)`` lambda_k = s_k^2.
    """
    sv = store.array("sv", matrix=matrix)[:, layer, head, :].astype(np.float64)  # (S, d_head)
    return dict(
        hist=store.array("hist_z", matrix=matrix)[:, layer, head, :].astype(np.float64),  # (S, 202)
        mu=store.array("mean", matrix=matrix)[:, layer, head],
        sigma=store.array("std", matrix=matrix)[:, layer, head],
        kl=store.array("kl_gauss", matrix=matrix)[:, layer, head],
        lam=sv * sv,
    )


def series(store: Store, names: tuple[str, str], *, matrix: str, layer: int, head: int) -> tuple[np.ndarray, np.ndarray]:
    """The two stored statistics ``names`` of one head of ``matrix`` (a slices panel's right-hand pair), each ``(S,)``
    over training."""
    first, second = names
    return store.array(first, matrix=matrix)[:, layer, head], store.array(second, matrix=matrix)[:, layer, head]


def compared(
    store: Store, names: tuple[str, str], *, matrix: str, pairs: Sequence[tuple[int, int]]
) -> list[tuple[int, int, tuple[np.ndarray, np.ndarray]]]:
    """The two stored statistics ``names`` of each overlaid head ``(layer, head)`` of ``pairs``: ``(layer, head,
    (first, second))``, each ``(S,)``, as the slices' panels draw them dotted."""
    return [(lay, hd, series(store, names, matrix=matrix, layer=lay, head=hd)) for lay, hd in pairs]


# --------------------------------------------------------------------------- P(w)


def w_range(hist: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> tuple[float, float]:
    """The w axis of the P(w) map and of the slices: every occupied bin at every step, in raw units
    (`analysis.stats.density.density_extent`)."""
    return density_extent(hist, mu, sigma)


def density_map(
    hist: np.ndarray,
    mu: np.ndarray,
    sigma: np.ndarray,
    w_range: tuple[float, float],
    *,
    points: int = DENSITY_GRID_POINTS,
) -> tuple[np.ndarray, np.ndarray]:
    """P(w) of one head over (step, w): ``(w, grid)``, the grid ``(points,)`` over ``w_range`` and p(w) on it
    ``(S, points)`` (`analysis.stats.density.density_grid`: NaN outside +-10 sigma and in empty bins)."""
    w = np.linspace(*w_range, points)
    return w, density_grid(hist, mu, sigma, w)


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


def curves(hist: np.ndarray, mu: np.ndarray, sigma: np.ndarray, *, z_units: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Each step's P(w) at its own bin centres (`analysis.stats.density.density_curves`): ``(w, p)``, both
    ``(S, 200)``; ``z_units``: standardized, ``(z, p_z)`` (`standardized`)."""
    w, p = density_curves(hist, mu, sigma)
    if z_units:  # z = (w - mu)/sigma, p_z = p(w) sigma
        return standardized(w, p, mu, sigma)
    return w, p


def gaussians(mu: np.ndarray, sigma: np.ndarray, idx: Sequence[int], *, z_units: bool = False) -> list[tuple[float, float]]:
    """The Gaussian of the same mean and sigma at each chosen step ``idx``, as ``(mean, sigma)``; ``z_units``:
    standardized, ``(0, 1)`` each."""
    if z_units:
        return [(0.0, 1.0)] * len(idx)
    return [(float(mu[i]), float(sigma[i])) for i in idx]


# --------------------------------------------------------------------------- the spectrum


def null_spectra_at(lam: np.ndarray, idx: Sequence[int], store: Store) -> np.ndarray:
    """The typical spectrum of a random (Gaussian) head of the store's shape with the same Frobenius norm as the head
    at each chosen step ``idx`` (`dashboard.data.null_spectra`): ``(len(idx), d_head)``."""
    return null_spectra(lam[list(idx)], store)


def crossings(lam: np.ndarray, overlaps: tuple[np.ndarray, np.ndarray], *, gap_pct: float) -> Crossings:
    """lambda_0 .. lambda_3's close approaches at a gap of ``gap_pct`` percent, each a crossing or a repulsion
    (`analysis.stats.crossings.level_crossings` of ``lam`` ``(S, d_head)`` and the head's stored overlaps)."""
    return level_crossings(lam, overlaps, gap_threshold=gap_pct / 100)


def approach_counts(crossings: Crossings) -> dict[str, int]:
    """How many approaches of each verdict (``crossing``, ``repulsion``, ``unresolved``) ``crossings`` holds."""
    kinds = [a.kind for a in crossings.approaches]
    return {kind: kinds.count(kind) for kind in ("crossing", "repulsion", "unresolved")}


# --------------------------------------------------------------------------- CSV tables


def grid_table(
    grid: np.ndarray,
    x: np.ndarray,
    *,
    x_name: str,
    statistic: str,
    steps: np.ndarray,
    run: str,
    layer: int,
    head: int,
    matrix: str,
) -> pd.DataFrame:
    """A ``(step, x)`` grid of one head (``grid`` ``(S, n)``; ``x`` ``(n,)`` shared by every step, or ``(S, n)`` each
    step's own) as tidy rows: run, layer, head, matrix, statistic, step, ``x_name``, value."""
    s, n = grid.shape
    x_rows = np.tile(x, s) if np.ndim(x) == 1 else np.asarray(x).ravel()  # (S * n,)
    return pd.DataFrame(
        {
            "run": run,
            "layer": layer,
            "head": head,
            "matrix": matrix,
            "statistic": statistic,
            "step": np.repeat(np.asarray(steps, dtype=np.int64), n),
            x_name: x_rows,
            "value": np.asarray(grid, dtype=np.float64).ravel(),
        }
    )


def lam_table(
    lam: np.ndarray, rows: Iterable[int], *, steps: np.ndarray, run: str, layer: int, head: int, matrix: str
) -> pd.DataFrame:
    """lambda_k of one head (``lam`` ``(S, n_k)``) at the checkpoint indices ``rows`` as tidy rows (k, step, value)."""
    rows = list(rows)
    sub = lam[rows]  # (len(rows), n_k)
    n_k = sub.shape[1]
    return pd.DataFrame(
        {
            "run": run,
            "layer": layer,
            "head": head,
            "matrix": matrix,
            "statistic": "lambda",
            "k": np.tile(np.arange(n_k), len(rows)),
            "step": np.repeat(np.asarray(steps, dtype=np.int64)[rows], n_k),
            "value": sub.ravel(),
        }
    )


def slices_table(
    x: np.ndarray,
    p: np.ndarray,
    idx: Sequence[int],
    sigma: np.ndarray,
    kl: np.ndarray,
    *,
    z_units: bool,
    steps: np.ndarray,
    run: str,
    layer: int,
    head: int,
    matrix: str,
) -> pd.DataFrame:
    """The density at the chosen steps ``idx`` (x, value; ``x``, ``p`` ``(S, B)``, standardized with ``z_units``) and
    sigma and D_KL at every step (``(S,)`` each), as tidy rows."""
    statistic = "p(z)" if z_units else "p(w)"
    chosen = np.asarray(steps)[idx]
    at_chosen = grid_table(
        p[idx], x[idx], x_name="x", statistic=statistic, steps=chosen, run=run, layer=layer, head=head, matrix=matrix
    )
    parts = [at_chosen]
    for what, v in (("std", sigma), ("kl_gauss", kl)):
        parts.append(
            pd.DataFrame(
                {
                    "run": run,
                    "layer": layer,
                    "head": head,
                    "matrix": matrix,
                    "statistic": what,
                    "step": np.asarray(steps, dtype=np.int64),
                    "value": np.asarray(v, dtype=np.float64),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


@dataclass(frozen=True)
class TypeThreshold:
    """The rule of the head type a statistic scores, as the store's ``meta.json`` ``types`` records it.

    Attributes:
        type: the head type's label (``induction``, ``previous-token``).
        threshold: its entry threshold; exit: its exit level (None unrecorded).
    """

    type: str
    threshold: float
    exit: float | None


def type_threshold(store: Store, stat: str) -> TypeThreshold | None:
    """The entry threshold and exit level of the head type whose score ``stat`` is (``prev_token``, ``induction``,
    ``sink``: `analysis.store.format.HEAD_TYPE_SCORES`), from the store's head-types record; None for any other
    statistic, or a store without head types."""
    rules = (store.meta.types or {}).get("types") or {}
    for name, score in HEAD_TYPE_SCORES.items():
        rule = rules.get(name)
        if score == stat and isinstance(rule, dict) and isinstance(rule.get("threshold"), int | float):
            out = rule.get("exit")
            return TypeThreshold(
                TYPE_LABELS.get(name, name), float(rule["threshold"]), float(out) if isinstance(out, int | float) else None
            )
    return None


def in_layer_table(
    values: np.ndarray,
    *,
    steps: np.ndarray,
    run: str,
    statistic: str,
    k: int | None,
    matrix: str,
    layer: int,
    pairs: Sequence[tuple[int, int]] = (),
) -> pd.DataFrame:
    """One statistic (``values`` ``(S, n_layers, n_heads)``) of every head of ``layer`` as tidy rows
    (`dashboard.export.tidy`), then those of the overlaid heads ``pairs``."""
    table = export.tidy(values, steps, run=run, statistic=statistic, k=k, matrix=matrix, layers=[layer])
    if not pairs:
        return table
    extra = [
        export.tidy(values, steps, run=run, statistic=statistic, k=k, matrix=matrix, layers=[lay], heads=[hd])
        for lay, hd in pairs
    ]
    return pd.concat([table, *extra], ignore_index=True)


# --------------------------------------------------------------------------- what the head does


def context_step_labels(steps: Sequence[int], stages: pd.DataFrame | None) -> dict[int, str]:
    """How the step picker of the tokens in context names each of its ``steps``: the step, and what it is when it is
    the start of a stage (stages.parquet rows of one basis: ``S7 begins: induction heads form (L1 H0)``) or the last
    checkpoint (``last``)."""
    begins = {}
    if stages is not None:
        for r in stages.itertuples(index=False):
            if int(r.stage) > 0:
                begins[int(r.start_step)] = f"S{int(r.stage) + 1} begins: {r.boundary}"
    out = {}
    for i, step in enumerate(steps):
        what = [begins[int(step)]] if int(step) in begins else []
        what += ["last"] if i == len(steps) - 1 else []
        out[int(step)] = f"{int(step):,}" + (f" · {'; '.join(what)}" if what else "")
    return out


def ablation_rows(effect, *, run: str, layer: int, head: int) -> pd.DataFrame:
    """One head's ablation effect over training as tidy rows (run, layer, head, statistic, step, value, se; nats):
    the loss increases on the probe and the text and the ICL scores with the head ablated, steps without a value left
    out.

    Args:
        effect: `analysis.findings.ablation.AblationEffect`.
    """
    parts = [
        pd.DataFrame(
            {
                "run": run,
                "layer": layer,
                "head": head,
                "statistic": measure,
                "step": np.asarray(effect.steps, dtype=np.int64),
                "value": effect.value[measure][:, layer, head],
                "se": effect.se[measure][:, layer, head],
            }
        )
        for measure in effect.value
    ]
    out = pd.concat(parts, ignore_index=True)
    return out[np.isfinite(out["value"])].reset_index(drop=True)
