"""Architecture heatmaps: one statistic for every head at every checkpoint, layer boundaries drawn.

Below the heatmap, each layer's mean over its heads over training (`views.architecture.data`: its range and CSV
rows), with the loss. This module: the layout, the widgets as one record and the two panels; the figures are
`views.architecture.figures`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from headwatch.dashboard import charts, export, widgets
from headwatch.dashboard.data import loss_curve
from headwatch.dashboard.figures.common import overlay_loss
from headwatch.dashboard.frame import RunFrame
from headwatch.dashboard.labels import STATS, stats_for
from headwatch.dashboard.statistic_page import StatisticChoice, open_page
from headwatch.dashboard.style import SIGNED_STATS
from headwatch.dashboard.views.architecture import data
from headwatch.dashboard.views.architecture import figures as figs


@dataclass(frozen=True)
class _Choices(StatisticChoice):
    """The page's widgets: the statistic (``matrix``, ``stat``, ``k``) and its log colour (``logc``)."""

    log_colour: bool


def main() -> None:
    # --- empty case, then the widgets and the statistic's values, (S, n_layers, n_heads) ---
    opened = open_page("Architecture heatmaps", _choose)
    if opened is None:
        return
    frame, opts, values = opened

    # --- panel: every head x every checkpoint ---
    event = _heatmap_panel(frame, opts, values)

    # --- panel: layer means over training (with the loss switch) ---
    _means_panel(frame, opts, values)

    # --- a clicked cell opens its head at that step ---
    opts.open_clicked(event, frame.store)


def _choose(frame: RunFrame) -> _Choices:
    """The widgets: the matrix; statistic, k and log colour in a row."""
    store = frame.store
    matrix = widgets.matrix(store.meta.matrices, store_path=str(store.path))
    c_stat, c_k, c_log = st.columns([3, 3, 2], vertical_alignment="bottom")
    stat, k, log_colour = widgets.statistic(
        store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log, log=("logc", "log colour"), options=stats_for(store)
    )
    return _Choices(matrix=matrix, stat=stat, k=k, log_colour=log_colour)


def _heatmap_panel(frame: RunFrame, opts: _Choices, values: np.ndarray) -> Any:
    """The statistic of every head (columns, layer by layer) at every checkpoint (rows); returns the click event."""
    store, stat, k = frame.store, opts.stat, opts.k
    event = charts.chart(
        figs.architecture_heatmap(
            frame.axis(), values, stat=STATS[stat], k=k, log_colour=opts.log_colour, signed=stat in SIGNED_STATS
        ),
        "architecture",
        title=f"{frame.run} · every head · {opts.label}",
        filename=export.safe_name(frame.run, "all-heads", opts.name),
        csv=lambda: export.tidy(values, store.steps, run=frame.run, statistic=stat, k=k, matrix=opts.matrix),
        select=True,
    )
    st.caption(
        f"{opts.label} of all {store.n_layers * store.n_heads} heads (columns, layer by layer; white lines separate "
        f"layers) at every checkpoint (rows){', log colour' if opts.log_colour else ''}. Hover names the head; "
        "click a cell to open that head in the head explorer at that step."
    )
    return event


def _means_panel(frame: RunFrame, opts: _Choices, values: np.ndarray) -> None:
    """Each layer's mean over its heads over training; the loss switch above it overlays the loss."""
    store, stat, k, axis = frame.store, opts.stat, opts.k, frame.axis()
    st.subheader("Layer means over training")
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None)
    fig = figs.layer_means(
        axis, values, stat=STATS[stat], k=k, y_range=data.means_range(values, log=opts.log_colour), log_y=opts.log_colour
    )
    charts.chart(
        overlay_loss(fig, axis, *curve) if show_loss and curve else fig,
        "layer_means",
        title=f"{frame.run} · layer means · {opts.label}",
        filename=export.safe_name(frame.run, "layer-means", opts.name),
        csv=lambda: data.layer_mean_rows(values, store.steps, run=frame.run, stat=stat, k=k, matrix=opts.matrix),
    )
    st.caption(
        f"{opts.label} averaged over the heads of each layer, one line per layer coloured from blue (layer 0) to "
        "red (last layer); log y axis when log colour is on."
    )
