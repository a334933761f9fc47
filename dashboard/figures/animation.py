"""The animated layer x head heatmap with its two marginals, one frame per checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from dashboard.data import fixed_range
from dashboard.figures.common import colour_layer, figure, layout, value_axis
from dashboard.stats import Stat

FRAME_MS = 180  # playback speed: one checkpoint per FRAME_MS milliseconds

# Panel layout in paper coordinates: main heatmap top-left, layer marginal right, head marginal below.
_MAIN_X, _MAIN_Y = [0.0, 0.74], [0.30, 1.0]
_RIGHT_X, _BOTTOM_Y = [0.79, 1.0], [0.0, 0.21]


def _marginal_range(means: np.ndarray, log: bool) -> tuple[float, float]:
    return fixed_range(means, log=log, pad=0.06)


def animation(
    values: np.ndarray, *, steps: Sequence[int], start: int, stat: Stat, k: int | None = None,
    log_colour: bool = False, signed: bool = False, frame_ms: int = FRAME_MS,
) -> go.Figure:
    """Layer x head heatmap of a statistic, animated over every checkpoint.

    The right marginal is the mean over the heads of each layer, the bottom one the mean
    over layers of each head index. Colour scale and marginal ranges are fixed over the
    whole run, so what moves is the data, not the scale. Play/pause and the step slider
    run in the browser.

    Args:
        values: ``(S, n_layers, n_heads)``.
        steps: the S checkpoints' steps (frame names and slider labels).
        start: index of the frame shown first (a link's ``step``).
        log_colour: colour (and marginals) on a log scale.
        signed: diverging colours centred on 0 (linear colour only).
    """
    s, n_layers, n_heads = values.shape
    sym = stat.short(k)
    colour = colour_layer(values, log=log_colour, title=stat.title(k), signed=signed)
    z_all = colour.pop("z").astype(np.float32)  # (S, L, H), log10 when log_colour; float32 halves the payload
    raw = values.astype(np.float32)
    layer_mean = np.nanmean(values, axis=2)  # (S, L): right marginal
    head_mean = np.nanmean(values, axis=1)  # (S, H): bottom marginal
    layers, heads = np.arange(n_layers), np.arange(n_heads)
    # hover shows the raw value: z itself on a linear scale, customdata (float32) under log colour
    hover = f"layer %{{y}}, head %{{x}}<br>{sym} = %{{{'customdata' if log_colour else 'z'}:.4g}}<extra></extra>"

    def frame_data(i: int) -> list[dict[str, Any]]:
        """What changes from one checkpoint to the next: colours and the two marginals."""
        heat = dict(type="heatmap", z=z_all[i])
        if log_colour:
            heat["customdata"] = raw[i]
        return [heat, dict(type="scatter", x=layer_mean[i]), dict(type="scatter", y=head_mean[i])]

    first = frame_data(start)
    first[0].update(x=heads, y=layers, hovertemplate=hover, xaxis="x", yaxis="y",
                    colorbar=dict(colour["colorbar"], x=1.0, xanchor="left", len=0.7, y=_MAIN_Y[1], yanchor="top",
                                  thickness=14),
                    **{key: val for key, val in colour.items() if key != "colorbar"})
    first[1].update(y=layers, mode="lines+markers", xaxis="x2", yaxis="y", line=dict(color="#444", width=1.5),
                    marker=dict(size=5), name="layer mean",
                    hovertemplate=f"layer %{{y}}: mean over heads {sym} = %{{x:.4g}}<extra></extra>")
    first[2].update(x=heads, mode="lines+markers", xaxis="x3", yaxis="y3", line=dict(color="#444", width=1.5),
                    marker=dict(size=5), name="head mean",
                    hovertemplate=f"head %{{x}}: mean over layers {sym} = %{{y:.4g}}<extra></extra>")
    frames = [dict(name=str(step), data=frame_data(i), traces=[0, 1, 2],
                   layout=dict(title=dict(text=f"step {step:,}")))
              for i, step in enumerate(steps)]

    play = dict(frame=dict(duration=frame_ms, redraw=True), fromcurrent=True, transition=dict(duration=0), mode="immediate")
    pause = dict(frame=dict(duration=0, redraw=False), mode="immediate", transition=dict(duration=0))
    jump = dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0))
    slider_steps = [dict(label=f"{step:,}", method="animate", args=[[str(step)], jump]) for step in steps]
    lay = layout(
        height=640, showlegend=False, margin=dict(l=64, r=90, t=56, b=120),
        title=dict(text=f"step {steps[start]:,}", x=0.01, xanchor="left"),
        xaxis=dict(domain=_MAIN_X, anchor="y", range=[-0.5, n_heads - 0.5], title=dict(text=""), showticklabels=False),
        yaxis=dict(domain=_MAIN_Y, anchor="x", range=[n_layers - 0.5, -0.5], title=dict(text="layer"),
                   dtick=1 if n_layers <= 24 else 2),
        xaxis2=value_axis(f"mean over heads ({stat.unit})", _marginal_range(layer_mean, log_colour), log=log_colour,
                          domain=_RIGHT_X, anchor="y", nticks=4),
        xaxis3=dict(domain=_MAIN_X, anchor="y3", matches="x", range=[-0.5, n_heads - 0.5], title=dict(text="head"),
                    dtick=1 if n_heads <= 24 else 2),
        yaxis3=value_axis("mean over<br>layers", _marginal_range(head_mean, log_colour), log=log_colour,
                          domain=_BOTTOM_Y, anchor="x3", nticks=4),
        updatemenus=[dict(
            type="buttons", direction="left", x=0.0, y=-0.1, xanchor="left", yanchor="top", pad=dict(t=0, r=10),
            showactive=False,
            # from the opening step on (plotly otherwise starts at frame 0 until something has played)
            buttons=[dict(label="▶ Play", method="animate", args=[[str(x) for x in steps[start:]] if start else None, play]),
                     dict(label="❚❚ Pause", method="animate", args=[[None], pause])],
        )],
        sliders=[dict(
            active=start, steps=slider_steps, x=0.16, len=0.84, y=-0.08, yanchor="top", pad=dict(t=0, b=0),
            currentvalue=dict(prefix="step ", visible=True, xanchor="right"), transition=dict(duration=0),
        )],
    )
    return figure(first, lay, frames)
