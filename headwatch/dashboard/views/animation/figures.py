"""The animated layer x head heatmap with its two marginals, one frame per checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard.data import fixed_range, nan_mean
from headwatch.dashboard.figures.common import FRAME_MS, colour_layer, figure, layout, play_menu, value_axis
from headwatch.dashboard.figures.points import HOVER_HEAD, HOVER_STEP, head_points, invisible_markers
from headwatch.dashboard.labels import Stat

# Panel layout in paper coordinates: main heatmap top-left, layer marginal right, head marginal below.
_MAIN_X, _MAIN_Y = [0.0, 0.74], [0.30, 1.0]
_RIGHT_X, _BOTTOM_Y = [0.79, 1.0], [0.0, 0.21]


def _marginal_range(means: np.ndarray, log: bool) -> tuple[float, float]:
    return fixed_range(means, log=log, pad=0.06)


def animation(
    values: np.ndarray,
    *,
    steps: Sequence[int],
    start: int,
    stat: Stat,
    k: int | None = None,
    log_colour: bool = False,
    signed: bool = False,
    frame_ms: int = FRAME_MS,
    title: str = "",
) -> go.Figure:
    """Layer x head heatmap of a statistic, animated over every checkpoint.

    The right marginal is the mean over the heads of each layer, the bottom one the mean
    over layers of each head index. Colour scale and marginal ranges are fixed over the
    whole run, so what moves is the data, not the scale. The frame shown is ``start``, which
    the page's one step control (in the URL) sets; Play runs the frames from there in the
    browser and Pause stops. Plotly's own slider is left out: a second step control that
    the URL could not follow. An invisible marker per cell carries the hover and makes a
    click open the head (`dashboard.figures.points.cell_picker`).

    Args:
        values: ``(S, n_layers, n_heads)``.
        steps: the S checkpoints' steps (frame names and titles).
        start: index of the frame shown first (a link's ``step``).
        log_colour: colour (and marginals) on a log scale.
        signed: diverging colours centred on 0 (linear colour only).
        title: put before each frame's ``step N`` title (run and statistic, for an exported image).
    """
    _s, n_layers, n_heads = values.shape
    sym = stat.short(k)
    colour = colour_layer(values, log=log_colour, title=stat.title(k), signed=signed)
    z_all = colour.pop("z").astype(np.float32)  # (S, L, H), log10 when log_colour; float32 halves the payload
    raw = values.astype(np.float32)
    layer_mean = nan_mean(values, axis=2)  # (S, L): right marginal
    head_mean = nan_mean(values, axis=1)  # (S, H): bottom marginal
    layers, heads = np.arange(n_layers), np.arange(n_heads)

    cell_layer, cell_head = np.repeat(layers, n_heads), np.tile(heads, n_layers)

    def frame_data(i: int) -> list[dict[str, Any]]:
        """What changes from one checkpoint to the next: colours, the two marginals, the cells' hover values."""
        heat = dict(type="heatmap", z=z_all[i])
        # the invisible cell markers: [layer, head, step, value] (a click opens the head at this step)
        cells = head_points(cell_layer, cell_head, steps[i], raw[i].ravel())
        return [
            heat,
            dict(type="scatter", x=layer_mean[i]),
            dict(type="scatter", y=head_mean[i]),
            dict(type="scatter", customdata=cells),
        ]

    first = frame_data(start)
    first[3].update(
        x=cell_head,
        y=cell_layer,
        mode="markers",
        xaxis="x",
        yaxis="y",
        showlegend=False,
        name="cells",
        **invisible_markers(),
        hovertemplate=f"{HOVER_HEAD}<br>{HOVER_STEP}<br>{sym} = %{{customdata[3]:.4g}}<extra>click to open</extra>",
    )
    first[0].update(
        x=heads,
        y=layers,
        hoverinfo="skip",
        xaxis="x",
        yaxis="y",
        colorbar=dict(colour["colorbar"], x=1.0, xanchor="left", len=0.7, y=_MAIN_Y[1], yanchor="top", thickness=14),
        **{key: val for key, val in colour.items() if key != "colorbar"},
    )
    first[1].update(
        y=layers,
        mode="lines+markers",
        xaxis="x2",
        yaxis="y",
        line=dict(color="#444", width=1.5),
        marker=dict(size=5),
        name="layer mean",
        hovertemplate=f"layer %{{y}}: mean over heads {sym} = %{{x:.4g}}<extra></extra>",
    )
    first[2].update(
        x=heads,
        mode="lines+markers",
        xaxis="x3",
        yaxis="y3",
        line=dict(color="#444", width=1.5),
        marker=dict(size=5),
        name="head mean",
        hovertemplate=f"head %{{x}}: mean over layers {sym} = %{{y:.4g}}<extra></extra>",
    )
    frames = [
        dict(
            name=str(step),
            data=frame_data(i),
            traces=[0, 1, 2, 3],
            layout=dict(title=dict(text=f"{title} · step {step:,}" if title else f"step {step:,}")),
        )
        for i, step in enumerate(steps)
    ]

    lay = layout(
        height=640,
        showlegend=False,
        margin=dict(l=102, r=104, t=56, b=100),
        hoverdistance=-1,
        title=dict(text=f"{title} · step {steps[start]:,}" if title else f"step {steps[start]:,}", x=0.01, xanchor="left"),
        xaxis=dict(domain=_MAIN_X, anchor="y", range=[-0.5, n_heads - 0.5], title=dict(text=""), showticklabels=False),
        yaxis=dict(
            domain=_MAIN_Y, anchor="x", range=[n_layers - 0.5, -0.5], title=dict(text="layer"), dtick=1 if n_layers <= 24 else 2
        ),
        xaxis2=value_axis(
            f"mean over heads ({stat.unit})",
            _marginal_range(layer_mean, log_colour),
            log=log_colour,
            domain=_RIGHT_X,
            anchor="y",
            nticks=4,
        ),
        xaxis3=dict(
            domain=_MAIN_X,
            anchor="y3",
            matches="x",
            range=[-0.5, n_heads - 0.5],
            title=dict(text="head"),
            dtick=1 if n_heads <= 24 else 2,
        ),
        yaxis3=value_axis(
            "mean over<br>layers", _marginal_range(head_mean, log_colour), log=log_colour, domain=_BOTTOM_Y, anchor="x3", nticks=4
        ),
        updatemenus=[play_menu(steps, start, frame_ms=frame_ms, y=-0.1, pad=dict(t=0, r=10))],
    )
    return figure(first, lay, frames)
