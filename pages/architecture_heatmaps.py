"""Architecture heatmaps: one statistic for every head at every checkpoint, layer boundaries drawn."""

import streamlit as st

from dashboard import charts, export, loader, viewstate, widgets
from dashboard.data import fixed_range, loss_curve
from dashboard.figures import architecture as figs
from dashboard.figures.common import overlay_loss
from dashboard.labels import STATS, stats_for
from dashboard.style import SIGNED_STATS


def main() -> None:
    st.title("Architecture heatmaps")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    store = frame.store
    axis = frame.axis()

    # --- widgets ---
    matrix = widgets.matrix(store.meta.matrices, store_path=str(store.path))
    c_stat, c_k, c_log = st.columns([3, 3, 2], vertical_alignment="bottom")
    stat, k, log_colour = widgets.statistic(
        store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log, log=("logc", "log colour"), options=stats_for(store)
    )
    values = loader.stat_values(store, stat, k=k or 0, matrix=matrix)  # (S, n_layers, n_heads)
    if charts.no_values(values, STATS[stat].label, matrix):
        return
    label = STATS[stat].short(k)
    name = STATS[stat].name if k is None else f"lambda_{k}"

    # --- panel: every head x every checkpoint ---
    event = charts.chart(
        figs.architecture_heatmap(axis, values, stat=STATS[stat], k=k, log_colour=log_colour, signed=stat in SIGNED_STATS),
        "architecture",
        title=f"{frame.run} · every head · {label}",
        filename=export.safe_name(frame.run, "all-heads", name),
        csv=lambda: export.tidy(values, store.steps, run=frame.run, statistic=stat, k=k, matrix=matrix),
        select=True,
    )
    st.caption(
        f"{label} of all {store.n_layers * store.n_heads} heads (columns, layer by layer; white lines separate "
        f"layers) at every checkpoint (rows){', log colour' if log_colour else ''}. Hover names the head; "
        "click a cell to open that head in the head explorer at that step."
    )

    # --- panel: layer means over training ---
    st.subheader("Layer means over training")
    means = values.mean(axis=2)
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None)
    fig = figs.layer_means(axis, values, stat=STATS[stat], k=k, y_range=fixed_range(means, log=log_colour), log_y=log_colour)
    charts.chart(
        overlay_loss(fig, axis, *curve) if show_loss and curve else fig,
        "layer_means",
        title=f"{frame.run} · layer means · {label}",
        filename=export.safe_name(frame.run, "layer-means", name),
        csv=lambda: export.tidy(
            means[:, :, None], store.steps, run=frame.run, statistic=f"{stat} (layer mean)", k=k, matrix=matrix
        ).assign(head="layer mean"),
    )
    st.caption(
        f"{label} averaged over the heads of each layer, one line per layer coloured from blue (layer 0) to "
        "red (last layer); log y axis when log colour is on."
    )

    # --- a clicked cell opens its head at that step ---
    charts.open_head_on_click(event, store, stat=stat, k=k, matrix=matrix)


main()
