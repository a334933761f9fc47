"""Figures of one statistic of one head over training, in context: against the other heads of its layer and the
layer mean (other heads overlaid, the random-head band in grey), and of both matrices (W_QK and W_OV) together."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, nan_mean
from headwatch.dashboard.figures.common import duplicate_shapes, figure, layout, step_marks, step_xaxis, value_axis, with_gaps
from headwatch.dashboard.figures.points import clickable
from headwatch.dashboard.labels import Stat
from headwatch.dashboard.views.head.figures.over_training import COMPARE_COLOURS, band_shapes


def head_in_layer(
    axis: StepAxis,
    values: np.ndarray,
    *,
    head: int,
    stat: Stat,
    k: int | None = None,
    y_range: tuple[float, float],
    log_y: bool = False,
    chosen_x: Sequence[float] = (),
    colours: Sequence[str] = (),
    layer: int = 0,
    compare: Sequence[tuple[int, int, np.ndarray]] = (),
    band: Any = None,
    threshold: Any = None,
) -> go.Figure:
    """One statistic of the chosen head over training, its layer's other heads behind it and the layer mean; on a
    head type's score, the type's entry threshold dashed and its exit level dotted.

    Args:
        values: ``(S, n_heads)`` the statistic for every head of the layer.
        head: the head drawn in front.
        y_range: fixed range (log10 units if ``log_y``), shared by every layer and head.
        layer: the head's layer (hover, and a click on another head of the layer opens it).
        compare: other heads to overlay, from any layer: ``(layer, head, values (S,))`` each.
        band: the statistic's random-head reference, a grey band (`analysis.rmt.references.Reference`), or None.
        threshold: the head type's rule when the statistic is its score (`views.head.data.TypeThreshold`), or None.
    """
    n_heads = values.shape[1]
    other_heads = np.delete(np.arange(n_heads), head)
    others = np.delete(values, head, axis=1).T  # (n_heads - 1, S)
    gx, gy = with_gaps(axis.x, others)
    sym = stat.short(k)
    hx = np.repeat(other_heads, len(axis.x) + 1)
    traces = [
        clickable(
            dict(
                type="scatter",
                x=gx,
                y=gy,
                mode="lines",
                name="other heads of the layer",
                line=dict(color=style.CONTEXT_COLOUR, width=1),
                customdata=np.stack([np.full(len(hx), layer), hx], axis=1),  # [layer, head]: a click opens it
                hovertemplate=f"L{layer} H%{{customdata[1]}}<br>{sym} = %{{y:.4g}}<extra>click to open</extra>",
            )
        ),
        dict(
            type="scatter",
            x=axis.x,
            y=nan_mean(values, axis=1),
            mode="lines",
            name="layer mean",
            line=dict(color=style.LAYER_MEAN_COLOUR, dash=style.LAYER_MEAN_DASH, width=style.LAYER_MEAN_WIDTH),
            customdata=axis.steps,
            hovertemplate=f"step %{{customdata}}<br>layer mean {sym} = %{{y:.4g}}<extra></extra>",
        ),
        dict(
            type="scatter",
            x=axis.x,
            y=values[:, head],
            mode="lines",
            name=f"head {head}",
            line=dict(color="#1f3b73", width=style.FOCUS_WIDTH),
            customdata=axis.steps,
            hovertemplate=f"step %{{customdata}}<br>head {head}: {sym} = %{{y:.4g}}<extra></extra>",
        ),
    ]
    for i, (c_layer, c_head, c_values) in enumerate(compare):
        traces.append(
            clickable(
                dict(
                    type="scatter",
                    x=axis.x,
                    y=c_values,
                    mode="lines",
                    name=f"L{c_layer} H{c_head}",
                    line=dict(color=COMPARE_COLOURS[i % len(COMPARE_COLOURS)], width=2, dash="dot"),
                    customdata=np.stack([np.full(len(axis.x), c_layer), np.full(len(axis.x), c_head), axis.steps], axis=1),
                    hovertemplate=f"L{c_layer} H{c_head}<br>step %{{customdata[2]}}<br>{sym} = %{{y:.4g}}"
                    "<extra>click to open</extra>",
                )
            )
        )
    return figure(
        traces,
        layout(
            xaxis=step_xaxis(axis),
            yaxis=value_axis(stat.title(k), y_range, log=log_y),
            shapes=band_shapes(band, log=log_y)
            + duplicate_shapes(axis)
            + step_marks(list(chosen_x), list(colours))
            + threshold_shapes(threshold, log=log_y),
            annotations=threshold_labels(threshold, log=log_y),
        ),
    )


def _levels(threshold: Any, *, log: bool) -> list[tuple[str, float, str]]:
    """(what, y as the axis places it, dash) of a type's threshold and exit level; a level a log axis cannot show
    left out."""
    if threshold is None:
        return []
    levels = [("threshold", threshold.threshold, "dash")]
    if threshold.exit is not None:
        levels.append(("exit level", threshold.exit, "dot"))
    return [(what, float(np.log10(v)) if log else v, dash) for what, v, dash in levels if np.isfinite(v) and (v > 0 or not log)]


def threshold_shapes(threshold: Any, *, xref: str = "x", yref: str = "y", log: bool = False) -> list[dict]:
    """A head type's entry threshold (dashed) and exit level (dotted) across a panel (`views.head.data.TypeThreshold`;
    on a log axis Plotly places shapes in log10 units)."""
    return [
        dict(
            type="line",
            xref=f"{xref} domain",
            yref=yref,
            x0=0,
            x1=1,
            y0=y,
            y1=y,
            layer="above",
            line=dict(color=style.THRESHOLD_COLOUR, width=1.5 if what == "threshold" else 1, dash=dash),
            name=f"{threshold.type} {what}",
        )
        for what, y, dash in _levels(threshold, log=log)
    ]


def threshold_labels(threshold: Any, *, xref: str = "x", yref: str = "y", log: bool = False) -> list[dict]:
    """The words on `threshold_shapes`' lines, at their right end inside the plot: ``induction threshold 0.3``."""
    raw = {"threshold": threshold.threshold, "exit level": threshold.exit} if threshold is not None else {}
    return [
        dict(
            xref=f"{xref} domain",
            yref=yref,
            x=1,
            y=y,
            xanchor="right",
            yanchor="bottom" if what == "threshold" else "top",
            text=f"{threshold.type} {what} {raw[what]:.3g}",
            showarrow=False,
            font=dict(size=11, color=style.THRESHOLD_COLOUR),
            name=f"{threshold.type} {what}",
        )
        for what, y, _ in _levels(threshold, log=log)
    ]


MATRIX_COLOURS = {"qk": "#1f4e9c", "ov": "#c2410c"}  # W_QK blue, W_OV orange, on every both-matrices chart


def both_matrices(
    axis: StepAxis,
    series: dict[str, np.ndarray],
    *,
    stat: Stat,
    k: int | None = None,
    y_range: tuple[float, float],
    log_y: bool = False,
) -> go.Figure:
    """One head's statistic for W_QK and W_OV over training on one pair of axes (shared x and y).

    Args:
        series: matrix (``qk``, ``ov``) -> ``(S,)`` the head's values at every checkpoint of ``axis``.
        y_range: fixed range over both matrices (log10 units if ``log_y``).
    """
    names = {"qk": "W_QK", "ov": "W_OV"}
    traces = [
        dict(
            type="scatter",
            x=axis.x,
            y=values,
            mode="lines+markers",
            name=names.get(m, m),
            line=dict(color=MATRIX_COLOURS.get(m, "#444"), width=2),
            marker=dict(size=4),
            customdata=axis.steps,
            hovertemplate=f"{names.get(m, m)}<br>step %{{customdata:,}}<br>{stat.short(k)} = %{{y:.4g}}<extra></extra>",
        )
        for m, values in series.items()
    ]
    return figure(
        traces,
        layout(
            showlegend=True,
            legend=dict(orientation="h", x=0, y=1.02, xanchor="left", yanchor="bottom"),
            xaxis=step_xaxis(axis),
            yaxis=value_axis(stat.title(k), y_range, log=log_y),
            shapes=duplicate_shapes(axis),
        ),
    )
