"""Whole-layer weight matrices: singular-value histograms against Marchenko-Pastur, over training and depth,
and one value per layer over training (the Frobenius norm, the tail exponent alpha)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from headwatch.analysis.rmt.marchenko_pastur import mp_density, mp_edges
from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis
from headwatch.dashboard.figures.common import duplicate_shapes, figure, layout, play_menu, step_xaxis, value_axis

FRAME_MS = 200  # playback: one checkpoint per FRAME_MS milliseconds
N_BINS = 60
MP_COLOUR = "#d62728"
HIST_COLOUR = "rgba(31,119,180,0.75)"


def mp_sv_density(s: np.ndarray, *, rows: int, cols: int, std: float) -> np.ndarray:
    """Density in s of the singular values of a random rows x cols matrix with entry s.d. ``std``:
    x = s^2 / (n std^2) follows MP_(m/n), so p(s) = rho(x) 2 s / (n std^2)."""
    m, n = min(rows, cols), max(rows, cols)
    scale = n * std * std
    if not scale > 0:
        return np.zeros_like(s, dtype=np.float64)
    return mp_density(s * s / scale, m / n) * 2 * s / scale


def sv_animation(
    sv: Sequence[np.ndarray],
    std: Sequence[float],
    *,
    steps: Sequence[int],
    start: int,
    rows: int,
    cols: int,
    title: str,
    frame_ms: int = FRAME_MS,
) -> go.Figure:
    """Histogram of one weight's singular values at each checkpoint against the Marchenko-Pastur law of a
    random matrix of its shape and entry variance, animated over training; both axes fixed over the run.

    The frame shown is ``start``, which the page's one step control (in the URL) sets; Play runs the
    following frames in the browser and Pause stops. Plotly's own slider is left out: a second step
    control that the page (its link, caption and depth panel) could not follow.

    Args:
        sv: per checkpoint, the weight's singular values.
        std: per checkpoint, its entry standard deviation (sets the law's scale).
        steps: the checkpoints' steps (frame names, slider labels).
        start: index of the frame shown first.
        rows, cols: the weight's shape.
        title: what the weight is (``layer 3 mlp_in``).
    """
    s_max = max(float(np.max(v)) for v in sv) if sv else 1.0
    upper = [np.sqrt(max(rows, cols)) * sd * (1 + np.sqrt(min(rows, cols) / max(rows, cols))) for sd in std]
    hi = 1.04 * max(s_max, max(upper, default=0.0))
    edges = np.linspace(0.0, hi, N_BINS + 1)
    centres = 0.5 * (edges[1:] + edges[:-1])
    grid = np.linspace(0.0, hi, 400)
    hists = [np.histogram(v, bins=edges, density=True)[0] for v in sv]
    laws = [mp_sv_density(grid, rows=rows, cols=cols, std=sd) for sd in std]
    y_hi = 1.08 * max(max(float(h.max()) for h in hists), max(float(np.max(d)) for d in laws))
    m = min(rows, cols)

    def frame_data(i: int) -> list[dict]:
        return [dict(type="bar", y=hists[i]), dict(type="scatter", y=laws[i])]

    first = frame_data(start)
    first[0].update(
        x=centres,
        width=(edges[1] - edges[0]) * 0.95,
        marker=dict(color=HIST_COLOUR),
        name=f"the {m} singular values",
        hovertemplate="s ≈ %{x:.3g}: density %{y:.3g}<extra></extra>",
    )
    first[1].update(
        x=grid,
        mode="lines",
        line=dict(color=MP_COLOUR, width=2),
        name="Marchenko-Pastur (random, same shape and variance)",
        hovertemplate="s = %{x:.3g}: MP density %{y:.3g}<extra></extra>",
    )
    frames = [
        dict(name=str(step), data=frame_data(i), traces=[0, 1], layout=dict(title=dict(text=f"{title}, step {step:,}")))
        for i, step in enumerate(steps)
    ]
    lay = layout(
        height=480,
        margin=dict(l=70, r=24, t=56, b=96),
        bargap=0,
        title=dict(text=f"{title}, step {steps[start]:,}", x=0.01, xanchor="left"),
        xaxis=value_axis("singular value s (weight units)", (0.0, hi)),
        yaxis=value_axis("density (per unit of s)", (0.0, y_hi)),
        updatemenus=[play_menu(steps, start, frame_ms=frame_ms, y=-0.16)],
    )
    return figure(first, lay, frames)


def sv_depth(
    sv: Sequence[np.ndarray], std: Sequence[float], *, layers: Sequence[int], rows: int, cols: int, x_max: float, title: str
) -> go.Figure:
    """At one checkpoint, each layer's histogram of x = s / (std sqrt(n)) (one line per layer), against the
    Marchenko-Pastur law of the shape, which in these units is the same for every layer.

    Args:
        sv, std: per layer, the weight's singular values and entry s.d.
        layers: the layer indices.
        x_max: the x-axis maximum (fixed over the run by the caller).
    """
    m, n = min(rows, cols), max(rows, cols)
    edges = np.linspace(0.0, x_max, N_BINS + 1)
    centres = 0.5 * (edges[1:] + edges[:-1])
    colours = style.scale_colours(style.LAYER_SCALE, len(layers))
    data = []
    for layer, v, sd, colour in zip(layers, sv, std, colours, strict=False):
        x = np.asarray(v, dtype=np.float64) / (sd * np.sqrt(n)) if sd > 0 else np.zeros(len(v))
        h = np.histogram(x, bins=edges, density=True)[0]
        data.append(
            dict(
                type="scatter",
                x=centres,
                y=h,
                mode="lines",
                line=dict(color=colour, width=1.6, shape="hvh"),
                name=f"layer {layer}",
                hovertemplate=f"layer {layer}: s/(σ√n) ≈ %{{x:.3g}}, density %{{y:.3g}}<extra></extra>",
            )
        )
    grid = np.linspace(0.0, x_max, 400)
    law = mp_density(grid * grid, m / n) * 2 * grid
    lo, hi = mp_edges(m / n)
    data.append(
        dict(
            type="scatter",
            x=grid,
            y=law,
            mode="lines",
            line=dict(color="black", width=2.5, dash="dash"),
            name="Marchenko-Pastur",
            hovertemplate="MP density %{y:.3g}<extra></extra>",
        )
    )
    y_hi = 1.08 * max([float(np.max(np.asarray(d["y"]))) for d in data] + [1e-12])
    lay = layout(
        height=480,
        title=dict(text=title, x=0.01, xanchor="left"),
        xaxis=value_axis(f"s / (σ √n)  (dimensionless; the law's bulk is [{np.sqrt(lo):.2f}, {np.sqrt(hi):.2f}])", (0.0, x_max)),
        yaxis=value_axis("density (per unit of s/(σ√n))", (0.0, y_hi)),
        legend=dict(orientation="v", x=1.01, y=1, xanchor="left", yanchor="top", font=dict(size=11)),
        margin=dict(l=70, r=150, t=56, b=68),
    )
    return figure(data, lay)


def layer_lines(
    axis: StepAxis,
    steps: Sequence[int],
    values: np.ndarray,
    *,
    layers: Sequence[int],
    y_title: str,
    symbol: str,
    log_y: bool = False,
) -> go.Figure:
    """One value of one role's weight in every layer over training (one line per layer, gaps where NaN).

    Args:
        axis: the training-time axis.
        steps: ``(S,)`` the checkpoints with layer rows (each one of ``axis``'s), for the x coordinates and the hover.
        values: ``(S, n_layers)``.
        y_title: the y axis's title with its unit; symbol: the value's name in the hover text.
    """
    colours = style.scale_colours(style.LAYER_SCALE, len(layers))
    x = np.array([axis.at(int(s)) for s in steps], dtype=np.float64)
    data = [
        dict(
            type="scatter",
            x=x,
            y=values[:, i],
            mode="lines+markers",
            marker=dict(size=4),
            line=dict(color=colours[i], width=1.6),
            name=f"layer {layer}",
            customdata=np.asarray(steps, dtype=np.int64),
            hovertemplate=f"layer {layer}, step %{{customdata:,}}: {symbol} = %{{y:.4g}}<extra></extra>",
        )
        for i, layer in enumerate(layers)
    ]
    finite = values[np.isfinite(values) & ((values > 0) if log_y else True)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    rng = (np.log10(lo) - 0.05, np.log10(hi) + 0.05) if log_y else (min(0.0, lo), hi * 1.05 if hi > 0 else 1.0)
    lay = layout(
        height=440,
        xaxis=step_xaxis(axis),
        yaxis=value_axis(y_title, rng, log=log_y),
        legend=dict(orientation="v", x=1.01, y=1, xanchor="left", yanchor="top", font=dict(size=11)),
        margin=dict(l=70, r=150, t=36, b=68),
        shapes=duplicate_shapes(axis),
    )
    return figure(data, lay)


def frob_lines(
    axis: StepAxis, steps: Sequence[int], frob: np.ndarray, *, layers: Sequence[int], role: str, log_y: bool = False
) -> go.Figure:
    """The Frobenius norm of one role's weight in every layer over training (`layer_lines`)."""
    return layer_lines(axis, steps, frob, layers=layers, y_title=f"‖W‖_F of {role} (weight units)", symbol="‖W‖_F", log_y=log_y)


def alpha_lines(axis: StepAxis, steps: Sequence[int], alpha: np.ndarray, *, layers: Sequence[int], role: str) -> go.Figure:
    """The power-law tail exponent alpha of one role's weight in every layer over training (`layer_lines`)."""
    return layer_lines(axis, steps, alpha, layers=layers, y_title=f"α of {role} (tail exponent of s², dimensionless)", symbol="α")
