"""What the head explorer's figures draw over training time: a log-colour map over (training time, y), a wide panel
beside two statistics over training, the random-head bands, the colours of compared heads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import colour_layer, duplicate_shapes, figure, layout, step_marks, step_xaxis, value_axis
from headwatch.dashboard.labels import Stat

COMPARE_COLOURS = ("#e377c2", "#17becf", "#bcbd22", "#8c564b", "#ff7f0e", "#2ca02c")  # overlaid other heads


def step_custom(axis: StepAxis, rows: int) -> np.ndarray:
    """Each cell's step, ``(rows, S)``, the customdata of a map over (training time, y)."""
    return np.broadcast_to(axis.steps, (rows, len(axis.steps)))


def step_map(
    axis: StepAxis,
    y: np.ndarray,
    values: np.ndarray,
    *,
    colour_title: str,
    y_axis: dict,
    hover: str,
    chosen_x: Sequence[float],
    colours: Sequence[str],
) -> go.Figure:
    """A log-colour heatmap over (training time, y) of ``values`` ``(S, len(y))``, chosen steps ticked on top.

    The colour bar lies under the time axis, across the plot: the right margin then holds no more than the curves'
    (the loss axis), so the page's charts over training share their margins (`stacked`) in a narrow column too.
    """
    colour = colour_layer(values, log=True, title=colour_title)
    colour["colorbar"] = dict(
        colour["colorbar"],
        title=dict(text=f"{colour_title} (log colour)", side="bottom"),
        orientation="h",
        x=0,
        xanchor="left",
        y=-0.3,
        yanchor="top",
        len=1,
        thickness=10,
    )
    heat = dict(
        type="heatmap",
        x=axis.edges,
        y=y,
        z=colour.pop("z").T,
        customdata=step_custom(axis, len(y)),
        hovertemplate=f"step %{{customdata}}<br>{hover}<extra></extra>",
        **colour,
    )
    return figure(
        [heat],
        layout(
            margin=dict(style.MARGIN, b=156),  # the colour bar under the time axis
            xaxis=step_xaxis(axis),
            yaxis=y_axis,
            shapes=duplicate_shapes(axis) + step_marks(list(chosen_x), list(colours), full=False),
        ),
    )


SLICES_HEIGHT = 760  # px: at three legend rows the wide panel about 220 px tall, each statistic about 110 px
STANDOFF = 6  # px between an axis's tick labels and its title


def two_lines(title: str) -> str:
    """An axis title broken before its last parenthesis (``σ<br>(raw units)``), for a panel too narrow or too
    short to hold it on one line: the same words, every unit and step kept."""
    head, sep, rest = title.rpartition(" (")
    return f"{head}<br>({rest}" if sep else title


def slices_layout(
    axis: StepAxis,
    left_x: dict,
    left_y: dict,
    right: tuple[tuple[Stat, np.ndarray], ...],
    chosen_idx: Sequence[int],
    colours: Sequence[str],
    bands: Sequence[Any] = (),
    compare: Sequence[tuple[int, int, tuple[np.ndarray, ...]]] = (),
) -> dict[str, Any]:
    """A wide panel (x, y) on top and two statistics over training stacked under it (x2/y2, then x3/y3, sharing
    the time axis, whose ticks and title are under the last).

    The chart is drawn in a half-page column (W_QK and W_OV side by side), 270 px wide at a 1,024 px window: side
    by side, the two small panels' time axis cut its title and their titles ran into their tick labels. Stacked,
    each panel spans the column; titles are broken before their units (`two_lines`) and placed by Plotly clear of
    the tick labels (``automargin``, a ``standoff``), the legend sits under the figure's title (`LEGEND_TOP`).
    """
    lay = layout(
        height=SLICES_HEIGHT,
        margin=dict(l=84, r=style.MARGIN["r"], t=108, b=72),  # t: the legend under the title
        xaxis=dict(left_x, domain=[0.0, 1.0], anchor="y", automargin=True, title=_titled(left_x, two_lines)),
        yaxis=dict(left_y, domain=[0.6, 1.0], anchor="x", automargin=True, title=_titled(left_y, str)),
        shapes=[],
        legend=dict(style.LEGEND_TOP, font=dict(size=11)),
    )
    for i, ((stat, values), dom) in enumerate(zip(right, ([0.26, 0.46], [0.0, 0.2]), strict=False), start=2):
        lay[f"xaxis{i}"] = step_xaxis(
            axis,
            domain=[0.0, 1.0],
            anchor=f"y{i}",
            title=dict(text=two_lines(axis.title) if i == 3 else "", standoff=STANDOFF),
            showticklabels=i == 3,
            automargin=True,
            nticks=6,
        )
        band = bands[i - 2] if len(bands) > i - 2 else None
        shown = np.concatenate([with_band(values, band)] + [np.ravel(c[2][i - 2]) for c in compare])
        lay[f"yaxis{i}"] = value_axis(
            two_lines(stat.title()), fixed_range(shown), domain=dom, anchor=f"x{i}", automargin=True, nticks=4
        )
        lay[f"yaxis{i}"]["title"]["standoff"] = STANDOFF
        lay["shapes"] += band_shapes(band, xref=f"x{i}", yref=f"y{i}")
        lay["shapes"] += step_marks([axis.x[j] for j in chosen_idx], list(colours), xref=f"x{i}", yref=f"y{i}")
        lay["shapes"] += duplicate_shapes(axis, xref=f"x{i}", yref=f"y{i}")
    lay["xaxis2"]["matches"] = "x3"
    return lay


def _titled(ax: dict, text: Any) -> dict:
    """``ax``'s title dict with its text passed through ``text`` and the `STANDOFF`."""
    title = dict(ax.get("title") or {})
    return dict(title, text=text(title.get("text", "")), standoff=STANDOFF)


def band_shapes(band: Any, *, xref: str = "x", yref: str = "y", log: bool = False) -> list[dict]:
    """A grey band (the random-head 5-95% range, ``band.lo`` .. ``band.hi``) across a panel, its mean dotted.

    On a log axis (``log``) Plotly places shapes in log10 units.
    """
    if band is None or not (np.isfinite(band.lo) and np.isfinite(band.hi)):
        return []
    lo, hi, mean = band.lo, band.hi, band.mean
    if log:
        if min(lo, hi, mean) <= 0:
            return []
        lo, hi, mean = np.log10(lo), np.log10(hi), np.log10(mean)
    return [
        dict(
            type="rect",
            xref=f"{xref} domain",
            yref=yref,
            x0=0,
            x1=1,
            y0=lo,
            y1=hi,
            layer="below",
            line=dict(width=0),
            fillcolor=style.REFERENCE_FILL,
        ),
        dict(
            type="line",
            xref=f"{xref} domain",
            yref=yref,
            x0=0,
            x1=1,
            y0=mean,
            y1=mean,
            layer="below",
            line=dict(color=style.REFERENCE_LINE, width=1, dash="dot"),
        ),
    ]


def with_band(values: np.ndarray, band: Any) -> np.ndarray:
    """``values`` and the band's ends, so a fixed range computed from them shows the band too."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if band is None or not (np.isfinite(band.lo) and np.isfinite(band.hi)):
        return v
    return np.append(v, [band.lo, band.hi])


def time_traces(
    axis: StepAxis,
    right: tuple[tuple[Stat, np.ndarray], ...],
    chosen_idx: Sequence[int],
    colours: Sequence[str],
    compare: Sequence[tuple[int, int, tuple[np.ndarray, ...]]] = (),
) -> list[dict]:
    """Each right-panel statistic over training, with the chosen steps as coloured markers, and compared heads
    (``(layer, head, (values of panel 1, values of panel 2))``) dotted."""
    traces = []
    for j, (c_layer, c_head, series) in enumerate(compare):
        for i, values in enumerate(series, start=2):
            traces.append(
                dict(
                    type="scatter",
                    x=axis.x,
                    y=values,
                    mode="lines",
                    xaxis=f"x{i}",
                    yaxis=f"y{i}",
                    showlegend=False,
                    name=f"L{c_layer} H{c_head}",
                    line=dict(color=COMPARE_COLOURS[j % len(COMPARE_COLOURS)], width=1.4, dash="dot"),
                    customdata=np.stack([np.full(len(axis.x), c_layer), np.full(len(axis.x), c_head), axis.steps], axis=1),
                    hovertemplate=f"L{c_layer} H{c_head}<br>step %{{customdata[2]}}<br>%{{y:.4g}}<extra>click to open</extra>",
                )
            )
    idx = list(chosen_idx)
    for i, (stat, values) in enumerate(right, start=2):
        ax = dict(xaxis=f"x{i}", yaxis=f"y{i}", showlegend=False)
        traces.append(
            dict(
                type="scatter",
                x=axis.x,
                y=values,
                mode="lines",
                line=dict(color="#555", width=1.8),
                name=stat.symbol,
                customdata=axis.steps,
                hovertemplate=f"step %{{customdata}}<br>{stat.symbol} = %{{y:.4g}}<extra></extra>",
                **ax,
            )
        )
        traces.append(
            dict(
                type="scatter",
                x=axis.x[idx],
                y=values[idx],
                mode="markers",
                name=stat.symbol,
                marker=dict(color=list(colours), size=9, line=dict(color="white", width=1)),
                customdata=axis.steps[idx],
                hovertemplate=f"step %{{customdata}}: {stat.symbol} = %{{y:.4g}}<extra></extra>",
                **ax,
            )
        )
    return traces
