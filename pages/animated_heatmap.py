"""Animation: the layer x head heatmap of a statistic played through every checkpoint."""

import streamlit as st

from dashboard import loader, widgets
from dashboard.figures.animation import animation
from dashboard.stats import STATS, stats_for
from dashboard.style import SIGNED_STATS


def main() -> None:
    st.title("Animation")
    # --- empty case ---
    frame = widgets.run_frame()
    if frame is None:
        return
    store = frame.store
    steps = [int(s) for s in store.steps]

    # --- widgets ---
    c_stat, c_k, c_log = st.columns([3, 3, 1], vertical_alignment="bottom")
    stat, k, log_colour = widgets.statistic(store.d_head, where_stat=c_stat, where_k=c_k, where_log=c_log,
                                            log=("logc", "log colour"), options=stats_for(store))
    step = widgets.select(
        "step", "Opening step (what a link to this page shows first)", steps, steps[0], kind="select_slider",
        fmt=lambda s: f"{s:,}",
    )
    values = loader.stat_values(store, stat, k=k or 0)

    # --- panel: animated layer x head heatmap with marginals ---
    st.plotly_chart(animation(values, steps=steps, start=steps.index(step), stat=STATS[stat], k=k,
                              log_colour=log_colour, signed=stat in SIGNED_STATS), key="animation")
    hidden = store.hidden_steps
    listed = "; ".join(text for _, text in hidden[:3]) + ("; ..." if len(hidden) > 3 else "")
    dup_note = f" Checkpoints that are not training states ({listed}) are not frames." if hidden else ""
    st.caption(f"{STATS[stat].short(k)} of every head (columns) in every layer (rows) at one checkpoint; right: mean "
               "over the heads of each layer; bottom: mean over layers for each head index. Colours and marginal "
               f"axes are fixed over the whole run. Play and the slider run in the browser.{dup_note}")


main()
