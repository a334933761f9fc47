"""Derived slices for the views: step axes, statistic arrays, densities, fixed ranges.

Pure numpy on an opened `analysis.store.Store` (no streamlit); `dashboard.loader`
caches what is worth caching. Everything is vectorised over steps, layers and
heads: a rerun slices arrays, it never loops over table rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from analysis.crossings import Approach, classify_approaches
from analysis.store.format import HIST_Z_BINS, HIST_Z_EDGES, HIST_Z_HI, HIST_Z_LO
from analysis.store import Store
from dashboard.stats import LAMBDA

Unit = Literal["step", "tokens"]
Scale = Literal["linear", "log"]

BIN_WIDTH = (HIST_Z_HI - HIST_Z_LO) / HIST_Z_BINS


# --------------------------------------------------------------------------- step axes


@dataclass(frozen=True)
class StepAxis:
    """Where each checkpoint sits on a plot's training-time axis.

    Attributes:
        x: coordinate of each real checkpoint (aligned with ``store.steps``).
        steps: the real checkpoints' steps (for hover text).
        dup_x: coordinates of listed checkpoints that are not training states: whole duplicates, and
            partial ones unless the view includes them (flagged, never plotted as states).
        dup_text: one label per such checkpoint, ``step 3 repeats step 0's weights (not plotted)``.
        title: axis title with unit, saying how step 0 is placed on a log axis.
        log: whether the axis is logarithmic.
        range: fixed axis range in plotly's units (log10 of the coordinate on a log axis).
        hover_label: what a coordinate is, for hover text (``step``, ``step + 1``, ``tokens``, ...).
        edges: ``(S + 1,)`` heatmap cell boundaries around each ``x``: midpoints on a linear axis,
            geometric midpoints on a log axis (so each checkpoint's cell looks right on either).
    """

    x: np.ndarray
    steps: np.ndarray
    dup_x: np.ndarray
    dup_text: tuple[str, ...]
    title: str
    log: bool
    range: tuple[float, float]
    hover_label: str = "step"
    edges: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def at(self, step: int) -> float:
        """Coordinate of a real checkpoint's step."""
        return float(self.x[int(np.searchsorted(self.steps, step))])


def _si(n: float) -> str:
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}"


def step_axis(store: Store, *, unit: Unit = "step", scale: Scale = "linear") -> StepAxis:
    """The training-time axis for the store's real checkpoints and its duplicates.

    A log axis cannot show step 0, so it plots step + 1 (tokens: tokens + one step's
    tokens) and says so in the title.

    Raises:
        ValueError: ``unit="tokens"`` for a store without token counts.
    """
    steps = store.steps
    hidden = store.hidden_steps
    dup_steps = np.array([d for d, _ in hidden], dtype=np.int64)
    dup_text = tuple(f"{text} (not plotted)" for _, text in hidden)
    log = scale == "log"
    if unit == "tokens":
        tok = store.meta.tokens_at(steps)
        dup_tok = store.meta.tokens_at(dup_steps)
        if tok is None or dup_tok is None:
            raise ValueError("this store records no token counts; use unit='step'")
        shift = store.meta.tokens_per_step or 1.0
        x, dup_x = (tok + shift, dup_tok + shift) if log else (tok, dup_tok)
        title = f"tokens seen + {_si(shift)} (log scale)" if log else "tokens seen"
        hover = f"tokens + {_si(shift)}" if log else "tokens"
    else:
        x = steps.astype(np.float64) + (1 if log else 0)
        dup_x = dup_steps.astype(np.float64) + (1 if log else 0)
        title = "training step + 1 (log scale)" if log else "training step"
        hover = "step + 1" if log else "step"
    if len(x) == 0:
        rng = (0.0, 1.0)
    elif log:
        lo, hi = np.log10(x.min()), np.log10(max(x.max(), x.min() * 10))
        pad = 0.03 * (hi - lo)
        rng = (lo - pad, hi + pad)
    else:
        lo, hi = float(x.min()), float(max(x.max(), x.min() + 1))
        pad = 0.02 * (hi - lo)
        rng = (lo - pad, hi + pad)
    return StepAxis(x=x, steps=steps, dup_x=dup_x, dup_text=dup_text, title=title, log=log, range=rng,
                    hover_label=hover, edges=cell_edges(x, log=log))


def cell_edges(x: np.ndarray, *, log: bool) -> np.ndarray:
    """Boundaries ``(S + 1,)`` of heatmap cells centred on ascending ``x`` (in log10 space on a log axis)."""
    if len(x) == 0:
        return np.zeros(0)
    u = np.log10(x) if log else np.asarray(x, dtype=np.float64)
    if len(u) == 1:
        half = 0.15 if log else 0.5
        e = np.array([u[0] - half, u[0] + half])
    else:
        mid = (u[:-1] + u[1:]) / 2
        e = np.concatenate([[2 * u[0] - mid[0]], mid, [2 * u[-1] - mid[-1]]])
    return 10**e if log else e


def default_steps(steps: np.ndarray, n: int = 5) -> list[int]:
    """About ``n`` checkpoints spread evenly in log(step + 1), always the first and the last."""
    if len(steps) <= n:
        return [int(s) for s in steps]
    pos = np.log1p(steps.astype(np.float64))
    targets = np.linspace(pos[0], pos[-1], n)
    idx = np.unique([int(np.argmin(np.abs(pos - t))) for t in targets])
    return [int(steps[i]) for i in idx]


# --------------------------------------------------------------------------- statistics


def stat_values(store: Store, stat: str, *, k: int = 0) -> np.ndarray:
    """``[step, layer, head]`` values of a statistic; ``lambda`` is s_k^2 (float64)."""
    if stat == LAMBDA:
        sv = store.array("sv")[..., k].astype(np.float64)
        return sv * sv
    return store.array(stat)


def fixed_range(values: np.ndarray, *, log: bool = False, pad: float = 0.04) -> tuple[float, float]:
    """A range that holds every finite value (positive ones on a log axis), padded; in log10 units if ``log``."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v) & (v > 0)] if log else v[np.isfinite(v)]
    if v.size == 0:
        return (0.0, 1.0)
    lo, hi = float(v.min()), float(v.max())
    if log:
        lo, hi = np.log10(lo), np.log10(hi)
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        lo, hi = lo - 0.5 * max(abs(lo), 1e-12), hi + 0.5 * max(abs(hi), 1e-12)
    span = hi - lo
    return (lo - pad * span, hi + pad * span)


def log10_or_nan(values: np.ndarray) -> np.ndarray:
    """log10 where positive and finite, NaN elsewhere (a gap in a heatmap)."""
    v = np.asarray(values, dtype=np.float64)
    out = np.full(v.shape, np.nan)
    ok = np.isfinite(v) & (v > 0)
    out[ok] = np.log10(v[ok])
    return out


# --------------------------------------------------------------------------- densities


def density_extent(hist: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> tuple[float, float]:
    """Raw-unit interval [w_lo, w_hi] covering every occupied interior bin at every step.

    Args:
        hist: ``(S, 202)`` hist_z probabilities of one head (underflow first, overflow last).
        mu, sigma: ``(S,)`` mean and standard deviation of its entries.
    """
    interior = hist[:, 1:-1] > 0  # (S, 200)
    any_bin = interior.any(axis=1)
    if not any_bin.any():
        return (-1.0, 1.0)
    first = np.argmax(interior, axis=1)
    last = HIST_Z_BINS - 1 - np.argmax(interior[:, ::-1], axis=1)
    lo = mu + sigma * HIST_Z_EDGES[first]
    hi = mu + sigma * HIST_Z_EDGES[last + 1]
    ok = any_bin & np.isfinite(lo) & np.isfinite(hi) & (sigma > 0)
    if not ok.any():
        return (-1.0, 1.0)
    return float(lo[ok].min()), float(hi[ok].max())


def density_grid(
    hist: np.ndarray, mu: np.ndarray, sigma: np.ndarray, w: np.ndarray
) -> np.ndarray:
    """Raw-unit density p(w) = p_z((w - mu) / sigma) / sigma on a common grid, for every step.

    p_z is the piecewise-constant standardized density hist_z / bin width; grid points
    outside [-10, 10] sigma (the tail bins, whose shape is unknown) get NaN, and so
    do empty bins (shown as gaps on a log colour scale).

    Args:
        hist: ``(S, 202)`` hist_z of one head.
        mu, sigma: ``(S,)``.
        w: ``(W,)`` grid in raw units.

    Returns:
        ``(S, W)`` densities in 1 / raw unit.
    """
    safe_sigma = np.where(sigma > 0, sigma, np.nan)
    z = (w[None, :] - mu[:, None]) / safe_sigma[:, None]  # (S, W)
    idx = np.floor((z - HIST_Z_LO) / BIN_WIDTH)
    inside = np.isfinite(idx) & (idx >= 0) & (idx < HIST_Z_BINS)
    idx = np.where(inside, idx, 0).astype(np.int64) + 1  # +1: skip the underflow bin
    p = np.take_along_axis(hist, idx, axis=1) / BIN_WIDTH / safe_sigma[:, None]
    p = np.where(inside & (p > 0), p, np.nan)
    return p


def density_curves(hist: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each step's density at its own bin centres: w ``(S, 200)`` and p(w) ``(S, 200)`` (0 -> NaN)."""
    centres = 0.5 * (HIST_Z_EDGES[1:] + HIST_Z_EDGES[:-1])
    w = mu[:, None] + sigma[:, None] * centres[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        p = hist[:, 1:-1] / BIN_WIDTH / sigma[:, None]
    return w, np.where(p > 0, p, np.nan)


def tail_mass(hist: np.ndarray) -> np.ndarray:
    """Probability beyond |z| >= 10 at each step (the underflow and overflow bins)."""
    return hist[:, 0] + hist[:, -1]


def null_spectra(lam: np.ndarray, store: Store) -> np.ndarray:
    """Typical spectra of a random head with the same Frobenius norm as each row of ``lam`` ``(n, d_head)``."""
    from analysis.nullmodel import null_ordered_spectrum

    return null_ordered_spectrum(lam.mean(axis=1), store.d_head, int(store.d_model))


# --------------------------------------------------------------------------- level crossings

CROSSING_LEVELS = 4  # lambda_0 .. lambda_3


@dataclass(frozen=True)
class Crossings:
    """One head's leading levels over training with what their singular vectors did.

    Attributes:
        kept: ``(S - 1, m)`` O_ii between consecutive checkpoints, how much level i kept its
            direction from one to the next (1: the same u and v; NaN: no overlaps for that pair).
        swapped: ``(S - 1, m - 1)`` O_(i,i+1) O_(i+1,i), the evidence that levels i and i+1 swapped.
        approaches: close approaches of adjacent levels, classified (`analysis.crossings`).
    """

    kept: np.ndarray
    swapped: np.ndarray
    approaches: list[Approach]


def level_crossings(lam: np.ndarray, overlaps: tuple[np.ndarray, np.ndarray], *, gap_threshold: float) -> Crossings:
    """Classify one head's close approaches of lambda_0 .. lambda_3.

    Args:
        lam: ``(S, d_head)`` lambda_k per step, descending.
        overlaps: ``(o_u, o_v)`` from `analysis.store.Store.overlaps`, each ``(S - 1, K, K)``.
        gap_threshold: relative singular-value gap below which two levels count as close.
    """
    o_u, o_v = overlaps
    o = o_u * o_v
    m = min(CROSSING_LEVELS, lam.shape[1], o.shape[-1])
    kept = np.diagonal(o, axis1=1, axis2=2)[:, :m]
    swapped = np.stack([o[:, i, i + 1] * o[:, i + 1, i] for i in range(m - 1)], axis=1) if m > 1 else np.zeros((len(o), 0))
    approaches = classify_approaches(lam, o, levels=m - 1, gap_threshold=gap_threshold) if m > 1 else []
    return Crossings(kept=kept, swapped=swapped, approaches=approaches)


def approach_table(approaches: list[Approach], steps: np.ndarray) -> pd.DataFrame:
    """The approaches as a table for display: step, levels, gap, verdict, swap score."""
    return pd.DataFrame({
        "step": [int(steps[a.t]) for a in approaches],
        "levels": [f"λ_{a.level}, λ_{a.level + 1}" for a in approaches],
        "gap of s, %": [round(100 * a.gap, 2) for a in approaches],
        "verdict": [a.kind for a in approaches],
        "swap score": [round(a.swap_score, 3) for a in approaches],
    })
