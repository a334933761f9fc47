"""The Timeline figure: the loss over training with the stages shaded, and every event on the same time axis.

Two panels share one x axis (the page's time scale): the loss on top with one shaded rectangle per stage
(named ``stage N: trend``), and below it one lane per kind of event (`analysis.findings.events.KINDS`), one marker
per event with its label and link in the hover (``customdata``: the link). Also the Overview card's small
version (`compact`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from headwatch.analysis.findings.events import KINDS, Event, basis_text
from headwatch.dashboard import style
from headwatch.dashboard.data import StepAxis, fixed_range
from headwatch.dashboard.figures.common import layout, step_xaxis

LOSS_DOMAIN = (0.42, 1.0)
LANES_DOMAIN = (0.0, 0.34)


BAND_FILL = "rgba(60,60,60,0.18)"  # a boundary's uncertainty band


def boundary_band(row: Any) -> tuple[int, int] | None:
    """The steps a stage's opening boundary could sit at (stages.parquet ``low_step``, ``high_step``: its
    profile-likelihood interval, `analysis.stages.curve.boundary_evidence`), when that spans more than one checkpoint;
    None for the first stage, a boundary placed to one checkpoint, or stages made before the interval was stored."""
    low, high = int(getattr(row, "low_step", -1)), int(getattr(row, "high_step", -1))
    if int(row.stage) == 0 or low < 0 or high <= low:
        return None
    return low, high


def stage_shapes(axis: StepAxis, stages: pd.DataFrame | None, *, yref: str) -> list[dict[str, Any]]:
    if stages is None:
        return []
    shapes = []
    for r in stages.itertuples(index=False):
        shapes.append(
            dict(
                type="rect",
                xref="x",
                yref=yref,
                x0=axis.at(int(r.start_step)),
                x1=axis.at(int(r.end_step)),
                y0=0,
                y1=1,
                fillcolor=style.STAGE_FILLS.get(str(r.trend), "rgba(0,0,0,0.05)"),
                line=dict(width=0),
                layer="below",
                name=f"stage {int(r.stage) + 1}: {r.trend}",
            )
        )
        if int(r.stage) > 0:  # neighbouring stages of the run often share a trend (a colour): a line marks the boundary
            x = axis.at(int(r.start_step))
            shapes.append(
                dict(
                    type="line",
                    xref="x",
                    yref=yref,
                    x0=x,
                    x1=x,
                    y0=0,
                    y1=1,
                    line=dict(width=1, dash="dot", color="#666666"),
                    layer="below",
                    name=f"stage {int(r.stage) + 1} begins: {r.boundary}",
                )
            )
        band = boundary_band(r)
        if band is not None:  # where the boundary could sit (stages.parquet low_step..high_step)
            shapes.append(
                dict(
                    type="rect",
                    xref="x",
                    yref=yref,
                    x0=axis.at(band[0]),
                    x1=axis.at(band[1]),
                    y0=0,
                    y1=1,
                    fillcolor=BAND_FILL,
                    line=dict(width=0),
                    layer="below",
                    name=f"stage {int(r.stage) + 1} boundary uncertainty: steps {band[0]:,} to {band[1]:,}",
                )
            )
    return shapes


def stage_labels(axis: StepAxis, stages: pd.DataFrame | None, *, yref: str) -> list[dict[str, Any]]:
    if stages is None:
        return []
    out = []
    for r in stages.itertuples(index=False):
        x0, x1 = axis.at(int(r.start_step)), axis.at(int(r.end_step))
        # an annotation on a log axis is placed in log10 units (shapes take data units)
        mid = float(np.log10(np.sqrt(x0 * x1))) if axis.log else (x0 + x1) / 2
        out.append(
            dict(
                x=mid,
                y=1.0,
                xref="x",
                yref=yref,
                yanchor="top",
                text=f"S{int(r.stage) + 1}" if r.basis == "run" else f"S{int(r.stage) + 1} {r.trend}",
                showarrow=False,
                font=dict(size=11, color="#444444"),
            )
        )
    return out


def timeline(
    axis: StepAxis,
    loss: np.ndarray | None,
    loss_label: str,
    stages: pd.DataFrame | None,
    events: list[Event],
    *,
    run: str,
    basis: str | None,
    title: str = "",
) -> go.Figure:
    """The loss with the stages shaded (top) and the events in lanes by kind (bottom), on one time axis.

    Args:
        axis: the page's time axis (`dashboard.data.step_axis`).
        loss: the loss at each of ``axis.steps`` (NaN where missing), or None.
        loss_label: what the loss is (``eval loss (nats/token)``).
        stages: the shaded stages (stages.parquet rows of one basis), or None.
        events: the events (`analysis.findings.events.run_events`).
        run: the run, for the links in ``customdata``.
        basis: which curve the stages were read from (``run``, ``llc``, ``loss``, ...), for the title.
        title: the figure title.
    """
    data: list[dict[str, Any]] = []
    if loss is not None:
        ok = np.isfinite(loss)
        data.append(
            dict(
                type="scatter",
                x=axis.x[ok],
                y=loss[ok],
                mode="lines+markers",
                marker=dict(size=4),
                name=loss_label,
                line=dict(color=style.LOSS_COLOUR, width=1.8),
                customdata=axis.steps[ok],
                hovertemplate="step %{customdata:,}<br>" + loss_label + " %{y:.4f}<extra></extra>",
                xaxis="x",
                yaxis="y",
            )
        )
    lanes = [k for k in KINDS if any(e.kind == k for e in events)]
    for kind in lanes:
        mine = [e for e in events if e.kind == kind]
        colour, symbol = style.EVENT_STYLE[kind]
        data.append(
            dict(
                type="scatter",
                x=[axis.at(e.step) for e in mine],
                y=[kind] * len(mine),
                mode="markers",
                name=kind,
                marker=dict(size=12, color=colour, symbol=symbol, line=dict(width=2, color=colour)),
                text=[e.label for e in mine],
                customdata=[[e.step, e.link(run), e.detail] for e in mine],
                hovertemplate="step %{customdata[0]:,}<br><b>%{text}</b><br>%{customdata[2]}<extra>" + kind + "</extra>",
                xaxis="x",
                yaxis="y2",
            )
        )
    finite = loss[np.isfinite(loss)] if loss is not None else np.zeros(0)
    what = f"stages from the {basis_text(basis)}" if basis else "no stages"
    if basis == "run":
        what = "the run's stages (every curve's boundaries merged)"
    fig_layout = layout(
        height=560,
        margin=dict(style.MARGIN, l=136),  # the event lanes' names
        title=dict(text=title or f"Loss over training, {what} shaded, and the run's events"),
        xaxis=step_xaxis(axis, anchor="y2"),
        yaxis=dict(
            domain=list(LOSS_DOMAIN),
            title=dict(text=loss_label if loss is not None else "no loss stored"),
            range=list(fixed_range(finite)) if len(finite) else [0, 1],
        ),
        yaxis2=dict(
            domain=list(LANES_DOMAIN),
            type="category",
            categoryorder="array",
            categoryarray=list(reversed(lanes)) or ["no events"],
            title=dict(text="events"),
            anchor="x",
        ),
        shapes=stage_shapes(axis, stages, yref="y domain") + stage_shapes(axis, stages, yref="y2 domain"),
        annotations=stage_labels(axis, stages, yref="y domain"),
        hovermode="closest",
    )
    return go.Figure(data, fig_layout)


def compact(axis: StepAxis, loss: np.ndarray | None, stages: pd.DataFrame | None, events: list[Event], *, run: str) -> go.Figure:
    """The Overview card's small timeline: the loss with the stages shaded, events as markers on the curve."""
    data: list[dict[str, Any]] = []
    finite = np.zeros(0)
    if loss is not None:
        ok = np.isfinite(loss)
        finite = loss[ok]
        data.append(
            dict(
                type="scatter",
                x=axis.x[ok],
                y=loss[ok],
                mode="lines",
                name="loss",
                line=dict(color=style.LOSS_COLOUR, width=1.5),
                customdata=axis.steps[ok],
                hovertemplate="step %{customdata:,}<br>loss %{y:.4f}<extra></extra>",
            )
        )
    if loss is not None and events:
        where = {int(s): float(v) for s, v in zip(axis.steps, loss, strict=True)}
        for kind in KINDS:
            mine = [e for e in events if e.kind == kind and np.isfinite(where.get(e.step, np.nan))]
            if not mine:
                continue
            colour, symbol = style.EVENT_STYLE[kind]
            data.append(
                dict(
                    type="scatter",
                    x=[axis.at(e.step) for e in mine],
                    y=[where[e.step] for e in mine],
                    mode="markers",
                    name=kind,
                    marker=dict(size=9, color=colour, symbol=symbol, line=dict(width=1.5, color=colour)),
                    text=[e.label for e in mine],
                    customdata=[[e.step, e.link(run)] for e in mine],
                    hovertemplate="step %{customdata[0]:,}<br>%{text}<extra>" + kind + "</extra>",
                )
            )
    return go.Figure(
        data,
        layout(
            height=230,
            margin=dict(l=58, r=8, t=8, b=64),
            font=dict(size=11),
            showlegend=False,
            xaxis=step_xaxis(axis),
            yaxis=dict(title=dict(text="loss (nats/token)"), range=list(fixed_range(finite)) if len(finite) else [0, 1]),
            shapes=stage_shapes(axis, stages, yref="y domain"),
            annotations=stage_labels(axis, stages, yref="y domain"),
        ),
    )
