"""Figures of the random-matrix lab: entries vs the predicted Gaussian, ordered singular values, P(lambda)."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.analysis.rmt.nullmodel import free_mp_density, free_mp_support, mp_density
from headwatch.analysis.rmt.rmt_lab import LabSample
from headwatch.dashboard import style
from headwatch.dashboard.figures.common import figure, layout, value_axis

MODEL_COLOUR = "#d62728"  # analytic curves
PLAIN_MP_COLOUR = "#7f7f7f"
SAMPLE_COLOUR = "#1f77b4"


def entries_figure(s: LabSample, *, log_density: bool = False) -> go.Figure:
    """Histogram of the d_model^2 entries of W_QK with the Gaussian of the predicted width."""
    centres = 0.5 * (s.entry_edges[1:] + s.entry_edges[:-1])
    grid = np.linspace(s.entry_edges[0], s.entry_edges[-1], 241)
    gauss = np.exp(-0.5 * (grid / s.predicted_std) ** 2) / (s.predicted_std * np.sqrt(2 * np.pi))
    data: list[dict[str, Any]] = [
        dict(
            type="bar",
            x=centres,
            y=s.entry_density,
            name="W_QK entries",
            marker=dict(color=SAMPLE_COLOUR),
            width=float(np.diff(s.entry_edges)[0]),
        ),
        dict(
            type="scatter", mode="lines", x=grid, y=gauss, name=f"N(0, σ_Q σ_K √{s.rank})", line=dict(color=MODEL_COLOUR, width=2)
        ),
    ]
    peak = float(max(gauss.max(), s.entry_density.max()))
    y = value_axis(
        "p(w) (1 / raw unit)", (np.log10(peak) - 6, np.log10(peak) + 0.3) if log_density else (0, 1.08 * peak), log=log_density
    )
    return figure(
        data,
        layout(xaxis=dict(title=dict(text="w: entry of W_QK (raw units)")), yaxis=y, bargap=0, margin=dict(style.MARGIN, l=70)),
    )


def singular_values_figure(s: LabSample) -> go.Figure:
    """All d_model singular values, descending, on a log axis, with the rank cut marked."""
    k = np.arange(s.d_model)
    sv = np.maximum(s.sv, np.finfo(np.float64).tiny)
    data = [dict(type="scatter", mode="markers", x=k, y=sv, name="s_k", marker=dict(color=SAMPLE_COLOUR, size=4))]
    shapes = []
    if s.rank < s.d_model:
        shapes.append(
            dict(
                type="line",
                xref="x",
                yref="paper",
                x0=s.rank - 0.5,
                x1=s.rank - 0.5,
                y0=0,
                y1=1,
                line=dict(color=MODEL_COLOUR, dash="dash", width=1.5),
            )
        )
    lo = np.log10(max(sv.min(), sv.max() * 1e-20))
    y = value_axis("s_k (raw units)", (lo - 0.5, np.log10(sv.max()) + 0.5), log=True)
    return figure(
        data,
        layout(
            xaxis=dict(title=dict(text="index k (0 = largest)")),
            yaxis=y,
            shapes=shapes,
            showlegend=False,
            margin=dict(style.MARGIN, l=88),
        ),
    )


def spectrum_law_figure(s: LabSample) -> go.Figure:
    """Histogram of x = lambda / (d_model σ_Q σ_K)^2 with the free-product law and the plain MP law."""
    c = s.c
    _lo, hi = free_mp_support(c)
    top = max(hi, float(s.x.max())) * 1.05
    edges = np.linspace(0, top, 41)
    counts, _ = np.histogram(s.x, bins=edges)
    density = counts / (len(s.x) * np.diff(edges))
    grid = np.linspace(1e-4, top, 600)
    free = free_mp_density(grid, c)
    plain = mp_density(grid, c)
    data: list[dict[str, Any]] = [
        dict(
            type="bar",
            x=0.5 * (edges[1:] + edges[:-1]),
            y=density,
            width=float(edges[1] - edges[0]),
            name=f"sample ({s.rank} values)",
            marker=dict(color=SAMPLE_COLOUR, opacity=0.7),
        ),
        dict(
            type="scatter",
            mode="lines",
            x=grid,
            y=free,
            name=f"MP_c ⊠ MP_c, c = {c:.3g}",
            line=dict(color=MODEL_COLOUR, width=2.5),
        ),
        dict(
            type="scatter",
            mode="lines",
            x=grid,
            y=plain,
            name="plain MP_c (one factor)",
            line=dict(color=PLAIN_MP_COLOUR, width=2, dash="dot"),
        ),
    ]
    finite = np.concatenate([density, free[np.isfinite(free)], plain])
    y_top = float(min(np.percentile(finite[finite > 0], 99.5) * 1.3, finite.max() * 1.1)) if np.any(finite > 0) else 1.0
    return figure(
        data,
        layout(
            xaxis=dict(title=dict(text="x = λ / (d_model σ_Q σ_K)² (dimensionless)"), range=[0, top]),
            yaxis=value_axis("P(x)", (0, y_top)),
            bargap=0,
            height=style.HEIGHT,
            margin=dict(style.MARGIN, l=72),
        ),
    )
