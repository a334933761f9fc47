"""Layer view: every head of a layer over training for any statistic, and a grid of all layers."""

import streamlit as st

from dashboard import charts, export, loader, viewstate, widgets
from dashboard.data import fixed_range, loss_curve
from dashboard.figures import layers as figs
from dashboard.figures.common import overlay_loss, overlay_loss_grid, stacked
from dashboard.labels import STATS, stats_for

STACK_RIGHT = 110  # px: the head legend right of the chosen layer's chart (its grid below shares the margin)


def main() -> None:
    st.title("Layer view")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    store = frame.store
    axis = frame.axis()

    # --- widgets ---
    matrix = widgets.matrix(store.meta.matrices, store_path=str(store.path))
    c_stat, c_layer, c_k = st.columns([3, 1, 2], vertical_alignment="bottom")
    c_log, c_loss, _ = st.columns([1, 2, 2])  # the switches on their own row, so their labels read whole at 1,024 px
    stat, k, log_y = widgets.statistic(
        store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log, log=("logy", "log y axis"), options=stats_for(store)
    )
    layer = widgets.select("layer", "Layer", list(range(store.n_layers)), 0, where=c_layer)
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None, where=c_loss)

    def with_loss_grid(fig):
        return overlay_loss_grid(fig, axis, *curve) if show_loss and curve else fig

    values = loader.stat_values(store, stat, k=k or 0, matrix=matrix)  # (S, n_layers, n_heads)
    if charts.no_values(values, STATS[stat].label, matrix):
        return
    y_range = fixed_range(values, log=log_y)
    label = STATS[stat].short(k)

    name = stat if k is None else f"lambda_{k}"

    # --- panel: every head of the chosen layer ---
    st.subheader(f"Layer {layer}: every head over training")
    fig = figs.layer_lines(axis, values[:, layer, :], layer=layer, stat=STATS[stat], k=k, y_range=y_range, log_y=log_y)
    event = charts.chart(
        stacked(overlay_loss(fig, axis, *curve) if show_loss and curve else fig, right=STACK_RIGHT),
        "layer_lines",
        title=f"{frame.run} · layer {layer}, every head · {label}",
        filename=export.safe_name(frame.run, f"L{layer}", "all-heads", name),
        csv=lambda: export.tidy(values, store.steps, run=frame.run, statistic=stat, k=k, matrix=matrix, layers=[layer]),
        select=True,
    )
    st.caption(
        f"{label} of each of the {store.n_heads} heads of layer {layer} over training (one colour per head), "
        "the layer mean red dashed; y range fixed over all layers so switching layers compares like with like. "
        "Click a head's line to open it in the head explorer."
    )

    # --- panel: all layers ---
    st.subheader("All layers")
    grid = charts.chart(
        stacked(
            with_loss_grid(figs.layer_grid(axis, values, stat=STATS[stat], k=k, y_range=y_range, log_y=log_y, highlight=layer)),
            right=STACK_RIGHT,
        ),
        "layer_grid",
        title=f"{frame.run} · every layer · {label}",
        filename=export.safe_name(frame.run, "all-layers", name),
        csv=lambda: export.tidy(values, store.steps, run=frame.run, statistic=stat, k=k, matrix=matrix),
        select=True,
    )
    st.caption(
        f"{label} over training, one panel per layer (heads thin blue, layer mean red dashed), all panels on "
        f"the same axes; layer {layer} is framed. Click a line to open that head."
    )

    # --- a clicked line opens its head ---
    charts.open_head_on_click(event, store, stat=stat, k=k, matrix=matrix)
    charts.open_head_on_click(grid, store, stat=stat, k=k, matrix=matrix)


main()
