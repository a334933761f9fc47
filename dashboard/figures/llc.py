"""Figures of the refined LLC: every head's estimate over training coloured by layer (or cluster), the
whole model's LLC with the loss, and the heads' clusters on the layer x head grid."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from dashboard import style
from dashboard.data import StepAxis, fixed_range
from dashboard.figures.common import figure, layout, step_xaxis, value_axis
from dashboard.figures.points import HOVER_HEAD, HOVER_STEP, head_points
from dashboard.stats import Stat

CLUSTER_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
                   "#7f7f7f", "#bcbd22")


def head_curves(axis: StepAxis, idx: np.ndarray, values: np.ndarray, *, stat: Stat, groups: np.ndarray,
                group_names: Sequence[str], colours: Sequence[str]) -> go.Figure:
    """Every head's estimates over training: markers at the estimated checkpoints, a thin line joining a
    head's consecutive estimates, one colour per group (its layer, or its cluster).

    Args:
        axis: the run's time axis.
        idx: ``(E,)`` positions in ``axis.x`` of the estimated checkpoints, ascending.
        values: ``(E, n_layers, n_heads)`` the estimates there.
        groups: ``(n_layers * n_heads,)`` each head's group (layer-major), indices into ``group_names``.
    """
    e, n_layers, n_heads = values.shape
    x, steps = axis.x[idx], axis.steps[idx]
    traces: list[dict[str, Any]] = []
    shown: set[int] = set()
    for layer in range(n_layers):
        for head in range(n_heads):
            g = int(groups[layer * n_heads + head])
            traces.append(dict(
                type="scatter", x=x, y=values[:, layer, head], mode="lines+markers", name=group_names[g],
                legendgroup=f"g{g}", showlegend=g not in shown, line=dict(color=colours[g], width=1),
                marker=dict(color=colours[g], size=6), opacity=0.8,
                customdata=head_points(layer, head, steps),
                hovertemplate=f"{HOVER_HEAD} ({group_names[g]})<br>{HOVER_STEP}"
                              f"<br>{stat.symbol} = %{{y:.4g}}<extra></extra>",
            ))
            shown.add(g)
    return figure(traces, layout(
        xaxis=step_xaxis(axis), yaxis=value_axis(stat.title(), fixed_range(values)),
        legend=dict(orientation="v", x=1.02, y=1, xanchor="left", yanchor="top"), margin=dict(style.MARGIN, r=120),
    ))


def model_llc(axis: StepAxis, idx: np.ndarray, llc: np.ndarray, std: np.ndarray, *, loss: np.ndarray | None,
              loss_label: str = "") -> go.Figure:
    """The whole model's LLC at the estimated checkpoints (markers with the chains' spread as error bars),
    the loss curve on a right-hand axis over every checkpoint."""
    traces: list[dict[str, Any]] = [dict(
        type="scatter", x=axis.x[idx], y=llc, mode="lines+markers", name="whole-model LLC",
        line=dict(color=style.LAYER_MEAN_COLOUR, width=1.5), marker=dict(size=8, color=style.LAYER_MEAN_COLOUR),
        error_y=dict(type="data", array=std, visible=True, thickness=1), customdata=axis.steps[idx],
        hovertemplate="step %{customdata:,}<br>LLC = %{y:.4g}<extra></extra>",
    )]
    lay = layout(xaxis=step_xaxis(axis), yaxis=value_axis("whole-model LLC (dimensionless)", fixed_range(np.r_[llc - std, llc + std])),
                 height=style.SMALL_HEIGHT + 80, margin=dict(style.MARGIN, r=80))
    if loss is not None:
        traces.append(dict(
            type="scatter", x=axis.x, y=loss, mode="lines+markers", name=loss_label, yaxis="y2",
            line=dict(color=style.LOSS_COLOUR, width=1.5, dash="dot"), marker=dict(size=3), customdata=axis.steps,
            hovertemplate=f"step %{{customdata:,}}<br>{loss_label} = %{{y:.4f}}<extra></extra>",
        ))
        lay["yaxis2"] = dict(overlaying="y", side="right", title=dict(text=loss_label), showgrid=False, zeroline=False,
                             range=list(fixed_range(loss)))
    return figure(traces, lay)


def cluster_grid(labels: np.ndarray, *, n_layers: int, n_heads: int, names: Sequence[str]) -> go.Figure:
    """Each head's cluster on a layer (rows) x head (columns) grid, one colour per cluster."""
    k = len(names)
    z = np.asarray(labels, dtype=np.float64).reshape(n_layers, n_heads)
    scale = []
    for i in range(k):
        scale += [[i / k, CLUSTER_COLOURS[i % len(CLUSTER_COLOURS)]], [(i + 1) / k, CLUSTER_COLOURS[i % len(CLUSTER_COLOURS)]]]
    text = np.array([[names[int(c)] for c in row] for row in z])
    heat = dict(type="heatmap", z=z, x=list(range(n_heads)), y=list(range(n_layers)), zmin=-0.5, zmax=k - 0.5,
                colorscale=scale, showscale=False, text=text, texttemplate="%{text}", xgap=2, ygap=2,
                hovertemplate="layer %{y}, head %{x}<br>%{text}<extra></extra>")
    return figure([heat], layout(
        xaxis=dict(title=dict(text="head"), dtick=1), yaxis=dict(title=dict(text="layer"), dtick=1, autorange="reversed"),
        height=max(style.SMALL_HEIGHT, 40 * n_layers + 90),
    ))
