"""The Timeline's essential-dynamics figure: the trajectory of the model's outputs in its first two principal
components over checkpoints (`analysis.stages.essential`), one colour per stage of the run, cusps marked, the direction of
travel drawn as arrowheads along the path and a few checkpoints labelled with their steps (the first and the last
as its start and its end).

Each checkpoint is a point whose hover names its step; its ``customdata`` is ``[-1, -1, step]`` (the charts' one
format, `dashboard.figures.points`: no head, then the step), so a click on it opens that step. The arrows and the
labels are annotations, which a click does not select.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from headwatch.dashboard.figures.common import layout
from headwatch.dashboard.style import MARGIN

# One colour per stage of the run (qualitative, readable on white); past ten the colours come round again with the
# next marker symbol, so no two stages look alike (the first and the last of eleven shared a blue).
STAGE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
STAGE_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "pentagon", "hexagon", "star", "triangle-down")
ARROWS = 6  # arrowheads along the path, evenly spaced along its length as drawn
LABELLED = 3  # checkpoints labelled with their step between the start and the end, at most
LABEL_GAP = 0.15  # a labelled checkpoint lies at least this share of the plot's span (each axis scaled) from another
PATH_COLOUR, ARROW_COLOUR, LABEL_COLOUR, SMOOTH_COLOUR = "#bbbbbb", "#555555", "#333333", "#888888"


def stage_style(stage: int) -> tuple[str, str]:
    """The colour and marker symbol of the 0-based ``stage`` (-1: no stages): `STAGE_COLOURS` in turn, the symbol
    moving on with each round of the colours; distinct for the first 80 stages."""
    s = max(stage, 0)
    return STAGE_COLOURS[s % len(STAGE_COLOURS)], STAGE_SYMBOLS[(s // len(STAGE_COLOURS)) % len(STAGE_SYMBOLS)]


def stage_of(steps: np.ndarray, stages: pd.DataFrame | None) -> np.ndarray:
    """The 0-based stage of each step (the last stage whose start is at or before it; -1 without stages)."""
    if stages is None or stages.empty:
        return np.full(len(steps), -1)
    starts = stages.sort_values("stage")["start_step"].to_numpy()
    return np.searchsorted(starts, np.asarray(steps), side="right") - 1


def trajectory(path: pd.DataFrame, explained: np.ndarray, stages: pd.DataFrame | None) -> go.Figure:
    """The trajectory in PC1 x PC2: a grey line in step order with arrowheads along it (`direction_arrows`), one
    marker trace per stage (named by the stage and what forms in it; `stage_style`), the cusps as open circles, and
    the start, the end and a few checkpoints between labelled with their steps (`step_labels`).

    Args:
        path: `analysis.stages.essential.store_trajectory`'s rows (``step``, ``pc1``, ``pc2``, ``cusp``, ...).
        explained: the fraction of the variance each component explains.
        stages: the shaded stages (stages.parquet rows of one basis), or None.
    """
    steps = path["step"].to_numpy()
    x, y = path["pc1"].to_numpy(), (path["pc2"].to_numpy() if "pc2" in path else np.zeros(len(path)))
    data: list[dict[str, Any]] = [
        dict(type="scatter", x=x, y=y, mode="lines", line=dict(color=PATH_COLOUR, width=1), hoverinfo="skip", showlegend=False)
    ]
    if "smooth1" in path:  # the path as the cusp rule reads it (`analysis.stages.essential.smoothed`)
        data.append(
            dict(
                type="scatter",
                x=path["smooth1"].to_numpy(),
                y=path["smooth2"].to_numpy() if "smooth2" in path else np.zeros(len(path)),
                mode="lines",
                name="smoothed path (Gaussian over checkpoints)",
                line=dict(color=SMOOTH_COLOUR, width=2, dash="dash"),
                hoverinfo="skip",
            )
        )
    which = stage_of(steps, stages)
    names = {} if stages is None else {int(r.stage): str(r.boundary) for r in stages.itertuples(index=False)}
    for s in np.unique(which):
        mine = which == s
        colour, symbol = stage_style(int(s))
        name = "no stages" if s < 0 else f"S{s + 1}" + (f": {names[s]}" if s > 0 else "")
        data.append(
            dict(
                type="scatter",
                x=x[mine],
                y=y[mine],
                mode="markers",
                name=name if len(name) < 60 else name[:57] + "…",
                marker=dict(size=9, color=colour, symbol=symbol),
                customdata=[[-1, -1, int(t)] for t in steps[mine]],
                hovertemplate="step %{customdata[2]:,}<br>PC1 %{x:.3g}, PC2 %{y:.3g}<extra>"
                + (f"S{s + 1}" if s >= 0 else "")
                + "</extra>",
            )
        )
    near = (path["verdict"] == "near").to_numpy(bool) if "verdict" in path else np.zeros(len(path), bool)
    turns = (
        (near, "near a cusp", "near a cusp (within the rule's margins)", "#999999", "circle-open-dot"),
        (path["cusp"].to_numpy(bool), "cusp", "cusp (turning point)", "#222222", "circle-open"),
    )
    for where, what, name, colour, symbol in turns:
        if where.any():
            data.append(
                dict(
                    type="scatter",
                    x=x[where],
                    y=y[where],
                    mode="markers",
                    name=name,
                    marker=dict(size=18, color="rgba(0,0,0,0)", line=dict(width=2, color=colour), symbol=symbol),
                    customdata=[[-1, -1, int(t)] for t in steps[where]],
                    hovertemplate=what + " at step %{customdata[2]:,}<extra></extra>",
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
            annotations=direction_arrows(x, y) + step_labels(x, y, steps),
        ),
    )


def _drawn(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each segment's length as drawn (each axis scaled by the path's span on it), and their running sum."""
    span = [float(np.ptp(v)) if len(v) and np.ptp(v) > 0 else 1.0 for v in (x, y)]
    lengths = np.hypot(np.diff(x) / span[0], np.diff(y) / span[1])  # (n - 1,)
    return lengths, np.concatenate([[0.0], np.cumsum(lengths)])


def direction_arrows(x: np.ndarray, y: np.ndarray, *, count: int = ARROWS) -> list[dict[str, Any]]:
    """Arrowheads along the path in step order: at ``count`` points evenly spaced along its length as drawn, each on
    its own segment, pointing from the segment's start (the earlier checkpoint) to that point."""
    if len(x) < 2:
        return []
    lengths, along = _drawn(x, y)
    if not along[-1] > 0:
        return []
    out, used = [], set()
    for k in range(1, count + 1):
        at = along[-1] * k / (count + 1)
        j = int(np.clip(np.searchsorted(along, at, side="right") - 1, 0, len(lengths) - 1))  # segment j: j -> j + 1
        if j in used or not lengths[j] > 0:
            continue
        used.add(j)
        f = max((at - along[j]) / lengths[j], 0.5)  # at least halfway, so the arrow is long enough to show
        out.append(
            dict(
                x=float(x[j] + f * (x[j + 1] - x[j])),
                y=float(y[j] + f * (y[j + 1] - y[j])),
                ax=float(x[j]),
                ay=float(y[j]),
                xref="x",
                yref="y",
                axref="x",
                ayref="y",
                text="",
                showarrow=True,
                arrowhead=2,
                arrowsize=1.3,
                arrowwidth=1.4,
                arrowcolor=ARROW_COLOUR,
                name=f"direction {j}",
            )
        )
    return out


def step_labels(x: np.ndarray, y: np.ndarray, steps: np.ndarray, *, count: int = LABELLED) -> list[dict[str, Any]]:
    """The first checkpoint labelled ``start: step 0``, the last ``end: step 4,000``, and up to ``count`` checkpoints
    between with their steps: those nearest to points spread along the path's drawn length (its middle first, then
    its quarters, then its eighths), each kept only when it lies at least `LABEL_GAP` of the plot's span from every
    checkpoint labelled already (where the path stalls, labels would sit on each other). Each label is offset toward
    the middle of the plot on a short leader line."""
    if not len(x):
        return []
    last = len(x) - 1
    _, along = _drawn(x, y)
    span = [float(np.ptp(v)) if np.ptp(v) > 0 else 1.0 for v in (x, y)]
    picked = [(0, f"start: step {int(steps[0]):,}")] + ([(last, f"end: step {int(steps[-1]):,}")] if last else [])
    for f in (1 / 2, 1 / 4, 3 / 4, 1 / 8, 3 / 8, 5 / 8, 7 / 8):
        if len(picked) >= count + 2 or last < 2:
            break
        i = int(np.argmin(np.abs(along - along[-1] * f)))
        gaps = [np.hypot((x[i] - x[j]) / span[0], (y[i] - y[j]) / span[1]) for j, _ in picked]
        if min(gaps) >= LABEL_GAP:
            picked.append((i, f"step {int(steps[i]):,}"))
    mid = ((np.nanmin(x) + np.nanmax(x)) / 2, (np.nanmin(y) + np.nanmax(y)) / 2)
    return [
        dict(
            x=float(x[i]),
            y=float(y[i]),
            xref="x",
            yref="y",
            text=f"<b>{text}</b>" if i in (0, last) else text,
            showarrow=True,
            arrowhead=0,
            arrowwidth=1,
            arrowcolor=LABEL_COLOUR,
            ax=-28 if x[i] > mid[0] else 28,  # toward the middle of the plot, so that a label stays inside it
            ay=26 if y[i] > mid[1] else -26,
            font=dict(size=11, color=LABEL_COLOUR),
            bgcolor="rgba(255,255,255,0.8)",
            name=f"step {int(steps[i])}",
        )
        for i, text in picked
    ]
