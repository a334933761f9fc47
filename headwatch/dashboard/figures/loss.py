"""The sidebar's small loss-curve figure."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from headwatch.dashboard import style
from headwatch.dashboard.data import fixed_range
from headwatch.dashboard.figures.common import layout


def loss_curve(steps: np.ndarray, train: np.ndarray, val: np.ndarray, *, log_x: bool = False) -> go.Figure:
    """Training and validation loss over training steps (validation drawn only where recorded).

    ``log_x``: the sidebar's log time axis, which plots step + 1 (so step 0 sits at 1), as every view does.
    """
    if log_x:
        steps = np.asarray(steps, dtype=np.float64) + 1
        lo, hi = np.log10(steps.min()), np.log10(max(steps.max(), steps.min() * 10))
        xaxis: dict[str, Any] = dict(
            type="log", title=dict(text="training step + 1 (log)"), range=[lo - 0.03 * (hi - lo), hi + 0.03 * (hi - lo)]
        )
    else:
        xaxis = dict(title=dict(text="training step"), range=list(fixed_range(steps, pad=0.02)))
    traces = [
        go.Scatter(
            x=steps,
            y=train,
            mode="lines",
            name="train",
            line=dict(color=style.TRAIN_COLOUR, width=1.8),
            customdata=steps - (1 if log_x else 0),
            hovertemplate="step %{customdata}<br>train loss %{y:.3f}<extra></extra>",
        )
    ]
    ok = np.isfinite(val)
    if ok.any():
        traces.append(
            go.Scatter(
                x=steps[ok],
                y=val[ok],
                mode="lines+markers",
                name="validation",
                marker=dict(size=4),
                line=dict(color=style.VAL_COLOUR, width=1.5),
                customdata=steps[ok] - (1 if log_x else 0),
                hovertemplate="step %{customdata}<br>val loss %{y:.3f}<extra></extra>",
            )
        )
    return go.Figure(
        traces,
        layout=layout(
            height=200,
            margin=dict(l=58, r=18, t=8, b=64),
            font=dict(size=11),
            xaxis=xaxis,
            yaxis=dict(title=dict(text="loss (nats/token)"), range=list(fixed_range(np.concatenate([train, val])))),
            legend=dict(orientation="h", yanchor="top", y=0.98, xanchor="right", x=1),
        ),
    )
