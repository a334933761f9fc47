"""Animation: the layer x head heatmap of a statistic played through every checkpoint.

This module: the layout, the widgets as one record, the heatmap's panel and its GIF button; the figure is
`views.animation.figures`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from headwatch.dashboard import charts, export, widgets
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import STATS, stats_for
from headwatch.dashboard.statistic_page import StatisticChoice, open_page
from headwatch.dashboard.style import SIGNED_STATS
from headwatch.dashboard.views.animation.figures import animation


@dataclass(frozen=True)
class _Choices(StatisticChoice):
    """The page's widgets: the statistic (``matrix``, ``stat``, ``k``), its log colour (``logc``) and the frame
    (``step``)."""

    log_colour: bool
    step: int


def main() -> None:
    # --- empty case, then the widgets and the statistic's values ---
    opened = open_page("Animation", _choose)
    if opened is None:
        return
    frame, opts, values = opened

    # --- panel: animated layer x head heatmap with marginals ---
    event, fig = _heatmap_panel(frame, opts, values)

    # --- the animation as a GIF ---
    _gif_button(frame, opts, values, fig)

    # --- a clicked cell opens its head at this step ---
    opts.open_clicked(event, frame.store)


def _choose(frame: RunFrame) -> _Choices:
    """The widgets: the matrix; statistic, k and log colour in a row; the step below."""
    store = frame.store
    steps = [int(s) for s in store.steps]
    matrix = widgets.matrix(store.meta.matrices, store_path=str(store.path))
    c_stat, c_k, c_log = st.columns([3, 3, 2], vertical_alignment="bottom")
    stat, k, log_colour = widgets.statistic(
        store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log, log=("logc", "log colour"), options=stats_for(store)
    )
    step = widgets.select(
        "step",
        "Step (the frame shown and linked; Play runs on from it in the browser)",
        steps,
        steps[0],
        kind="select_slider",
        fmt=lambda s: f"{s:,}",
    )
    return _Choices(matrix=matrix, stat=stat, k=k, log_colour=log_colour, step=step)


def _heatmap_panel(frame: RunFrame, opts: _Choices, values: np.ndarray) -> tuple[Any, go.Figure]:
    """The layer x head heatmap at the step, its marginals beside and below, playable; returns the click event and
    the figure."""
    store, step, label = frame.store, opts.step, opts.label
    steps = [int(s) for s in store.steps]
    fig = animation(
        values,
        steps=steps,
        start=steps.index(step),
        stat=STATS[opts.stat],
        k=opts.k,
        log_colour=opts.log_colour,
        signed=opts.stat in SIGNED_STATS,
        title=f"{frame.run} · every head · {label}",
    )
    event = charts.chart(
        fig,
        "animation",
        title=f"{frame.run} · every head · {label}",
        filename=export.safe_name(frame.run, "all-heads", opts.name, "step", step),
        csv=lambda: export.tidy(values, store.steps, run=frame.run, statistic=opts.stat, k=opts.k, matrix=opts.matrix),
        select=True,
    )
    charts.follow_play("animation", step)
    hidden = store.hidden_steps
    listed = "; ".join(text for _, text in hidden[:3]) + ("; ..." if len(hidden) > 3 else "")
    dup_note = f" Checkpoints that are not training states ({listed}) are not frames." if hidden else ""
    st.caption(
        f"{label} of every head (columns) in every layer (rows) at step {step:,}; right: mean over the heads of "
        "each layer; bottom: mean over layers for each head index. Colours and marginal axes are fixed over the "
        "whole run. The step control above is the frame (and the link); Play runs the following frames in the "
        "browser, and Pause (or the last frame) moves the step control to the frame shown. Click a cell to open "
        f"that head at this step.{dup_note}"
    )
    return event, fig


def _gif_button(frame: RunFrame, opts: _Choices, values: np.ndarray, fig: go.Figure) -> None:
    """Every checkpoint's heatmap as an animated GIF, in the chart's fixed colours (drawn when clicked)."""
    heat = fig.data[0]
    steps = [int(s) for s in frame.store.steps]
    charts.download(
        "Animation (GIF)",
        lambda: export.animation_gif(
            values,
            steps,
            title=f"{frame.run} · {opts.label}",
            zmin=heat.zmin,
            zmax=heat.zmax,
            log=opts.log_colour,
            signed=opts.stat in SIGNED_STATS,
        ),
        file_name=f"{export.safe_name(frame.run, 'animation', opts.name)}.gif",
        mime="image/gif",
        key="animation_gif",
        icon=":material/movie:",
        help="Every checkpoint's layer × head heatmap, colours fixed over the run, drawn with Pillow",
    )
