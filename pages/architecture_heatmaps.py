"""Architecture heatmaps: one statistic for every head at every checkpoint, layer boundaries drawn."""

import streamlit as st

from dashboard import loader, widgets
from dashboard.data import fixed_range, loss_curve
from dashboard.figures.common import overlay_loss
from dashboard.figures import architecture as figs
from dashboard.stats import STATS, stats_for
from dashboard.style import SIGNED_STATS


def main() -> None:
    st.title("Architecture heatmaps")
    # --- empty case ---
    frame = widgets.run_frame()
    if frame is None:
        return
    store = frame.store
    axis = frame.axis()

    # --- widgets ---
    c_stat, c_k, c_log = st.columns([3, 3, 1], vertical_alignment="bottom")
    stat, k, log_colour = widgets.statistic(store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log,
                                            log=("logc", "log colour"), options=stats_for(store))
    values = loader.stat_values(store, stat, k=k or 0)  # (S, n_layers, n_heads)
    label = STATS[stat].short(k)

    # --- panel: every head x every checkpoint ---
    st.plotly_chart(figs.architecture_heatmap(axis, values, stat=STATS[stat], k=k, log_colour=log_colour,
                                              signed=stat in SIGNED_STATS), key="architecture")
    st.caption(f"{label} of all {store.n_layers * store.n_heads} heads (columns, layer by layer; white lines separate "
               f"layers) at every checkpoint (rows){', log colour' if log_colour else ''}. Hover names the head.")

    # --- panel: layer means over training ---
    st.subheader("Layer means over training")
    means = values.mean(axis=2)
    curve = loss_curve(store)
    show_loss = widgets.loss_toggle(curve is not None)
    fig = figs.layer_means(axis, values, stat=STATS[stat], k=k, y_range=fixed_range(means, log=log_colour), log_y=log_colour)
    st.plotly_chart(overlay_loss(fig, axis, *curve) if show_loss else fig, key="layer_means")
    st.caption(f"{label} averaged over the heads of each layer, one line per layer coloured from first (blue) to "
               "last (red) layer; log y axis when log colour is on.")


main()
