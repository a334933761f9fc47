"""Figures of one head's weight density P(w): the map over (training time, w), P(w) at the chosen steps beside sigma(t)
and D_KL(t), and the fixed ranges of their axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard.data import StepAxis, log10_or_nan
from headwatch.dashboard.figures.common import figure, value_axis
from headwatch.dashboard.labels import Stat
from headwatch.dashboard.views.head.figures.over_training import slices_layout, step_map, time_traces


def w_title(matrix_name: str = "W_QK") -> str:
    """The P(w) axes' title: ``w: entry of W_OV (raw units)`` for the matrix shown."""
    return f"w: entry of {matrix_name} (raw units)"


def density_map(
    axis: StepAxis,
    w: np.ndarray,
    density: np.ndarray,
    *,
    chosen_x: Sequence[float] = (),
    colours: Sequence[str] = (),
    matrix_name: str = "W_QK",
) -> go.Figure:
    """P(w) of one head as a map over (training time, w), log colour.

    Args:
        axis: the step axis (its ``x`` matches the rows of ``density``).
        w: ``(W,)`` grid of entry values in raw units.
        density: ``(S, W)`` p(w) in 1/raw unit; NaN where no entry falls.
        chosen_x, colours: chosen steps (axis coordinates), marked by ticks along the top.
        matrix_name: the matrix whose entries ``w`` are (``W_QK``, ``W_OV``), named on the w axis.
    """
    return step_map(
        axis,
        w,
        density,
        colour_title="p(w) (1 / raw unit)",
        y_axis=value_axis(w_title(matrix_name), (float(w[0]), float(w[-1]))),
        hover="w = %{y:.3g}<br>log10 p(w) = %{z:.2f}",
        chosen_x=chosen_x,
        colours=colours,
    )


def density_slices(
    w: np.ndarray,
    p: np.ndarray,
    *,
    labels: Sequence[str],
    colours: Sequence[str],
    axis: StepAxis,
    chosen_idx: Sequence[int],
    sigma: np.ndarray,
    kl: np.ndarray,
    stats: tuple[Stat, Stat],
    w_range: tuple[float, float],
    p_range: tuple[float, float],
    log_p: bool = True,
    gauss: Sequence[tuple[float, float]] = (),
    bands: Sequence[Any] = (),
    standardized: bool = False,
    compare: Sequence[tuple[int, int, tuple[np.ndarray, np.ndarray]]] = (),
    matrix_name: str = "W_QK",
) -> go.Figure:
    """P(w) at the chosen steps overlaid (left); sigma(t) and D_KL(t) with those steps marked (right).

    Args:
        w, p: ``(n, B)`` bin centres (raw units) and densities of the n chosen steps.
        labels, colours: one per chosen step.
        axis: the step axis; ``chosen_idx`` indexes its checkpoints.
        sigma, kl: ``(S,)`` the head's sigma and D_KL over training.
        stats: the `Stat` entries of sigma and D_KL (axis titles).
        w_range: fixed w range (raw units); p_range: fixed density range (log10 units if ``log_p``).
        log_p: logarithmic density axis.
        gauss: ``(mu, sigma)`` per chosen step: the Gaussian of the same mean and sigma, dashed in the step's colour.
        bands: the random-head references of sigma and D_KL (`analysis.rmt.references.Reference`), drawn as grey bands.
        standardized: ``w`` and ``p`` are z = (w - mu)/sigma and p_z (the x axis says so).
        compare: other heads' ``(layer, head, (sigma, kl))`` over training, dotted on the right panels.
        matrix_name: the matrix whose entries ``w`` are (``W_QK``, ``W_OV``), named on the w axis.
    """
    var, dens = ("z", "p(z)") if standardized else ("w", "p(w)")
    traces = [
        dict(
            type="scatter",
            x=w[i],
            y=p[i],
            mode="lines",
            name=label,
            line=dict(color=colour, width=1.8),
            hovertemplate=f"{label}<br>{var} = %{{x:.3g}}<br>{dens} = %{{y:.3g}}<extra></extra>",
        )
        for i, (label, colour) in enumerate(zip(labels, colours, strict=False))
    ]
    for i, ((mu, sd), label, colour) in enumerate(zip(gauss, labels, colours, strict=False)):
        x = np.linspace(w_range[0], w_range[1], 241)
        g = np.exp(-0.5 * ((x - mu) / sd) ** 2) / (sd * np.sqrt(2 * np.pi)) if sd > 0 else np.full_like(x, np.nan)
        traces.append(
            dict(
                type="scatter",
                x=x,
                y=np.where(g > 0, g, np.nan),
                mode="lines",
                name=f"Gaussian, {label}",
                legendgroup="gauss",
                showlegend=i == 0,
                line=dict(color=colour, width=1, dash="dash"),
                hovertemplate=f"N(μ, σ) of {label}<br>{var} = %{{x:.3g}}<br>{dens} = %{{y:.3g}}<extra></extra>",
            )
        )
    right = ((stats[0], sigma), (stats[1], kl))
    traces += time_traces(axis, right, chosen_idx, colours, compare)
    x_title = "z = (w − μ)/σ (standardized)" if standardized else w_title(matrix_name)
    y_title = "p(z)" if standardized else "p(w) (1 / raw unit)"
    return figure(
        traces,
        slices_layout(
            axis,
            value_axis(x_title, w_range),
            value_axis(y_title, p_range, log=log_p),
            right,
            chosen_idx,
            colours,
            bands,
            compare,
        ),
    )


def log_density_range(p: np.ndarray, *, floor_decades: float = 8.0) -> tuple[float, float]:
    """Fixed log10 range for densities: the peak down to its smallest value, at most ``floor_decades`` below."""
    lp = log10_or_nan(p)
    if not np.isfinite(lp).any():
        return (-1.0, 1.0)
    hi = float(np.nanmax(lp))
    lo = max(float(np.nanmin(lp)), hi - floor_decades)
    pad = 0.04 * (hi - lo if hi > lo else 1.0)
    return (lo - pad, hi + pad)


def z_range(hist: np.ndarray) -> tuple[float, float]:
    """A fixed z range holding every occupied histogram bin of the run (``hist`` ``(S, 202)``, tails excluded)."""
    from headwatch.analysis.store.format import HIST_Z_EDGES

    occupied = np.flatnonzero(np.asarray(hist)[:, 1:-1].sum(axis=0) > 0)
    if occupied.size == 0:
        return (-4.0, 4.0)
    lo, hi = float(HIST_Z_EDGES[occupied[0]]), float(HIST_Z_EDGES[occupied[-1] + 1])
    return (lo - 0.2, hi + 0.2)
