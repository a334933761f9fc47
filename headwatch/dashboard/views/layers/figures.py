"""Figures of every head of a layer over training: one layer large, and a grid of all layers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, nan_mean
from headwatch.dashboard.figures.common import duplicate_shapes, figure, layout, step_xaxis, value_axis, with_gaps
from headwatch.dashboard.figures.points import clickable
from headwatch.dashboard.labels import Stat

_MEAN_LINE = dict(color=style.LAYER_MEAN_COLOUR, dash=style.LAYER_MEAN_DASH, width=style.LAYER_MEAN_WIDTH)


def layer_lines(
    axis: StepAxis,
    values: np.ndarray,
    *,
    layer: int,
    stat: Stat,
    k: int | None = None,
    y_range: tuple[float, float],
    log_y: bool = False,
) -> go.Figure:
    """Every head of one layer over training (one colour per head) and the layer mean (red, dashed).

    Args:
        values: ``(S, n_heads)`` the statistic of each head of the layer.
        y_range: fixed value range (log10 units if ``log_y``), shared by all layers.
    """
    n_heads = values.shape[1]
    colours = style.scale_colours(style.HEAD_SCALE, n_heads)
    sym = stat.short(k)
    traces: list[dict[str, Any]] = [
        clickable(
            dict(
                type="scatter",
                x=axis.x,
                y=values[:, h],
                mode="lines",
                name=f"H{h}",
                legendgroup="heads",
                line=dict(color=colours[h], width=style.THIN_WIDTH + 0.3),
                customdata=np.stack([np.full(len(axis.steps), layer), np.full(len(axis.steps), h), axis.steps], axis=1),
                hovertemplate=f"L{layer} H{h}<br>step %{{customdata[2]}}<br>{sym} = %{{y:.4g}}<extra>click to open</extra>",
            )
        )
        for h in range(n_heads)
    ]
    traces.append(
        dict(
            type="scatter",
            x=axis.x,
            y=nan_mean(values, axis=1),
            mode="lines",
            name="layer mean",
            line=_MEAN_LINE,
            customdata=axis.steps,
            hovertemplate=f"layer {layer} mean<br>step %{{customdata}}<br>{sym} = %{{y:.4g}}<extra></extra>",
        )
    )
    return figure(
        traces,
        layout(
            height=style.HEIGHT + 40,
            xaxis=step_xaxis(axis),
            yaxis=value_axis(stat.title(k), y_range, log=log_y),
            shapes=duplicate_shapes(axis),
            legend=dict(orientation="v", x=1.01, y=1, xanchor="left", yanchor="top", font=dict(size=10)),
            margin=dict(style.MARGIN, r=110),
        ),
    )


def grid_columns(n_layers: int) -> int:
    """Columns of the small-multiples grid: about square, at most 8 wide."""
    return max(1, min(8, math.ceil(math.sqrt(n_layers * 1.5))))


def layer_grid(
    axis: StepAxis,
    values: np.ndarray,
    *,
    stat: Stat,
    k: int | None = None,
    y_range: tuple[float, float],
    log_y: bool = False,
    highlight: int | None = None,
    cols: int | None = None,
) -> go.Figure:
    """Small multiples: one panel per layer with all its heads (thin) and the layer mean (red dashed).

    All panels share the fixed x and y ranges. Each panel's heads are one trace (NaN between heads),
    so the figure stays light at 36 layers x 40 heads.

    Args:
        values: ``(S, n_layers, n_heads)``.
        highlight: a layer whose panel gets a frame (the one shown large above).
        cols: grid columns (default `grid_columns`).
    """
    s, n_layers, n_heads = values.shape
    cols = cols or grid_columns(n_layers)
    rows = math.ceil(n_layers / cols)
    gap_x, gap_y = 0.012, 0.07
    width = (1 - gap_x * (cols - 1)) / cols
    height = (1 - gap_y * (rows - 1)) / rows
    lay = layout(
        height=max(260, 160 * rows + 60),
        showlegend=False,
        margin=dict(l=64, r=16, t=36, b=68),
        annotations=[],
        shapes=[],
    )
    traces: list[dict[str, Any]] = []
    heads = np.arange(n_heads)
    sym = stat.short(k)
    for layer in range(n_layers):
        r, c = divmod(layer, cols)
        n = "" if layer == 0 else str(layer + 1)  # plotly names the first axes x, y; then x2, y2, ...
        xa, ya = f"x{n}", f"y{n}"
        x0 = c * (width + gap_x)
        y1 = min(1.0, 1 - r * (height + gap_y))
        lay[f"xaxis{n}"] = step_xaxis(
            axis,
            domain=[max(0.0, x0), min(1.0, x0 + width)],
            anchor=ya,
            title=dict(text=""),
            showticklabels=r == rows - 1 or layer + cols >= n_layers,
            nticks=4,
            **({"matches": "x"} if layer else {}),
        )
        lay[f"yaxis{n}"] = value_axis(
            "",
            y_range,
            log=log_y,
            domain=[max(0.0, y1 - height), y1],
            anchor=xa,
            showticklabels=c == 0,
            nticks=4,
            **({"matches": "y"} if layer else {}),
        )
        gx, gy = with_gaps(axis.x, values[:, layer, :].T)
        hx = np.repeat(heads, s + 1)  # the head of each point of the joined trace
        traces.append(
            clickable(
                dict(
                    type="scatter",
                    x=gx,
                    y=gy,
                    xaxis=xa,
                    yaxis=ya,
                    mode="lines",
                    customdata=np.stack([np.full(len(hx), layer), hx], axis=1),  # [layer, head]: a click opens the head
                    line=dict(color="rgba(31,59,115,0.45)", width=style.THIN_WIDTH),
                    hovertemplate=f"L{layer} H%{{customdata[1]}}<br>{sym} = %{{y:.4g}}<extra>click to open</extra>",
                )
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=axis.x,
                y=nan_mean(values[:, layer, :], axis=1),
                xaxis=xa,
                yaxis=ya,
                mode="lines",
                line=dict(_MEAN_LINE, width=1.8),
                hovertemplate=f"layer {layer} mean<br>{sym} = %{{y:.4g}}<extra></extra>",
            )
        )
        lay["annotations"].append(
            dict(
                text=f"<b>L{layer}</b>" if layer == highlight else f"L{layer}",
                xref=f"{xa} domain",
                yref=f"{ya} domain",
                x=0.0,
                y=1.0,
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                font=dict(size=11),  # above the panel
            )
        )
        if layer == highlight:
            lay["shapes"].append(
                dict(
                    type="rect",
                    xref=f"{xa} domain",
                    yref=f"{ya} domain",
                    x0=0,
                    x1=1,
                    y0=0,
                    y1=1,
                    line=dict(color=style.LAYER_MEAN_COLOUR, width=1.5),
                )
            )
        lay["shapes"] += duplicate_shapes(axis, xref=xa, yref=ya)
    lay["annotations"] += [
        dict(text=axis.title, xref="paper", yref="paper", x=0.5, y=0, yshift=-44, showarrow=False, font=dict(size=12)),
        dict(
            text=stat.title(k),
            xref="paper",
            yref="paper",
            x=0,
            xshift=-52,
            y=0.5,
            textangle=-90,
            showarrow=False,
            font=dict(size=12),
        ),
    ]
    return figure(traces, lay)
