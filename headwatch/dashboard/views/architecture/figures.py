"""The Architecture heatmaps' figures: a statistic over (layer-major head index x step), the layer means."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, nan_mean
from headwatch.dashboard.figures.common import colour_layer, duplicate_shapes, figure, layout, step_xaxis, value_axis
from headwatch.dashboard.figures.heads_axis import head_labels, head_tick_font, head_ticks, layer_boundaries
from headwatch.dashboard.figures.points import cell_picker
from headwatch.dashboard.labels import Stat


def architecture_heatmap(
    axis: StepAxis,
    values: np.ndarray,
    *,
    stat: Stat,
    k: int | None = None,
    log_colour: bool = False,
    signed: bool = False,
) -> go.Figure:
    """A statistic for every head (x, layer-major) at every checkpoint (y), with layer boundaries drawn.

    Args:
        axis: the step axis (vertical here).
        values: ``(S, n_layers, n_heads)``.
        log_colour: colour by log10 (non-positive values become gaps).
        signed: diverging colours centred on 0 (linear colour only).
    """
    s, n_layers, n_heads = values.shape
    flat = values.reshape(s, n_layers * n_heads)
    colour = colour_layer(flat, log=log_colour, title=stat.title(k), signed=signed)
    sym = stat.short(k)
    labels = head_labels(n_layers, n_heads)
    heat: dict[str, Any] = dict(
        type="heatmap",
        x=labels,
        y=axis.edges,
        z=colour.pop("z"),
        hoverinfo="skip",
        **colour,
    )
    # the cell markers sit on a hidden numeric axis over the category one (column i at i): numbers travel as a
    # typed array, where 221,760 category names (a 36 x 40 model, 154 checkpoints) would be megabytes of JSON
    picker = cell_picker(
        np.arange(n_layers * n_heads, dtype=np.float32), axis.x, flat, axis.steps, n_heads=n_heads, sym=sym, xaxis="x2"
    )
    lay = _heatmap_layout(axis, n_layers, n_heads)
    lay["xaxis2"] = dict(
        overlaying="x", range=[-0.5, n_layers * n_heads - 0.5], visible=False, fixedrange=False, anchor="y", matches="x"
    )
    return figure([heat, picker], lay)


def _heatmap_layout(axis: StepAxis, n_layers: int, n_heads: int) -> dict[str, Any]:
    tickvals, ticktext = head_ticks(n_layers, n_heads)
    yaxis = step_xaxis(axis)  # the step axis, standing vertically
    return layout(
        height=max(style.HEIGHT, 520),
        margin=dict(l=88, r=138, t=style.MARGIN["t"], b=82),  # the steps' labels, the colour bar, the heads' labels
        hoverdistance=-1,
        xaxis=dict(
            type="category",
            title=dict(text="head, layer-major (layer boundaries in white)"),
            automargin=True,
            tickvals=tickvals,
            ticktext=ticktext,
            tickangle=0 if len(tickvals) <= 16 else -90,
            tickfont=head_tick_font(len(tickvals)),
            range=[-0.5, n_layers * n_heads - 0.5],
        ),
        yaxis=yaxis,
        shapes=layer_boundaries(n_layers, n_heads) + duplicate_shapes(axis, vertical=False),
    )


def layer_means(
    axis: StepAxis,
    values: np.ndarray,
    *,
    stat: Stat,
    k: int | None = None,
    y_range: tuple[float, float],
    log_y: bool = False,
) -> go.Figure:
    """The mean over heads of every layer over training, one line per layer coloured by depth.

    Args:
        values: ``(S, n_layers, n_heads)``; y_range: fixed range (log10 units if ``log_y``).
    """
    means = nan_mean(values, axis=2)  # (S, n_layers)
    n_layers = means.shape[1]
    colours = style.layer_colours(n_layers)
    sym = stat.short(k)
    traces = [
        dict(
            type="scatter",
            x=axis.x,
            y=means[:, layer],
            mode="lines",
            name=f"L{layer}",
            line=dict(color=colours[layer], width=1.8),
            customdata=axis.steps,
            hovertemplate=f"layer {layer} mean<br>step %{{customdata}}<br>{sym} = %{{y:.4g}}<extra></extra>",
        )
        for layer in range(n_layers)
    ]
    # layers are discrete: a legend entry per layer (a vertical legend right of the plot, clear of the toolbar)
    return figure(
        traces,
        layout(
            showlegend=True,
            legend=dict(
                orientation="v", x=1.01, y=1, xanchor="left", yanchor="top", font=dict(size=10), title=dict(text="layer")
            ),
            margin=dict(style.MARGIN, l=84, r=90),
            xaxis=step_xaxis(axis),
            yaxis=value_axis(f"layer mean of {stat.title(k)}", y_range, log=log_y),
            shapes=duplicate_shapes(axis),
        ),
    )
