"""What the Head similarity view computes before it draws: the similarity matrix shown (every head, or one layer in
dendrogram order), its fixed colour range, the random heads' mean similarity, and the ultrametricity table as arrays
over training."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.cluster.hierarchy import dendrogram, linkage
from scipy.spatial.distance import squareform

from headwatch.analysis.weights.ultrametric import distance
from headwatch.dashboard.data import fixed_range

ALL = -1  # the layer choice that shows every head against every head


def pair_square(values: np.ndarray, *, diagonal: float = 1.0) -> np.ndarray:
    """``(n, n)`` symmetric matrix from the upper triangle ``values`` (NaN elsewhere), the diagonal set."""
    upper = np.triu(np.nan_to_num(values, nan=0.0), 1)
    out = upper + upper.T
    known = np.isfinite(values) | np.isfinite(values.T)
    out[~known] = np.nan
    np.fill_diagonal(out, diagonal)
    return out


def dendrogram_order(distance: np.ndarray) -> np.ndarray:
    """The leaves of scipy's average-linkage dendrogram of a square distance matrix, in plotting order."""
    n = distance.shape[0]
    if n < 3 or not np.isfinite(distance).all():
        return np.arange(n)
    z = linkage(squareform(distance, checks=False), method="average")
    return np.asarray(dendrogram(z, no_plot=True)["leaves"], dtype=np.int64)


def distance_text(stat: str) -> str:
    """How a similarity statistic ``x`` becomes a distance (`analysis.weights.ultrametric.distance`)."""
    return "d = √(2 − 2x)" if stat.endswith("frob") else "d = √(1 − x)"


@dataclass(frozen=True)
class Shown:
    """The similarity matrix drawn: its rows' heads in order, the values, the lines between layers and what it is.

    Attributes:
        heads: ``(layer, head)`` of each row (and column).
        values: ``(len(heads), len(heads))`` similarities, 1 on the diagonal.
        rng: the colour range, fixed over training.
        separators: rows before which a white line is drawn (between layers).
        what: the caption's words for the matrix.
    """

    heads: list[tuple[int, int]]
    values: np.ndarray
    rng: tuple[float, float]
    separators: list[int]
    what: str


def shown(values: np.ndarray, steps: np.ndarray, *, step: int, layer: int, stat: str) -> Shown:
    """The matrix of ``stat`` at ``step``: every head against every head (``layer`` = `ALL`) or the heads of one layer,
    ordered by the leaves of an average-linkage dendrogram of their distances (layer-major, with lines between layers,
    only where the distances are not all finite and no dendrogram can be drawn).

    Args:
        values: ``(S, L, H, L, H)`` the store's similarities, upper triangle in layer-major order.
        steps: the store's steps (axis 0 of ``values``).
    """
    _, n_layers, n_heads = values.shape[:3]
    n = n_layers * n_heads
    square = pair_square(values[int(np.searchsorted(steps, step))].reshape(n, n), diagonal=1.0)  # (n, n)
    rng = fixed_range(values[np.isfinite(values)], pad=0.0)
    rng = (min(rng[0], 0.0), 1.0)
    if layer == ALL:
        order = dendrogram_order(pair_square(distance(stat.split("_", 1)[1], square), diagonal=0.0))
        separators = [] if not np.array_equal(order, np.arange(n)) else [k * n_heads for k in range(1, n_layers)]
        what = (
            f"every head against every head at step {step:,}, ordered by the leaves of an average-linkage dendrogram "
            f"of their distances ({distance_text(stat)}; the axes name each head's layer)"
        )
    else:
        block = square[layer * n_heads : (layer + 1) * n_heads, layer * n_heads : (layer + 1) * n_heads]
        order = layer * n_heads + dendrogram_order(pair_square(distance(stat.split("_", 1)[1], block), diagonal=0.0))
        separators = []
        what = (
            f"the heads of layer {layer} at step {step:,}, ordered by the leaves of an average-linkage dendrogram of "
            f"their distances ({distance_text(stat)})"
        )
    heads = [(int(i // n_heads), int(i % n_heads)) for i in order]
    return Shown(heads=heads, values=square[np.ix_(order, order)], rng=rng, separators=separators, what=what)


def baseline_mean(similarity: dict, stat: str) -> float | None:
    """The mean of ``stat`` over independent random heads of the model's shapes (meta.json ``similarity``'s
    ``baseline``, by the statistic's kind: ``frob``, ``col`` or ``row``), or None when the store does not say."""
    return ((similarity.get("baseline") or {}).get("mean") or {}).get(stat.split("_", 1)[1])


@dataclass(frozen=True)
class Ultrametricity:
    """The ultrametricity table's rows of one statistic, as arrays over training.

    Attributes:
        rows: the table's rows whose ``distance`` is the statistic.
        layers: the L layers they cover, in order.
        share, baseline: ``(S, L)`` the layers' shares of ultrametric triangles and the random heads' (`grid`), NaN
            where absent.
    """

    rows: pd.DataFrame
    layers: list[int]
    share: np.ndarray
    baseline: np.ndarray


def ultrametricity(table: pd.DataFrame, stat: str, steps: np.ndarray) -> Ultrametricity:
    """The rows of ``table`` (``ultrametricity.parquet``) for the distance of ``stat``, over the store's ``steps``."""
    rows = table[table["distance"] == stat]
    layers = sorted(int(v) for v in rows["layer"].unique())
    return Ultrametricity(
        rows=rows,
        layers=layers,
        share=grid(rows, "share", steps, layers),
        baseline=grid(rows, "baseline", steps, layers),
    )


def ultrametric_reading(share: np.ndarray, base: np.ndarray, layers: list[int], steps: np.ndarray) -> str:
    """What the shares mean for these heads, at the last step with a share: per layer, the share against random heads
    and what it says (nested families of heads, or no more hierarchy than chance).

    Args:
        share, base: ``(S, L)`` the layers' shares and the random heads' (`grid`), NaN where absent.
        layers: the L layers; steps: the S steps.
    """
    have = np.flatnonzero(np.isfinite(share).any(axis=1))
    if not len(have):
        return ""
    t = int(have[-1])
    parts = []
    for j, layer in enumerate(layers):
        s, b = float(share[t, j]), float(base[t, j])
        if not (np.isfinite(s) and np.isfinite(b)):
            continue
        ratio = f"{s / b:.1f}× as often" if b > 0 else "more often"
        reading = f"{ratio}: nested families" if s > 2 * b else "no more hierarchy than random heads"
        parts.append(f"layer {layer}: {s:.2f} against {b:.2g} for random heads ({reading})")
    if not parts:
        return ""
    return (
        f"At step {int(steps[t]):,}, " + "; ".join(parts) + ". Nested families: the layer's heads group into families "
        "alike within, and the families into larger ones, as a dendrogram draws them (more than twice the random "
        "heads' share counts as such here); the matrix above, ordered by that dendrogram, shows the families."
    )


def grid(rows: pd.DataFrame, column: str, steps: np.ndarray, layers: list[int]) -> np.ndarray:
    """``(S, L)`` one column over the store's steps and the given layers (NaN where absent)."""
    pivot = rows.pivot_table(index="step", columns="layer", values=column, aggfunc="first")
    return pivot.reindex(index=[int(s) for s in steps], columns=layers).to_numpy(dtype=np.float64)


def pairs_csv(run: str, frame: pd.DataFrame | None, stat: str, step: int) -> pd.DataFrame:
    """The pairs' similarities at ``step`` as rows of the table, with the run and the statistic."""
    if frame is None:
        return pd.DataFrame()
    at = frame[frame["step"] == step]
    return at.assign(run=run, statistic=stat).rename(columns={stat: "value"})
