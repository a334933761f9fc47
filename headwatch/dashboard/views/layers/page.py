"""Layer view: every head of a layer over training for any statistic, and a grid of all layers.

This module: the layout, the widgets as one record and the two panels; the figures in `views.layers.figures`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from headwatch.dashboard import charts, export, widgets
from headwatch.dashboard.data import StepAxis, fixed_range, loss_curve
from headwatch.dashboard.figures.common import overlay_loss, overlay_loss_grid, stacked
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import STATS, stats_for
from headwatch.dashboard.statistic_page import StatisticChoice, open_page
from headwatch.dashboard.views.layers import figures as figs

STACK_RIGHT = 116  # px: the head legend right of the chosen layer's chart (its grid below shares the margin)


@dataclass(frozen=True)
class _Choices(StatisticChoice):
    """The page's widgets: the statistic (``matrix``, ``stat``, ``k``), its log axis (``logy``), the layer
    (``layer``) and the loss overlay (``loss``); ``curve``: the run's loss curve, if any."""

    log_y: bool
    layer: int
    show_loss: bool
    curve: tuple[np.ndarray, str] | None


def main() -> None:
    # --- empty case, then the widgets and the statistic's values, (S, n_layers, n_heads) ---
    opened = open_page("Layer view", _choose)
    if opened is None:
        return
    frame, opts, values = opened
    y_range = fixed_range(values, log=opts.log_y)

    # --- panel: every head of the chosen layer ---
    event = _layer_panel(frame, opts, values, y_range)

    # --- panel: all layers ---
    grid = _grid_panel(frame, opts, values, y_range)

    # --- a clicked line opens its head ---
    opts.open_clicked(event, frame.store)
    opts.open_clicked(grid, frame.store)


def _choose(frame: RunFrame) -> _Choices:
    """The widgets: the matrix; statistic, layer and k in a row; the log and loss switches in the next."""
    store = frame.store
    matrix = widgets.matrix(store.meta.matrices, store_path=str(store.path))
    c_stat, c_layer, c_k = st.columns([3, 1, 2], vertical_alignment="bottom")
    c_log, c_loss, _ = st.columns([1, 2, 2])  # the switches on their own row, so their labels read whole at 1,024 px
    stat, k, log_y = widgets.statistic(
        store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log, log=("logy", "log y axis"), options=stats_for(store)
    )
    layer = widgets.select("layer", "Layer", list(range(store.n_layers)), 0, where=c_layer)
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None, where=c_loss)
    return _Choices(matrix=matrix, stat=stat, k=k, log_y=log_y, layer=layer, show_loss=show_loss, curve=curve)


def _layer_panel(frame: RunFrame, opts: _Choices, values: np.ndarray, y_range: tuple[float, float]) -> Any:
    """Every head of the chosen layer over training, the layer mean dashed; returns the click event."""
    store, layer, axis, curve = frame.store, opts.layer, frame.axis(), opts.curve
    st.subheader(f"Layer {layer}: every head over training")
    fig = figs.layer_lines(
        axis, values[:, layer, :], layer=layer, stat=STATS[opts.stat], k=opts.k, y_range=y_range, log_y=opts.log_y
    )
    event = charts.chart(
        stacked(overlay_loss(fig, axis, *curve) if opts.show_loss and curve else fig, right=STACK_RIGHT),
        "layer_lines",
        title=f"{frame.run} · layer {layer}, every head · {opts.label}",
        filename=export.safe_name(frame.run, f"L{layer}", "all-heads", opts.name),
        csv=lambda: export.tidy(
            values, store.steps, run=frame.run, statistic=opts.stat, k=opts.k, matrix=opts.matrix, layers=[layer]
        ),
        select=True,
    )
    st.caption(
        f"{opts.label} of each of the {store.n_heads} heads of layer {layer} over training (one colour per head), "
        "the layer mean red dashed; y range fixed over all layers so switching layers compares like with like. "
        "Click a head's line to open it in the head explorer."
    )
    return event


def _grid_panel(frame: RunFrame, opts: _Choices, values: np.ndarray, y_range: tuple[float, float]) -> Any:
    """One panel per layer on shared axes, the chosen layer framed; returns the click event."""
    store, axis = frame.store, frame.axis()
    st.subheader("All layers")
    fig = figs.layer_grid(axis, values, stat=STATS[opts.stat], k=opts.k, y_range=y_range, log_y=opts.log_y, highlight=opts.layer)
    grid = charts.chart(
        stacked(_with_loss_grid(fig, axis, opts), right=STACK_RIGHT),
        "layer_grid",
        title=f"{frame.run} · every layer · {opts.label}",
        filename=export.safe_name(frame.run, "all-layers", opts.name),
        csv=lambda: export.tidy(values, store.steps, run=frame.run, statistic=opts.stat, k=opts.k, matrix=opts.matrix),
        select=True,
    )
    st.caption(
        f"{opts.label} over training, one panel per layer (heads thin blue, layer mean red dashed), all panels on "
        f"the same axes; layer {opts.layer} is framed. Click a line to open that head."
    )
    return grid


def _with_loss_grid(fig: Any, axis: StepAxis, opts: _Choices) -> Any:
    return overlay_loss_grid(fig, axis, *opts.curve) if opts.show_loss and opts.curve else fig
