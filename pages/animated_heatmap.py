"""Animation: the layer x head heatmap of a statistic played through every checkpoint."""

import streamlit as st

from dashboard import charts, export, loader, viewstate, widgets
from dashboard.figures.animation import animation
from dashboard.labels import STATS, stats_for
from dashboard.style import SIGNED_STATS


def main() -> None:
    st.title("Animation")
    # --- empty case ---
    frame = viewstate.run_frame()
    if frame is None:
        return
    store = frame.store
    steps = [int(s) for s in store.steps]

    # --- widgets ---
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
    values = loader.stat_values(store, stat, k=k or 0, matrix=matrix)
    if charts.no_values(values, STATS[stat].label, matrix):
        return
    label = STATS[stat].short(k)
    name = stat if k is None else f"lambda_{k}"

    # --- panel: animated layer x head heatmap with marginals ---
    fig = animation(
        values,
        steps=steps,
        start=steps.index(step),
        stat=STATS[stat],
        k=k,
        log_colour=log_colour,
        signed=stat in SIGNED_STATS,
        title=f"{frame.run} · every head · {label}",
    )
    event = charts.chart(
        fig,
        "animation",
        title=f"{frame.run} · every head · {label}",
        filename=export.safe_name(frame.run, "all-heads", name, "step", step),
        csv=lambda: export.tidy(values, store.steps, run=frame.run, statistic=stat, k=k, matrix=matrix),
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

    # --- the animation as a GIF ---
    heat = fig.data[0]
    st.download_button(
        "Animation (GIF)",
        lambda: export.animation_gif(
            values,
            steps,
            title=f"{frame.run} · {label}",
            zmin=heat.zmin,
            zmax=heat.zmax,
            log=log_colour,
            signed=stat in SIGNED_STATS,
        ),
        file_name=f"{export.safe_name(frame.run, 'animation', name)}.gif",
        mime="image/gif",
        key="animation_gif",
        on_click="ignore",
        icon=":material/movie:",
        type="tertiary",
        help="Every checkpoint's layer × head heatmap, colours fixed over the run, drawn with Pillow",
    )

    # --- a clicked cell opens its head at this step ---
    charts.open_head_on_click(event, store, stat=stat, k=k, matrix=matrix)


main()
