"""The Timeline's essential-dynamics figure: the trajectory of the model's outputs in its first two principal
components over checkpoints (`analysis.essential`), one colour per stage of the run, cusps marked.

Each checkpoint is a point whose hover names its step; its ``customdata`` is ``[-1, -1, step]`` (the charts' one
format, `dashboard.figures.points`: no head, then the step), so a click on it opens that step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from headwatch.dashboard.figures.common import layout
from headwatch.dashboard.style import MARGIN

# One colour per stage of the run, cycling (qualitative, readable on white).
STAGE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def stage_of(steps: np.ndarray, stages: pd.DataFrame | None) -> np.ndarray:
    """The 0-based stage of each step (the last stage whose start is at or before it; -1 without stages)."""
    if stages is None or stages.empty:
        return np.full(len(steps), -1)
    starts = stages.sort_values("stage")["start_step"].to_numpy()
    return np.searchsorted(starts, np.asarray(steps), side="right") - 1


def trajectory(path: pd.DataFrame, explained: np.ndarray, stages: pd.DataFrame | None) -> go.Figure:
    """The trajectory in PC1 x PC2: a grey line in step order, one marker trace per stage (named by the stage and
    what forms in it), the cusps as open circles.

    Args:
        path: `analysis.essential.store_trajectory`'s rows (``step``, ``pc1``, ``pc2``, ``cusp``, ...).
        explained: the fraction of the variance each component explains.
        stages: the shaded stages (stages.parquet rows of one basis), or None.
    """
    steps = path["step"].to_numpy()
    x, y = path["pc1"].to_numpy(), (path["pc2"].to_numpy() if "pc2" in path else np.zeros(len(path)))
    data: list[dict[str, Any]] = [
        dict(type="scatter", x=x, y=y, mode="lines", line=dict(color="#bbbbbb", width=1), hoverinfo="skip", showlegend=False)
    ]
    which = stage_of(steps, stages)
    names = {} if stages is None else {int(r.stage): str(r.boundary) for r in stages.itertuples(index=False)}
    for s in np.unique(which):
        mine = which == s
        name = "no stages" if s < 0 else f"S{s + 1}" + (f": {names[s]}" if s > 0 else "")
        data.append(
            dict(
                type="scatter",
                x=x[mine],
                y=y[mine],
                mode="markers",
                name=name if len(name) < 60 else name[:57] + "…",
                marker=dict(size=9, color=STAGE_COLOURS[max(s, 0) % len(STAGE_COLOURS)]),
                customdata=[[-1, -1, int(t)] for t in steps[mine]],
                hovertemplate="step %{customdata[2]:,}<br>PC1 %{x:.3g}, PC2 %{y:.3g}<extra>"
                + (f"S{s + 1}" if s >= 0 else "")
                + "</extra>",
            )
        )
    cusp = path["cusp"].to_numpy(bool)
    if cusp.any():
        data.append(
            dict(
                type="scatter",
                x=x[cusp],
                y=y[cusp],
                mode="markers",
                name="cusp (turning point)",
                marker=dict(size=18, color="rgba(0,0,0,0)", line=dict(width=2, color="#222222"), symbol="circle-open"),
                customdata=[[-1, -1, int(t)] for t in steps[cusp]],
                hovertemplate="cusp at step %{customdata[2]:,}<extra></extra>",
            )
        )
    pct = [f"{100 * e:.1f}%" for e in explained] + ["–", "–"]
    return go.Figure(
        data,
        layout(
            height=480,
            margin=dict(MARGIN, l=76),  # the right one grows to the legend's stage names
            title=dict(text="Essential dynamics: the outputs' trajectory in its first two principal components"),
            xaxis=dict(title=dict(text=f"PC1 ({pct[0]} of the variance; log-probability, nats)")),
            yaxis=dict(title=dict(text=f"PC2 ({pct[1]} of the variance; log-probability, nats)")),
            hovermode="closest",
            legend=dict(title=dict(text="stage of the run")),
        ),
    )
