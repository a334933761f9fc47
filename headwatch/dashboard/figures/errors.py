"""Curves over training with their standard-error bands, the run's stages shaded behind them: the in-context-learning
scores (the Timeline, the Forward lenses) and a head's ablation effect (the head explorer) are drawn with it.

`lines_with_errors` takes tidy series (`Series`: a name, a colour, the value and its standard error at each
checkpoint) and marks (`Mark`: a step, or two steps as an interval, named), and returns a ``go.Figure``; it never
calls Streamlit. The stages are shaded as the Timeline shades them (`dashboard.figures.timeline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import layout, step_xaxis, value_axis, value_axis_margin
from headwatch.dashboard.figures.timeline import stage_labels, stage_shapes


@dataclass(frozen=True)
class Series:
    """One curve: ``value`` and its standard error ``se`` at each of the axis's checkpoints (NaN where missing), drawn
    with the line style ``dash``."""

    name: str
    colour: str
    value: np.ndarray
    se: np.ndarray | None = None
    dash: str = "solid"


@dataclass(frozen=True)
class Mark:
    """A step marked on the chart (``end`` None) or an interval between two steps, with its label and colour."""

    label: str
    start: int
    end: int | None = None
    colour: str = "#444444"
    dash: str = "dash"


def _rgba(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def lines_with_errors(
    axis: StepAxis,
    series: list[Series],
    *,
    y_title: str,
    stages: pd.DataFrame | None = None,
    marks: list[Mark] | None = None,
    zero_line: bool = False,
    height: int | None = None,
) -> go.Figure:
    """Each series as a line with markers and a band of ± 1 standard error, over the page's time axis, the stages
    shaded behind (the Timeline's shading and labels) and the marks drawn as dashed lines or shaded intervals.

    Args:
        axis: the page's time axis; every series has one value per ``axis.steps``.
        series: the curves.
        y_title: the value axis's title (statistic and unit).
        stages: stages.parquet rows of one basis, or None.
        marks: steps or intervals to mark (the sharpest fall, the induction boundary, a chosen step).
        zero_line: a thin line at y = 0 (a loss increase, a score that changes sign).
    """
    data: list[dict[str, Any]] = []
    shown: list[np.ndarray] = []
    for s in series:
        value = np.asarray(s.value, dtype=np.float64)
        ok = np.isfinite(value)
        if s.se is not None:
            se = np.asarray(s.se, dtype=np.float64)
            band = ok & np.isfinite(se)
            lo, hi = value[band] - se[band], value[band] + se[band]
            shown += [lo, hi]
            data += [
                dict(
                    type="scatter",
                    x=axis.x[band],
                    y=hi,
                    mode="lines",
                    line=dict(width=0),
                    legendgroup=s.name,
                    showlegend=False,
                    hoverinfo="skip",
                ),
                dict(
                    type="scatter",
                    x=axis.x[band],
                    y=lo,
                    mode="lines",
                    line=dict(width=0),
                    fill="tonexty",
                    fillcolor=_rgba(s.colour, 0.2),
                    legendgroup=s.name,
                    name=f"{s.name}: ± 1 s.e.",
                    showlegend=False,
                    hoverinfo="skip",
                ),
            ]
        shown.append(value[ok])
        errors = np.asarray(s.se, dtype=np.float64)[ok] if s.se is not None else np.full(int(ok.sum()), np.nan)
        data.append(
            dict(
                type="scatter",
                x=axis.x[ok],
                y=value[ok],
                mode="lines+markers",
                marker=dict(size=4),
                line=dict(color=s.colour, width=2, dash=s.dash),
                name=s.name,
                legendgroup=s.name,
                customdata=np.stack([axis.steps[ok], errors], axis=1),
                hovertemplate="step %{customdata[0]:,}<br>" + s.name + " %{y:.4g} ± %{customdata[1]:.2g}<extra></extra>",
            )
        )
    shapes = stage_shapes(axis, stages, yref="paper") if stages is not None else []
    annotations = stage_labels(axis, stages, yref="paper") if stages is not None else []
    for m in marks or []:
        x0 = axis.at(m.start)
        if m.end is None:
            line = dict(color=m.colour, width=1.6, dash=m.dash)
            shapes.append(dict(type="line", xref="x", yref="paper", x0=x0, x1=x0, y0=0, y1=1, line=line))
            text_x = x0
        else:
            x1 = axis.at(m.end)
            shapes.append(
                dict(
                    type="rect",
                    xref="x",
                    yref="paper",
                    x0=x0,
                    x1=x1,
                    y0=0,
                    y1=1,
                    fillcolor=_rgba(m.colour, 0.18),
                    line=dict(color=m.colour, width=1, dash=m.dash),
                    layer="below",
                )
            )
            text_x = float(np.sqrt(x0 * x1)) if axis.log else (x0 + x1) / 2
        annotations.append(
            dict(
                x=float(np.log10(text_x)) if axis.log and text_x > 0 else text_x,
                y=0.02,
                xref="x",
                yref="paper",
                yanchor="bottom",
                text=m.label,
                textangle=-90,
                showarrow=False,
                font=dict(size=10, color=m.colour),
                bgcolor="rgba(255,255,255,0.7)",
            )
        )
    if zero_line:
        shapes.append(dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=0, y1=0, line=dict(color="#999999", width=1)))
    values = np.concatenate(shown) if shown else np.zeros(0)
    values = values[np.isfinite(values)]
    rng = fixed_range(np.concatenate([values, [0.0]]) if zero_line else values) if len(values) else (0.0, 1.0)
    return go.Figure(
        data,
        layout(
            **({"height": height} if height else {}),
            margin=dict(style.MARGIN, l=value_axis_margin(rng, height or style.HEIGHT)),
            xaxis=step_xaxis(axis),
            yaxis=value_axis(y_title, rng),
            shapes=shapes,
            annotations=annotations,
        ),
    )
