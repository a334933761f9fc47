"""The Forward lenses' figures: per-layer attention statistics over training, the layer-pair divergence at a step
(animated), and head types as heatmaps over training (the losses on the induction probe are
`views.lenses.figures.probe_losses`')."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import colour_layer, duplicate_shapes, figure, layout, play_menu, step_xaxis, value_axis
from headwatch.dashboard.figures.heads_axis import head_labels, head_tick_font, head_ticks, layer_boundaries
from headwatch.dashboard.figures.points import cell_picker, head_points
from headwatch.dashboard.labels import Stat

FRAME_MS = 200  # the divergence's playback: one checkpoint per FRAME_MS milliseconds


def _rgba(colour: str, alpha: float) -> str:
    """``rgb(r, g, b)`` or ``#rrggbb`` as ``rgba(r, g, b, alpha)``."""
    if colour.startswith("#"):
        r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    else:
        r, g, b = (int(float(v)) for v in colour[colour.index("(") + 1 : colour.index(")")].split(",")[:3])
    return f"rgba({r},{g},{b},{alpha})"


def layer_bands(
    axis: StepAxis, values: np.ndarray, *, stat: Stat, reference: float | None = None, reference_label: str = ""
) -> go.Figure:
    """One line per layer (mean over its heads) with the heads' range as a band, over training.

    Args:
        values: ``(S, n_layers, n_heads)``.
        reference: a value to mark with a horizontal dotted line (uniform attention's), if any.
    """
    _s, n_layers, _ = values.shape
    colours = style.scale_colours(style.LAYER_SCALE, n_layers)
    traces: list[dict[str, Any]] = []
    for layer in range(n_layers):
        v = values[:, layer, :]
        lo, hi, mean = np.nanmin(v, axis=1), np.nanmax(v, axis=1), np.nanmean(v, axis=1)
        band = _rgba(colours[layer], 0.15)
        traces.append(
            dict(
                type="scatter",
                x=axis.x,
                y=hi,
                mode="lines",
                line=dict(width=0),
                legendgroup=f"L{layer}",
                showlegend=False,
                hoverinfo="skip",
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=axis.x,
                y=lo,
                mode="lines",
                line=dict(width=0),
                fill="tonexty",
                fillcolor=band,
                legendgroup=f"L{layer}",
                showlegend=False,
                hoverinfo="skip",
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=axis.x,
                y=mean,
                mode="lines",
                name=f"L{layer}",
                legendgroup=f"L{layer}",
                line=dict(color=colours[layer], width=2),
                customdata=np.stack([axis.steps, lo, hi], axis=1),
                hovertemplate=f"layer {layer}<br>step %{{customdata[0]:,}}<br>mean {stat.symbol} = %{{y:.4g}}"
                f"<br>heads %{{customdata[1]:.4g}} … %{{customdata[2]:.4g}}<extra></extra>",
            )
        )
    shapes = duplicate_shapes(axis)
    annotations = []
    if reference is not None:
        shapes.append(
            dict(
                type="line",
                xref="x domain",
                yref="y",
                x0=0,
                x1=1,
                y0=reference,
                y1=reference,
                line=dict(color="#555", width=1, dash="dot"),
            )
        )
        annotations.append(
            dict(
                xref="x domain",
                yref="y",
                x=1,
                y=reference,
                xanchor="right",
                yanchor="bottom",
                text=reference_label,
                showarrow=False,
                font=dict(size=11, color="#555"),
            )
        )
    rng = fixed_range(np.concatenate([values.ravel(), [reference] if reference is not None else []]))
    return figure(
        traces,
        layout(
            height=style.HEIGHT,
            xaxis=step_xaxis(axis),
            yaxis=value_axis(stat.title(), rng),
            shapes=shapes,
            annotations=annotations,
            legend=dict(orientation="v", x=1.01, y=1, xanchor="left", yanchor="top", font=dict(size=11)),
            margin=dict(style.MARGIN, r=90),
        ),
    )


def divergence_animation(jsd: np.ndarray, *, steps: Sequence[int], start: int, frame_ms: int = FRAME_MS) -> go.Figure:
    """The layer x layer Jensen-Shannon divergence heatmap, one frame per checkpoint, colours fixed over training.

    The frame shown is ``start``, which the page's one step control (in the URL) sets; Play runs the
    following frames in the browser and Pause stops (the page moves its step control to the paused
    frame: `dashboard.charts.follow_play`). Plotly's own slider is left out: a second step control
    that the link could not follow.

    Args:
        jsd: ``(S, n_layers, n_layers)`` in bits (NaN where a step has no forward rows).
        steps: the S steps (frame names).
        start: index of the frame shown first.
    """
    _s, n_layers, _ = jsd.shape
    hi = float(np.nanmax(jsd)) if np.isfinite(jsd).any() else 1.0
    layers = np.arange(n_layers)
    hover = "layers %{y} and %{x}<br>JSD = %{z:.4f} bits<extra></extra>"
    first = dict(
        type="heatmap",
        x=layers,
        y=layers,
        z=jsd[start],
        zmin=0.0,
        zmax=max(hi, 1e-6),
        colorscale=style.HEATMAP_SCALE,
        hovertemplate=hover,
        colorbar=dict(title=dict(text="JSD (bits)", side="right"), thickness=14),
    )
    frames = [
        dict(name=str(step), data=[dict(type="heatmap", z=jsd[i])], traces=[0], layout=dict(title=dict(text=f"step {step:,}")))
        for i, step in enumerate(steps)
    ]
    return figure(
        [first],
        layout(
            height=520,
            showlegend=False,
            margin=dict(l=64, r=116, t=56, b=90),
            title=dict(text=f"step {steps[start]:,}", x=0.01, xanchor="left"),
            xaxis=dict(title=dict(text="layer"), dtick=1, range=[-0.5, n_layers - 0.5], constrain="domain"),
            yaxis=dict(title=dict(text="layer"), dtick=1, range=[n_layers - 0.5, -0.5], scaleanchor="x"),
            updatemenus=[play_menu(steps, start, frame_ms=frame_ms, y=-0.12)],
        ),
        frames,
    )


# The marker of each head type on the heatmaps (docs/head-types.md), and its legend name.
TYPE_MARKERS = {
    "previous_token": "triangle-left",
    "induction": "diamond",
    "sink": "square",
    "current_token": "circle",
    "multigram": "star",
    "other": "x",
}


def type_markers(
    axis: StepAxis, labels: list[str], held: dict[str, np.ndarray], emergence: dict[str, np.ndarray], *, n_heads: int
) -> list[dict[str, Any]]:
    """Markers on the cells where a head holds a type, and a larger open one where it became it for good.

    Args:
        labels: the heads' categories, layer-major (`head_labels`).
        held: type -> ``(S, n_layers, n_heads)`` bool (`analysis.findings.held_types.HeadTypes.held`).
        emergence: type -> ``(n_layers, n_heads)`` emergence step, -1 for none.

    Each trace's ``meta`` is ``{"kind": "type" | "emergence", "type": name}``; its points' ``customdata`` is
    ``[layer, head, step]`` (a click opens the head, as on the cells).
    """
    traces: list[dict[str, Any]] = []
    steps = np.asarray(axis.steps)
    where = {int(s): i for i, s in enumerate(steps)}
    for name, symbol in TYPE_MARKERS.items():
        if name not in held:
            continue
        t, heads = np.nonzero(held[name].reshape(len(steps), -1))  # (cells,), (cells,)
        became = emergence[name].ravel()
        layer, head = heads // n_heads, heads % n_heads
        since = [
            f"became {name} at step {became[h]:,}" if became[h] >= 0 else f"does not hold {name} at the last checkpoint"
            for h in heads
        ]
        traces.append(
            dict(
                type="scatter",
                mode="markers",
                x=axis.x[t],
                y=[labels[h] for h in heads],
                name=f"{name}: held",
                legendgroup=name,
                marker=dict(symbol=symbol, size=5, color="rgba(255,255,255,0.85)", line=dict(color="black", width=0.6)),
                customdata=head_points(layer, head, steps[t]),
                text=[
                    f"L{a} H{b} holds {name} at step {int(steps[i]):,}; {w}"
                    for a, b, i, w in zip(layer, head, t, since, strict=True)
                ],
                hovertemplate="%{text}<extra></extra>",
                meta=dict(kind="type", type=name),
            )
        )
        heads = np.flatnonzero((became >= 0) & np.isin(became, steps))
        traces.append(
            dict(
                type="scatter",
                mode="markers",
                x=axis.x[[where[int(became[h])] for h in heads]],
                y=[labels[h] for h in heads],
                name=f"{name}: became one",
                legendgroup=name,
                marker=dict(symbol=f"{symbol}-open", size=11, color="black", line=dict(width=1.6)),
                customdata=head_points(heads // n_heads, heads % n_heads, became[heads]),
                text=[f"L{h // n_heads} H{h % n_heads} became {name} at step {int(became[h]):,}" for h in heads],
                hovertemplate="%{text}<extra></extra>",
                meta=dict(kind="emergence", type=name),
            )
        )
    return traces


def head_type_heatmap(
    axis: StepAxis,
    values: np.ndarray,
    *,
    stat: Stat,
    baseline: float | None = None,
    held: dict[str, np.ndarray] | None = None,
    emergence: dict[str, np.ndarray] | None = None,
) -> go.Figure:
    """One head-type score for every head (y, layer-major) at every checkpoint (x), with markers where heads
    hold a type.

    Args:
        values: ``(S, n_layers, n_heads)``, scores in [0, 1].
        baseline: uniform attention's score, named in the colour bar.
        held, emergence: the store's head types (`type_markers`); None: no markers.
    """
    s, n_layers, n_heads = values.shape
    flat = values.reshape(s, n_layers * n_heads).T  # (heads, S)
    title = stat.title() + (f"<br>uniform: {baseline:.3g}" if baseline is not None else "")
    colour = colour_layer(
        flat, log=False, title=title, rng=(0.0, max(1e-6, float(np.nanmax(flat)) if np.isfinite(flat).any() else 1.0))
    )
    tickvals, ticktext = head_ticks(n_layers, n_heads)
    labels = head_labels(n_layers, n_heads)
    # hover and clicks through invisible cell markers ([layer, head, step, value]: a click opens the head)
    heat = dict(type="heatmap", x=axis.edges, y=labels, z=colour.pop("z"), hoverinfo="skip", **colour)
    picker = cell_picker(
        labels, axis.x, values.reshape(s, n_layers * n_heads), axis.steps, n_heads=n_heads, sym=stat.symbol, heads_on="y"
    )
    shapes = [
        dict(line, x0=line["y0"], x1=line["y1"], y0=line["x0"], y1=line["x1"], xref="x domain", yref="y")
        for line in layer_boundaries(n_layers, n_heads)
    ]
    markers = type_markers(axis, labels, held, emergence or {}, n_heads=n_heads) if held is not None else []
    return figure(
        [heat, picker, *markers],
        layout(
            showlegend=bool(markers),
            margin=dict(style.MARGIN, b=76),
            # at least 12 px per labelled head, so that the labels do not overlap
            height=max(style.SMALL_HEIGHT, min(900, max(8 * n_layers * n_heads, 12 * len(tickvals)) + 90)),
            hovermode="closest",
            hoverdistance=-1,
            xaxis=step_xaxis(axis),
            yaxis=dict(
                type="category",
                tickvals=tickvals,
                ticktext=ticktext,
                tickfont=head_tick_font(len(tickvals)),
                autorange="reversed",
                title=dict(text="head (layer-major)"),
            ),
            shapes=shapes + duplicate_shapes(axis),
        ),
    )
